"""``GoalNumbaEnv``: a ``NumbaEnv`` whose flat observation is a goal-conditioned Dict's encoding, with its rewards.

The observation vector is [achieved_goal | desired_goal | observation] (``goal_widths``): the order in which
``rapidrl.envs.spaces`` flattens a Gymnasium Dict with these keys (a plain dict's keys are sorted), so the built-in
env and its Gymnasium twin behind the adapters give identical vectors. ``compute_reward`` and (optionally)
``compute_terminated`` are NumPy functions on [B, G] arrays, what HER relabels with (``rapidrl.buffers.her``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rapidrl.envs.core.numba_env import NumbaEnv
from rapidrl.envs.goal.spec import GoalSpec

__all__ = ["GoalNumbaEnv"]


@dataclass(frozen=True, eq=False, kw_only=True)
class GoalNumbaEnv(NumbaEnv):
    """A ``NumbaEnv`` (see its Args) that is goal-conditioned.

    Args:
        goal_widths: (achieved_goal, desired_goal, observation) widths; they add up to the observation's size.
        compute_reward: ``(achieved [B, G], desired [B, G]) -> rewards [B] float32``, the reward ``step`` returns
            for the goal it was given.
        compute_terminated: ``(achieved, desired) -> [B] bool`` where reaching a goal ends an episode, else None.
    """

    goal_widths: tuple[int, int, int]
    compute_reward: Callable
    compute_terminated: Callable | None = None

    def __post_init__(self):
        super().__post_init__()
        widths = tuple(int(w) for w in self.goal_widths)
        if len(widths) != 3 or min(widths) < 1 or sum(widths) != int(self.observation_space.shape[0]):
            raise ValueError(f"{self.id}: goal_widths {self.goal_widths} must be three positive widths adding up to "
                             f"the observation's {self.observation_space.shape}")

    @property
    def goal_spec(self) -> GoalSpec:
        a, d, o = self.goal_widths
        return GoalSpec(observation=slice(a + d, a + d + o), achieved_goal=slice(0, a), desired_goal=slice(a, a + d),
                        compute_reward=self.compute_reward, compute_terminated=self.compute_terminated, name=self.id)
