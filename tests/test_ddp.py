"""Several learners: PPO with two torchrun ranks stays bitwise identical, uses different envs, and learns.

The two-rank run (``tests/ddp_worker.py`` under ``python -m torch.distributed.run``) happens once per
module; its rank 0 writes a JSON file of check results that the tests below read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist

import rapidrl
from rapidrl.train.ddp import DistributedContext

WORKER = Path(__file__).with_name("ddp_worker.py")
TIMEOUT = 600  # seconds; start-up (imports, Numba cache) dominates on a loaded machine


def run_reaped(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; kill the whole group on timeout; assert nothing is left."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} did not finish within {timeout} s\nstdout:\n{out}\nstderr:\n{err[-5000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun's workers share its group: none may outlive it
        leftover = True
    except ProcessLookupError:
        leftover = False
    assert not leftover, "processes of the torchrun group were still alive after it exited"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("ddp") / "result.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(WORKER),
           "--out", str(out), "--timesteps", "5120"]
    done = run_reaped(cmd, TIMEOUT)
    assert done.returncode == 0, f"torchrun failed ({done.returncode})\nstderr:\n{done.stderr[-5000:]}"
    return json.loads(out.read_text())


def test_ranks_stay_bitwise_identical(two_ranks):
    assert two_ranks["world_size"] == 2
    assert two_ranks["params_changed"]  # training moved the parameters...
    assert two_ranks["params_equal"]  # ...identically on both ranks, although each saw its own data
    assert two_ranks["all_reduce_calls"] == two_ranks["num_updates"] * 8  # one per minibatch (4 epochs x 2)


def test_ranks_use_different_env_seeds(two_ranks):
    assert two_ranks["first_obs_differ"]


def test_metrics_are_combined_over_ranks(two_ranks):
    assert two_ranks["steps_per_rank"] == 5120
    assert two_ranks["global_step"] == 2 * 5120  # summed over ranks


@pytest.mark.parametrize("check", ["broadcast_restores_rank0", "grads_averaged", "metrics_reduced",
                                   "all_reduce_mean"])
def test_context_operations(two_ranks, check):
    assert two_ranks["checks"][check]


def test_two_ranks_learn(two_ranks):
    returns = [r for r in two_ranks["returns"] if r is not None]
    assert len(returns) >= 10
    # 20 short updates take CartPole from ~18 to ~33 (seed 0); a random policy stays near 22.
    assert np.mean(returns[-3:]) > 1.25 * np.mean(returns[:3])


def test_outside_torchrun_is_a_clear_error(monkeypatch):
    assert not dist.is_initialized()
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        DistributedContext.from_env()
    with pytest.raises(RuntimeError, match="torchrun"):
        rapidrl.PPO("CartPole-v1", num_envs=2, num_steps=8, minibatch_size=16, distributed=True)


def test_unsupported_algorithm_is_a_clear_error(monkeypatch):
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(NotImplementedError, match="not supported by DQN"):
        rapidrl.DQN("CartPole-v1", num_envs=1, distributed=True)
    assert not dist.is_initialized()  # refused before any process group exists


def test_single_rank_is_a_no_op():
    ctx = DistributedContext(rank=0, world_size=1, local_rank=0)
    assert ctx.is_main
    metrics = {"global_step": 7, "losses/x": 0.5}
    ctx.reduce_metrics(metrics)
    assert metrics == {"global_step": 7, "losses/x": 0.5}
    assert ctx.all_reduce_mean(3.0) == 3.0


def test_cli_distributed_training_rank0_writes_the_run(tmp_path):
    """`rapidrl train ... --distributed` under torchrun: one run directory, written by rank 0 only."""
    run = tmp_path / "run"
    out = run_reaped([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                      "-m", "rapidrl", "train", "ppo", "CartPole-v1", "--distributed", "--run-dir", str(run),
                      "--timesteps", "2048", "--headless", "--eval-episodes", "2",
                      "--set", "algo.num_envs=4", "--set", "algo.num_steps=64", "--set", "algo.minibatch_size=128"],
                     timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("run directory:") == 1 and out.stdout.count("model saved to") == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["timesteps"] == 2048
    assert (run / "model.pt").is_file() and len(list((run / "checkpoints").glob("*.pt"))) >= 1
