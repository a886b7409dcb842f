"""The path settings an algorithm resolves at construction, and the hooks through which it takes part.

``rapidrl.train.paths`` resolves one setting (``choose``); ``rapidrl.train.precision`` says when bfloat16 pays. This
mixin of ``Algorithm`` ties them to a model: ``_resolve_gradient_backend`` and ``_resolve_precision`` (called by each
algorithm family's ``_build``: ``OnPolicyAlgorithm``, ``OffPolicyAlgorithm``, PQN, after the collection path) fill
``model.paths``; ``gradient_backend``, ``precision`` and ``_autocast`` read them back. An algorithm overrides the hooks:
``_gradient_backends`` (the backends it has, each with its check), ``_update_batch`` (rows of one gradient step) and
``_bf16_unsupported``, and sets the class attributes ``bf16_learning_tested`` and ``handwritten``.

Gradient backends: "torch" is PyTorch autograd (every network, device and precision; the reference); "handwritten" is
an algorithm's CPU backend with some or all of its gradients written by hand, each declared in one
``HandwrittenBackend`` (which parts, in what, at which precision): ``backend_table`` lists them all, as
docs/precision.md shows. Until rapidrl 0.1 it was called "compiled", which read as "written in Numba" and was true of
PPO's only; the old name is upgraded with a DeprecationWarning (``RuntimeConfig.upgrade_legacy``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rapidrl.train.config import ConfigError
from rapidrl.train.paths import PathChoice, choose
from rapidrl.train.precision import autocast, heavy_networks, native_bf16, resolve_precision

__all__ = ["HandwrittenBackend", "PathSettings", "backend_table"]


@dataclass(frozen=True)
class HandwrittenBackend:
    """What an algorithm's "handwritten" gradient backend writes by hand (a class attribute, ``handwritten``, of the
    algorithm; one row of ``backend_table``). It always runs on the CPU."""

    by_hand: str
    """The parts whose forward and backward are written by hand, and in what (Numba kernels, batched PyTorch)."""
    autograd: str = "nothing"
    """What still runs through PyTorch autograd."""
    autocasts: bool = False
    """The networks run through autograd and return float32, so precision="bf16" applies on this backend too (else it
    runs in float32 only)."""
    gives_way_to_bf16: bool = False
    """Its bf16 torch update measured faster on heavy networks (``rapidrl bench precision``): under "auto" for both
    settings, where bf16 would be taken, the torch backend runs (``_auto_bf16_over_handwritten``)."""


def backend_table(algorithms: dict[str, type]) -> str:
    """The Markdown table of every handwritten backend of ``algorithms`` (name -> class; the registry's): which parts
    are written by hand and in what, what stays on autograd, device and precision (docs/precision.md shows it,
    ``tests/test_paths.py`` keeps it equal)."""
    rows = ["| algorithm | written by hand | through autograd | device | precision |", "|---|---|---|---|---|"]
    for name, cls in sorted(algorithms.items()):
        b = getattr(cls, "handwritten", None)
        if b is not None:
            precision = "fp32 or bf16 (the networks autocast)" if b.autocasts else "fp32"
            rows.append(f"| `{name}` | {b.by_hand} | {b.autograd} | CPU | {precision} |")
    return "\n".join(rows) + "\n"


class PathSettings:
    """The gradient backend and precision of a model (a mixin of ``Algorithm``; see the module docstring)."""

    bf16_learning_tested: ClassVar[bool] = False
    """The algorithm's learning tests pass with precision="bf16" at the float32 thresholds and seeds
    (``tests/test_learning_bf16.py``): only then may precision="auto" pick bf16 (``rapidrl.train.precision``)."""
    auto_keeps_fp32: ClassVar[str | None] = None
    """Why precision="auto" keeps float32 for this algorithm even where bf16 would pay (its losses need more than
    bf16's 8 significant bits: IQL's advantage weights), or None. An explicit "bf16" still runs."""
    handwritten: ClassVar[HandwrittenBackend | None] = None
    """The algorithm's "handwritten" gradient backend, if it has one: what it writes by hand, in what (one row of the
    table of ``backend_table``, docs/precision.md). None: PyTorch autograd only."""

    def _gradient_backends(self) -> dict:
        """The gradient backends this algorithm has, preferred first: name -> check (None when it can run with
        these settings, else what to change): "handwritten" (where the class declares one) then "torch". An algorithm
        whose handwritten backend covers only some settings overrides this with ``_handwritten_or_torch(checks)``
        (PPO, DQN)."""
        return self._handwritten_or_torch() if self.handwritten is not None else {"torch": lambda: None}

    def _handwritten_or_torch(self, *checks: Callable[[], str | None]) -> dict:
        """``_gradient_backends`` of an algorithm with a handwritten backend: handwritten first, torch always. The
        handwritten one is refused off the CPU, then (under "auto" for both settings) where its bf16 torch update
        measured faster (``HandwrittenBackend.gives_way_to_bf16``), then by the first of ``checks`` (the algorithm's
        own conditions, in order) that gives a reason, then when torch_compile=True (off-policy: it traces the
        autograd update), then, for a backend that runs in float32 only, under precision="bf16"."""
        backend = self.handwritten

        def handwritten() -> str | None:
            if self.device.type != "cpu":
                return "needs device='cpu'"
            if backend.gives_way_to_bf16:
                why = self._auto_bf16_over_handwritten()
                if why is not None:
                    return why
            for check in checks:
                why = check()
                if why is not None:
                    return why
            if getattr(self.config, "torch_compile", False):
                return "torch_compile=True traces the autograd update (it needs gradient_backend='torch')"
            if not backend.autocasts and self.config.precision == "bf16":
                return "runs in float32 (precision='bf16' needs gradient_backend='torch')"
            return None

        return {"handwritten": handwritten, "torch": lambda: None}

    def _resolve_gradient_backend(self) -> PathChoice:
        """``paths["gradient_backend"]`` from the config's setting (``rapidrl.train.paths.choose``)."""
        requested, candidates = self.config.gradient_backend, self._gradient_backends()
        if requested != "auto" and requested not in candidates:
            raise ConfigError(f"gradient_backend={requested!r} cannot run here: {self.name.upper()} has no "
                              f"{requested} backend (it has {', '.join(candidates)})")
        return choose("gradient_backend", requested, candidates)

    def _resolve_precision(self) -> PathChoice:
        """``paths["precision"]`` from the config's setting, after the gradient backend (rapidrl.train.precision)."""
        autocasts = self.gradient_backend != "handwritten" or self.handwritten.autocasts
        return resolve_precision(self.config.precision, device=self.device, backend_autocasts=autocasts,
                                 tested=self.bf16_learning_tested, keeps_fp32=self.auto_keeps_fp32,
                                 heavy=heavy_networks(self.trainable_modules(), self._update_batch()),
                                 unsupported=self._bf16_unsupported())

    def _auto_bf16_over_handwritten(self) -> str | None:
        """Why the handwritten backend steps aside under gradient_backend="auto" and precision="auto" (None: it does
        not): for algorithms whose bf16 torch update measured faster than their handwritten float32 one
        (``HandwrittenBackend.gives_way_to_bf16``; ``rapidrl bench precision``), where "auto" would take bf16 (native
        bf16, the learning tests, heavy networks). A check of the handwritten backend calls it first."""
        c = self.config
        if not (c.precision == "auto" and c.gradient_backend == "auto"):
            return None
        if native_bf16(self.device) or not self.bf16_learning_tested or self.auto_keeps_fp32 \
                or heavy_networks(self.trainable_modules(), self._update_batch()):
            return None
        return ("precision='auto' takes bf16, whose torch update measured faster than the handwritten float32 one "
                "here (rapidrl bench precision)")

    def _update_batch(self) -> int:
        """Rows of one gradient step (the minibatch, or the whole rollout): what bf16's gain depends on (each
        algorithm family says which: ``OnPolicyAlgorithm``, ``OffPolicyAlgorithm``, PQN)."""
        raise NotImplementedError

    def _bf16_unsupported(self) -> str | None:
        """Why these settings cannot run in bf16 at all (a recurrent policy), else None."""
        return None

    @property
    def precision(self) -> str:
        """The precision that runs ("fp32" or "bf16"; ``paths["precision"]`` says why)."""
        choice = self.paths.get("precision")
        return "fp32" if choice is None else choice.value

    def _autocast(self):
        """The arithmetic context of the resolved precision on the model's device: bfloat16 autocast (device type
        from the model's device: "cpu" or "cuda") for "bf16", nothing for "fp32"."""
        return autocast(self.device, self.precision)

    @property
    def gradient_backend(self) -> str:
        """The gradient backend that runs ("handwritten" or "torch"; ``paths["gradient_backend"]`` says why)."""
        return self.paths["gradient_backend"].value
