"""The path settings an algorithm resolves at construction, and the hooks through which it takes part.

``rapidrl.train.paths`` resolves one setting (``choose``); ``rapidrl.train.precision`` says when bfloat16 pays. This
mixin of ``Algorithm`` ties them to a model: ``_resolve_gradient_backend`` and ``_resolve_precision`` (called by each
algorithm family's ``_build``: ``OnPolicyAlgorithm``, ``OffPolicyAlgorithm``, PQN, after the collection path) fill
``model.paths``; ``gradient_backend``, ``precision`` and ``_autocast`` read them back. An algorithm overrides the hooks:
``_gradient_backends`` (the backends it has, each with its check), ``_update_batch`` (rows of one gradient step) and
``_bf16_unsupported``, and sets the class attributes ``bf16_learning_tested`` and ``bf16_beats_compiled``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rapidrl.train.config import ConfigError
from rapidrl.train.paths import PathChoice, choose
from rapidrl.train.precision import autocast, heavy_networks, native_bf16, resolve_precision

__all__ = ["PathSettings"]


class PathSettings:
    """The gradient backend and precision of a model (a mixin of ``Algorithm``; see the module docstring)."""

    bf16_learning_tested: ClassVar[bool] = False
    """The algorithm's learning tests pass with precision="bf16" at the float32 thresholds and seeds
    (``tests/test_learning_bf16.py``): only then may precision="auto" pick bf16 (``rapidrl.train.precision``)."""
    compiled_backend_autocasts: ClassVar[bool] = False
    """The compiled backend runs the networks through autograd, as the torch one (TQC compiles only its loss, on the
    networks' float32 outputs), so precision="bf16" applies on it too."""
    bf16_beats_compiled: ClassVar[bool] = False
    """The bf16 torch update measured faster than the compiled float32 backend on heavy networks (SAC), so "auto"
    for both settings gives torch + bf16 where the hardware has native bf16 (``_auto_bf16_over_compiled``)."""

    def _gradient_backends(self) -> dict:
        """The gradient backends this algorithm has, preferred first: name -> check (None when it can run with
        these settings, else what to change). PyTorch autograd only, unless overridden (PPO, DQN, SAC, TD3, DDPG, TQC,
        CrossQ)."""
        return {"torch": lambda: None}

    def _compiled_or_torch(self, *checks: Callable[[], str | None], float32_only: bool = False) -> dict:
        """``_gradient_backends`` of an algorithm with a compiled CPU backend (PPO, SAC, DQN, TD3, DDPG, TQC, CrossQ):
        compiled first, torch always. The compiled one is refused off the CPU, then by the first of ``checks`` (the
        algorithm's own conditions, in order) that gives a reason, then when torch_compile=True (off-policy: it traces
        the autograd update), then, for a ``float32_only`` backend, under precision="bf16"."""

        def compiled() -> str | None:
            if self.device.type != "cpu":
                return "needs device='cpu'"
            for check in checks:
                why = check()
                if why is not None:
                    return why
            if getattr(self.config, "torch_compile", False):
                return "torch_compile=True traces the autograd update (it needs gradient_backend='torch')"
            if float32_only and self.config.precision == "bf16":
                return "runs in float32 (precision='bf16' needs gradient_backend='torch')"
            return None

        return {"compiled": compiled, "torch": lambda: None}

    def _resolve_gradient_backend(self) -> PathChoice:
        """``paths["gradient_backend"]`` from the config's setting (``rapidrl.train.paths.choose``)."""
        requested, candidates = self.config.gradient_backend, self._gradient_backends()
        if requested != "auto" and requested not in candidates:
            raise ConfigError(f"gradient_backend={requested!r} cannot run here: {self.name.upper()} has no "
                              f"{requested} backend (it has {', '.join(candidates)})")
        return choose("gradient_backend", requested, candidates)

    def _resolve_precision(self) -> PathChoice:
        """``paths["precision"]`` from the config's setting, after the gradient backend (rapidrl.train.precision)."""
        autocasts = self.gradient_backend != "compiled" or self.compiled_backend_autocasts
        return resolve_precision(self.config.precision, device=self.device, backend_autocasts=autocasts,
                                 tested=self.bf16_learning_tested,
                                 heavy=heavy_networks(self.trainable_modules(), self._update_batch()),
                                 unsupported=self._bf16_unsupported())

    def _auto_bf16_over_compiled(self) -> str | None:
        """Why the compiled backend steps aside under gradient_backend="auto" and precision="auto" (None: it does
        not): for algorithms whose bf16 torch update measured faster than their compiled float32 one
        (``bf16_beats_compiled``; ``rapidrl bench precision``), where "auto" would take bf16 (native bf16, the
        learning tests, heavy networks). A check of the compiled backend calls it first."""
        c = self.config
        if not (self.bf16_beats_compiled and c.precision == "auto" and c.gradient_backend == "auto"):
            return None
        if native_bf16(self.device) or not self.bf16_learning_tested \
                or heavy_networks(self.trainable_modules(), self._update_batch()):
            return None
        return ("precision='auto' takes bf16, whose torch update measured faster than the compiled float32 one "
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
        """The gradient backend that runs ("compiled" or "torch"; ``paths["gradient_backend"]`` says why)."""
        return self.paths["gradient_backend"].value
