"""rapidrl as a real package: the wheel carries the presets, search spaces and the benchmark suite, and a clean
virtual environment with only the wheel installed runs `rapidrl list`, `train`, `eval` and `bench` from a
directory outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from test_precompile import _LISTEN_TO_COMPILES

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd, cwd, timeout=900, env=None):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


# The main job (the README's `make train`: preset PPO on CartPole-v1, then evaluation) on a short budget, printing the
# rapidrl functions Numba compiled on the way (a probe first: a function no cache holds, proving the counter counts).
_TRAIN_COUNTING_COMPILES = _LISTEN_TO_COMPILES + textwrap.dedent("""
    import numba
    def probe(x):
        return x + 1
    probe.__module__ = "rapidrl.probe"
    numba.njit(probe)(1)
    from rapidrl import cli
    assert cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "4096", "--eval-episodes", "2", "--run-dir", "run",
                     "--headless"]) == 0
    print("COMPILED", sorted(m for m in compiled if m.startswith("rapidrl")))
""")


@pytest.mark.slow
def test_wheel_installs_in_a_clean_venv_and_runs_outside_the_repository(tmp_path):
    """... and after ``python -m rapidrl.precompile`` there, the main job compiles nothing (no cold start)."""
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT), "-w",
          str(dist)], cwd=tmp_path)
    (wheel,) = dist.glob("rapidrl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("rapidrl/configs/ppo_cartpole.toml", "rapidrl/configs/spaces/ppo.toml",
                     "rapidrl/configs/variants/ppo_cartpole_throughput.toml", "rapidrl/benchmarks/run.py",
                     "rapidrl/benchmarks/README.md", "rapidrl/precompile.py"):
        assert expected in names, expected
    assert "rapidrl/benchmarks/taxi_tutorial.py" in names  # `rapidrl bench custom` needs no checkout
    assert not any(n.startswith(("tests/", "tools/")) or n == "rapidrl/benchmarks/results.py" for n in names)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    # torch before anything that needs it; --no-compile: no .pyc written ahead for torch's thousands of modules
    # (Python compiles what it imports)
    _run([py, "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0"], cwd=tmp_path)
    _run([py, "-m", "pip", "install", "-q", "--no-compile", str(wheel)], cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba_cache")
    rapidrl = str(venv / "bin" / "rapidrl")
    where = _run([py, "-c", "import rapidrl; print(rapidrl.__file__)"], cwd=work, env=env)
    assert str(venv) in where  # the installed package, not the repository's
    listed = _run([rapidrl, "list"], cwd=work, env=env)
    assert "ppo_cartpole" in listed and "CartPole-v1" in listed and "MinAtar/Breakout-v1" in listed
    # `python -m rapidrl.precompile` (the README's advice for a cold start) leaves nothing for the main job to compile:
    # the installed package's precompile, then the main job (preset PPO CartPole, then evaluation), counting compiles
    pre = _run([py, "-m", "rapidrl.precompile"], cwd=work, env=env)
    assert "precompile: done" in pre
    trained = _run([py, "-c", _TRAIN_COUNTING_COMPILES], cwd=work, env=env)
    assert "preset: ppo_cartpole.toml" in trained and "eval return" in trained
    assert trained.split("COMPILED")[-1].strip() == "['rapidrl.probe']"  # the probe only: nothing of the job
    assert (work / "run" / "model.pt").is_file()
    evaluated = _run([rapidrl, "eval", "run", "--episodes", "2"], cwd=work, env=env)
    assert "eval return" in evaluated
    bench = _run([rapidrl, "bench", "kernels", "--quick", "--filter", "gae/float32/64x128", "--out", "bench"],
                 cwd=work, env=env)
    assert "gae/float32/64x128" in bench and (work / "bench" / "BENCHMARKS.md").is_file()
    assert "not installed: pip install rlox" in bench  # peers missing from the clean venv are named, not fatal
