"""Learning thresholds on MuJoCo (slow; run in CI), with the presets users get (configs/<algo>_<task>.toml).

InvertedPendulum-v5 pays 1 per step for at most 1000 steps: SAC and PPO must reach a 10-episode evaluation mean
of at least 950. Each run stops as soon as an evaluation reaches it; the test asserts that happened within the
preset's step budget.
"""

from __future__ import annotations

import pytest

import rapidrl as rr
from rapidrl.runs.config import preset_path, read_toml
from rapidrl.train.callbacks import EvalCallback

ENV = "InvertedPendulum-v5"


def preset(algo: str, env: str = ENV) -> tuple[dict, int]:
    data = read_toml(preset_path(algo, env))
    return data["algo"], data["run"]["timesteps"]


def reaches(model, threshold: float, budget: int, eval_freq: int) -> tuple[bool, list]:
    cb = EvalCallback(eval_freq=eval_freq, n_episodes=10, reward_threshold=threshold)
    model.learn(budget, callback=cb, progress_bar=False)
    history = [(int(step), round(mean, 1)) for step, mean, _, _ in cb.history]
    return any(mean >= threshold for _, mean in history), history


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sac_inverted_pendulum_reaches_950(seed):
    """Calibration (2026-11-24, 10-episode evaluations every 1,000 steps, torch at 1 thread): seed 0 reached 1000
    at 10,000 steps (39 s on the loaded 2-core machine), seed 1 at 16,000 (917 at 15,000; 60 s), seed 2 at 10,000
    (32 s); before that every evaluation was below 120."""
    kw, budget = preset("sac")
    ok, history = reaches(rr.SAC(ENV, seed=seed, torch_threads=1, **kw), 950, budget, 1000)
    assert ok, history


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_inverted_pendulum_reaches_950(seed):
    """Calibration (2026-11-24, evaluations every 10,240 steps): seed 0 reached 1000 at 40,960 steps (10 s),
    seed 1 at 51,200 (726 at 40,960; 13 s), seed 2 at 40,960 (10 s)."""
    kw, budget = preset("ppo")
    ok, history = reaches(rr.PPO(ENV, seed=seed, **kw), 950, budget, 10_240)
    assert ok, history


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_hopper_learns_to_hop_early_in_its_budget(seed):
    """PPO with the Hopper preset (configs/ppo_hopper.toml, CleanRL's setting) in a learn call of 102,400 steps (10%
    of the preset's budget; the learning rate anneals over it) reaches a 5-episode evaluation of 300; the run stops
    there. A random policy falls at once (about 20). Calibration (2026-11-25, evaluations every 10,240 steps): seed
    0: 58, 204, 244, 395 (stops at 40,960); seed 1: 213, 238, 346 (30,720); seed 2: 59, 248, 326 (30,720); run on,
    they reach 741, 917, 1571 at 102,400 (the 1M-step results are in docs/RESULTS.md). The preset it replaces
    (rl-zoo3's v3 setting) reached ~1000 at once by standing still and stayed there."""
    kw, _ = preset("ppo", "Hopper-v5")
    model = rr.PPO("Hopper-v5", seed=seed, **kw)
    cb = EvalCallback(eval_freq=10_240, n_episodes=5, reward_threshold=300)
    model.learn(102_400, callback=cb, progress_bar=False)
    assert max(mean for _, mean, _, _ in cb.history) >= 300, cb.history
    assert model.num_timesteps <= 51_200, cb.history  # reached within half of that call
