"""Hindsight experience replay (Andrychowicz et al. 2017) as a replay buffer any off-policy algorithm takes.

``HerReplayBuffer`` stores transitions of a goal-conditioned env (flat observations laid out by a
``rapidrl.envs.goal.GoalSpec``) exactly as ``ReplayBuffer`` does, and relabels at sample time: each sampled row is
drawn by the buffer's one sampling path (``rapidrl.buffers.sampler``), then, with probability
``her_ratio = n_sampled_goal / (n_sampled_goal + 1)`` (SB3's), its desired goal (in the observation and the next
observation) is replaced by the achieved goal of a step of the same episode chosen by ``goal_selection``
("future", "final" or "episode"; ``rapidrl.kernels.her``), its reward recomputed with the env's vectorised
``compute_reward(next achieved goal, new goal)``, and, for envs where reaching a goal ends the episode
(``compute_terminated``), its ``terminated`` flag and discount too. Rows keep their stored goal otherwise.

Episodes are found from the stored flags along each env's stream (every ``add`` carries one row per env), so
relabelling is correct across episode ends, truncations (a truncated step ends its episode) and vectorised envs,
and for an episode still running it looks up to the newest stored step. The relabelling uniforms come from a
counter-based stream of their own (keyed by the buffer's seed, its position saved with the buffer), so a sample is a
pure function of (seed, draws, contents) as for ``ReplayBuffer``.

Limits: one-step targets only (``n_step = 1``: an n-step return would need every reward of the path recomputed);
uniform replay (no prioritized HER); ``compute_reward`` sees no per-step ``info`` (an empty dict); relabelling
reads the storage outside the buffer's lock, so a HER buffer is not filled by another thread while it is sampled.
"""

from __future__ import annotations

import numpy as np

from rapidrl.buffers.replay import ReplayBuffer
from rapidrl.envs.goal.spec import GoalSpec
from rapidrl.kernels.her import GOAL_SELECTION_CODES, her_goals
from rapidrl.kernels.rng import derive_keys
from rapidrl.kernels.validation import check_int

__all__ = ["GOAL_SELECTIONS", "HerReplayBuffer"]

GOAL_SELECTIONS = tuple(GOAL_SELECTION_CODES)


class HerReplayBuffer(ReplayBuffer):
    """A ``ReplayBuffer`` (same arguments; ``n_step`` must be 1) that relabels goals when sampled (module docstring).

    Args:
        goal: where the goal parts lie in the flat observation and the env's reward on goals (``GoalSpec``;
            ``rapidrl.envs.goal.goal_spec(env)`` finds it).
        goal_selection: "future", "final" or "episode".
        n_sampled_goal: relabelled rows per row kept as collected (her_ratio = n / (n + 1)); 0 disables
            relabelling.
    """

    def __init__(self, capacity: int, obs_shape: tuple, action_shape: tuple = (), *, goal: GoalSpec,
                 goal_selection: str = "future", n_sampled_goal: int = 4, **kwargs):
        if not isinstance(goal, GoalSpec):
            raise TypeError(f"goal must be a rapidrl.envs.goal.GoalSpec, got {type(goal).__name__}")
        if goal_selection not in GOAL_SELECTION_CODES:
            raise ValueError(f"goal_selection must be one of {GOAL_SELECTIONS}, got {goal_selection!r}")
        if kwargs.get("n_step", 1) != 1:
            raise ValueError("HER relabels one-step transitions: n_step must be 1 (an n-step return would need every "
                             "reward on its path recomputed)")
        super().__init__(capacity, obs_shape, action_shape, **kwargs)
        if len(self.obs_shape) != 1:
            raise ValueError(f"HER needs flat observations (a goal-conditioned Dict's encoding), got shape "
                             f"{self.obs_shape}")
        if self.capacity % self.num_envs:
            raise ValueError(f"capacity={self.capacity} must be a multiple of num_envs={self.num_envs} for HER (each "
                             "env's episodes are found along its own stream of rows)")
        self.goal = goal.check(self.obs_shape[0])
        self.goal_selection = goal_selection
        self.n_sampled_goal = check_int("n_sampled_goal", n_sampled_goal, low=0)
        self.her_ratio = 1.0 - 1.0 / (self.n_sampled_goal + 1)
        self._goal_selection_code = GOAL_SELECTION_CODES[goal_selection]
        self._her_key = int(derive_keys(self.seed, 2)[1].astype(np.int64))
        self._her_draws = 0
        self._goal_rows: dict[int, np.ndarray] = {}
        self._rows_per_add = self.num_envs  # every add carries one row per env: row r is env r % num_envs
        self._set_fast_add(True)
        self._relabel = self._relabel_batch

    def _relabel_batch(self, batch) -> None:
        """Relabel a sampled batch of NumPy arrays in place (called by the sampler before delivering it)."""
        B = batch.rewards.shape[0]
        rows = self._goal_rows.get(B)
        if rows is None:
            rows = self._goal_rows[B] = np.empty(B, np.int64)
        g = self.goal
        _, _, _, next_obs, terminated, truncated = self._flat_store
        n = her_goals(batch.indices, self._her_key, self._her_draws, self.her_ratio, self._goal_selection_code,
                      terminated, truncated, self.num_envs, self._pos, self._size, next_obs, g.achieved_goal.start,
                      g.desired_goal.start, g.goal_dim, batch.obs, batch.next_obs, rows)
        self._her_draws += 2 * B
        if n == 0:
            return
        picked = np.flatnonzero(rows >= 0)  # [n]
        achieved = batch.next_obs[picked, g.achieved_goal]  # [n, G]
        desired = batch.next_obs[picked, g.desired_goal]  # [n, G]
        batch.rewards[picked] = g.compute_reward(achieved, desired)
        if g.compute_terminated is not None:
            done = np.asarray(g.compute_terminated(achieved, desired), dtype=np.bool_)
            batch.terminated[picked] = done
            batch.discounts[picked] = np.where(done, 0.0, self.gamma)

    # -- persistence -----------------------------------------------------------------------------
    def _config(self) -> dict:
        return {**super()._config(), "goal_selection": self.goal_selection, "n_sampled_goal": self.n_sampled_goal}

    def _state(self) -> tuple[dict, dict[str, np.ndarray]]:
        state, extra = super()._state()
        return {**state, "her_draws": self._her_draws}, extra

    def _set_state(self, state: dict, arrays: dict[str, np.ndarray]) -> None:
        super()._set_state(state, arrays)
        self._her_draws = int(state.get("her_draws", 0))
