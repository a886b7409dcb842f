"""Built-in Multi-Particle Environments (batched Numba kernels, exact to the ``mpe2`` package).

``make_vec("MPE/simple_spread-v3", num_envs)`` gives ``SimpleSpreadVecEnv`` with ``num_envs`` env copies, i.e.
``num_envs * N`` agent rows (``rapidrl.envs.multiagent``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rapidrl.envs.core.base import parse_autoreset_mode
from rapidrl.envs.mpe import simple_spread as _ss
from rapidrl.envs.multiagent import MultiAgentVecEnvBase
from rapidrl.kernels import rng

MPE_ENVS = ("MPE/simple_spread-v3",)


class SimpleSpreadVecEnv(MultiAgentVecEnvBase):
    """``num_copies`` copies of simple_spread with N agents as ``num_copies * N`` rows (see ``rapidrl.envs.mpe
    .simple_spread`` for the dynamics and ``rapidrl.envs.multiagent`` for the layout).

    Args:
        num_copies: env copies E.
        N: agents (and landmarks) per copy.
        local_ratio: weight of the local (collision) reward; the team part has 1 - local_ratio.
        max_cycles: steps per episode (truncation).
        continuous_actions: Box(0, 1, (5,)) actions instead of Discrete(5).
        seed: copy e's stream derives from (seed, e); None = fresh entropy.
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
        if parse_autoreset_mode(autoreset_mode).name != "SAME_STEP":
            raise ValueError("SimpleSpreadVecEnv supports autoreset_mode='same_step' only")
        self.continuous = bool(continuous_actions)
        action_space = gym.spaces.Box(0.0, 1.0, (_ss.NUM_ACTIONS,), np.float32) if self.continuous \
            else gym.spaces.Discrete(_ss.NUM_ACTIONS)
        o = _ss.local_obs_dim(int(N))
        super().__init__(num_copies=num_copies, num_agents=int(N), local_obs_dim=o, state_dim=int(N) * o,
                         single_action_space=action_space, copy=copy)
        self.local_ratio, self.max_cycles = float(local_ratio), int(max_cycles)
        e, n = self.num_copies, self.num_agents
        self.agent_pos = np.zeros((e, n, 2))
        self.agent_vel = np.zeros((e, n, 2))
        self.landmark_pos = np.zeros((e, n, 2))
        self.steps = np.zeros(e, np.int64)
        self._rng_key = np.zeros(e, np.uint64)
        self._rng_counter = np.zeros(e, np.uint64)
        rng.derive_keys(seed, e, out=self._rng_key)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        if seed is not None:
            rng.derive_keys(seed, self.num_copies, out=self._rng_key)
            self._rng_counter[:] = 0
        _ss.reset_all(self.agent_pos, self.agent_vel, self.landmark_pos, self.steps, self._rng_key,
                      self._rng_counter, self._obs)
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        self._reset_team_stats()
        return self._reset_result()

    def step(self, actions):
        a = self._check_actions(actions)
        a = a.astype(np.float32, copy=False) if self.continuous else a.astype(np.int64, copy=False).reshape(-1, 1)
        _ss.step(self.agent_pos, self.agent_vel, self.landmark_pos, self.steps, np.ascontiguousarray(a),
                 self.continuous, self.local_ratio, self.max_cycles, self._rng_key, self._rng_counter, self._obs,
                 self._rewards, self._terminated, self._truncated, self._final_obs, self._episode_return,
                 self._episode_length, self._done, self._team_reward, self._team_return, self._team_done)
        self._team_length[:] = self.steps
        self._team_length[self._team_done] = self.max_cycles
        self._collect_team_stats()
        return self._step_result()

    def set_state(self, agent_pos: np.ndarray, agent_vel: np.ndarray, landmark_pos: np.ndarray,
                  steps: np.ndarray | None = None) -> None:
        """Overwrite the physical state (float64 [E, N, 2] each; steps int [E]) and recompute the observations."""
        for name, v in (("agent_pos", agent_pos), ("agent_vel", agent_vel), ("landmark_pos", landmark_pos)):
            if np.shape(v) != self.agent_pos.shape:
                raise ValueError(f"{name} must have shape {self.agent_pos.shape}, got {np.shape(v)}")
        self.agent_pos[:] = agent_pos
        self.agent_vel[:] = agent_vel
        self.landmark_pos[:] = landmark_pos
        if steps is not None:
            self.steps[:] = steps
        for e in range(self.num_copies):
            _ss.observe(e, self.agent_pos, self.agent_vel, self.landmark_pos, self._obs)


def make_mpe(env_id: str, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step", copy=False,
             **env_kwargs) -> SimpleSpreadVecEnv:
    """``num_envs`` copies of a built-in MPE env (``MPE_ENVS``)."""
    if env_id != "MPE/simple_spread-v3":
        raise ValueError(f"unknown MPE env {env_id!r}; built-in: {', '.join(MPE_ENVS)}")
    return SimpleSpreadVecEnv(num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
