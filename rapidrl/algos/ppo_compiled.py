"""PPO's "handwritten" gradient backend: the binding of the compiled epoch (``rapidrl.kernels.ppo_update``) to a
model's policy, optimizer and rollout.

The kernel runs every minibatch update of one epoch (forward, loss gradients, backward, clipping, Adam) in one
call on zero-copy NumPy views of the parameters, their ``.grad`` and the ``torch.optim.Adam`` state, so the
optimizer's state dict, checkpoints and the PyTorch backend see every step. It covers separate MLP actor and
critic (each reading a column range of the observation row), categorical or Gaussian heads (clipped or
tanh-squashed; a categorical over the valid actions of the rollout's stored action masks), float32 on the CPU, one
learner; ``unavailable`` says what to change otherwise. The "torch" backend (``rapidrl.algos.ppo``) is its
reference: ``tests/test_ppo_compiled_update.py`` compares them.
"""

from __future__ import annotations

import numpy as np
import torch

from rapidrl._unsafe.torch_private import adam_state
from rapidrl.buffers.advantages import ADVANTAGE_EPS, advantage_moments
from rapidrl.kernels.ppo_update import NORM_BATCH, NORM_MINIBATCH, NORM_NONE, STAT_NAMES, PPOEpochKernel
from rapidrl.nn.numba_mlp import linear_layers

__all__ = ["CompiledPPOUpdate", "unavailable"]


def unavailable(policy, *, distributed: bool, on_device_collection: bool) -> str | None:
    """None when the compiled epoch can train ``policy`` in this setting, else what to change. The conditions every
    handwritten backend shares (the CPU, float32 arithmetic) are ``PathSettings._handwritten_or_torch``'s."""
    if on_device_collection:
        return "the device path (collection='device') keeps the update on the env's device"
    if distributed:
        return "several learners (distributed=True) average their gradients after every minibatch"
    if policy.recurrent:
        return "needs a feed-forward policy (recurrent='none')"
    if policy.encoder_kind != "mlp":
        return f"needs MLP networks (the policy has a {policy.encoder_kind!r} encoder)"
    if policy.shared:
        return "needs separate actor and critic MLPs (shared=False)"
    if policy.multi:
        return "covers Discrete and Box actions (MultiDiscrete/MultiBinary train with gradient_backend='torch')"
    if any(t.dtype != torch.float32 for t in policy.parameters()):
        return "needs float32 parameters"
    return None


