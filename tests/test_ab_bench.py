"""tools/ab_bench.py's table of a suite's extras rows (the train suite reports nothing else)."""

from tools.ab_bench import extras_table


def side(sps: str, threads: str) -> dict:
    rows = [{"case": "PPO CartPole", "contender": "rapidrl", "torch threads": threads, "SPS (median)": sps,
             "eval mean per seed": "500, 500", "phases": "{'update': 0.5}"},
            {"case": "time to solve", "contender": "rapidrl", "torch threads": "1", "SPS (median)": "",
             "rapidrl speedup (best vs best)": "median 2.0s"}]
    return {"extras": {"title": "t", "rows": rows}}


def test_extras_rows_are_paired_by_name_and_compared_per_numeric_column():
    docs = {"A": [side("10,000", "1 (best)"), side("12,000", "1")], "B": [side("13,200", "1"), side("9,000", "1")]}
    lines = extras_table(docs)
    assert lines[3] == "| PPO CartPole / rapidrl / 1 | SPS (median) | 11,000.00 | 11,100.00 | 1.01 |"
    assert lines[4] == "| time to solve / rapidrl / 1 | rapidrl speedup (best vs best) | 2.00 | 2.00 | 1.00 |"
    assert len(lines) == 5  # eval and phases are not timings; the empty SPS cell is not a number


def test_no_extras_no_table():
    assert extras_table({"A": [{"extras": None}], "B": [{"extras": None}]}) == []
