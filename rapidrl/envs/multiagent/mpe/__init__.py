"""Built-in Multi-Particle Environments, written on the env core (exact to the ``mpe2`` package).

``make_vec("MPE/simple_spread-v3", num_envs)`` gives ``SimpleSpreadVecEnv`` with ``num_envs`` env copies, i.e.
``num_envs * N`` agent rows (``rapidrl.envs.multiagent``).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np

from rapidrl.envs.core.numba_env import NumbaEnv, NumbaVecEnv
from rapidrl.envs.multiagent.base import MultiAgentVecEnvBase, row_observation_space
from rapidrl.envs.multiagent.mpe import simple_spread as _ss

MPE_ENVS = ("MPE/simple_spread-v3",)


@functools.cache
def simple_spread_env(n_agents: int, continuous: bool) -> NumbaEnv:
    """simple_spread with ``n_agents`` agents (and landmarks) as a multi-agent ``NumbaEnv`` (rows = agents)."""
    o = _ss.local_obs_dim(n_agents)
    action_space = gym.spaces.Box(0.0, 1.0, (_ss.NUM_ACTIONS,), np.float32) if continuous \
        else gym.spaces.Discrete(_ss.NUM_ACTIONS)
    return NumbaEnv(id="MPE/simple_spread-v3", observation_space=row_observation_space(o, n_agents, n_agents * o),
                    action_space=action_space, state_shape=(None, 4, n_agents, 2), reset=_ss.reset, step=_ss.step,
                    observe=_ss.observe_rows, params={"local_ratio": 0.5}, max_episode_steps=25, agents=n_agents,
                    cache_dependencies=("rapidrl.kernels.rng",))


class SimpleSpreadVecEnv(MultiAgentVecEnvBase, NumbaVecEnv):
    """``num_copies`` copies of simple_spread with N agents as ``num_copies * N`` rows (see ``simple_spread.py`` for
    the dynamics and ``rapidrl.envs.multiagent`` for the layout).

    Args:
        num_copies: env copies E.
        N: agents (and landmarks) per copy.
        local_ratio: weight of the local (collision) reward; the team part has 1 - local_ratio.
        max_cycles: steps per episode (truncation).
        continuous_actions: Box(0, 1, (5,)) actions instead of Discrete(5).
        seed: copy e's stream derives from (seed, e); None = fresh entropy.
        autoreset_mode: "same_step" or "next_step" (the core's, as every env written as Numba functions).
    """

    env_id = "MPE/simple_spread-v3"

    def __init__(self, num_copies: int, *, N: int = 3, local_ratio: float = 0.5, max_cycles: int = 25,
                 continuous_actions: bool = False, seed: int | None = None, autoreset_mode="same_step",
                 copy: bool = False):
        if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 2:
            raise ValueError(f"N must be an int >= 2, got {N!r}")
        if not 0.0 <= float(local_ratio) <= 1.0:
            raise ValueError(f"local_ratio must lie in [0, 1], got {local_ratio!r}")
        if isinstance(max_cycles, bool) or not isinstance(max_cycles, (int, np.integer)) or max_cycles < 1:
            raise ValueError(f"max_cycles must be a positive int, got {max_cycles!r}")
        self.continuous = bool(continuous_actions)
        super().__init__(simple_spread_env(int(N), self.continuous), num_copies, seed=seed,
                         autoreset_mode=autoreset_mode, copy=copy, max_episode_steps=int(max_cycles),
                         local_ratio=float(local_ratio))
        o = _ss.local_obs_dim(int(N))
        self._init_multiagent(num_copies=self.copies, num_agents=int(N), local_obs_dim=o, state_dim=int(N) * o)
        self.local_ratio, self.max_cycles = float(local_ratio), int(max_cycles)
        self.agent_pos = self._state[:, _ss.POS]  # float64 [E, N, 2] views of the state
        self.agent_vel = self._state[:, _ss.VEL]
        self.landmark_pos = self._state[:, _ss.LANDMARK]

    @property
    def steps(self) -> np.ndarray:
        """Steps of each copy's current episode (int32 [E], the core's time-limit counter)."""
        return self._elapsed

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        out = super().reset(seed=seed, options=options)
        self._reset_team_stats()
        return out

    def step(self, actions):
        out = super().step(actions)
        self._team_step(self._done.reshape(self.num_copies, self.num_agents)[:, 0])
        return out

    def set_state(self, agent_pos: np.ndarray, agent_vel: np.ndarray, landmark_pos: np.ndarray,
                  steps: np.ndarray | None = None) -> None:
        """Overwrite the physical state (float64 [E, N, 2] each; steps int [E]) and recompute the observations."""
        for name, v in (("agent_pos", agent_pos), ("agent_vel", agent_vel), ("landmark_pos", landmark_pos)):
            if np.shape(v) != self.agent_pos.shape:
                raise ValueError(f"{name} must have shape {self.agent_pos.shape}, got {np.shape(v)}")
        state = np.stack([agent_pos, agent_vel, landmark_pos, np.zeros_like(self.agent_pos)], axis=1)
        for e in range(self.copies):
            super().set_state(e, state[e])
        if steps is not None:
            self._elapsed[:] = steps
        self._reset_team_stats()


def make_mpe(env_id: str, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step", copy=False,
             **env_kwargs) -> SimpleSpreadVecEnv:
    """``num_envs`` copies of a built-in MPE env (``MPE_ENVS``)."""
    if env_id != "MPE/simple_spread-v3":
        raise ValueError(f"unknown MPE env {env_id!r}; built-in: {', '.join(MPE_ENVS)}")
    return SimpleSpreadVecEnv(num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