class CompiledPPOUpdate:
    """The compiled epoch bound to ``policy`` and ``optimizer`` (a ``torch.optim.Adam`` with one parameter group,
    as PPO builds it). ``update`` runs one PPO update; the binding is rebuilt whenever a parameter, gradient or
    Adam state tensor object was replaced (``load_state_dict`` of the optimizer replaces its state)."""

    def __init__(self, policy, optimizer: torch.optim.Optimizer):
        group = optimizer.param_groups
        if not (isinstance(optimizer, torch.optim.Adam) and len(group) == 1 and not any(
                group[0][k] for k in ("amsgrad", "maximize", "weight_decay"))):
            raise ValueError("the compiled PPO epoch needs a plain torch.optim.Adam with one parameter group")
        self.policy, self.optimizer = policy, optimizer
        self.actor_layers, self.critic_layers = linear_layers(policy.actor), linear_layers(policy.critic)
        self.params = [t for layer in self.actor_layers + self.critic_layers for t in (layer.weight, layer.bias)]
        if not policy.discrete:
            self.params.append(policy.log_std)
        if {id(t) for t in self.params} != {id(t) for t in policy.parameters()}:
            raise ValueError("the compiled PPO epoch trains an actor MLP, a critic MLP and log_std, nothing else")
        self.actor_columns, self.critic_columns = policy.input_columns()
        self._bound: tuple[list, PPOEpochKernel] | None = None

    def kernel(self) -> PPOEpochKernel:
        """The compiled epoch on zero-copy views of the parameters, gradients and Adam state (created here in
        torch's own layout when missing); rebound whenever one of those tensor objects was replaced."""
        adam_state(self.optimizer, self.params)  # rapidrl._unsafe.torch_private: Adam's state, as its step makes it
        state = self.optimizer.state
        tensors = [x for t in self.params
                   for x in (t, t.grad, state[t]["exp_avg"], state[t]["exp_avg_sq"], state[t]["step"])]
        if self._bound is not None and all(a is b for a, b in zip(self._bound[0], tensors)):
            return self._bound[1]
        if not all(x.is_contiguous() and x.device.type == "cpu" and x.dtype == torch.float32 for x in tensors):
            raise ValueError("the compiled PPO epoch needs contiguous CPU float32 parameters and optimizer state")

        def views(i):
            return tuple(tensors[5 * k + i].detach().view(-1).numpy() for k in range(len(self.params)))

        shapes = np.array([(t.shape[0], t.shape[1] if t.dim() == 2 else 1) for t in self.params], np.int64)
        kernel = PPOEpochKernel(views(0), views(1), views(2), views(3), views(4), shapes,
                                n_actor=len(self.actor_layers), n_critic=len(self.critic_layers),
                                discrete=self.policy.discrete, relu=self.policy.activation == "relu",
                                actor_columns=self.actor_columns, critic_columns=self.critic_columns)
        self._bound = (tensors, kernel)
        return kernel

    def update(self, buffer, generator: torch.Generator, config, clip: float, normalize: str
               ) -> tuple[int, dict[str, float]]:
        """``config.update_epochs`` epochs over ``buffer`` (stopping early past ``target_kl``), advantages normalized by
        ``normalize`` ("minibatch", "batch" or "none"); returns (number of minibatches, summed statistics by
        ``STAT_NAMES``)."""
        c, policy, group = config, self.policy, self.optimizer.param_groups[0]
        kernel = self.kernel()
        flat = {f: buffer.flat(f) for f in ("obs", "actions", "log_probs", "values", "advantages", "returns")}
        obs = flat["obs"].numpy().reshape(flat["obs"].shape[0], -1)
        actions = flat["actions"].numpy() if policy.discrete else flat["actions"].numpy().reshape(obs.shape[0], -1)
        old_log_probs = flat["log_probs"]
        if not policy.discrete and policy.squash == "tanh":
            # stored log-probs are Gaussian minus the squash's log-Jacobian, which depends on the action only:
            # the kernel compares Gaussian log-probs on both sides (the same ratio as ActorCritic.evaluate gives)
            with torch.no_grad():
                old_log_probs = old_log_probs + policy.squash_log_jacobian(flat["actions"])
        adv = flat["advantages"][buffer.active_indices()] if buffer.masked else flat["advantages"]
        if normalize == "batch":  # the rollout's moments (normalize_advantages' definition; the kernel divides by them)
            mean, std = advantage_moments(adv)
            batch_stats = (float(mean), float(std) + ADVANTAGE_EPS)
        else:
            batch_stats = (0.0, 1.0)
        mode = {"none": NORM_NONE, "minibatch": NORM_MINIBATCH, "batch": NORM_BATCH}[normalize]
        masks = buffer.flat_action_masks()  # [T*N, A] bool: the valid actions of each sample (None: no masks)
        masks = None if masks is None else masks.numpy()
        sums, count = np.zeros(len(STAT_NAMES)), 0
        for _epoch in range(c.update_epochs):
            perm = buffer.active_permutation(generator) if buffer.masked else buffer.permutation(generator)
            stats = kernel(obs, actions, old_log_probs.numpy(), flat["values"].numpy(), flat["advantages"].numpy(),
                           flat["returns"].numpy(), perm.numpy(), batch_size=c.minibatch_size, norm_mode=mode,
                           batch_mean=batch_stats[0], batch_std=batch_stats[1], clip_coef=clip,
                           clip_vloss=c.clip_vloss, ent_coef=c.ent_coef, vf_coef=c.vf_coef,
                           max_grad_norm=c.max_grad_norm, lr=float(group["lr"]), beta1=group["betas"][0],
                           beta2=group["betas"][1], eps=group["eps"], action_masks=masks, threads=c.update_threads)
            sums += stats.sum(0)
            count += stats.shape[0]
            if c.target_kl is not None and stats[-1, STAT_NAMES.index("approx_kl")] > c.target_kl:
                break
        return count, {k: float(v) for k, v in zip(STAT_NAMES, sums)}
