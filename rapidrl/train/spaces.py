"""Gymnasium spaces <-> plain dicts of ints, lists and tensors (safe for ``torch.load(weights_only=True)``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch


def space_to_dict(space: gym.Space) -> dict:
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        low, high = torch.from_numpy(np.array(space.low)), torch.from_numpy(np.array(space.high))
        return {"type": "Box", "low": low, "high": high, "dtype": np.dtype(space.dtype).name}
    raise TypeError(f"cannot save space {space}")


def space_from_dict(d: dict) -> gym.Space:
    if d["type"] == "Discrete":
        return gym.spaces.Discrete(d["n"], start=d["start"])
    if d["type"] == "Box":
        return gym.spaces.Box(d["low"].numpy(), d["high"].numpy(), dtype=np.dtype(d["dtype"]))
    raise ValueError(f"unknown space type {d['type']!r} in saved model")


def spaces_equal(a: gym.Space, b: gym.Space) -> bool:
    """Same kind, shape and bounds (Box) or size (Discrete)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, gym.spaces.Discrete):
        return a.n == b.n and a.start == b.start
    return a.shape == b.shape and np.allclose(a.low, b.low) and np.allclose(a.high, b.high)
