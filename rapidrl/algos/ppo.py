"""PPO (Schulman et al. 2017): clipped surrogate objective on GAE advantages.

Read top to bottom: the config, the loss (a pure function), the update loop. Rollout collection and
advantages come from the shared on-policy core (``rapidrl.algos.onpolicy``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from rapidrl.algos.registry import register
from rapidrl.buffers import RolloutBatch, normalize_advantages, vtrace_targets
from rapidrl.buffers.advantages import advantage_moments
from rapidrl.kernels.ppo_update import NORM_BATCH, NORM_MINIBATCH, NORM_NONE, STAT_NAMES, PPOEpochKernel
from rapidrl.nn.mlp_grad import linear_layers, mlp_backward, mlp_forward
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.policies import LOG_2PI
from rapidrl.nn.recurrent import SegmentLayout, segment_layout
from rapidrl.train.config import check_positive, require


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
    norm_adv: str = "minibatch"
    """Advantage normalization: "minibatch", "batch" or "none"."""
    target_kl: float | None = None
    """Stop the epochs of an update early when the approximate KL exceeds this (None: never)."""
    closed_form_grads: bool = True
    """Compute the gradients of separate actor/critic MLPs in closed form (``ppo_output_grads`` and
    ``rapidrl.nn.mlp_grad``) instead of autograd: same gradients, about a quarter of the PyTorch calls. With a
    recurrent policy: the loss's and the heads' gradients in closed form, autograd through the cell and encoder."""
    async_collect: bool = False
    """Collect the next rollout in a thread while updating on the last (``rapidrl.train.async_collect``): the
    data is then one update stale (policy lag 1); the stored log-probs are the behaviour policy's, so the
    probability ratio corrects for it."""
    vtrace_advantages: bool = False
    """Replace GAE by V-trace (importance weights clipped at 1), computed with the learner's policy and critic
    at the start of each update: advantages = V-trace policy-gradient advantages, returns = V-trace targets.
    Corrects the policy lag of ``async_collect`` in the advantages too. CPU storage only."""
    fused_update: bool = True
    """On CPU with separate float32 MLPs (closed-form gradients, no distributed learners, "clip" squash, host-side
    collection), run each epoch's minibatch updates (forward, loss gradients, backward, clipping, Adam) in one
    compiled call (``rapidrl.kernels.ppo_update``); the same mathematics as the PyTorch path, which tests compare
    it with."""
    bf16_update: bool = False
    """Run the update's forward pass and loss under bfloat16 autocast (with autograd: closed-form gradients
    are then off). Parameters, optimizer state and rollout storage stay float32."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "update_epochs", "minibatch_size", "clip_coef")
        batch = self.num_steps * self.num_envs
        require(self.minibatch_size <= batch,
                f"minibatch_size={self.minibatch_size} is larger than the rollout "
                f"(num_steps * num_envs = {batch})")
        require(self.norm_adv in ("minibatch", "batch", "none"),
                f"norm_adv must be 'minibatch', 'batch' or 'none', got {self.norm_adv!r}")
        require(self.target_kl is None or self.target_kl > 0, f"target_kl must be > 0 or None, got {self.target_kl}")
        require(self.recurrent == "none" or self.minibatch_size % self.num_steps == 0,
                f"with a recurrent policy a minibatch is whole env columns: minibatch_size={self.minibatch_size} "
                f"must be a multiple of num_steps={self.num_steps}")
        require(not self.vtrace_advantages or self.device == "cpu",
                "vtrace_advantages needs device='cpu' (the V-trace kernel is Numba)")


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


