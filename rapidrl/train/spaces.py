"""Gymnasium spaces <-> plain dicts of ints, lists and tensors (safe for ``torch.load(weights_only=True)``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rapidrl.envs.spaces import EncodedBox


def check_discrete_actions(name: str, space: gym.Space,
                           others: str = "PPO and A2C take MultiDiscrete, MultiBinary and Box actions") -> None:
    """TypeError unless ``space`` is Discrete (the actions of DQN, DiscreteCQL, PQN); ``others`` names the
    algorithms that take the rest."""
    if not isinstance(space, gym.spaces.Discrete):
        raise TypeError(f"{name} needs a Discrete action space, got {space}; {others}")


def space_to_dict(space: gym.Space) -> dict:
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        low, high = torch.from_numpy(np.array(space.low)), torch.from_numpy(np.array(space.high))
        d = {"type": "Box", "low": low, "high": high, "dtype": np.dtype(space.dtype).name}
        if isinstance(space, EncodedBox):
            d["image_parts"] = [[start, list(shape)] for start, shape in space.image_parts]
        return d
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": torch.from_numpy(np.array(space.nvec, np.int64)),
                "start": torch.from_numpy(np.array(space.start, np.int64))}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": [int(n) for n in np.atleast_1d(space.n)]}
    raise TypeError(f"cannot save space {space}")


def space_from_dict(d: dict) -> gym.Space:
    if d["type"] == "Discrete":
        return gym.spaces.Discrete(d["n"], start=d["start"])
    if d["type"] == "Box":
        if "image_parts" in d:
            return EncodedBox(d["low"].numpy(), d["high"].numpy(), [(start, tuple(shape)) for start, shape in
                                                                   d["image_parts"]], np.dtype(d["dtype"]))
        return gym.spaces.Box(d["low"].numpy(), d["high"].numpy(), dtype=np.dtype(d["dtype"]))
    if d["type"] == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(d["nvec"].numpy(), start=d["start"].numpy())
    if d["type"] == "MultiBinary":
        return gym.spaces.MultiBinary(d["n"] if len(d["n"]) > 1 else d["n"][0])
    raise ValueError(f"unknown space type {d['type']!r} in saved model")


def spaces_equal(a: gym.Space, b: gym.Space) -> bool:
    """Same kind, shape, bounds and byte-or-not dtype (Box: a policy takes uint8 or float32) or sizes (Discrete,
    MultiDiscrete, MultiBinary)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, gym.spaces.Discrete):
        return a.n == b.n and a.start == b.start
    if isinstance(a, gym.spaces.MultiDiscrete):
        return np.array_equal(a.nvec, b.nvec) and np.array_equal(a.start, b.start)
    if isinstance(a, gym.spaces.MultiBinary):
        return a.shape == b.shape
    return a.shape == b.shape and np.allclose(a.low, b.low) and np.allclose(a.high, b.high) \
        and (a.dtype == np.uint8) == (b.dtype == np.uint8) \
        and getattr(a, "image_parts", ()) == getattr(b, "image_parts", ())
