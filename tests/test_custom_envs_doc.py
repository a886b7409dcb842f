"""docs/custom-envs.md runs: its Python blocks, in order, as one module (a file, so that Numba caches the env's
kernels as it would a user's): the env passes ``check`` in both modes, ``align`` finds it identical to Gymnasium's
Taxi-v4, and PPO trains on it with the fused collector."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "custom-envs.md"


def load_tutorial(directory: Path, name: str = "custom_env_tutorial"):
    """The doc's Python blocks written to ``directory/name.py`` and imported (run top to bottom)."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    path = directory / f"{name}.py"
    path.write_text("\n\n".join(blocks))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def test_tutorial_runs_and_its_env_is_taxi(tmp_path):
    from rapidrl.train.collect.fused import FusedCollector

    ns = load_tutorial(tmp_path)
    assert ns.report.ok and ns.report.steps == 1500 and ns.report.episodes >= 40, ns.report
    assert isinstance(ns.model.collector, FusedCollector)  # the fused rollout runs the user's step
    assert ns.model.num_timesteps == 2 * 16 * 64 and -2000 <= ns.mean <= 20


def test_the_benchmarked_taxi_is_the_tutorials():
    """``rapidrl.benchmarks.taxi_tutorial`` (what ``rapidrl bench custom`` measures, from an installed package too) is
    the doc's definition verbatim: every Python block but those that check, align and train."""
    import rapidrl.benchmarks

    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    definition = [b for b in blocks if not any(use in b for use in ("rr.envs.check", "rr.envs.align", "rr.PPO"))]
    assert len(definition) == 2
    source = (Path(rapidrl.benchmarks.__file__).parent / "taxi_tutorial.py").read_text()  # not imported: no compiling
    copy = source.split("# -- docs/custom-envs.md, verbatim --\n", 1)[1]
    assert copy == "\n\n".join(definition), "copy docs/custom-envs.md's definition blocks into taxi_tutorial.py"


def test_benchmark_suite_builds_its_cases():
    """``python -m rapidrl.benchmarks.run custom``: one case per size, both contenders step (nothing is timed here)."""
    from rapidrl.benchmarks import bench_custom_env
    from rapidrl.benchmarks.harness import Context

    cases = list(bench_custom_env.cases(Context(quick=True)))
    assert [c.params["num_envs"] for c in cases] == [8, 64, 512]
    for case in cases:
        assert set(case.contenders) == {"rapidrl", "gymnasium/sync"}
        for step in case.contenders.values():
            step()
        for close in case.teardown:
            close()
