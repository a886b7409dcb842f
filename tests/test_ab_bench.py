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


# ------------------------------------------------------------------ the guard: each side is the tree it names

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from rapidrl.benchmarks.isolated import MixedTreeError, run_isolated  # noqa: E402
from tools.ab_bench import case_table, run_rounds  # noqa: E402
from tools.trees import imported_from, run_in_tree  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# B's kernels.gae_into does the work 8 times: "one kernel 8x slower", the rest of the tree identical to A.
SLOW_GAE_INTO = '''

_gae_into_once = gae_into


def gae_into(*args, **kwargs):  # the regressed tree of tests/test_ab_bench.py
    for _ in range(7):
        _gae_into_once(*args, **kwargs)
    return _gae_into_once(*args, **kwargs)
'''


def _copy_tree(dst: Path) -> Path:
    """A source tree with this checkout's rapidrl/ (Numba's caches kept: copy2 keeps the sources' stamps)."""
    shutil.copytree(REPO / "rapidrl", dst / "rapidrl", copy_function=shutil.copy2,
                    ignore=shutil.ignore_patterns("_kernel_cache"))
    return dst


def _tiny_tree(dst: Path, name: str) -> Path:
    """A stand-in source tree whose rapidrl is a package with one entry point that prints its tree's name."""
    (dst / "rapidrl").mkdir(parents=True)
    (dst / "rapidrl" / "__init__.py").write_text(f"TREE = {name!r}\n")
    (dst / "rapidrl" / "entry.py").write_text("import rapidrl\n\ndef main(argv):\n    print('TREE', rapidrl.TREE)\n")
    return dst


def test_the_old_invocation_imports_the_working_directory_tree_and_is_refused(tmp_path):
    a, b = _tiny_tree(tmp_path / "a", "A"), _tiny_tree(tmp_path / "b", "B")
    # What the old ab_bench did for side B when started from A's root: PYTHONPATH=B, working directory A.
    old = subprocess.run([sys.executable, "-c", "import rapidrl; print(rapidrl.TREE)"], cwd=a, capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(b)}, check=True)
    assert old.stdout.strip() == "A"  # side "B" ran tree A: A and B would have been the same tree
    with pytest.raises(MixedTreeError, match="not from the tree it was started on"):
        run_in_tree(sys.executable, b, "rapidrl.entry:main", [], cwd=a,
                    env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(b)})
    # The guarded call, started from the same place, runs B and says so.
    proc = run_in_tree(sys.executable, b, "rapidrl.entry:main", [])
    assert "TREE B" in proc.stdout
    assert imported_from(proc.stdout) == (b / "rapidrl" / "__init__.py").resolve()


def test_run_isolated_refuses_a_child_that_imported_another_tree(tmp_path):
    empty = tmp_path / "not-a-tree"  # no rapidrl here: the child falls back to the installed one
    empty.mkdir()
    with pytest.raises(MixedTreeError, match="imported rapidrl from"):
        run_isolated("rapidrl.benchmarks.isolated:job_process_state", {}, torch_threads=1, checkout=empty)
    tree = _tiny_tree(tmp_path / "t", "T")
    (tree / "rapidrl" / "benchmarks").mkdir()
    (tree / "rapidrl" / "benchmarks" / "__init__.py").write_text("")
    shutil.copy2(REPO / "rapidrl" / "benchmarks" / "isolated.py", tree / "rapidrl" / "benchmarks" / "isolated.py")
    (tree / "rapidrl" / "_system.py").write_text("def usable_cpu_count():\n    return 1\n")
    (tree / "rapidrl" / "job.py").write_text("import rapidrl\n\ndef tree():\n    return {'tree': rapidrl.TREE}\n")
    out = run_isolated("rapidrl.job:tree", {}, torch_threads=1, checkout=tree)
    assert out["tree"] == "T" and Path(out["rapidrl_file"]) == (tree / "rapidrl" / "__init__.py").resolve()


def test_ab_bench_reports_one_kernel_made_slower_between_two_trees(tmp_path):
    a, b = _copy_tree(tmp_path / "a"), _copy_tree(tmp_path / "b")
    with open(b / "rapidrl" / "kernels" / "__init__.py", "a") as f:
        f.write(SLOW_GAE_INTO)
    docs = run_rounds(sys.executable, {"A": a, "B": b}, "kernels",
                      ["--filter", "gae/float32/64x128", "--quick", "--against", "numpy"], 1, tmp_path / "out")
    assert Path(docs["A"][0]["rapidrl_file"]).is_relative_to(a) and Path(docs["B"][0]["rapidrl_file"]).is_relative_to(b)
    rows = [line for line in case_table(docs) if line.startswith("| gae/float32/64x128 |")]
    assert len(rows) == 1, case_table(docs)
    speedup = float(rows[0].split("|")[4].strip().rstrip("x"))
    assert speedup < 0.5, rows[0]  # B does 8x the work: about 0.13x; the same tree twice gives about 1x
