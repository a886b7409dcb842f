"""The continuous-control benchmark (``rapidrl bench continuous``): rapidrl's job in a fresh process, timed as the
peers' jobs are (warm-up apart), reporting the path that ran. The peers' own jobs need SB3 / sb3-contrib in
``RAPIDRL_SB3_PYTHON``'s interpreter and run in ``rapidrl bench continuous`` only."""

from __future__ import annotations

import pytest

from rapidrl.benchmarks import bench_continuous
from rapidrl.benchmarks.isolated import run_isolated
from rapidrl.benchmarks.run import SUITES


def test_the_suite_is_registered():
    assert SUITES["continuous"] == "rapidrl.benchmarks.bench_continuous"


@pytest.mark.parametrize(("algo", "backend"), [("ddpg", "auto"), ("ddpg", "torch"), ("td3", "auto")])
def test_deterministic_actor_jobs_run_in_a_fresh_process_and_report_their_backend(algo, backend):
    warmup = bench_continuous.LEARNING_STARTS + 20  # random steps, then the first updates
    out = run_isolated("rapidrl.benchmarks.bench_continuous:job_sps",
                       dict(lib="rapidrl", algo=algo, warmup=warmup, steps=30, seed=0, gradient_backend=backend),
                       torch_threads=1)
    assert out["torch_threads"] == 1 and out["sps"] > 0 and out["wall_s"] > 0 and out["warmup_s"] > 0
    assert out["sps"] == pytest.approx(30 / out["wall_s"])
    assert out["ran"] == f"precision fp32, gradient backend {'handwritten' if backend == 'auto' else 'torch'}"
