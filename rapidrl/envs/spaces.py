"""Structured observation spaces as one vector: Discrete, MultiDiscrete, MultiBinary, Tuple and Dict.

rapidrl's networks take a Box observation. ``FlattenStructuredObservation`` (a ``gymnasium.ObservationWrapper``)
turns every other space SB3 users train on into one vector, part by part:

- ``Discrete(n, start)``: one-hot of length n;
- ``MultiDiscrete(nvec)``: one one-hot per component, concatenated (sum(nvec) values);
- ``MultiBinary(n)``: the bits as 0.0/1.0;
- ``Box``: its values, flattened (bounds kept);
- ``Tuple``/``Dict``: the parts in the space's order, concatenated (nested structures too).

A one-hot part followed by a linear layer is exactly a learned embedding per category, and a linear layer on the
concatenation equals the sum of one linear map per part: an MLP on this vector is the "one encoder per key,
concatenated" design with MLP encoders. Image parts (uint8 Box of rank 3, channels first) are kept as their pixel
values; the flat space is then an ``EncodedBox`` that records where each image lies, and the policies put a CNN
on each image and one layer on the other parts (``rapidrl.nn.encoders.MultiInputEncoder``).

The vector is float32, except when images are present and every part fits a byte exactly (uint8 Boxes, one-hot
and binary parts): it is then uint8, so rollouts and replay keep images at one byte per pixel, as for Atari
(``storage_dtype``). A float Box beside an image makes the whole vector float32.

Algorithms apply the wrapper to Gymnasium envs whose observation space is not a Box (``make_vec(...,
flatten_observations=True)``); ``encode_observation`` converts a raw observation the same way (used by
``predict`` on raw observations).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["EncodedBox", "FlattenStructuredObservation", "encode_observation", "flat_box", "image_parts",
           "is_structured", "storage_dtype"]


def is_structured(space: gym.Space) -> bool:
    """True for the spaces this module flattens (anything but a Box)."""
    return not isinstance(space, gym.spaces.Box)


def _parts(space: gym.Space, path: str = "observation") -> list[tuple[str, gym.Space]]:
    """(path, leaf space) pairs in encoding order; raises TypeError for unsupported leaves."""
    if isinstance(space, gym.spaces.Dict):
        return [p for key, sub in space.spaces.items() for p in _parts(sub, f"{path}[{key!r}]")]
    if isinstance(space, gym.spaces.Tuple):
        return [p for i, sub in enumerate(space.spaces) for p in _parts(sub, f"{path}[{i}]")]
    if isinstance(space, gym.spaces.Box):
        return [(path, space)]
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return [(path, space)]
    raise TypeError(f"{path}: observation space {space} is not supported (Box, Discrete, MultiDiscrete, "
                    "MultiBinary, and Tuple/Dict of them)")


def _width(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(space.nvec.sum())
    return int(np.prod(space.shape))


class EncodedBox(gym.spaces.Box):
    """The flat Box of a structured space with image parts: ``image_parts`` = ((start, (C, H, W)), ...), each
    image's first column in the vector and its shape (its C*H*W pixel values follow, in C-order); ``dtype``
    uint8 or float32 (``storage_dtype``)."""

    def __init__(self, low: np.ndarray, high: np.ndarray, image_parts: tuple[tuple[int, tuple[int, int, int]], ...],
                 dtype=np.float32):
        if np.dtype(dtype) not in (np.dtype(np.uint8), np.dtype(np.float32)):
            raise ValueError(f"an EncodedBox is uint8 or float32, got {np.dtype(dtype)}")
        super().__init__(low, high, dtype=dtype)
        self.image_parts = tuple((int(start), tuple(int(d) for d in shape)) for start, shape in image_parts)
        if not self.image_parts:
            raise ValueError("an EncodedBox records at least one image part (else flat_box gives a plain Box)")
        for start, shape in self.image_parts:
            if len(shape) != 3 or start < 0 or start + int(np.prod(shape)) > self.shape[0]:
                raise ValueError(f"image part {(start, shape)} does not fit a vector of {self.shape[0]} values")

    def __repr__(self) -> str:
        return f"EncodedBox({self.shape[0]} {self.dtype} values, images {list(self.image_parts)})"

    def __eq__(self, other) -> bool:
        return super().__eq__(other) and getattr(other, "image_parts", ()) == self.image_parts


def _is_image(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def image_parts(space: gym.Space) -> tuple[tuple[int, tuple[int, int, int]], ...]:
    """(start, (C, H, W)) of every image (uint8 Box of rank 3) inside a structured ``space``'s encoding."""
    out, start = [], 0
    for _, part in _parts(space):
        if _is_image(part):
            out.append((start, tuple(int(d) for d in part.shape)))
        start += _width(part)
    return tuple(out)


