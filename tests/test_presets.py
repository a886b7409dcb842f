"""Nothing a user trains is lost: every shipped preset trains, saves, evaluates and resumes from the CLI.

The presets are discovered from the package data (``rapidrl/configs/*.toml`` and the variants,
``rapidrl/configs/variants/*.toml``), so a new preset is covered by adding it. Each one trains briefly from the
command line (its own hyperparameters; only the budget, the warm-up of off-policy learners and, for Atari, the
length of a game are cut), then:
- ``model.pt`` and every checkpoint load with ``torch.load(weights_only=True)`` and hold nothing but tensors and
  plain Python values; ``rapidrl eval RUN_DIR`` and ``ALGO.load`` read them; ``model.pt`` and the final checkpoint
  act alike;
- the run resumes from its first checkpoint (as ``rapidrl train --resume`` after a crash) to completion, and
  where the checkpoint holds the env's state (the built-in envs) it ends with exactly the parameters of the
  uninterrupted run;
- a representative of each algorithm and env family is killed with SIGKILL mid-run, in its own process, and
  resumed to completion.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from checkpoint_checks import assert_plain, kill_when, python_rapidrl, same

from rapidrl import cli
from rapidrl.algos.registry import get_algorithm
from rapidrl.runs.config import PRESETS_DIR, env_family, list_presets, read_toml
from rapidrl.runs.layout import read_summary
from rapidrl.train.checkpoint import list_checkpoints, load_checkpoint

VARIANTS = sorted((PRESETS_DIR / "variants").glob("*.toml"))
"""Presets not picked automatically (``rapidrl train --config``; a results row's ``config``): covered as the rest."""
PRESETS = {p.stem: p for p in [*list_presets(), *VARIANTS]}


def test_the_shipped_presets_are_found_in_the_package_data():
    assert len(PRESETS) >= 26
    assert {"ppo_cartpole", "dqn_atari", "impala_cartpole", "ppo_hopper", "sac_halfcheetah",
            "iql_hopper_finetune"} <= set(PRESETS)
    assert len(PRESETS) == len(list_presets()) + len(VARIANTS), "a variant has the name of a preset"


def brief(name: str, rollouts: int = 1, phases: int = 16) -> tuple[list[str], int, int]:
    """(CLI arguments, total steps, checkpoint interval) of a short run of preset ``name`` with a checkpoint half-way:
    ``rollouts`` on-policy rollouts per checkpoint, or (off-policy) learning from when one batch is stored and
    ``phases`` update phases (at least 2) before each checkpoint."""
    data = read_toml(PRESETS[name])
    run, algo = data["run"], data.get("algo", {})
    config = get_algorithm(run["algo"]).config_class()
    get = lambda key: algo.get(key, getattr(config, key))  # noqa: E731
    sets: list[str] = []
    if hasattr(config, "num_steps"):  # on-policy
        every = total = rollouts * get("num_envs") * get("num_steps")
    elif hasattr(config, "dataset"):  # offline: a step is a gradient step (CQL's ~0.2 s at its size here)
        every = total = 4
        if get("offline_steps") is not None:  # offline-to-online: the switch before the checkpoint
            sets += ["--set", "algo.offline_steps=2"]
    else:  # off-policy
        phase = get("train_freq") * get("num_envs")  # env steps between two update phases
        warmup = -(-max(get("batch_size"), phase) // phase) * phase
        total = phase * max(2, -(-phases // phase))
        every = warmup + total
        sets += ["--set", f"algo.learning_starts={warmup}"]
    if env_family(run["env"]) == "atari":  # an untrained agent's game is cut at 1,000 agent steps
        sets += ["--set", "env.max_episode_frames=4000"]
    total += every
    return ["--config", str(PRESETS[name]), "--timesteps", str(total), "--eval-episodes", "1", "--headless",
            "--set", f"run.checkpoint_every={every}", "--set", "run.checkpoint_keep=5", *sets], total, every


def observations(model, n: int = 8) -> np.ndarray:
    """n observations of the model's env after a few random steps (the policy's raw input)."""
    from rapidrl.envs import make_vec

    env = make_vec(model.env_id, n, seed=123, flatten_observations=True, **model.env_kwargs)
    obs, _ = env.reset(seed=123)
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample())
    obs = np.array(obs)
    env.close()
    return obs


def offline_dataset(name: str, root) -> None:
    """For a preset that trains on a dataset: a small one under its id in ``root`` (2,000 steps of uniform-random
    actions in its env; the preset's own dataset is built by the D4RL recipe, docs/offline.md)."""
    from rapidrl.buffers.dataset import collect_episodes, write_dataset
    from rapidrl.envs import make_vec

    data = read_toml(PRESETS[name])
    env = make_vec(data["run"]["env"], 4, seed=0, flatten_observations=True)
    space = env.single_action_space
    space.seed(0)
    write_dataset(data["algo"]["dataset"], collect_episodes(env, lambda o: np.stack([space.sample() for _ in o]),
                                                            2000), env.single_observation_space, space,
                  env_id=data["run"]["env"], root=root)
    env.close()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_trains_saves_evaluates_and_resumes(name, tmp_path, capsys, monkeypatch):
    if "dataset" in read_toml(PRESETS[name]).get("algo", {}):
        monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
        offline_dataset(name, tmp_path / "datasets")
    args, total, every = brief(name)
    algo = read_toml(PRESETS[name])["run"]["algo"]
    cls = get_algorithm(algo)
    run = tmp_path / "run"
    assert cli.main(["train", *args, "--run-dir", str(run)]) == 0, capsys.readouterr().err
    summary = read_summary(run)
    assert summary["status"] == "finished" and summary["timesteps"] == total
    steps = [s for s, _ in list_checkpoints(run / "checkpoints")]
    assert steps == [every, total]

    # every file loads without running code and holds only tensors and plain values
    for path in [run / "model.pt", *(p for _, p in list_checkpoints(run / "checkpoints"))]:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        assert_plain(payload, path.name)
        assert load_checkpoint(path)["num_timesteps"] in (every, total)

    # rapidrl eval reads the run; model.pt and the final checkpoint hold the same policy
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0
    assert "eval return" in capsys.readouterr().out
    final = cls.load(run / "model.pt")
    last = cls.load(run / "checkpoints" / f"step_{total:012d}.pt")
    obs = observations(final)
    np.testing.assert_array_equal(act(final, obs), act(last, obs))
    for m in (final, last):
        m.env.close()

    # resume from the first checkpoint, as `rapidrl train --resume` after a crash right after it
    uninterrupted = load_checkpoint(run / "model.pt")
    first = load_checkpoint(run / "checkpoints" / f"step_{every:012d}.pt")
    captured = bool(first["training"]["env"])  # the env's state is in the checkpoint (built-in envs)
    for item in [run / "model.pt", run / "summary.json", *(run / "checkpoints").glob(f"step_{total:012d}.pt*")]:
        shutil.rmtree(item) if item.is_dir() else item.unlink()
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"resuming from {run / 'checkpoints'}" in out and f"(step {every:,})" in out
    summary = read_summary(run)
    assert summary["status"] == "finished" and summary["timesteps"] == total and summary["resumed"]
    resumed = load_checkpoint(run / "model.pt")
    if captured:
        assert same(resumed["state"], uninterrupted["state"]), "the resumed run ended elsewhere"


def act(model, obs: np.ndarray) -> np.ndarray:
    """Deterministic actions for obs [B, ...] (a recurrent policy from a fresh state)."""
    if getattr(model, "recurrent", False) or getattr(getattr(model, "policy", None), "recurrent", False):
        return model.predict(obs, deterministic=True)[0]
    return model.predict(obs, deterministic=True)


# One preset per algorithm and per env family, with the size of its brief run: long enough after the first
# checkpoint (a fraction of a second at least) that the run is still going when it is killed there.
KILLED = {
    "ppo_cartpolenovel": dict(rollouts=16),  # PPO, recurrent, the partially observed family
    "a2c_cartpole": dict(rollouts=200),  # A2C, classic control
    "impala_cartpole": dict(rollouts=16),  # IMPALA, overlapped collection
    "ppo_minatar": dict(rollouts=2),  # MinAtar
    "dqn_atari": dict(phases=32),  # DQN, Atari, frame replay
    "sac_hopper": dict(phases=64),  # SAC, MuJoCo
    "td3_pendulum": dict(phases=64),  # TD3
}


@pytest.mark.parametrize("name", sorted(KILLED))
def test_preset_killed_with_sigkill_resumes_to_completion(name, tmp_path, capsys):
    args, total, _ = brief(name, **KILLED[name])
    run = tmp_path / "run"
    kill_when(python_rapidrl("train", *args, "--run-dir", str(run)),
              lambda: bool(list_checkpoints(run / "checkpoints")), timeout=240)
    killed_at = list_checkpoints(run / "checkpoints")[-1][0]
    assert killed_at < total and read_summary(run) is None
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0, capsys.readouterr().err
    assert f"resuming from {run / 'checkpoints'}" in capsys.readouterr().out
    summary = read_summary(run)
    assert summary["status"] == "finished" and summary["timesteps"] == total and summary["resumed"]
    model = get_algorithm(summary["algo"]).load(run / "model.pt")
    assert model.num_timesteps == total
    model.env.close()


def test_an_old_setting_name_overrides_the_presets_new_one():
    """A user's setting under a name of an older rapidrl wins over the preset's value under today's name (each layer
    is upgraded before the layers merge), with a DeprecationWarning that names both."""
    from rapidrl.runs.config import resolve

    with pytest.warns(DeprecationWarning, match="target_update_interval replaced by target_update_gradient_steps=7"):
        config = resolve([("--config", {"run": {"algo": "discrete_cql", "env": "CartPole-v1"},
                                        "algo": {"target_update_interval": 7}})])
    assert config.algo_config.target_update_gradient_steps == 7
