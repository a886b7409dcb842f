"""What hindsight relabelling needs from a goal-conditioned env: ``GoalSpec`` and ``goal_spec(env)``.

A goal-conditioned env (gymnasium-robotics' convention) observes a Dict with ``observation``, ``achieved_goal`` and
``desired_goal`` and has a vectorised ``compute_reward(achieved_goal, desired_goal, info)`` (optionally
``compute_terminated``). rapidrl's algorithms see that Dict as one flat vector (``rapidrl.envs.spaces``: the Dict's
keys in its order, each part flattened), so a ``GoalSpec`` records where each part lies in the vector and the reward
function to call on [B, G] arrays.

``goal_spec(env)`` finds it for a built-in goal env (``GoalNumbaEnv``, its definition carries it) and for a Gymnasium
env behind the adapters (``SyncVecEnv``'s first env, or one env made locally from the vector env's id for
``SubprocVecEnv``/``RayVecEnv``). An env without the three keys, or whose ``compute_reward`` does not return one
reward per row of a batch, is refused with one line naming what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from rapidrl.envs.spaces import flat_box

__all__ = ["GOAL_KEYS", "GoalSpec", "goal_spec", "goal_spec_from_dict_space"]

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


@dataclass(frozen=True)
class GoalSpec:
    """Where the parts of a flat goal-conditioned observation lie, and the env's reward on goals.

    compute_reward(achieved [B, G], desired [B, G]) -> rewards [B] float32; compute_terminated likewise -> [B]
    bool, or None when reaching a goal does not end an episode (the stored flags are kept).
    """

    observation: slice
    achieved_goal: slice
    desired_goal: slice
    compute_reward: Callable[[np.ndarray, np.ndarray], np.ndarray]
    compute_terminated: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    name: str = "env"

    @property
    def goal_dim(self) -> int:
        return self.achieved_goal.stop - self.achieved_goal.start

    def check(self, obs_dim: int) -> GoalSpec:
        """Check the layout against the flat observation width and that the functions vectorise; returns self."""
        for key in GOAL_KEYS:
            part = getattr(self, key)
            if not 0 <= part.start < part.stop <= obs_dim:
                raise ValueError(f"{self.name}: {key} columns {part.start}:{part.stop} do not fit the {obs_dim} "
                                 "observation values")
        if self.desired_goal.stop - self.desired_goal.start != self.goal_dim:
            raise ValueError(f"{self.name}: achieved_goal and desired_goal differ in size ({self.goal_dim} vs "
                             f"{self.desired_goal.stop - self.desired_goal.start})")
        probe_a = np.zeros((3, self.goal_dim), np.float32)
        probe_d = np.ones((3, self.goal_dim), np.float32)
        for fn_name in ("compute_reward", "compute_terminated"):
            fn = getattr(self, fn_name)
            if fn is None:
                continue
            try:
                out = np.asarray(fn(probe_a, probe_d))
            except Exception as e:  # any failure on a batch is the same finding
                raise TypeError(f"HER needs a vectorised {fn_name}: {self.name}'s failed on achieved_goal and "
                                f"desired_goal of shape [3, {self.goal_dim}] ({type(e).__name__}: {e})"[:400]) from None
            if out.shape != (3,):
                raise TypeError(f"HER needs a vectorised {fn_name}: {self.name}'s returned shape {out.shape} for "
                                f"achieved_goal and desired_goal of shape [3, {self.goal_dim}] (expected (3,))")
        return self


def goal_spec_from_dict_space(space: gym.Space, compute_reward: Callable, compute_terminated: Callable | None = None,
                              name: str = "env") -> GoalSpec:
    """The ``GoalSpec`` of a Gymnasium env with Dict ``space`` and its ``compute_reward(achieved, desired, info)``
    (and ``compute_terminated``), as flattened by ``rapidrl.envs.spaces`` (the Dict's keys in order)."""
    if not isinstance(space, gym.spaces.Dict) or not set(GOAL_KEYS) <= set(space.spaces):
        have = list(space.spaces) if isinstance(space, gym.spaces.Dict) else space
        raise ValueError(f"HER needs Dict observations with keys 'observation', 'achieved_goal', 'desired_goal'; "
                         f"{name}'s observations are {have}")
    slices, start = {}, 0
    for key, sub in space.spaces.items():
        width = int(flat_box(sub).shape[0]) if not isinstance(sub, gym.spaces.Box) else int(np.prod(sub.shape))
        slices[key] = slice(start, start + width)
        start += width
    reward = lambda a, d: np.asarray(compute_reward(a, d, {}), dtype=np.float32)  # noqa: E731
    terminated = None if compute_terminated is None else (
        lambda a, d: np.asarray(compute_terminated(a, d, {}), dtype=np.bool_))
    return GoalSpec(slices["observation"], slices["achieved_goal"], slices["desired_goal"], reward, terminated,
                    name).check(start)


def _terminates_on_goals(env: gym.Env, goal_dim: int) -> Callable | None:
    """The env's ``compute_terminated``, or None where it has none or it is a constant False (gymnasium-robotics'
    Fetch tasks: episodes end by their time limit only)."""
    fn = getattr(env, "compute_terminated", None)
    if not callable(fn):
        return None
    try:
        probe = fn(np.zeros((3, goal_dim), np.float32), np.ones((3, goal_dim), np.float32), {})
    except Exception:  # left to GoalSpec.check, which names the failure
        return fn
    return None if np.ndim(probe) == 0 and not probe else fn


def _one_env(env_id: str) -> gym.Env | None:
    """One Gymnasium env of ``env_id`` (``"module:EnvId"`` imports ``module`` first, as ``make_vec`` does; a
    gymnasium-robotics id made as ``make_vec`` makes it), or None where Gymnasium does not know the id."""
    from rapidrl.envs.adapters import robotics
    from rapidrl.envs.registry import import_env_module

    name = import_env_module(env_id)
    if name not in gym.registry:
        return None
    return robotics.make(name) if robotics.is_robotics_id(name) else gym.make(name)


def goal_spec(env) -> GoalSpec:
    """The ``GoalSpec`` of a rapidrl vector env (module docstring); ValueError/TypeError naming what is missing."""
    definition = getattr(env, "definition", None)
    spec = getattr(definition, "goal_spec", None)
    name = getattr(env, "env_id", None) or type(env).__name__
    if spec is not None:
        return spec.check(int(np.prod(env.single_observation_space.shape)))
    single = None
    envs = getattr(env, "envs", None)
    if envs:  # SyncVecEnv: its first env
        single = envs[0]
    elif isinstance(getattr(env, "env_id", None), str):  # envs in other processes
        single = _one_env(env.env_id)
    if single is None:
        raise ValueError(f"HER needs Dict observations with keys 'observation', 'achieved_goal', 'desired_goal' and "
                         f"a vectorised compute_reward; {name} is not a goal-conditioned env")
    space = getattr(single, "structured_observation_space", single.observation_space)
    base = single.unwrapped
    reward = getattr(base, "compute_reward", None)
    if not callable(reward):
        if isinstance(space, gym.spaces.Dict) and set(GOAL_KEYS) <= set(space.spaces):
            raise ValueError(f"HER needs the env's compute_reward(achieved_goal, desired_goal, info); {name} has none")
        goal_spec_from_dict_space(space, reward, name=name)  # raises the missing keys' message
    goal_dim = goal_spec_from_dict_space(space, reward, name=name).goal_dim
    return goal_spec_from_dict_space(space, reward, _terminates_on_goals(base, goal_dim), name)