@torch.no_grad()
def ppo_output_grads(head: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, log_std: torch.Tensor | None,
                     old_log_probs: torch.Tensor, old_values: torch.Tensor, advantages: torch.Tensor,
                     returns: torch.Tensor, *, clip_coef: float, clip_vloss: bool, ent_coef: float, vf_coef: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
    """Gradients of ``ppo_loss`` w.r.t. the actor output, the values and log_std, computed in closed form.

    head: logits [B, A] (log_std None) or Gaussian means [B, A] (log_std [A]); values [B]. Returns
    (d_head [B, A], d_values [B], d_log_std [A] or None, stats as ``ppo_loss``). With r = exp(logp - logp_old):
    dL/dr = -A where the unclipped term is the max, else 0; dlogp/dlogits = onehot - softmax; the entropy term
    adds ent_coef/B * p (log p + H); for a Gaussian dlogp/dmu = z/sigma, dlogp/dlog_std = z^2 - 1.
    """
    n = head.shape[0]
    if log_std is None:
        logp_all = torch.log_softmax(head, -1)
        probs = logp_all.exp()
        new_logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(probs * logp_all).sum(-1)
    else:
        inv_std = torch.exp(-log_std)
        z = (actions - head) * inv_std
        new_logp = (-0.5 * z.square() - log_std - 0.5 * LOG_2PI).sum(-1)
        entropy = (log_std + 0.5 + 0.5 * LOG_2PI).sum().expand(n)
    log_ratio = new_logp - old_log_probs
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    d_logp = torch.where(unclipped >= clipped, -advantages, 0.0).mul_(ratio).div_(n)  # [B]
    if log_std is None:
        d_head = (-probs).mul_(d_logp.unsqueeze(-1))
        d_head.scatter_add_(-1, actions.long().unsqueeze(-1), d_logp.unsqueeze(-1))
        if ent_coef:
            d_head.add_(probs * (logp_all + entropy.unsqueeze(-1)), alpha=ent_coef / n)
        d_log_std = None
    else:
        d_head = z * inv_std * d_logp.unsqueeze(-1)
        d_log_std = (d_logp.unsqueeze(-1) * (z.square() - 1.0)).sum(0) - ent_coef
    v_err = values - returns
    if clip_vloss:
        v_clipped = old_values + (values - old_values).clamp(-clip_coef, clip_coef)
        c_err = v_clipped - returns
        in_range = (values - old_values).abs() <= clip_coef
        use_plain = v_err.square() >= c_err.square()
        d_values = torch.where(use_plain, v_err, c_err * in_range) * (vf_coef / n)
        v_loss = 0.5 * torch.max(v_err.square(), c_err.square()).mean()
    else:
        d_values = v_err * (vf_coef / n)
        v_loss = 0.5 * v_err.square().mean()
    stats = {"policy_loss": torch.max(unclipped, clipped).mean(), "value_loss": v_loss, "entropy": entropy.mean(),
             "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
             "clipfrac": ((ratio - 1.0).abs() > clip_coef).float().mean()}
    return d_head, d_values, d_log_std, stats


@register
class PPO(OnPolicyAlgorithm):
    """Proximal Policy Optimization. ``PPO(env, **hyperparameters)``; see PPOConfig for the fields."""

    name = "ppo"
    config_class = PPOConfig
    supports_recurrent = True

    def _schedule_update(self, progress_remaining: float) -> None:
        super()._schedule_update(progress_remaining)
        c = self.config
        self._clip_coef = c.clip_coef * (progress_remaining if c.anneal_clip else 1.0)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        p = self.policy
        self._closed_form = self.config.closed_form_grads and not p.shared and not self.config.bf16_update \
            and not p.multi  # the closed-form gradients cover categorical and Gaussian heads
        self._closed_form_heads = p.recurrent and self.config.closed_form_grads and not p.multi
        """Recurrent policies: the linear heads' and the loss's gradients in closed form, autograd below them."""
        if p.recurrent:  # the heads: single Linear layers on the cell's outputs
            heads = ([p.actor], [p.critic])
        else:
            heads = ([], []) if p.shared else (p.actor, p.critic)
        self._actor_layers, self._critic_layers = (linear_layers(m) for m in heads)
        self._epoch_kernel: tuple[list, PPOEpochKernel] | None = None
        self._clip_coef = self.config.clip_coef  # annealed per update by _schedule_update (anneal_clip)
        return adam(self.policy.parameters(), self.config.learning_rate, eps=1e-5)

    def _fused_params(self) -> list[torch.Tensor] | None:
        """The parameters in the compiled epoch's order (actor layers, critic layers, [log_std]), or None when the
        compiled epoch does not apply to this policy, optimizer and device."""
        c, p = self.config, self.policy
        # not with the device-resident collector: that path is the GPU's, run on the CPU device in tests, and
        # stays free of host round trips (tests/test_device.py counts them)
        if not (c.fused_update and self._closed_form and self.dist is None and self.device.type == "cpu"
                and self.device_collector is None and c.squash == "clip" and p.activation in ("tanh", "relu")):
            return None
        params = [t for layer in self._actor_layers + self._critic_layers for t in (layer.weight, layer.bias)]
        if not p.discrete:
            params.append(p.log_std)
        if {id(t) for t in params} != {id(t) for t in p.parameters()} or any(t.dtype != torch.float32 for t in params):
            return None
        opt = self.optimizer
        if not (isinstance(opt, torch.optim.Adam) and len(opt.param_groups) == 1 and not any(
                opt.param_groups[0][k] for k in ("amsgrad", "maximize", "weight_decay"))):
            return None
        return params

    @staticmethod
    def _match_blas_threads() -> None:
        """Numba's ``np.dot`` calls SciPy's OpenBLAS, which by default spins one thread per core: at small matrix
        sizes that only fights torch's and the envs' threads (measured: 3-10x slower updates on a busy machine).
        Sets that one library (not NumPy's or torch's BLAS) to torch's thread count, i.e. the ``torch_threads``
        setting (1 by default; 0 = all cores pays off for minibatches of thousands)."""
        import scipy.linalg.cython_blas  # noqa: F401  (loads the library Numba calls)
        from threadpoolctl import ThreadpoolController

        for lib in ThreadpoolController().lib_controllers:
            if "scipy.libs" in lib.filepath or "scipy_openblas32" in lib.filepath:
                lib.set_num_threads(torch.get_num_threads())

    def _bound_epoch_kernel(self, params: list[torch.Tensor]) -> PPOEpochKernel:
        """The compiled epoch bound to zero-copy views of the parameters, gradients and Adam state (created here
        in torch's own layout when missing); rebound whenever one of those tensor objects was replaced."""
        state = self.optimizer.state
        for t in params:
            if t.grad is None:
                t.grad = torch.zeros_like(t)
            if not state.get(t):
                state[t] = {"step": torch.tensor(0.0, dtype=torch.float32),
                            "exp_avg": torch.zeros_like(t, memory_format=torch.preserve_format),
                            "exp_avg_sq": torch.zeros_like(t, memory_format=torch.preserve_format)}
        tensors = [x for t in params
                   for x in (t, t.grad, state[t]["exp_avg"], state[t]["exp_avg_sq"], state[t]["step"])]
        if self._epoch_kernel is not None and all(a is b for a, b in zip(self._epoch_kernel[0], tensors)):
            return self._epoch_kernel[1]
        if not all(x.is_contiguous() and x.device.type == "cpu" and x.dtype == torch.float32 for x in tensors):
            raise ValueError("the compiled PPO epoch needs contiguous CPU float32 parameters and optimizer state")

        def views(i):
            return tuple(tensors[5 * k + i].detach().view(-1).numpy() for k in range(len(params)))

        self._match_blas_threads()
        shapes = np.array([(t.shape[0], t.shape[1] if t.dim() == 2 else 1) for t in params], np.int64)
        kernel = PPOEpochKernel(views(0), views(1), views(2), views(3), views(4), shapes,
                                n_actor=len(self._actor_layers), n_critic=len(self._critic_layers),
                                discrete=self.policy.discrete, relu=self.policy.activation == "relu")
        self._epoch_kernel = (tensors, kernel)
        return kernel

    def _fused_epoch(self, params: list[torch.Tensor], clip: float, norm: str | None, batch_stats) -> np.ndarray:
        """One epoch of minibatch updates in one compiled call; returns per-minibatch stats [n, 5]."""
        c, b, group = self.config, self.buffer, self.optimizer.param_groups[0]
        kernel = self._bound_epoch_kernel(params)
        perm = (b.active_permutation(self.torch_generator) if b.masked else b.permutation(self.torch_generator)).numpy()
        flat = {f: b.flat(f).numpy() for f in ("obs", "actions", "log_probs", "values", "advantages", "returns")}
        obs = flat["obs"].reshape(flat["obs"].shape[0], -1)
        actions = flat["actions"] if self.policy.discrete else flat["actions"].reshape(obs.shape[0], -1)
        mode = {None: NORM_NONE, "minibatch": NORM_MINIBATCH, "batch": NORM_BATCH}[norm]
        return kernel(obs, actions, flat["log_probs"], flat["values"], flat["advantages"], flat["returns"], perm,
                      batch_size=c.minibatch_size, norm_mode=mode, batch_mean=batch_stats[0],
                      batch_std=batch_stats[1], clip_coef=clip, clip_vloss=c.clip_vloss, ent_coef=c.ent_coef,
                      vf_coef=c.vf_coef, max_grad_norm=c.max_grad_norm, lr=float(group["lr"]),
                      beta1=group["betas"][0], beta2=group["betas"][1], eps=group["eps"])

    def _actor_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's input in the closed-form gradients: obs [B, O] (multi-agent PPO reads a column slice)."""
        return obs

    def _critic_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's input in the closed-form gradients (as ``_actor_obs``)."""
        return obs

    def _closed_form_grads(self, mb: RolloutBatch, clip: float, actor_x: torch.Tensor | None = None,
                           critic_x: torch.Tensor | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Set the .grad of the actor and critic layers (and log_std) to d ppo_loss / d parameter for minibatch
        ``mb``, the layers reading ``actor_x`` and ``critic_x`` (default ``_actor_obs(mb.obs)``,
        ``_critic_obs(mb.obs)``). Returns (d loss / d actor output [n, A], d loss / d values [n], stats)."""
        c, p = self.config, self.policy
        actor_x = self._actor_obs(mb.obs) if actor_x is None else actor_x
        critic_x = self._critic_obs(mb.obs) if critic_x is None else critic_x
        head, actor_inputs = mlp_forward(actor_x, self._actor_layers, p.activation)
        values, critic_inputs = mlp_forward(critic_x, self._critic_layers, p.activation)
        log_std = None if p.discrete else p.log_std.detach()
        old_log_probs = mb.log_probs
        if not p.discrete and p.squash == "tanh":
            # stored log-probs are Gaussian minus the squash's log-Jacobian, which depends on the action only:
            # compare Gaussian log-probs on both sides (the ratio ActorCritic.evaluate gives)
            old_log_probs = old_log_probs + p.squash_log_jacobian(mb.actions)
        d_head, d_values, d_log_std, stats = ppo_output_grads(
            head, values.squeeze(-1), mb.actions, log_std, old_log_probs, mb.values, mb.advantages, mb.returns,
            clip_coef=clip, clip_vloss=c.clip_vloss, ent_coef=c.ent_coef, vf_coef=c.vf_coef)
        mlp_backward(d_head, actor_inputs, self._actor_layers, p.activation)
        mlp_backward(d_values.unsqueeze(-1), critic_inputs, self._critic_layers, p.activation)
        if d_log_std is not None:  # into the existing .grad, so optimizer_step keeps its cached views
            if p.log_std.grad is None:
                p.log_std.grad = d_log_std
            else:
                p.log_std.grad.copy_(d_log_std)
        return d_head, d_values, stats

    @torch.no_grad()
    def _vtrace_advantages(self) -> None:
        """Overwrite the rollout's advantages/returns with V-trace under the learner's current policy."""
        c, b = self.config, self.buffer.tensors
        T, N = c.num_steps, c.num_envs
        log_probs, _, values = self.policy.evaluate(b.obs.reshape(T * N, *b.obs.shape[2:]),
                                                    b.actions.reshape(T * N, *b.actions.shape[2:]))
        vs, pg_adv = vtrace_targets(log_probs.view(T, N), b.log_probs, b.rewards, values.view(T, N),
                                    self.policy.value(torch.from_numpy(self._last_obs)), b.terminated, b.truncated,
                                    b.final_values, gamma=c.gamma, rho_bar=1.0, c_bar=1.0)
        b.advantages.copy_(pg_adv)
        b.returns.copy_(vs)

    def _update(self) -> None:
        c = self.config
        if c.vtrace_advantages:
            self._vtrace_advantages()
        clip = self._clip_coef
        norm = None if c.norm_adv == "none" else c.norm_adv
        params = list(self.policy.parameters())
        totals: dict[str, torch.Tensor] = {}
        count = 0
        fused = self._fused_params()
        if fused is not None and self.buffer.flat("actions").dtype in (torch.int64, torch.float32) \
                and self.buffer.flat("obs").dtype == torch.float32:
            adv = self.buffer.flat("advantages")
            if self.buffer.masked:
                adv = adv[self.buffer.active_indices()]
            batch_stats = (float(adv.mean()), float(adv.std(correction=0)) + 1e-8) if norm == "batch" else (0.0, 1.0)
            sums = np.zeros(len(STAT_NAMES))
            for _epoch in range(c.update_epochs):
                stats = self._fused_epoch(fused, clip, norm, batch_stats)
                sums += stats.sum(0)
                count += stats.shape[0]
                if c.target_kl is not None and stats[-1, STAT_NAMES.index("approx_kl")] > c.target_kl:
                    break
            totals = {k: float(v) for k, v in zip(STAT_NAMES, sums)}
        else:
            count = self._update_epochs(params, clip, norm, totals)
        if self.num_updates % c.log_every:
            return  # scalars are read back only every log_every updates
        record = {f"losses/{k}": float(v) / count for k, v in totals.items()}
        record["losses/explained_variance"] = self._explained_variance()
        record["charts/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self.record(record)

    def _update_epochs(self, params, clip: float, norm: str | None, totals: dict) -> int:
        """The PyTorch path of ``_update``: per minibatch, gradients (``_epoch_gradients``), then the optimizer step.
        Adds each minibatch's stats into ``totals``; returns the number of minibatches."""
        c = self.config
        count = 0
        plan = self._sequence_plan(norm) if self.policy.recurrent else None
        for _epoch in range(c.update_epochs):
            for stats in self._epoch_gradients(clip, norm, plan):
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
        return count

    def _epoch_gradients(self, clip: float, norm: str | None, plan: SequencePlan | None = None):
        """One epoch: for each minibatch set every parameter's .grad to the gradient of ``ppo_loss`` and yield the
        minibatch's stats (closed-form gradients, autograd, or whole sequences for a recurrent policy, which needs
        ``plan``: ``_sequence_plan``)."""
        c = self.config
        if self.policy.recurrent:
            yield from self._sequence_gradients(clip, norm, plan)
            return
        for mb in self.buffer.minibatches(c.minibatch_size, generator=self.torch_generator,
                                          normalize_advantages=norm):
            if self._closed_form:
                yield self._closed_form_grads(mb, clip)[2]
                continue
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=c.bf16_update):
                new_logp, entropy, new_values = self.policy.evaluate(mb.obs, mb.actions)
                loss, stats = ppo_loss(new_logp, entropy, new_values, mb.log_probs, mb.values, mb.advantages,
                                       mb.returns, clip_coef=clip, clip_vloss=c.clip_vloss, ent_coef=c.ent_coef,
                                       vf_coef=c.vf_coef)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            yield stats

    def _sequence_plan(self, norm: str | None) -> SequencePlan:
        """What every epoch of a recurrent update shares (computed once per update)."""
        c = self.config
        starts = self._rollout_starts()
        moments = advantage_moments(self.buffer.tensors.advantages[c.burn_in:]) if norm == "batch" else None
        return SequencePlan(starts, segment_layout(starts[c.burn_in:]), moments)

    def _sequence_gradients(self, clip: float, norm: str | None, plan: SequencePlan):
        """``_epoch_gradients`` for a recurrent policy: each minibatch is ``minibatch_size // num_steps`` whole env
        columns of the rollout, replayed through the recurrent layer from the state stored at the rollout start
        (truncated backpropagation through time over the rollout, as CleanRL's ppo_atari_lstm)."""
        c = self.config
        per_batch = c.minibatch_size // c.num_steps
        perm = torch.randperm(c.num_envs, generator=self.torch_generator).to(plan.starts.device)
        for start in range(0, c.num_envs, per_batch):
            # one minibatch of all columns: their order cannot change the loss, so no gather
            idx = perm[start:start + per_batch] if per_batch < c.num_envs else None
            advantages = self._columns("advantages", idx)
            if norm is not None:  # "minibatch": these columns' own moments
                advantages = normalize_advantages(advantages, plan.adv_moments)
            old = (self._columns("log_probs", idx), self._columns("values", idx), advantages,
                   self._columns("returns", idx))
            layout = plan.layout if idx is None else None
            self.optimizer.zero_grad(set_to_none=True)
            if self._closed_form_heads:  # the heads are single Linear layers on the cell's outputs
                outputs = self._column_outputs(idx, plan.starts, layout)
                h = outputs.detach()
                d_head, d_values, stats = self._closed_form_grads(
                    RolloutBatch(h, self._columns("actions", idx), *old), clip, h, h)
                with torch.no_grad():  # d loss / d outputs through both heads
                    d_outputs = torch.addmm(d_values.unsqueeze(-1) * self.policy.critic.weight, d_head,
                                            self.policy.actor.weight)
                outputs.backward(d_outputs)
                yield stats
                continue
            new_logp, entropy, new_values = self._score_columns(idx, plan.starts, layout)
            loss, stats = ppo_loss(new_logp.reshape(-1), entropy.reshape(-1), new_values.reshape(-1), *old,
                                   clip_coef=clip, clip_vloss=c.clip_vloss, ent_coef=c.ent_coef, vf_coef=c.vf_coef)
            loss.backward()
            yield stats


@dataclass(frozen=True)
class SequencePlan:
    """What the epochs of one recurrent PPO update share."""

    starts: torch.Tensor
    """[T, N] bool: the rollout's episode starts."""
    layout: SegmentLayout
    """The segment layout of all N columns past the burn-in (``starts[burn_in:]``)."""
    adv_moments: tuple[torch.Tensor, torch.Tensor] | None
    """The rollout's advantage (mean, std) past the burn-in (norm_adv "batch"), else None."""
