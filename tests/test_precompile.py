"""``python -m rapidrl.precompile`` leaves nothing for the main job to compile (no cold start)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Runs the main job (the README's `make train`: preset PPO on CartPole-v1, then evaluation) on a short budget
# and prints how many rapidrl functions Numba compiled on the way.
_COUNT_COMPILES = textwrap.dedent("""
    import os, sys
    from numba.core import event
    compiled = []
    class Listener(event.Listener):
        def on_start(self, ev):
            pass
        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__module__)
    event.register("numba:compile", Listener())
    import numba
    def probe(x):
        return x + 1
    probe.__module__ = "rapidrl.probe"  # a function the cache cannot hold yet: proves the counter counts
    numba.njit(probe)(1)
    from rapidrl import cli
    os.chdir(sys.argv[1])
    assert cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "4096", "--seed", "0"]) == 0
    print("COMPILED", sorted(m for m in compiled if m.startswith("rapidrl")))
""")


@pytest.mark.slow
def test_main_job_compiles_nothing_after_precompile(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba_cache")}
    pre = subprocess.run([sys.executable, "-m", "rapidrl.precompile"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert pre.returncode == 0, pre.stderr[-3000:]
    assert "precompile: done" in pre.stderr
    run = subprocess.run([sys.executable, "-c", _COUNT_COMPILES, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split("COMPILED")[-1].strip() == "['rapidrl.probe']"  # the probe only: nothing of the job
