"""Learning with memory: a recurrent PPO solves the partially observed tasks, and the same PPO without memory
(an MLP policy, the same settings otherwise) does not, in the same test: that is the proof the state is used.
The CartPole preset's settings also solve Gymnasium's own CartPole-v1 with the velocities masked by an observation
wrapper (not rapidrl's built-in env).

Calibrated on the seeds in each docstring; CI runs one seed of each CartPole test and all three seeds of the memory
task (about 25 seconds each).
"""

from __future__ import annotations

import pytest
from space_envs import PositionsOnly  # noqa: F401  (registers PositionsOnlyCartPole-v1)

import rapidrl as rr
from rapidrl.runs.config import preset_path, read_toml
from rapidrl.train.callbacks import EvalCallback

CARTPOLE_BUDGET = 150_000
"""The budget of the issue's memory row: solved (evaluation >= 475) within 150k steps."""
SOLVE = 475.0
SEED_BUILTIN = 0
SEED_WRAPPER = 0
MEMORY_BUDGET = 51_200


def cartpole_preset(recurrent: bool) -> dict:
    """The preset's settings (configs/ppo_cartpolenovel.toml); without memory: the same PPO with an MLP of the
    heads' sizes for the actor and for the critic (recurrent="none", hidden=head_hidden; the feed-forward policy's
    own orthogonal initialisation)."""
    settings = dict(read_toml(preset_path("ppo", "CartPoleNoVel-v1"))["algo"])
    if not recurrent:
        for key in ("critic_recurrent", "ortho_init"):
            settings.pop(key, None)
        hidden = settings.pop("head_hidden", None) or [64]
        settings = {**settings, "recurrent": "none", "hidden": hidden}
    return settings


def steps_to_solve(env_id: str, seed: int, recurrent: bool = True) -> tuple[int | None, float]:
    """Train the preset on ``env_id`` for CARTPOLE_BUDGET steps at most, evaluating every 5,120 steps (10
    deterministic episodes, as ``rapidrl eval``) and stopping at the first evaluation >= SOLVE: (steps then or None
    when never solved, the best evaluation)."""
    model = rr.PPO(env_id, seed=seed, torch_threads=1, **cartpole_preset(recurrent))
    probe = EvalCallback(eval_freq=5_120, n_episodes=10, reward_threshold=SOLVE)
    model.learn(CARTPOLE_BUDGET, callback=probe, progress_bar=False)
    solved = next((step for step, mean, _, _ in probe.history if mean >= SOLVE), None)
    return solved, probe.best_mean


MEMORY_SETTINGS = dict(num_envs=8, num_steps=32, minibatch_size=256, update_epochs=20, hidden=[64],
                       recurrent_size=64, learning_rate=1e-3, gamma=0.98, gae_lambda=0.9, anneal_clip=True)
"""gae_lambda 0.9 (was 0.8): the reward comes 8 steps after the cue, and lambda^8 is 0.43 instead of 0.17 of the
credit reaching the cue step. Recalibrated when the recurrent update moved from closed-form head gradients to
autograd through ppo_loss (the same mathematics, another rounding path): at 0.8, seed 1 then reached 0.53 (1.00
before), at 0.9 every seed reaches 1.00."""


def train_memory_cue(seed: int, recurrent: bool) -> float:
    """MemoryCue-v0 (4 cues, the answer asked 8 steps after the cue): mean reward of 100 episodes."""
    model = rr.PPO("MemoryCue-v0", seed=seed, torch_threads=1, recurrent="lstm" if recurrent else "none",
                   **MEMORY_SETTINGS)
    model.learn(MEMORY_BUDGET, progress_bar=False)
    return model.evaluate(100)[0]


@pytest.mark.parametrize("seed", [SEED_BUILTIN])
def test_recurrent_ppo_solves_cartpole_without_velocities_and_an_mlp_does_not(seed):
    """Solved as the results row counts it (an evaluation of 10 deterministic episodes >= 475 within 150k steps,
    every 5,120 steps): recurrent PPO at 25,600 / 56,320 / 10,240 / 35,840 / 15,360 steps on seeds 0 / 1 / 2 / 3 / 4
    (AMX CPU; seed 0 at 20,480 on an AVX2-only CPU); the MLP twin never, at any of its 29 evaluations (best 49.2,
    seed 0, AVX2 CPU; 43.9 at 150k on the AMX CPU).

    Not asserted: the evaluation at the end of the budget. The preset (rl-zoo3's setting, which trains 100k steps)
    does not hold its solution: on an AVX2-only CPU, seed 0 evaluates 500 at 20,480 steps, then 160-500 and 185 at
    150k (seeds 1 and 2: 500 from 71,680 on); on the AMX CPU seed 4 ended at 468.6. Rounding differs between CPUs
    (another matmul kernel), so a run's path after solving is not a property of the preset."""
    solved, best = steps_to_solve("CartPoleNoVel-v1", seed, recurrent=True)
    assert solved is not None, f"not solved in {CARTPOLE_BUDGET} steps (best evaluation {best})"
    solved_mlp, best_mlp = steps_to_solve("CartPoleNoVel-v1", seed, recurrent=False)
    assert solved_mlp is None and best_mlp < SOLVE / 2, f"the MLP twin reached {best_mlp} (solved at {solved_mlp})"


@pytest.mark.parametrize("seed", [SEED_WRAPPER])
def test_the_preset_solves_gymnasiums_cartpole_with_velocities_masked(seed):
    """The preset's settings on Gymnasium's own CartPole-v1 behind an observation wrapper that keeps the cart
    position and the pole angle (tests/space_envs.py), stepped through rapidrl's Gymnasium adapter: solved
    (an evaluation of 10 deterministic episodes >= 475) within 150k steps, training stopped there. Solved at
    25,600 / 10,240 / 10,240 / 15,360 steps on seeds 0 / 1 / 2 / 3 (seed 0: about 11 s of training on one core)."""
    solved, best = steps_to_solve("PositionsOnlyCartPole-v1", seed)
    assert solved is not None, f"not solved in {CARTPOLE_BUDGET} steps (best evaluation {best})"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recurrent_ppo_remembers_the_cue_and_an_mlp_cannot(seed):
    """Mean reward (100 episodes) at 51,200 steps, seeds 0 / 1 / 2: recurrent PPO 1.00 / 1.00 / 1.00; MLP PPO
    0.26 / 0.25 / 0.25 (no policy without memory can expect more than 1/4)."""
    assert train_memory_cue(seed, recurrent=True) >= 0.95
    assert train_memory_cue(seed, recurrent=False) <= 0.4
