"""``PettingZooVecEnv``: any PettingZoo Parallel API env, E copies, as the multi-agent row layout.

Rows are ``e * N + i`` for agent ``possible_agents[i]`` of copy e (``rapidrl.envs.multiagent``). Parameter
sharing needs one observation space and one action space for every agent: they are checked to be equal (Box
observations of any shape, flattened; Discrete or 1-D Box actions), otherwise a ValueError names the agent that
differs. The global state is the env's ``state()`` when it has one, else the concatenation of the agents' local
observations (zeros in the slots of agents that are not present).

Action masks (docs/masks.md): an env whose observations are PettingZoo's ``{"observation": Box, "action_mask":
...}`` dicts (the classic envs' convention) with Discrete actions gives its masks: the row observations are built
from ``"observation"``, and ``info["action_mask"]`` / ``action_masks()`` hold each row's ``"action_mask"`` (all
actions valid for rows without an observation: their actions are not sent to the env).

Agents that leave mid-episode: on the step an agent terminates or is truncated its row carries the real final
reward, flag and observation (``info["final_obs"]``); afterwards, until its copy resets (when no agent is left),
the row is inactive (``info["active"]`` False): observation zeros, reward 0, ``terminated`` True, no episode
statistics, and its actions are not sent to the env. Agents absent at reset are inactive the same way. An agent
that leaves without a terminated or truncated flag counts as truncated (its episode was cut, not ended).

Episode statistics of the rows and autoreset flags come from the env core (``VecEnvBase._record`` over the rows
that acted); autoreset is per copy, in the same step (``autoreset_mode="same_step"``).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from rapidrl.envs.core.actions import as_action_mask
from rapidrl.envs.core.base import VecEnvBase
from rapidrl.envs.multiagent.base import MultiAgentVecEnvBase, row_observation_space


def _same_space(a: gym.Space, b: gym.Space) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, gym.spaces.Box):
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.low, b.low) \
            and np.array_equal(a.high, b.high)
    return a == b


class PettingZooVecEnv(MultiAgentVecEnvBase, VecEnvBase):
    """E copies of a PettingZoo ``ParallelEnv`` as ``E * N`` rows.

    Args:
        env_fn: a callable returning a new ParallelEnv (e.g. ``mpe2.simple_spread_v3.parallel_env``).
        num_copies: E.
        seed: copy e is reset with seed ``seed + e`` at ``reset()`` (None: unseeded).
    """

    def __init__(self, env_fn: Callable, num_copies: int, *, seed: int | None = None, copy: bool = False):
        if not callable(env_fn):
            raise TypeError(f"env_fn must be a callable returning a PettingZoo ParallelEnv, got {env_fn!r}")
        if isinstance(num_copies, bool) or not isinstance(num_copies, (int, np.integer)) or num_copies < 1:
            raise ValueError(f"num_copies must be a positive int, got {num_copies!r}")
        self.envs = [env_fn() for _ in range(int(num_copies))]
        first = self.envs[0]
        if not hasattr(first, "possible_agents") or not hasattr(first, "step"):
            raise TypeError(f"env_fn must return a PettingZoo ParallelEnv, got {type(first).__name__}")
        agents = list(first.possible_agents)
        obs_space, act_space = first.observation_space(agents[0]), first.action_space(agents[0])
        self._masked = (isinstance(obs_space, gym.spaces.Dict) and set(obs_space.spaces) == {"observation",
                                                                                            "action_mask"})
        if self._masked:
            if not isinstance(act_space, gym.spaces.Discrete):
                raise ValueError(f"observations with an 'action_mask' need Discrete actions, got {act_space} for "
                                 f"agent {agents[0]!r}")
            obs_space = obs_space["observation"]
        if not isinstance(obs_space, gym.spaces.Box):
            raise ValueError(f"observation spaces must be Box for parameter sharing, got {obs_space} "
                             f"for agent {agents[0]!r}")
        if not (isinstance(act_space, gym.spaces.Discrete)
                or (isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1)):
            raise ValueError(f"action spaces must be Discrete or 1-D Box, got {act_space} for agent {agents[0]!r}")
        for a in agents[1:]:
            other = first.observation_space(a)
            if self._masked and isinstance(other, gym.spaces.Dict) and "observation" in other.spaces:
                other = other["observation"]
            if not _same_space(other, obs_space):
                raise ValueError(f"parameter sharing needs one observation space for all agents: agent {a!r} has "
                                 f"{first.observation_space(a)}, agent {agents[0]!r} has {obs_space}")
            if not _same_space(first.action_space(a), act_space):
                raise ValueError(f"parameter sharing needs one action space for all agents: agent {a!r} has "
                                 f"{first.action_space(a)}, agent {agents[0]!r} has {act_space}")
        o = int(np.prod(obs_space.shape))
        state_space = getattr(first, "state_space", None)
        self._has_state = isinstance(state_space, gym.spaces.Box)
        state_dim = int(np.prod(state_space.shape)) if self._has_state else len(agents) * o
        super().__init__(row_observation_space(o, len(agents), state_dim), act_space, int(num_copies) * len(agents),
                         copy=copy, mask_size=int(act_space.n) if self._masked else 0)
        self._init_multiagent(num_copies=int(num_copies), num_agents=len(agents), local_obs_dim=o,
                              state_dim=state_dim, agent_names=agents)
        self.seed = seed
        self._alive = np.zeros(self.num_envs, np.bool_)

    # -- writing rows -------------------------------------------------------------------------------
    def _write_copy(self, e: int, obs: dict, out: np.ndarray) -> None:
        """Rows of copy e in ``out`` := [local obs | one-hot | state] (zeros for agents without an observation)."""
        n, o = self.num_agents, self.local_obs_dim
        rows = out[e * n:(e + 1) * n]
        rows[:] = 0.0
        masks = self._action_mask[e * n:(e + 1) * n] if self._masked else None
        for i, name in enumerate(self.agent_names):
            if name in obs:
                agent_obs = obs[name]
                if masks is not None:
                    masks[i] = as_action_mask(np.asarray(agent_obs["action_mask"]).reshape(-1),
                                              f"agent {name!r}'s action_mask")
                    agent_obs = agent_obs["observation"]
                rows[i, :o] = np.asarray(agent_obs, np.float32).reshape(-1)
            elif masks is not None:
                masks[i] = True  # no observation, no action sent: any action will do
            rows[i, o + i] = 1.0
        if self._has_state:
            state = np.asarray(self.envs[e].state(), np.float32).reshape(-1)
        else:
            state = rows[:, :o].reshape(-1)
        rows[:, o + n:] = state

    def _reset_copy(self, e: int, seed: int | None) -> None:
        obs, _ = self.envs[e].reset(seed=seed)
        n = self.num_agents
        alive = self._alive[e * n:(e + 1) * n]
        alive[:] = [name in obs for name in self.agent_names]
        self._write_copy(e, obs, self._obs)

    # -- the API ------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        if seed is not None:
            self.seed = seed
        for e in range(self.num_copies):
            self._reset_copy(e, None if self.seed is None else self.seed + e)
        self._clear()
        self._reset_team_stats()
        self._active[:] = self._alive
        self.seed = None  # later resets continue each copy's own stream
        return self._reset_result()

    def step(self, actions):
        actions = self._check_actions(actions)
        n, o = self.num_agents, self.local_obs_dim
        np.copyto(self._active, self._alive)
        acting = np.flatnonzero(self._alive)
        self._rewards[:] = 0.0
        self._terminated[:] = ~self._alive
        self._truncated[:] = False
        copy_ended = np.zeros(self.num_copies, np.bool_)
        for e, env in enumerate(self.envs):
            act = {name: actions[e * n + i] for i, name in enumerate(self.agent_names) if self._alive[e * n + i]}
            obs, rewards, terms, truncs, _ = env.step(act)
            for i, name in enumerate(self.agent_names):
                r = e * n + i
                if not self._alive[r]:
                    continue
                self._rewards[r] = rewards.get(name, 0.0)
                self._terminated[r] = bool(terms.get(name, False))
                self._truncated[r] = bool(truncs.get(name, False)) or (name not in env.agents
                                                                         and not self._terminated[r])
                if self._terminated[r] or self._truncated[r]:
                    self._alive[r] = False
            self._write_copy(e, obs, self._obs)
            copy_ended[e] = not env.agents
        self._done[~self._active] = False  # rows that did not act: no statistics (the core records acting rows)
        self._record(acting)
        self._team_step(copy_ended)
        for e in range(self.num_copies):
            rows = slice(e * n, (e + 1) * n)
            if copy_ended[e]:
                self._final_obs[rows] = self._obs[rows]
                self._final_action_mask[rows] = self._action_mask[rows]
                self._reset_copy(e, None)
            else:
                done_rows = np.flatnonzero(self._done[rows]) + e * n
                self._final_obs[done_rows] = self._obs[done_rows]
                self._final_action_mask[done_rows] = self._action_mask[done_rows]
                gone = ~self._alive[rows]
                self._obs[rows][gone, :o] = 0.0
        return self._step_result()

    def close_extras(self, **kwargs) -> None:
        for env in self.envs:
            env.close()
        super().close_extras(**kwargs)