def _fits_byte(space: gym.Space) -> bool:
    """True when every value of the part's encoding is a byte exactly (uint8 Box, one-hot, binary)."""
    return not isinstance(space, gym.spaces.Box) or space.dtype == np.uint8


def storage_dtype(space: gym.Space) -> np.dtype:
    """dtype of a structured ``space``'s encoding: uint8 when it holds images and every part fits a byte, else
    float32 (vectors without images stay float32, the MLP's input)."""
    parts = [part for _, part in _parts(space)]
    if any(_is_image(p) for p in parts) and all(_fits_byte(p) for p in parts):
        return np.dtype(np.uint8)
    return np.dtype(np.float32)


def flat_box(space: gym.Space) -> gym.spaces.Box:
    """The Box a structured ``space`` is encoded into (one-hot parts in [0, 1], Box parts' bounds): float32, or an
    ``EncodedBox`` recording the image parts when there are any (uint8 when ``storage_dtype`` says so)."""
    lows, highs = [], []
    for _, part in _parts(space):
        if isinstance(part, gym.spaces.Box):
            lows.append(part.low.astype(np.float32).ravel())
            highs.append(part.high.astype(np.float32).ravel())
        else:
            lows.append(np.zeros(_width(part), np.float32))
            highs.append(np.ones(_width(part), np.float32))
    low, high, images = np.concatenate(lows), np.concatenate(highs), image_parts(space)
    if images:
        return EncodedBox(low, high, images, storage_dtype(space))
    return gym.spaces.Box(low, high, dtype=np.float32)


def _encode_part(space: gym.Space, x, out: np.ndarray) -> None:
    if isinstance(space, gym.spaces.Discrete):
        out[:] = 0.0
        out[int(x) - int(space.start)] = 1.0
    elif isinstance(space, gym.spaces.MultiDiscrete):
        out[:] = 0.0
        values = (np.asarray(x).ravel() - space.start.ravel()).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(space.nvec.ravel())[:-1]])
        out[offsets + values] = 1.0
    else:  # Box, MultiBinary
        out[:] = np.asarray(x).ravel()


def _leaves(space: gym.Space, obs) -> list:
    if isinstance(space, gym.spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _leaves(sub, obs[key])]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for sub, x in zip(space.spaces, obs) for leaf in _leaves(sub, x)]
    return [obs]


def encode_observation(space: gym.Space, obs, dtype=None) -> np.ndarray:
    """One raw observation of ``space`` -> [flat_box(space).shape[0]] of ``dtype`` (default
    ``storage_dtype(space)``); checks it belongs to the space."""
    if not space.contains(obs):
        raise ValueError(f"observation {obs!r} is not in the observation space {space}")
    parts = _parts(space)
    out = np.empty(sum(_width(p) for _, p in parts), storage_dtype(space) if dtype is None else dtype)
    start = 0
    for (_, part), x in zip(parts, _leaves(space, obs)):
        w = _width(part)
        _encode_part(part, x, out[start:start + w])
        start += w
    return out


class FlattenStructuredObservation(gym.ObservationWrapper):
    """A Gymnasium env whose Discrete/MultiDiscrete/MultiBinary/Tuple/Dict observations become one vector
    (``encode_observation``); ``structured_observation_space`` keeps the original space."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.structured_observation_space = env.observation_space
        self.observation_space = flat_box(env.observation_space)

    def observation(self, observation):
        return encode_observation(self.structured_observation_space, observation, self.observation_space.dtype)


def flattened(factory):
    """A zero-argument env factory whose env's structured observations are flattened (picklable when
    ``factory`` is)."""
    return _Flattened(factory)


class _Flattened:
    def __init__(self, factory):
        self.factory = factory

    def __call__(self) -> gym.Env:
        env = self.factory()
        return FlattenStructuredObservation(env) if is_structured(env.observation_space) else env
