"""The benchmark harness: statistics on injected timings, interleaving, JSON schema, peer skipping.

No real code is timed: contenders advance a fake clock by known durations.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from rapidrl.benchmarks import harness, run
from rapidrl.benchmarks.harness import Case, Context, measure


class FakeClock:
    """A nanosecond clock that only moves when a contender 'works'."""

    def __init__(self):
        self.now = 0
        self.log: list[str] = []

    def __call__(self) -> int:
        return self.now

    def worker(self, name: str, durations):
        """Contender that logs its name and advances the clock by the next duration (cycled)."""
        it = iter(durations)

        def fn():
            self.log.append(name)
            self.now += next(it)

        return fn


def test_bootstrap_median_ci_matches_numpy_and_is_deterministic():
    x = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 3.5])
    med, lo, hi = harness.bootstrap_median_ci(x)
    assert med == np.median(x)
    assert lo <= med <= hi
    assert min(x) <= lo and hi <= max(x)
    # fixed seed: same inputs give the same interval
    assert harness.bootstrap_median_ci(x) == (med, lo, hi)
    # constant samples: the interval collapses to the value
    assert harness.bootstrap_median_ci(np.full(9, 7.0)) == (7.0, 7.0, 7.0)


def test_bootstrap_ci_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    few = rng.normal(100, 10, 10)
    many = rng.normal(100, 10, 1000)
    _, lo1, hi1 = harness.bootstrap_median_ci(few)
    _, lo2, hi2 = harness.bootstrap_median_ci(many)
    assert hi2 - lo2 < hi1 - lo1
    assert lo2 <= np.median(many) <= hi2
    assert 98 < lo2 and hi2 < 102


def test_ratio_ci_is_paired():
    # shared per-round noise (x1..x3) cancels in a paired ratio: the interval is exactly 2.
    noise = np.array([1.0, 3.0, 1.5, 2.0, 10.0, 1.2])
    med, lo, hi = harness.bootstrap_ratio_ci(2 * noise, noise)
    assert med == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0)
    with pytest.raises(ValueError):
        harness.bootstrap_ratio_ci(np.ones(3), np.ones(4))


def test_measure_per_call_median_ci_and_speedup_with_injected_durations():
    clock = FakeClock()
    fast = [1000] * 1000  # 1 µs per call
    slow = [3000] * 1000
    case = Case(
        "fake",
        {"rapidrl": clock.worker("rapidrl", fast), "peer": clock.worker("peer", slow)},
        items_per_call=10,
        item_unit="steps",
    )
    res = measure(case, warmup=2, repeats=7, inner=5, clock=clock)
    assert res.inner == {"rapidrl": 5, "peer": 5}
    np.testing.assert_allclose(res.samples_ns["rapidrl"], 1000.0)
    np.testing.assert_allclose(res.samples_ns["peer"], 3000.0)
    assert res.stats["rapidrl"]["median_ns"] == 1000.0
    assert res.stats["rapidrl"]["items_per_s"] == pytest.approx(1e7)
    r = res.ratios["peer"]
    assert (r["speedup"], r["ci_low"], r["ci_high"]) == pytest.approx((3.0, 3.0, 3.0))
    assert "rapidrl" not in res.ratios


def test_measure_median_resists_an_outlier_repeat():
    clock = FakeClock()
    # one call per repeat after 1 warm-up call: repeat 3 of rapidrl is a 50x outlier
    durs = [100, 100, 100, 100, 5000, 100, 100, 100]
    case = Case("outlier", {"rapidrl": clock.worker("rapidrl", durs), "p": clock.worker("p", [200] * 8)})
    res = measure(case, warmup=1, repeats=7, inner=1, clock=clock)
    assert res.stats["rapidrl"]["median_ns"] == 100.0
    assert res.ratios["p"]["speedup"] == pytest.approx(2.0)


def test_interleaving_rotates_the_order_each_repeat():
    assert harness.interleaved_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert harness.interleaved_order(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert harness.interleaved_order(["a", "b", "c"], 4) == ["b", "c", "a"]
    clock = FakeClock()
    names = ["rapidrl", "x", "y"]
    case = Case("order", {n: clock.worker(n, [1] * 100) for n in names})
    res = measure(case, warmup=0, repeats=4, inner=2, clock=clock)
    assert res.order == [["rapidrl", "x", "y"], ["x", "y", "rapidrl"], ["y", "rapidrl", "x"],
                         ["rapidrl", "x", "y"]]
    # the timed calls happened round by round, `inner` calls per contender per round
    timed = [n for o in res.order for n in o for _ in range(2)]
    assert clock.log == timed


def test_calibration_reaches_the_target():
    clock = FakeClock()
    fn = clock.worker("f", [1000] * 100_000)  # 1 µs per call
    inner = harness.calibrate_inner(fn, target_ns=3_000_000, clock=clock)
    assert inner * 1000 >= 3_000_000
    assert inner < 3 * 3000  # not wildly above the target


def test_timed_learn_times_the_warmup_and_the_steps_apart(monkeypatch):
    calls, clock = [], iter([10.0, 12.5, 20.0, 27.0])  # warm-up 2.5 s, timed phase 7 s
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(clock))
    assert harness.timed_learn(calls.append, 300, 1000) == (2.5, 7.0)
    assert calls == [300, 1000]  # the warm-up first, on the same callable


def test_failing_contender_is_dropped_and_reported():
    clock = FakeClock()

    def broken():
        raise RuntimeError("API changed")

    case = Case("fail", {"rapidrl": clock.worker("rapidrl", [10] * 50), "peer": broken})
    res = measure(case, warmup=1, repeats=3, inner=1, clock=clock)
    assert list(res.stats) == ["rapidrl"]
    assert "API changed" in res.failed["peer"]
    assert "failed" in harness.markdown_table([res])


def test_missing_peer_is_skipped_cleanly():
    def importer(name):
        if name == "rlox":
            raise ModuleNotFoundError("No module named 'rlox'")
        if name == "stable_baselines3":
            raise ImportError("cannot import name 'x' from 'torch'")  # installed, but broken
        return __import__(name)

    ctx = Context(importer=importer)
    assert ctx.peer("rlox") is None
    assert ctx.skipped["rlox"] == "not installed: pip install rlox"  # says how to install it
    assert ctx.peer("sb3") is None and "not importable (ImportError" in ctx.skipped["sb3"]
    assert ctx.peer("numpy") is np
    filtered = Context(against={"sb3"})
    assert filtered.peer("rlox") is None and filtered.skipped["rlox"] == "not in --against"
    case = Case("c", {"rapidrl": lambda: None, "rlox": lambda: None, "sb3/x": lambda: None})
    harness.filter_contenders(case, filtered)
    assert list(case.contenders) == ["rapidrl", "sb3/x"]


def test_case_without_baseline_is_skipped():
    ctx = Context()
    cases = iter([Case("nobase", {"numpy": lambda: None})])
    assert harness.run_cases(cases, ctx, warmup=0, repeats=1) == []
    assert "nobase" in ctx.skipped_cases


def test_parse_against_aliases_and_errors():
    assert harness.parse_against(None) is None
    assert harness.parse_against("all") is None
    assert harness.parse_against("rlox, stable-baselines3") == {"rlox", "sb3"}
    with pytest.raises(ValueError, match="unknown peer"):
        harness.parse_against("nosuchlib")


def test_json_schema_and_markdown(tmp_path):
    clock = FakeClock()
    case = Case(
        "schema",
        {"rapidrl": clock.worker("a", [100] * 50), "rlox": clock.worker("b", [250] * 50)},
        params={"N": 8},
        notes=["a note"],
    )
    res = measure(case, warmup=1, repeats=5, inner=2, clock=clock)
    machine = harness.machine_info()
    for key in ("cpu", "cores", "python", "versions", "date_utc"):
        assert key in machine
    for dist in ("numpy", "numba", "torch", "rlox", "stable-baselines3", "torchrl"):
        assert dist in machine["versions"]
    doc = harness.suite_json("demo", [res], machine, {"sb3": "not in --against"}, quick=True, repeats=5)
    doc = json.loads(json.dumps(doc))  # JSON-serializable
    assert doc["schema"] == "rapidrl-bench/1" and doc["suite"] == "demo"
    assert doc["skipped_peers"] == {"sb3": "not in --against"}
    (c,) = doc["cases"]
    assert c["name"] == "schema" and c["params"] == {"N": 8} and c["baseline"] == "rapidrl"
    for name in ("rapidrl", "rlox"):
        entry = c["contenders"][name]
        assert set(entry) >= {"median_ns", "ci_low_ns", "ci_high_ns", "inner", "samples_ns"}
        assert len(entry["samples_ns"]) == 5
    assert c["speedup"]["rlox"]["speedup"] == pytest.approx(2.5)
    md = harness.report_markdown("demo", [res], machine, {"sb3": "not in --against"})
    assert "| schema | rlox |" in md and "2.50x" in md and "Skipped peers: sb3" in md and "a note" in md
    jp, mp = harness.write_outputs(tmp_path, "demo", doc, md)
    assert json.loads(jp.read_text())["suite"] == "demo" and mp.read_text() == md


def test_format_helpers():
    assert harness.format_time(812) == "812 ns"
    assert harness.format_time(37_200) == "37.2 µs"
    assert harness.format_time(1_270_000) == "1.27 ms"
    assert harness.format_rate(6.01e6, "steps") == "6.01 M steps/s"


def test_run_main_rejects_unknown_suite_and_peer(capsys):
    assert run.main(["nosuchsuite"]) == 2
    assert run.main(["kernels", "--against", "nosuchlib"]) == 2


def test_run_main_writes_outputs_for_a_registered_suite(tmp_path, monkeypatch):
    module = type(sys)("fake_suite")
    module.REPEATS = {"quick": 2, "full": 2}
    module.cases = lambda ctx: iter([Case("tiny", {"rapidrl": lambda: None, "numpy": lambda: None})])
    monkeypatch.setitem(sys.modules, "fake_suite", module)
    monkeypatch.setitem(run.SUITES, "fake", "fake_suite")
    assert run.main(["fake", "--quick", "--warmup", "0", "--torch-threads", "0", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "fake.json").read_text())
    assert doc["settings"]["quick"] is True and doc["cases"][0]["name"] == "tiny"
    assert (tmp_path / "fake.md").exists()
    report = (tmp_path / "BENCHMARKS.md").read_text()  # the one report: command, machine, every table
    assert "Reproduce: `rapidrl bench fake --quick --warmup 0" in report and "## fake" in report
    assert "| tiny |" in report and "numpy" in report


def test_slow_case_runs_fewer_rounds_within_budget():
    clock = FakeClock()
    second = 1_000_000_000
    case = Case("slow", {"rapidrl": clock.worker("a", [second] * 100), "p": clock.worker("b", [second] * 100)})
    # a round takes 2 s: a 40 s budget fits 20 of the 30 rounds asked for
    res = measure(case, warmup=0, repeats=30, inner=1, clock=clock, budget_ns=40 * second)
    assert len(res.samples_ns["rapidrl"]) == 20 and len(res.order) == 20
    # a 4 s budget would fit 2 rounds: MIN_REPEATS still run
    case = Case("slower", {"rapidrl": clock.worker("a", [second] * 100)})
    res = measure(case, warmup=0, repeats=30, inner=1, clock=clock, budget_ns=4 * second)
    assert len(res.samples_ns["rapidrl"]) == harness.MIN_REPEATS


def test_teardown_runs_for_measured_filtered_and_skipped_cases():
    closed = []
    cases = [
        Case("keep/a", {"rapidrl": lambda: None}, teardown=[lambda: closed.append("a")]),
        Case("drop/b", {"rapidrl": lambda: None}, teardown=[lambda: closed.append("b")]),
        Case("keep/nobase", {"numpy": lambda: None}, teardown=[lambda: closed.append("c")]),
    ]
    ctx = Context()
    res = harness.run_cases(iter(cases), ctx, warmup=0, repeats=1, name_filter="keep")
    assert [r.case.name for r in res] == ["keep/a"]
    assert closed == ["a", "b", "c"]
    assert all(not c.contenders for c in cases)  # callables released


def test_isolated_job_runs_in_a_fresh_process_at_the_given_thread_count(capsys):
    import os

    import torch

    from rapidrl.algos import PPO  # noqa: F401  (state of this process that must not reach the child)
    from rapidrl.benchmarks.isolated import best_by_threads, interleaved, run_isolated

    torch.set_num_threads(2)
    state = run_isolated("rapidrl.benchmarks.isolated:job_process_state", {}, torch_threads=1)
    assert state["torch_threads"] == 1 and state["pid"] != os.getpid()
    # nothing of rapidrl but the stdlib-only lazy exports and system facts, and the job module itself
    assert state["rapidrl_modules"] == ["rapidrl._lazy", "rapidrl._system", "rapidrl.benchmarks",
                                        "rapidrl.benchmarks.isolated"]
    with pytest.raises(RuntimeError, match="no_such_job"):
        run_isolated("rapidrl.benchmarks.isolated:no_such_job", {}, torch_threads=1)
    with pytest.raises(ValueError, match="torch_threads"):
        run_isolated("rapidrl.benchmarks.isolated:job_process_state", {}, torch_threads=0)
    calls = []
    out = interleaved({"a": lambda s, t: calls.append(("a", s, t)) or {"sps": 10.0 * t + s},
                       "b": lambda s, t: calls.append(("b", s, t)) or {"sps": 5.0}}, seeds=[0, 1], threads=[1, 2])
    assert calls[:4] == [("a", 0, 1), ("b", 0, 1), ("a", 0, 2), ("b", 0, 2)]
    assert calls[4] == ("b", 1, 1)  # the order rotates with the seed
    err = capsys.readouterr().err  # each job says that it starts and how long it took
    assert "  a seed 0 at 1 torch thread(s) (job 1/8) ..." in err
    assert "  a seed 1 at 2 torch thread(s) (job 8/8): " in err  # seed 1's order: b, a
    assert best_by_threads(out["a"]) == (2, 20.5) and best_by_threads(out["b"])[1] == 5.0


def test_as_in_learn_times_an_update_under_learns_settings_and_sets_them_back():
    """An update timed outside learn() runs under the model's process settings (threads, denormal flushing) and the
    process is as it was after each call (a peer timed in the same process runs under its own)."""
    import torch

    import rapidrl as rr
    from rapidrl.benchmarks.harness import as_in_learn
    from rapidrl.train.runtime import denormals_flushed

    model = rr.DQN("CartPole-v1", learning_starts=64, batch_size=32, seed=0, torch_threads=1)
    model.learn(128, progress_bar=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2 if threads == 1 else 1)
    before = (torch.get_num_threads(), denormals_flushed())
    seen = []

    def update():
        seen.append((torch.get_num_threads(), denormals_flushed()))
        model._train_step()

    as_in_learn(model, update)()
    assert seen == [(1, True)]
    assert (torch.get_num_threads(), denormals_flushed()) == before
    torch.set_num_threads(threads)
