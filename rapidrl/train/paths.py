"""Which implementation runs: every path a setting selects is resolved here, once, when the model is built.

An algorithm has a few *path settings*, each a string: ``"auto"`` or the name of one implementation.

- ``gradient_backend``: how the update computes its gradients. ``"handwritten"`` is an algorithm's CPU backend with
  some or all of its gradients written by hand (tested equal to autograd on the PyTorch definition of the loss; what
  each writes by hand, and in what: ``rapidrl.train.path_settings.backend_table``); ``"torch"`` is PyTorch autograd on
  that definition, for every network, device and precision. An algorithm has at most these two.
- ``collection`` (on-policy): ``"fused"`` (one compiled call per rollout on a built-in env), ``"step"`` (the
  PyTorch policy and any vector env, step by step) or ``"device"`` (env, policy and storage on the env's
  device); ``rapidrl.train.collect`` holds each collector and the choice.
- ``precision`` (``rapidrl.train.precision``): float32 or bfloat16 arithmetic, resolved after the backend.

Beside the settings, ``model.paths`` records what else switches the code that runs, so that it says everything:
on-policy ``async_collect`` ("thread" or "off"), ``recurrent`` (the cell or "none") and ``advantages`` ("gae" after
each rollout, or "vtrace" in the update); off-policy ``acting`` ("compiled": the compiled MLP forward for a few
observations per call, else "torch").

``choose`` resolves one setting: "auto" takes the first candidate (in the algorithm's order of preference) that
applies, and records why the faster ones did not; an explicit name that cannot run here is a ``ConfigError``
naming what to change. Nothing falls back silently. The choices (``PathChoice``: value and reason) are kept
on the model as ``model.paths``, printed at the start of a run, and written to the run's ``config.toml`` and
``summary.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rapidrl.train.config import ConfigError

__all__ = ["PathChoice", "choose", "describe"]


@dataclass(frozen=True)
class PathChoice:
    """The resolved value of one path setting and why it was taken."""

    setting: str
    """The setting's name (``gradient_backend``, ``collection``, ``precision``)."""
    value: str
    """The implementation that runs."""
    reason: str
    """Why: set explicitly, the only one, or what "auto" found."""

    def as_dict(self) -> dict[str, str]:
        return {"value": self.value, "reason": self.reason}


def choose(setting: str, requested: str, candidates: dict[str, Callable[[], str | None]]) -> PathChoice:
    """Resolve ``setting`` (its value ``requested``: "auto" or a candidate name).

    candidates: name -> check, in order of preference for "auto". A check returns None when that implementation
    can run here, else why not, phrased as what to change ("needs device='cpu'"). Raises ConfigError for an
    unknown name, an explicit choice whose check fails, and "auto" when none applies.
    """
    names = list(candidates)
    if requested != "auto" and requested not in candidates:
        allowed = ", ".join(repr(n) for n in ["auto", *names])
        raise ConfigError(f"{setting} must be one of {allowed}, got {requested!r}")
    if requested != "auto":
        why_not = candidates[requested]()
        if why_not is not None:
            raise ConfigError(f"{setting}={requested!r} cannot run here: {why_not} "
                              f"(or set {setting}='auto' to pick one that can)")
        only = " (the only one)" if len(names) == 1 else ""
        return PathChoice(setting, requested, f"{setting}={requested!r}{only}")
    skipped = []
    for name in names:
        why_not = candidates[name]()
        if why_not is None:
            if len(names) == 1:
                return PathChoice(setting, name, "the only one")
            if not skipped:
                return PathChoice(setting, name, "auto: the first that applies")
            return PathChoice(setting, name, "auto: " + "; ".join(skipped))
        skipped.append(f"not {name} ({why_not})")
    raise ConfigError(f"no {setting} can run here: " + "; ".join(skipped))


def fixed(setting: str, value: str, reason: str) -> PathChoice:
    """A path the algorithm has only one of (reported like the others)."""
    return PathChoice(setting, value, reason)


def describe(paths: dict[str, PathChoice]) -> str:
    """The paths on one line, as the log and ``rapidrl train`` show them:
    ``collection=fused (auto: the first that applies); gradient_backend=handwritten (...)``."""
    return "; ".join(f"{p.setting}={p.value} ({p.reason})" for p in paths.values())
