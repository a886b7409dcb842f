"""The offline datasets rebuilt from sources small enough for git (``tools/dataset_sources``, issue 61 item 1).

A source is a SAC run's config and its medium policy (the actor only). The rebuild re-runs the SAC seed to the
medium step, checks that its policy is the committed one bit for bit, writes medium-replay (the re-run's replay) and
medium (the committed policy's episodes) and compares their hashes with the ones recorded for this CPU. Here on
Pendulum at a few hundred steps, end to end through the command line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import rapidrl as rr
from tools import dataset_sources as ds

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    """A finished SAC Pendulum run (fp32, one thread) with checkpoints and their replay buffers at 200 and 400."""
    run = tmp_path_factory.mktemp("source") / "sac-pendulum"
    argv = [sys.executable, "-m", "rapidrl", "train", "sac", "Pendulum-v1", "--timesteps", "400", "--seed", "0",
            "--run-dir", str(run), "--headless", "--set", "algo.torch_threads=1", "--set", "algo.precision=fp32",
            "--set", "algo.learning_starts=100", "--set", "algo.hidden=[32, 32]", "--set", "algo.batch_size=32",
            "--set", "run.checkpoint_every=200", "--set", "run.checkpoint_keep=10"]
    subprocess.run(argv, cwd=REPO, check=True, capture_output=True)
    return run


def test_a_policy_file_is_the_actor_alone_and_acts_as_its_model(sac_run, tmp_path):
    ckpt = sac_run / "checkpoints" / "step_000000000400.pt"
    payload = ds.policy_payload(ckpt)
    assert set(payload["state"]) == {"actor"} and "training" not in payload
    policy = tmp_path / "policy.pt"
    torch.save(payload, policy)
    assert policy.stat().st_size < ckpt.stat().st_size / 2  # no critics, targets or optimizer moments
    model = rr.SAC.load(ds.model_from_policy(policy, tmp_path / "model.pt"))
    original = rr.SAC.load(ckpt)
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), original.predict(obs, deterministic=True))
    assert ds.tensors_digest(model._state()["actor"]) == ds.tensors_digest(payload["state"]["actor"])


def test_the_datasets_rebuild_bit_for_bit_from_their_sources(sac_run, tmp_path):
    sources, root = tmp_path / "sources", tmp_path / "datasets"
    sources.mkdir()
    main = ds.main
    assert main(["record", "pendulum", "--run", str(sac_run), "--medium-step", "200", "--ref-max", "-150",
                 "--medium-steps", "600", "--sources", str(sources)]) == 0
    assert (sources / "pendulum-run.toml").is_file() and ds.source_tasks(sources) == ["pendulum"]
    key = ds.cpu_key()
    assert set(ds.load_source("pendulum", sources)["hashes"][key]) == {"policy"}
    rebuild = ["rebuild", "pendulum", "--sources", str(sources), "--root", str(root)]
    # first rebuild: the re-run's policy is the committed one; the datasets' hashes are recorded for this CPU
    assert main([*rebuild, "--work", str(tmp_path / "work1"), "--record"]) == 0
    hashes = ds.load_source("pendulum", sources)["hashes"][key]
    assert set(hashes) == {"policy", "medium-replay-v0", "medium-v0"}
    assert hashes["medium-replay-v0"] == ds.dataset_digest("rapidrl/pendulum/medium-replay-v0", root)
    from rapidrl.buffers.dataset import read_header

    assert read_header("rapidrl/pendulum/medium-replay-v0", root).total_steps == 200  # the replay to step 200
    assert read_header("rapidrl/pendulum/medium-v0", root).total_steps == 600
    # a second rebuild from scratch gives the same bytes
    assert main([*rebuild, "--work", str(tmp_path / "work2")]) == 0
    assert ds.dataset_digest("rapidrl/pendulum/medium-v0", root) == hashes["medium-v0"]
    # a committed policy that is not the run's (the step-400 one) is caught: the policy and medium differ
    other = ds.policy_payload(sac_run / "checkpoints" / "step_000000000400.pt")
    torch.save(other, sources / "pendulum-medium-policy.pt")
    assert main([*rebuild, "--work", str(tmp_path / "work2")]) == 2
    assert ds.dataset_digest("rapidrl/pendulum/medium-v0", root) != hashes["medium-v0"]
    assert ds.dataset_digest("rapidrl/pendulum/medium-replay-v0", root) == hashes["medium-replay-v0"]


def test_a_source_must_state_its_precision_and_step(sac_run, tmp_path):
    with pytest.raises(SystemExit, match="no checkpoint at step 300"):
        ds.main(["record", "pendulum", "--run", str(sac_run), "--medium-step", "300", "--ref-max", "-150",
                 "--sources", str(tmp_path)])
    with pytest.raises(SystemExit, match="no dataset source"):
        ds.main(["rebuild", "walker", "--work", str(tmp_path / "w"), "--sources", str(tmp_path)])
