"""The multi-agent vector env layout: agents of E env copies batched as rows.

A multi-agent vector env with E copies of an N-agent env is a rapidrl vector env of ``num_envs = E * N`` rows
(row ``e * N + i`` = agent i of copy e), so every single-agent algorithm and collector can step it. Each row's
observation is ``[local obs (O) | agent one-hot (N) | global state (S)]`` float32 (width O + N + S): the policy
reads what its kind allows (``rapidrl.algos.mappo``: the actor and an IPPO critic read the first O + N columns, a
MAPPO critic the last S + the one-hot). Per row: the agent's own reward and terminated/truncated flags, and
``info["episode"]`` with the agent's own return and length (the core's statistics, one row each).

Extra ``info`` keys: ``"team_reward"`` float32 [E] (sum of the copy's agent rewards this step), ``"team_episode"``
``{"r": float32[E], "l": int32[E]}`` valid where ``"_team_episode"`` bool [E] (a copy's episode ended) and
``"active"`` bool [E * N]: rows whose agent acted this step. A row whose agent left mid-episode is inactive until
its copy resets: its observation is zeros, its reward 0, ``terminated`` True on every step, and it is never part
of an episode statistic (the data are a placeholder, not made up: ``active`` marks them and MAPPO drops them
from its loss).
"""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np


def row_observation_space(local_obs_dim: int, num_agents: int, state_dim: int) -> gym.spaces.Box:
    """The float32 Box of one row: [local obs | agent one-hot | global state]."""
    return gym.spaces.Box(-np.inf, np.inf, (local_obs_dim + num_agents + state_dim,), np.float32)


class MultiAgentVecEnvBase:
    """The multi-agent layout on top of a vector env (a mixin before ``VecEnvBase`` or ``NumbaVecEnv`` in the bases):
    sizes, the team statistics and the ``info`` keys above.

    Subclasses call ``_init_multiagent`` after the vector env's ``__init__``, ``_reset_team_stats()`` after a reset
    and ``_team_step(copy_ended)`` after each step.
    """

    def _init_multiagent(self, *, num_copies: int, num_agents: int, local_obs_dim: int, state_dim: int,
                         agent_names: list[str] | None = None) -> None:
        self.num_copies, self.num_agents = int(num_copies), int(num_agents)
        self.local_obs_dim, self.state_dim = int(local_obs_dim), int(state_dim)
        self.agent_names = list(agent_names) if agent_names else [f"agent_{i}" for i in range(num_agents)]
        e = self.num_copies
        self._team_reward = np.zeros(e, np.float32)
        self._team_return = np.zeros(e, np.float32)
        self._team_length = np.zeros(e, np.int32)
        self._team_done = np.zeros(e, np.bool_)
        self._active = np.ones(self.num_envs, np.bool_)
        self._info.update({"team_reward": self._team_reward, "team_episode": {"r": self._team_return,
                                                                               "l": self._team_length},
                           "_team_episode": self._team_done, "active": self._active})
        self.finished_team_returns: deque = deque(maxlen=1000)
        """Team returns of the episodes that ended (oldest dropped after 1000); ``pop_finished`` empties it."""
        self.finished_agent_returns: deque = deque(maxlen=1000)
        """Per-agent returns [N] (NaN for an agent that was never active) of the same episodes."""
        self._agent_ret_acc = np.zeros((e, self.num_agents), np.float64)
        self._agent_seen = np.zeros((e, self.num_agents), np.bool_)

    @property
    def policy_input_dim(self) -> int:
        """Columns the actor reads: local observation + agent one-hot."""
        return self.local_obs_dim + self.num_agents

    def _team_step(self, copy_ended: np.ndarray) -> None:
        """After a step: the copies' team reward (the float32 sum of their rows' rewards, in agent order), team
        return and length, ``_team_episode`` = ``copy_ended``; then the per-agent returns of active rows, and the
        returns of ended copies moved to the ``finished_*`` queues."""
        rew = self._rewards.reshape(self.num_copies, self.num_agents)
        restart = self._team_done.copy()  # copies whose episode ended last step start counting anew
        self._team_return[restart] = 0.0
        self._team_length[restart] = 0
        np.copyto(self._team_reward, rew[:, 0])
        for a in range(1, self.num_agents):
            self._team_reward += rew[:, a]
        self._team_return += self._team_reward
        self._team_length += 1
        np.copyto(self._team_done, copy_ended)
        act = self._active.reshape(self.num_copies, self.num_agents)
        self._agent_ret_acc += np.where(act, rew, 0.0)
        self._agent_seen |= act
        for e in np.flatnonzero(self._team_done):
            self.finished_team_returns.append(float(self._team_return[e]))
            self.finished_agent_returns.append(np.where(self._agent_seen[e], self._agent_ret_acc[e], np.nan))
            self._agent_ret_acc[e] = 0.0
            self._agent_seen[e] = False

    def pop_finished(self) -> tuple[np.ndarray, np.ndarray]:
        """(team returns [K], per-agent returns [K, N]) of the episodes that ended since the last call."""
        team = np.array(self.finished_team_returns, np.float64)
        agents = np.array(self.finished_agent_returns, np.float64).reshape(-1, self.num_agents)
        self.finished_team_returns.clear()
        self.finished_agent_returns.clear()
        return team, agents

    def _reset_team_stats(self) -> None:
        self._team_return[:] = 0.0
        self._team_length[:] = 0
        self._team_done[:] = False
        self._active[:] = True
        self._agent_ret_acc[:] = 0.0
        self._agent_seen[:] = False
