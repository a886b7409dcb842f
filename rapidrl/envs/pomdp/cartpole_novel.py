"""CartPoleNoVel-v1: CartPole-v1 observing (cart position, pole angle) only.

Batched, it is CartPole's own Numba functions (``rapidrl.envs.classic.cartpole``) with an ``observe`` that keeps two
of the four state variables: same dynamics, seeding, autoreset and statistics, on the same core. The single
Gymnasium env (``MaskVelocity`` around ``gymnasium.make("CartPole-v1")``) is the reference the tests compare with.
"""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.classic import cartpole
from rapidrl.envs.core.numba_env import NumbaEnv, NumbaVecEnv

CARTPOLE_POSITIONS = (0, 2)
"""Columns of CartPole's observation that CartPoleNoVel keeps: cart position and pole angle."""


class MaskVelocity(gym.ObservationWrapper):
    """An env with only the ``keep`` columns of its Box observation (default CartPole's cart position and pole angle;
    PendulumNoVel's are ``PENDULUM_POSITIONS``)."""

    def __init__(self, env: gym.Env, keep: tuple[int, ...] = CARTPOLE_POSITIONS):
        super().__init__(env)
        box = env.observation_space
        self.keep = list(keep)
        self.observation_space = gym.spaces.Box(box.low[self.keep], box.high[self.keep], dtype=box.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def make_cartpole_novel(**kwargs) -> gym.Env:
    """``gymnasium.make("CartPole-v1", **kwargs)`` with the velocities masked (the Gymnasium entry point)."""
    return MaskVelocity(gym.make("CartPole-v1", **kwargs))


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = float32(x, theta)."""
    obs[i, 0] = np.float32(state[0, i])
    obs[i, 1] = np.float32(state[2, i])


_KEEP = list(CARTPOLE_POSITIONS)
SPEC = NumbaEnv(
    id="CartPoleNoVel-v1",
    observation_space=gym.spaces.Box(cartpole.SPEC.observation_space.low[_KEEP],
                                     cartpole.SPEC.observation_space.high[_KEEP], dtype=np.float32),
    action_space=cartpole.SPEC.action_space,
    state_shape=cartpole.SPEC.state_shape,
    reset=cartpole.reset,
    step=cartpole.step,
    observe=observe,
    params=cartpole.SPEC.params,
    max_episode_steps=cartpole.SPEC.max_episode_steps,
    reset_params=cartpole.SPEC.reset_params,
    check_params=cartpole.check_params,
    render=cartpole.SPEC.render,
    render_fps=cartpole.SPEC.render_fps,
)


class CartPoleNoVelVecEnv(NumbaVecEnv):
    """N CartPoleNoVel-v1 envs: a ``NumbaVecEnv`` of ``SPEC`` (``get_state()`` is CartPole's whole state)."""

    def __init__(self, num_envs: int, **kwargs):
        super().__init__(SPEC, num_envs, **kwargs)

    @property
    def inner(self) -> CartPoleNoVelVecEnv:
        """This env (code written against the earlier wrapper read CartPole's state through ``inner``)."""
        return self
