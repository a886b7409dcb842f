"""The torch-threads benchmark (``rapidrl bench threads``): its busy neighbour and its table, on real processes."""

from __future__ import annotations

import time

from rapidrl.benchmarks import bench_threads
from rapidrl.benchmarks.run import SUITES


def test_the_suite_is_registered():
    assert SUITES["threads"] == "rapidrl.benchmarks.bench_threads"


def test_busy_neighbour_computes_for_the_duration_and_is_gone_after():
    import psutil

    with bench_threads.busy_neighbour(True) as proc:
        busy = psutil.Process(proc.pid)
        before, deadline = sum(busy.cpu_times()[:2]), time.monotonic() + 20
        while sum(busy.cpu_times()[:2]) - before < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        # half a CPU-second within the deadline: it computes (a sleeping process would not), however loaded the machine
        assert proc.poll() is None and sum(busy.cpu_times()[:2]) - before >= 0.5
    assert proc.returncode is not None
    with bench_threads.busy_neighbour(False) as none:
        assert none is None


def test_measure_gives_a_row_per_algorithm_condition_and_thread_count(monkeypatch):
    monkeypatch.setitem(bench_threads.STEPS, "ddpg", (8, 8))
    rows = bench_threads.measure(["ddpg"], [1], repeats=1, quick=True, dataset="")
    assert [(r["algorithm"], r["condition"], r["torch threads"]) for r in rows] == \
        [("ddpg", c, 1) for c in bench_threads.CONDITIONS]
    assert all(r["SPS (median)"] > 0 and r["vs 1 thread"] == 1.0 and r["precision"] == "fp32" for r in rows)
