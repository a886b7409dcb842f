"""Hyperparameter dataclasses: building them from dicts with clear errors, and checks shared by all.

Every algorithm's config is a dataclass whose fields carry a docstring. ``config_from_dict`` rejects
unknown keys with a suggestion and converts TOML-friendly values (lists -> tuples).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
import warnings
from typing import Any

GRADIENT_BACKENDS = ("auto", "handwritten", "torch")
PRECISIONS = ("auto", "fp32", "bf16")


class ConfigError(ValueError):
    """A hyperparameter is unknown or has a bad value; the message names it."""


def with_defaults(**values: Any):
    """Class decorator (placed under ``@dataclass``): inherited fields with new defaults, e.g.
    ``@with_defaults(learning_rate=1e-3)``. Each field keeps its one declaration and docstring in the base class that
    declares it (a re-declaration would copy both, and the copies drift) and its place in the field order."""

    def apply(cls):
        inherited: dict[str, dataclasses.Field] = {}
        for base in cls.__mro__[1:]:
            for name, f in getattr(base, "__dataclass_fields__", {}).items():
                inherited.setdefault(name, f)
        annotations = inspect.get_annotations(cls)  # cls's own
        for name, value in values.items():
            if name not in inherited or name in annotations:
                raise TypeError(f"{cls.__name__}: with_defaults({name}=...) needs a field that only a base declares")
            annotations[name] = inherited[name].type
            setattr(cls, name, value)
        cls.__annotations__ = annotations
        return cls

    return apply


def field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def check_known_keys(keys, known: list[str], unknown: str) -> None:
    """ConfigError for the first of ``keys`` not in ``known``: ``unknown`` (formatted with ``key``) plus the closest
    known names, or the list of them."""
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"{unknown.format(key=key)}; {hint}")


def config_from_dict(cls, values: dict[str, Any]):
    """Build ``cls(**values)``; unknown keys raise ConfigError with the closest known names. Settings renamed since
    an older rapidrl wrote ``values`` (a checkpoint, a run's config.toml) are upgraded first (``upgrade_legacy``)."""
    values = upgrade_legacy(cls, values)
    check_known_keys(values, field_names(cls), f"unknown {cls.__name__} key {{key!r}}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if isinstance(value, list) and "tuple" in str(hints.get(key, "")):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)


def upgrade_legacy(cls, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the settings of older rapidrl versions renamed to today's (``cls.upgrade_legacy``, where the
    config class has one); a copy, with a DeprecationWarning naming what changed (a renamed setting, or an old value
    of a setting: A2C's ``normalize_advantage=True``)."""
    upgrade = getattr(cls, "upgrade_legacy", None)
    if upgrade is None:
        return dict(values)
    new = upgrade(dict(values))
    renamed = sorted(set(values) - set(new))
    changed = sorted(k for k in set(values) & set(new) if type(values[k]) is not type(new[k]) or values[k] != new[k])
    if renamed or changed:
        old = [*renamed, *(f"{k}={values[k]!r}" for k in changed)]
        now = sorted((set(new) - set(values)) | set(changed))
        warnings.warn(f"{cls.__name__}: {', '.join(old)} replaced by {', '.join(f'{k}={new[k]!r}' for k in now)} "
                      "(a setting of an older rapidrl)", DeprecationWarning, stacklevel=3)
    return new


def config_to_dict(config) -> dict[str, Any]:
    """Plain dict of a config dataclass (tuples become lists, so it round-trips through TOML/torch.save)."""
    out = {}
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def require(condition: bool, message: str) -> None:
    """Raise ConfigError(message) when ``condition`` is false."""
    if not condition:
        raise ConfigError(message)


def check_positive(config, *names: str, allow_zero: bool = False) -> None:
    """Each named field is a number > 0 (>= 0 with allow_zero)."""
    for n in names:
        v = getattr(config, n)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (v >= 0 if allow_zero else v > 0)
        require(ok, f"{n} must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")


def check_unit_interval(config, *names: str) -> None:
    """Each named field lies in [0, 1]."""
    for n in names:
        v = getattr(config, n)
        require(isinstance(v, (int, float)) and 0.0 <= v <= 1.0, f"{n} must lie in [0, 1], got {v!r}")


def check_hidden(hidden, *, allow_empty: bool = False) -> None:
    """hidden: a sequence of positive ints, non-empty unless ``allow_empty`` (a recurrent policy's encoder)."""
    require(isinstance(hidden, (tuple, list)) and (allow_empty or len(hidden) > 0)
            and all(isinstance(h, int) and h > 0 for h in hidden),
            f"hidden must be a {'' if allow_empty else 'non-empty '}sequence of positive ints, got {hidden!r}")


@dataclasses.dataclass
class GradientClipConfig:
    """The gradient-norm clip of the algorithms that clip (on-policy, PQN, DQN, DiscreteCQL; a dataclass mixin:
    each sets its default with ``with_defaults``)."""

    max_grad_norm: float = 0.0
    """Global gradient-norm clip (0 disables clipping)."""


@dataclasses.dataclass
class RuntimeConfig:
    """Fields every algorithm has: seeding, devices and the process settings that hold while the model builds, learns
    and evaluates (``rapidrl.train.runtime.process_settings``: set back when each call returns)."""

    seed: int | None = 0
    """Seed for networks, envs, exploration and sampling (None: nondeterministic)."""
    device: str = "cpu"
    """Device of the networks and of the training data."""
    env_device: str = "cpu"
    """Device of built-in envs ("cpu": Numba kernels; else the PyTorch backend on that device)."""
    torch_threads: int | None = 1
    """torch.set_num_threads while the model builds, learns and evaluates, set back afterwards (every algorithm's
    default: 1). 0 uses every core this process may run
    on: faster only while nothing else runs (alone on 2 cores: 1.2-1.9x), 1.8-50x slower beside one
    other busy process, since OpenMP's workers spin on the cores others need (``rapidrl bench threads``). None leaves
    the setting alone. Where an update is all compiled code (DQN's, C51's and QR-DQN's handwritten backend) the count
    goes to its matrix products (Numba's BLAS) and torch runs at one thread."""
    flush_denormal: bool = True
    """Flush denormal floats to zero in this thread's CPU arithmetic (torch.set_flush_denormal) while the model builds,
    learns and evaluates, set back afterwards. Optimizer moments of weights that stop receiving gradients decay into
    the denormal range, where CPU arithmetic is ~10x slower: without this an Adam step of a 256x256 DQN grew from
    0.1 ms to 0.8 ms during training. False leaves the process setting alone."""
    gradient_backend: str = "auto"
    """How updates compute their gradients (``rapidrl.train.paths``): "handwritten" (the algorithm's CPU backend with
    some or all of its gradients written by hand, where it has one and the networks fit it: docs/precision.md's table
    says, per algorithm, which parts, in what; "compiled" before rapidrl 0.1, upgraded with a DeprecationWarning),
    "torch" (PyTorch autograd: every network, device and precision; ``torch_compile`` traces this one) or "auto"
    (handwritten wherever it applies). ``model.paths`` says which ran and why."""
    precision: str = "fp32"
    """Arithmetic of the networks in updates and training rollouts (``rapidrl.train.precision``): "fp32", "bf16"
    (matmuls and convolutions under bfloat16 autocast; parameters, optimizer state and storage stay float32; needs
    the "torch" gradient backend) or "auto" (bf16 where the device has native bfloat16, the update runs on the
    torch backend, the algorithm's bf16 learning tests pass and the networks are large; else fp32).
    ``model.paths["precision"]`` says which runs and why. Unlike ``gradient_backend`` and ``collection``, whose
    "auto" picks among implementations of the same float32 arithmetic, the default is "fp32": "auto" changes the
    arithmetic with the machine, so a config trains the same numbers everywhere unless it asks for "auto" (the
    Atari and offline presets do)."""
    log_every_steps: int = 0
    """Env steps between two reports (counted over all envs): the update's loss statistics read back from the
    device (one host sync), the finiteness check, the metrics flushed to history and loggers, the progress bar.
    A report follows the first iteration (a rollout and its update) at or after each multiple, and the last one;
    0 reports after every iteration (the on-policy default: every update). A larger value keeps a GPU run free of
    host syncs. Callbacks run after every iteration; the ones that save check finiteness themselves."""
    keep_heap: bool = True
    """glibc only: keep freed heap memory for reuse instead of returning it to the OS (mallopt trim and mmap
    thresholds of 1 GiB, ``rapidrl._unsafe.malloc``) while the model builds, learns and evaluates; afterwards glibc's
    default thresholds are set back. Otherwise every update's large
    temporaries are fresh pages that fault in again: SAC's update (batch 256, 256x256) measured ~2-3 ms
    faster. The process keeps its peak heap during ``learn``. False leaves the allocator alone."""

    renamed_settings: typing.ClassVar[dict[str, str]] = {}
    """Settings renamed since an older rapidrl, old name -> today's, of this config class (its bases' are applied too):
    ``upgrade_legacy`` moves them (``TD3BCConfig``: ``{"alpha": "q_weight"}``)."""

    @classmethod
    def upgrade_legacy(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Rename the settings of older rapidrl versions in ``values`` (a fresh dict) to today's: the
        ``renamed_settings`` of the class and its bases (a value under today's name wins); subclasses whose upgrade is
        more than a rename extend it (``config_from_dict`` calls it)."""
        for klass in cls.__mro__:
            for old, new in vars(klass).get("renamed_settings", {}).items():
                if old in values:
                    values.setdefault(new, values.pop(old))
        if values.get("gradient_backend") == "compiled":  # the name of the handwritten backend before rapidrl 0.1
            values["gradient_backend"] = "handwritten"
        return values

    def validate(self) -> None:
        if self.gradient_backend == "compiled":  # a config built directly, not through config_from_dict
            warnings.warn("gradient_backend='compiled' is now called 'handwritten' (a setting of an older rapidrl)",
                          DeprecationWarning, stacklevel=2)
            self.gradient_backend = "handwritten"
        require(self.gradient_backend in GRADIENT_BACKENDS,
                f"gradient_backend must be one of {GRADIENT_BACKENDS}, got {self.gradient_backend!r}")
        require(self.precision in PRECISIONS, f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        require(self.seed is None or (isinstance(self.seed, int) and self.seed >= 0),
                f"seed must be a non-negative int or None, got {self.seed!r}")
        require(self.torch_threads is None or (isinstance(self.torch_threads, int) and self.torch_threads >= 0),
                f"torch_threads must be an int >= 0 or None, got {self.torch_threads!r}")
        require(isinstance(self.log_every_steps, int) and not isinstance(self.log_every_steps, bool)
                and self.log_every_steps >= 0, f"log_every_steps must be an int >= 0, got {self.log_every_steps!r}")



@dataclasses.dataclass
@with_defaults(max_grad_norm=0.5)
class RolloutConfig(RuntimeConfig, GradientClipConfig):
    """Fields of the algorithms that learn from rollouts of ``num_steps`` per env (on-policy algorithms, PQN)."""

    num_envs: int = 8
    """Parallel environments collecting experience."""
    num_steps: int = 128
    """Steps per env in each rollout (the rollout holds num_steps * num_envs transitions)."""
    learning_rate: float = 2.5e-4
    """Optimizer learning rate (start value when annealed)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the total timesteps of ``learn``."""
    gamma: float = 0.99
    """Discount factor."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "num_envs", "num_steps", "learning_rate")
        check_unit_interval(self, "gamma")
