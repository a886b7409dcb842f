"""PendulumNoVel-v1: Pendulum-v1 observing (cos theta, sin theta) only: the angular velocity is hidden, so a policy
must infer it from the observations it has seen (a continuous-control memory task, as pomdp-baselines' "-P" tasks).

Batched, it is Pendulum's own Numba functions (``rapidrl.envs.classic.pendulum``) with an ``observe`` that keeps two
of the three observations: same dynamics, seeding, autoreset and statistics, on the same core. The single Gymnasium
env (``cartpole_novel.MaskVelocity`` of these columns around ``gymnasium.make("Pendulum-v1")``) is the reference
the tests compare with.
"""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.classic import pendulum
from rapidrl.envs.core.numba_env import NumbaEnv, NumbaVecEnv
from rapidrl.envs.pomdp.cartpole_novel import MaskVelocity

PENDULUM_POSITIONS = (0, 1)
"""Columns of Pendulum's observation that PendulumNoVel keeps: cos theta and sin theta."""


def make_pendulum_novel(**kwargs) -> gym.Env:
    """``gymnasium.make("Pendulum-v1", **kwargs)`` with the angular velocity masked (the Gymnasium entry point)."""
    return MaskVelocity(gym.make("Pendulum-v1", **kwargs), PENDULUM_POSITIONS)


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = float32(cos theta, sin theta)."""
    th = state[0, i]
    obs[i, 0] = np.float32(np.cos(th))
    obs[i, 1] = np.float32(np.sin(th))


_KEEP = list(PENDULUM_POSITIONS)
SPEC = NumbaEnv(
    id="PendulumNoVel-v1",
    observation_space=gym.spaces.Box(pendulum.SPEC.observation_space.low[_KEEP],
                                     pendulum.SPEC.observation_space.high[_KEEP], dtype=np.float32),
    action_space=pendulum.SPEC.action_space,
    state_shape=pendulum.SPEC.state_shape,
    reset=pendulum.reset,
    step=pendulum.step,
    observe=observe,
    params=pendulum.SPEC.params,
    max_episode_steps=pendulum.SPEC.max_episode_steps,
    reset_params=pendulum.SPEC.reset_params,
    render=pendulum.SPEC.render,
    render_fps=pendulum.SPEC.render_fps,
)


class PendulumNoVelVecEnv(NumbaVecEnv):
    """N PendulumNoVel-v1 envs: a ``NumbaVecEnv`` of ``SPEC`` (``get_state()`` is Pendulum's whole state)."""

    def __init__(self, num_envs: int, **kwargs):
        super().__init__(SPEC, num_envs, **kwargs)
