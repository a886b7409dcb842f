"""Observation encoders: the part of a network that turns one observation into a feature vector.

An encoder maps ``obs [B, *obs_shape]`` to ``features [B, out_dim]``; the heads (actor, critic, Q) are
``nn.Linear``/MLP layers on top. Three encoders:

- ``"mlp"``: no layers of its own (flattening only); the MLP stacks of ``ActorCritic``/``QNetwork`` are
  today's behaviour and are left exactly as they were.
- ``"nature"``: the Nature CNN (Mnih et al. 2015): conv 32x8x8 stride 4, conv 64x4x4 stride 2, conv
  64x3x3 stride 1, linear 512, ReLU after each; for 84x84 Atari frames.
- ``"minatar"``: the MinAtar network (Young & Tian 2019): conv 16x3x3 stride 1, linear 128, ReLU after each;
  for 10x10 MinAtar frames.

CNN encoders take ``uint8 [B, C, H, W]`` (channels first, the layout the envs hand out) and convert inside
the network: ``float(obs) * scale`` with ``scale = 1/255`` for Atari pixels and ``1`` for MinAtar's 0/1
channels, so storage and the env-to-torch hand-off stay uint8 (4x less memory and copy than float32).

``layer_norm=True`` puts a LayerNorm between each layer and its ReLU (PQN's networks, Gallici et al. 2025): over
the whole [C, H, W] feature map after a convolution, as CleanRL's pqn_atari_envpool.py (purejaxql's Flax networks
normalise each pixel's channels instead), and over the features after the linear layer.

- ``"multi"``: for Dict/Tuple observations with images (``rapidrl.envs.spaces.EncodedBox``): one CNN per image
  (the two above, chosen by size), one ``Linear(., VECTOR_FEATURES) + ReLU`` layer on all other parts, the
  features concatenated (SB3's MultiInputPolicy / CombinedExtractor design).

``encoder_for(space, kind="auto")`` picks one from the observation space: a uint8 Box of rank 3 is an image
(``"minatar"`` below ``NATURE_MIN_SIZE`` pixels on a side, else ``"nature"``), an ``EncodedBox`` with images
``"multi"``, anything else ``"mlp"``.

Memory format (measured on the shared 2-core machine under load, one thread, forward + backward): the Nature
CNN at batch 256 took 273 ms contiguous and 207 ms with channels-last weights and input (13.4 vs 11.1 ms at
batch 8, ``python -m rapidrl.nn.encoders``); with contiguous weights and a channels-last input it took 216 ms
against 293 ms contiguous in a second run, and its weight gradients stay contiguous, which rapidrl's Adam step
needs (channels-last weights give channels-last gradients). A PPO Atari update is minibatches of 256, which
dominate, so the Nature CNN converts its input to channels-last once per forward and keeps contiguous weights;
the MinAtar network measured the same either way (7.1 vs 7.2 ms at 256) and stays contiguous.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn

__all__ = ["ENCODERS", "NATURE_MIN_SIZE", "VECTOR_FEATURES", "CNNEncoder", "MinAtarCNN", "MultiInputEncoder",
           "NatureCNN", "encoder_for", "is_image_space", "make_encoder"]

ENCODERS = ("auto", "mlp", "nature", "minatar", "multi")
VECTOR_FEATURES = 64
"""Width of the layer the multi-input encoder puts on the non-image parts of an observation."""
NATURE_MIN_SIZE = 36
"""Smallest height/width the Nature CNN accepts (8x8/4 -> 4x4/2 -> 3x3/1 leaves at least one pixel)."""


def _conv(in_c: int, out_c: int, k: int, s: int) -> nn.Conv2d:
    conv = nn.Conv2d(in_c, out_c, k, stride=s)
    nn.init.orthogonal_(conv.weight, math.sqrt(2.0))
    nn.init.zeros_(conv.bias)
    return conv


def _linear(d_in: int, d_out: int) -> nn.Linear:
    layer = nn.Linear(d_in, d_out)
    nn.init.orthogonal_(layer.weight, math.sqrt(2.0))
    nn.init.zeros_(layer.bias)
    return layer


class CNNEncoder(nn.Module):
    """Convolutions then one linear layer, ReLU after each: obs [B, C, H, W] (uint8 or float) -> [B, out_dim].

    ``scale`` multiplies the float observation first (1/255 for pixels, 1 for 0/1 channels). Orthogonal
    initialisation with gain sqrt(2), zero biases (as CleanRL's ppo_atari). ``layer_norm``: a LayerNorm before each
    ReLU, over [C, H, W] after a convolution and over the features after the linear layer.
    """

    def __init__(self, obs_shape: tuple[int, int, int], convs: tuple[tuple[int, int, int], ...], out_dim: int,
                 scale: float, channels_last: bool = False, layer_norm: bool = False):
        super().__init__()
        c, h, w = obs_shape
        layers: list[nn.Module] = []
        for out_c, k, s in convs:
            if h < k or w < k:
                raise ValueError(f"observation {obs_shape} is too small for a {k}x{k} convolution "
                                 f"(after the earlier layers: {h}x{w})")
            conv = _conv(c, out_c, k, s)
            c, h, w = out_c, (h - k) // s + 1, (w - k) // s + 1
            layers += [conv, nn.LayerNorm([c, h, w]), nn.ReLU()] if layer_norm else [conv, nn.ReLU()]
        self.convs = nn.Sequential(*layers)
        fc = _linear(c * h * w, out_dim)
        self.fc = nn.Sequential(fc, nn.LayerNorm(out_dim), nn.ReLU()) if layer_norm else nn.Sequential(fc, nn.ReLU())
        self.obs_shape, self.out_dim, self.scale = tuple(obs_shape), int(out_dim), float(scale)
        # of the input only (the weights stay contiguous), and on the CPU only: channels-last measured 1.2x faster
        # there (fp32, one thread) and slower on CUDA (H200, DQN Atari learning phase 212 vs 246 SPS with NCHW)
        self.channels_last = bool(channels_last)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()  # [B, C, H, W]
        if self.scale != 1.0:
            x = x * self.scale
        if self.channels_last and x.device.type == "cpu":
            x = x.contiguous(memory_format=torch.channels_last)
        return self.fc(self.convs(x).flatten(1))  # [B, out_dim]


class NatureCNN(CNNEncoder):
    """Mnih et al. (2015): 32x8x8/4, 64x4x4/2, 64x3x3/1, linear 512; pixels scaled by 1/255; channels-last input
    on the CPU."""

    def __init__(self, obs_shape: tuple[int, int, int], scale: float = 1.0 / 255.0, channels_last: bool = True,
                 layer_norm: bool = False):
        super().__init__(obs_shape, ((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512, scale, channels_last, layer_norm)


class MinAtarCNN(CNNEncoder):
    """Young & Tian (2019): 16x3x3/1, linear 128; 0/1 channels used unscaled."""

    def __init__(self, obs_shape: tuple[int, int, int], scale: float = 1.0, channels_last: bool = False,
                 layer_norm: bool = False):
        super().__init__(obs_shape, ((16, 3, 1),), 128, scale, channels_last, layer_norm)


def is_image_space(space: gym.Space) -> bool:
    """True for a uint8 Box of rank 3 (an image, channels first: [C, H, W])."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def _image_kind(shape: tuple[int, ...]) -> str:
    """"nature", or "minatar" below ``NATURE_MIN_SIZE`` pixels on a side, for a [C, H, W] image."""
    return "minatar" if min(shape[1:]) < NATURE_MIN_SIZE else "nature"


def encoder_for(space: gym.Space, kind: str = "auto") -> str:
    """The encoder name for one env's observation ``space``: ``kind`` itself, or with "auto" "nature"/"minatar"
    for images (by size: below ``NATURE_MIN_SIZE`` pixels on a side -> "minatar"), "multi" for encoded
    Dict/Tuple observations with images, and "mlp" otherwise."""
    if kind not in ENCODERS:
        raise ValueError(f"encoder must be one of {ENCODERS}, got {kind!r}")
    images = getattr(space, "image_parts", ())
    if kind == "auto":
        if images:
            return "multi"
        return _image_kind(space.shape) if is_image_space(space) else "mlp"
    if kind == "multi":
        if not images:
            raise ValueError(f"encoder='multi' needs a Dict/Tuple observation space with images, got {space}")
        return kind
    if kind != "mlp" and not (isinstance(space, gym.spaces.Box) and len(space.shape) == 3):
        raise ValueError(f"encoder={kind!r} needs a [C, H, W] Box observation space, got {space}")
    return kind


def _cnn(kind: str, shape: tuple[int, ...], high: np.ndarray, layer_norm: bool = False) -> CNNEncoder:
    """The ``kind`` CNN for images of ``shape``; scale 1/255 when their high bound is above 1 (pixels), else 1."""
    scale = 1.0 / 255.0 if float(np.max(high)) > 1.0 else 1.0
    cls = NatureCNN if kind == "nature" else MinAtarCNN
    return cls(tuple(int(s) for s in shape), scale=scale, layer_norm=layer_norm)


class MultiInputEncoder(nn.Module):
    """Encoded Dict/Tuple observations with images: obs [B, O] uint8 or float32 -> features [B, out_dim] float32.

    Each image part (``space.image_parts``: start column and [C, H, W]) is cut out of the vector, reshaped and
    encoded by its own CNN (Nature or MinAtar by size, pixels scaled as its bounds say); the remaining columns go
    through one ``Linear(., VECTOR_FEATURES) + ReLU``; the features are concatenated in that order. ``layer_norm``:
    LayerNorms in the CNNs and before the vector layer's ReLU.
    """

    def __init__(self, space: gym.spaces.Box, layer_norm: bool = False):
        super().__init__()
        parts = getattr(space, "image_parts", ())
        if not parts:
            raise ValueError(f"MultiInputEncoder needs an observation space with image parts, got {space}")
        width = int(space.shape[0])
        is_image = np.zeros(width, bool)
        self.cnns = nn.ModuleList()
        self.image_slices: list[tuple[int, int, tuple[int, int, int]]] = []
        for start, shape in parts:
            stop = start + int(np.prod(shape))
            is_image[start:stop] = True
            self.cnns.append(_cnn(_image_kind(shape), shape, space.high[start:stop], layer_norm))
            self.image_slices.append((start, stop, tuple(shape)))
        self.register_buffer("vector_columns", torch.from_numpy(np.flatnonzero(~is_image)), persistent=False)
        n_vec = int(self.vector_columns.numel())
        norm = [nn.LayerNorm(VECTOR_FEATURES)] if layer_norm else []
        self.vector = nn.Sequential(_linear(n_vec, VECTOR_FEATURES), *norm, nn.ReLU()) if n_vec else None
        self.out_dim = sum(c.out_dim for c in self.cnns) + (VECTOR_FEATURES if n_vec else 0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = [cnn(obs[:, start:stop].reshape(-1, *shape))
                    for cnn, (start, stop, shape) in zip(self.cnns, self.image_slices)]
        if self.vector is not None:
            features.append(self.vector(obs.index_select(1, self.vector_columns).float()))
        return torch.cat(features, -1)  # [B, out_dim]


def make_encoder(space: gym.Space, kind: str, *, layer_norm: bool = False) -> nn.Module:
    """The encoder ``kind`` ("nature", "minatar" or "multi", as ``encoder_for`` resolved it) for observation
    ``space``; CNN scales are 1/255 when the space's high bound is above 1 (pixels), else 1 (0/1 channels).
    layer_norm: a LayerNorm before every ReLU (PQN's networks)."""
    if kind == "multi":
        return MultiInputEncoder(space, layer_norm)
    if kind not in ("nature", "minatar"):
        raise ValueError(f"make_encoder builds 'nature', 'minatar' or 'multi', got {kind!r}")
    return _cnn(kind, space.shape, space.high, layer_norm)


def _measure_memory_format() -> None:  # pragma: no cover - a measurement, run by hand
    """Forward+backward time of both CNNs, contiguous vs channels-last, at a few batch sizes."""
    import time

    torch.set_num_threads(1)
    for kind, shape in (("minatar", (4, 10, 10)), ("nature", (4, 84, 84))):
        for batch in (8, 64, 256):
            row = []
            for last in (False, True):
                fmt = torch.channels_last if last else torch.contiguous_format
                net = (NatureCNN if kind == "nature" else MinAtarCNN)(shape, channels_last=last)
                x = torch.randint(0, 255, (batch, *shape), dtype=torch.uint8).contiguous(memory_format=fmt)
                for _ in range(3):
                    net(x).sum().backward()
                reps = 20 if kind == "minatar" else 3
                t0 = time.perf_counter()
                for _ in range(reps):
                    net(x).sum().backward()
                row.append((time.perf_counter() - t0) / reps * 1e3)
            print(f"{kind:8s} batch {batch:4d}: contiguous {row[0]:8.2f} ms  channels_last {row[1]:8.2f} ms")


if __name__ == "__main__":  # pragma: no cover
    _measure_memory_format()
