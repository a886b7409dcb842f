"""PPO (Schulman et al. 2017): clipped surrogate objective on GAE advantages.

Read top to bottom: the config, the loss (``ppo_loss``, a pure function: the one definition), the update loop.
Rollout collection and advantages come from the shared on-policy core (``rapidrl.algos.onpolicy``).

Two gradient backends compute the same update, chosen once at construction by ``gradient_backend``
(``rapidrl.train.paths``; ``model.paths`` says which and why):

- ``"torch"``: autograd on ``ppo_loss`` through the policy, then ``optimizer_step``; every policy (recurrent,
  CNN, shared trunk, MultiDiscrete), every device, ``precision="bf16"`` (autocast), several learners;
- ``"handwritten"``: each epoch's minibatch updates in one Numba call on the CPU for separate MLP actor and critic
  (``rapidrl.algos.ppo_compiled`` binds ``rapidrl.kernels.ppo_update`` to the policy and optimizer); tested
  equal to the torch backend. ``"auto"`` takes it wherever it applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rapidrl.algos.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from rapidrl.algos.ppo_compiled import CompiledPPOUpdate, unavailable
from rapidrl.algos.registry import register
from rapidrl.buffers import vtrace_targets
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.train.config import check_positive, require
from rapidrl.train.path_settings import HandwrittenBackend
from rapidrl.train.paths import PathChoice


@dataclass
class PPOConfig(OnPolicyConfig):
    update_epochs: int = 4
    """Passes over the rollout per update."""
    minibatch_size: int = 256
    """Transitions per gradient step; must not exceed num_steps * num_envs."""
    clip_coef: float = 0.2
    """Clip range of the probability ratio."""
    anneal_clip: bool = False
    """Decay clip_coef linearly to 0 with the learning rate."""
    clip_vloss: bool = True
    """Clip the value update around the old values with the same range."""
    target_kl: float | None = None
    """Stop the epochs of an update early when the approximate KL exceeds this (None: never)."""
    vtrace_advantages: bool = False
    """Replace GAE by V-trace (importance weights clipped at 1), computed with the learner's policy and critic
    at the start of each update: advantages = V-trace policy-gradient advantages, returns = V-trace targets.
    Corrects the policy lag of ``async_collect`` in the advantages too. CPU storage only."""
    update_threads: int = 1
    """Threads of the handwritten epoch (``gradient_backend`` "handwritten", or "auto" where it applies): 2 runs
    each minibatch's actor half (forward, surrogate and entropy terms, backward) and critic half in two threads,
    then clipping and Adam, for bitwise the same result as 1. Measured 1.8x faster per epoch on 2-core AMD EPYCs
    (docs/BENCHMARKS.md, "the update in two threads"); leave it at 1 when each core runs its own experiment, or
    beside ``async_collect`` (its collector already takes the second core)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "update_epochs", "minibatch_size", "clip_coef")
        batch = self.num_steps * self.num_envs
        require(self.minibatch_size <= batch,
                f"minibatch_size={self.minibatch_size} is larger than the rollout "
                f"(num_steps * num_envs = {batch})")
        require(self.target_kl is None or self.target_kl > 0, f"target_kl must be > 0 or None, got {self.target_kl}")
        require(self.recurrent == "none" or self.minibatch_size % self.num_steps == 0,
                f"with a recurrent policy a minibatch is whole env columns: minibatch_size={self.minibatch_size} "
                f"must be a multiple of num_steps={self.num_steps}")
        require(not self.vtrace_advantages or self.device == "cpu",
                "vtrace_advantages needs device='cpu' (the V-trace kernel is Numba)")
        require(self.update_threads in (1, 2) and not isinstance(self.update_threads, bool),
                f"update_threads must be 1 or 2, got {self.update_threads!r}")

    @classmethod
    def upgrade_legacy(cls, values: dict) -> dict:
        """Settings of older rapidrl versions: ``closed_form_grads``/``fused_update`` (the compiled epoch's switches
        before path settings; both on: today's "auto"; either off: the PyTorch update, now
        ``gradient_backend="torch"``); ``bf16_update`` (now ``precision="bf16"``, or "fp32"); ``norm_adv`` (now
        ``normalize_advantage``, the same values)."""
        values = super().upgrade_legacy(values)
        if "norm_adv" in values:
            values.setdefault("normalize_advantage", values.pop("norm_adv"))
        if "bf16_update" in values:  # rapidrl before the precision setting: bf16 autocast in PPO's update only
            bf16 = values.pop("bf16_update")
            values.setdefault("precision", "bf16" if bf16 else "fp32")
        old = {k: values.pop(k) for k in ("closed_form_grads", "fused_update") if k in values}
        if old and "gradient_backend" not in values:
            values["gradient_backend"] = "auto" if all(old.values()) else "torch"
        return values


def ppo_loss(new_log_probs: torch.Tensor, entropy: torch.Tensor, new_values: torch.Tensor,
             old_log_probs: torch.Tensor, old_values: torch.Tensor, advantages: torch.Tensor,
             returns: torch.Tensor, *, clip_coef: float, clip_vloss: bool, ent_coef: float, vf_coef: float
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO loss on a minibatch; every tensor is [B].

    L = E[max(-A r, -A clip(r, 1-eps, 1+eps))] + vf_coef * L_V - ent_coef * E[H], r = exp(logp - logp_old),
    L_V = 0.5 E[max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)] when clipped, else 0.5 E[(V - R)^2].
    Stats (detached): policy/value loss, entropy, approx_kl = E[(r - 1) - log r], clip fraction.
    """
    log_ratio = new_log_probs - old_log_probs
    ratio = log_ratio.exp()
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)).mean()
    if clip_vloss:
        clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max((new_values - returns).square(), (clipped - returns).square()).mean()
    else:
        v_loss = 0.5 * (new_values - returns).square().mean()
    ent = entropy.mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * ent
    with torch.no_grad():
        stats = {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach(),
                 "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
                 "clipfrac": ((ratio - 1.0).abs() > clip_coef).float().mean()}
    return loss, stats


@register
class PPO(OnPolicyAlgorithm):
    """Proximal Policy Optimization. ``PPO(env, **hyperparameters)``; see PPOConfig for the fields."""

    name = "ppo"
    config_class = PPOConfig
    supports_recurrent = True
    supports_async_collect = True
    bf16_learning_tested = True
    handwritten = HandwrittenBackend(
        by_hand="every epoch's minibatch updates in one Numba call: both MLPs' forward and backward, the loss's "
                "gradients, clipping, Adam (`rapidrl.kernels.ppo_update`, bound by `rapidrl.algos.ppo_compiled`); "
                "separate MLP actor and critic only")

    def _make_optimizer(self) -> torch.optim.Optimizer:
        self._clip_coef = self.config.clip_coef  # annealed per update by _schedule_update (anneal_clip)
        return adam(self.policy.parameters(), self.config.learning_rate, eps=1e-5)

    def _gradient_backends(self) -> dict:
        return self._handwritten_or_torch(lambda: unavailable(
            self.policy, distributed=self.dist is not None, on_device_collection=self.device_collector is not None))

    def _bind_backend(self) -> None:
        self._compiled = CompiledPPOUpdate(self.policy, self.optimizer) if self.gradient_backend == "handwritten" \
            else None
        require(self.config.update_threads == 1 or self._compiled is not None,
                f"update_threads={self.config.update_threads} splits the handwritten epoch between the actor and the "
                f"critic, but this model's update runs on the torch backend ({self.paths['gradient_backend'].reason}); "
                "set update_threads=1 (torch_threads sets the torch backend's threads)")

    def _update_batch(self) -> int:
        return self.config.minibatch_size

    def _advantage_estimator(self) -> PathChoice:
        if self.config.vtrace_advantages:
            return PathChoice("advantages", "vtrace", "vtrace_advantages=True: V-trace with the learner's policy at "
                              "the start of each update")
        return super()._advantage_estimator()

    def _schedule_update(self, progress_remaining: float) -> None:
        super()._schedule_update(progress_remaining)
        c = self.config
        self._clip_coef = c.clip_coef * (progress_remaining if c.anneal_clip else 1.0)

    # -- the update ------------------------------------------------------------------------------
    def _update(self) -> None:
        c = self.config
        if self.paths["advantages"].value == "vtrace":
            self._vtrace_advantages()
        if self._compiled is not None:
            count, totals = self._compiled.update(self.buffer, self.torch_generator, c, self._clip_coef,
                                                  c.normalize_advantage)
        else:
            count, totals = self._torch_update(self._clip_coef, c.normalize_advantage)
        if not self.reporting:
            return  # scalars are read back at reports only (log_every_steps)
        record = {f"losses/{k}": float(v) / count for k, v in totals.items()}
        record["losses/explained_variance"] = self._explained_variance()
        record["charts/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self.record(record)

    def _torch_update(self, clip: float, normalize: str) -> tuple[int, dict]:
        """The "torch" backend: ``update_epochs`` passes over the rollout's minibatches (``_minibatches``), each one
        gradient step of autograd on ``ppo_loss`` (gradients averaged over learners, then ``optimizer_step``); the
        epochs stop early past ``target_kl``. Returns (number of minibatches, summed statistics)."""
        c = self.config
        params = list(self.policy.parameters())
        epoch = self._minibatches(normalize)
        totals: dict[str, torch.Tensor] = {}
        count = 0
        for _epoch in range(c.update_epochs):
            for mb in epoch():
                with self._autocast():  # bf16 autocast under precision="bf16" (rapidrl.train.precision)
                    new_logp, entropy, new_values = mb.evaluate(self.policy)
                    loss, stats = ppo_loss(new_logp, entropy, new_values, mb.log_probs, mb.values, mb.advantages,
                                           mb.returns, clip_coef=clip, clip_vloss=c.clip_vloss, ent_coef=c.ent_coef,
                                           vf_coef=c.vf_coef)
                # zeroed in place, not set to None (every on-policy update): the .grad tensors persist, so
                # optimizer_step's zero-copy views and the learners' shared gradient buffer (rapidrl.train.ddp) stay
                # valid, with no NumPy conversion per step and a device loop free of host work
                self.optimizer.zero_grad(set_to_none=False)
                loss.backward()
                self._sync_grads(params)
                optimizer_step(self.optimizer, c.max_grad_norm)
                for k, v in stats.items():
                    totals[k] = totals[k] + v if k in totals else v
                count += 1
                last_kl = stats["approx_kl"]
            if c.target_kl is not None:  # every rank must take the same decision
                kl = float(last_kl) if self.dist is None else self.dist.all_reduce_mean(float(last_kl))
                if kl > c.target_kl:
                    break
        return count, totals

    def _minibatches(self, normalize: str) -> Callable[[], Iterator]:
        """A function giving one epoch's minibatches: the rollout's samples shuffled (``RolloutBuffer.minibatches``),
        or for a recurrent policy whole env columns, ``minibatch_size // num_steps`` each, replayed from the state
        stored at the rollout's start (``rapidrl.train.recurrent.RolloutSequences``)."""
        c = self.config
        if self.policy.recurrent:
            return self._sequences.epochs(c.minibatch_size // c.num_steps, self.torch_generator, normalize)
        return lambda: self.buffer.minibatches(c.minibatch_size, generator=self.torch_generator,
                                               normalize_advantage=normalize)

    @torch.no_grad()
    def _vtrace_advantages(self) -> None:
        """Overwrite the rollout's advantages/returns with V-trace under the learner's current policy."""
        c, b = self.config, self.buffer.tensors
        T, N = c.num_steps, c.num_envs
        log_probs, _, values = self.policy.evaluate(b.obs.reshape(T * N, *b.obs.shape[2:]),
                                                    b.actions.reshape(T * N, *b.actions.shape[2:]),
                                                    action_masks=self.buffer.flat_action_masks())
        vs, pg_adv = vtrace_targets(log_probs.view(T, N), b.log_probs, b.rewards, values.view(T, N),
                                    self.policy.value(torch.from_numpy(self._last_obs)), b.terminated, b.truncated,
                                    b.final_values, gamma=c.gamma, rho_bar=1.0, c_bar=1.0)
        b.advantages.copy_(pg_adv)
        b.returns.copy_(vs)
