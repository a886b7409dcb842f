"""CrossQ (Bhatt et al., ICLR 2024): SAC without target networks, with batch-renormalised critics and actor.

Read top to bottom: the config, the joint critic pass, the update, written out: the critic step
(``CrossQ._update_step``), then every ``policy_delay`` critic steps (``CrossQ._after_update``) the temperature and
actor steps (``CrossQ._actor_update``). Its maths reads three files: this one; ``rapidrl.algos.offpolicy_losses``
(SAC's ``soft_target``, ``critic_loss``, ``soft_actor_loss``, and ``temperature_loss``); ``rapidrl.nn.batch_renorm``
(``batch_renorm_mode``, Batch Renormalization). The networks' and temperature's construction and acting are the
squashed Gaussian actor-critic's (``rapidrl.algos.soft_actor_critic``); collection, replay and the update driver come
from the shared off-policy core (``rapidrl.algos.offpolicy``).

The critics see (s, a) and (s', a'), a' ~ pi(s'), in one joint forward pass of 2B rows in training mode, so their
Batch Renormalization layers normalise both with the statistics of the mixture (``joint_critic_forward``). Its
first B rows are Q(s, a), its last B the bootstrap values Q(s', a'), taken as constants: no target network. On the
"handwritten" gradient backend (the CPU default) each ReLU + Batch Renormalization of that training pass is one compiled
kernel forward and one backward (``rapidrl.kernels.batch_renorm``); "torch" is the PyTorch operators. The
actor and the temperature are updated every ``policy_delay`` critic updates, the actor on the critics in evaluation
mode (running statistics). Batch Renormalization behaves as batch normalisation for its first
``renorm_warmup_steps`` training calls (``rapidrl.nn.batch_renorm``). The order of the steps, the settings and the
optimiser (Adam with beta1 = 0.5) are sb3-contrib's ``CrossQ``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.offpolicy import CriticEnsembleConfig, OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.offpolicy_losses import critic_loss, soft_actor_loss, soft_target, temperature_loss
from rapidrl.algos.offpolicy_networks import NetworkConfig, network_optimizer
from rapidrl.algos.registry import register
from rapidrl.algos.soft_actor_critic import EntropyConfig, SquashedGaussianActorCritic
from rapidrl.nn.batch_renorm import BatchRenorm, batch_renorm_mode, interleave_batch_renorm
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import CriticEnsemble
from rapidrl.train.compile import maybe_compile
from rapidrl.train.config import check_hidden, check_positive, check_unit_interval, require, with_defaults
from rapidrl.train.path_settings import HandwrittenBackend


@dataclass
@with_defaults(learning_rate=1e-3)
class CrossQConfig(OffPolicyConfig, EntropyConfig, CriticEnsembleConfig, NetworkConfig):
    """sb3-contrib's CrossQ defaults (sb3_contrib/crossq/crossq.py, policies.py). ``tau`` is not used (no target
    networks)."""

    adam_beta1: float = 0.5
    """Adam's beta1 for actor and critics (CrossQ's 0.5; the temperature's Adam keeps 0.9)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the actor."""
    critic_hidden: tuple[int, ...] = (1024, 1024)
    """Hidden layer sizes of each critic (sb3-contrib's default; the paper and rl-zoo3's MuJoCo settings: 2048)."""
    policy_delay: int = 3
    """Critic updates per actor and temperature update."""
    batch_norm_momentum: float = 0.01
    """Rate of the Batch Renormalization running statistics."""
    batch_norm_eps: float = 1e-3
    """Added to the variances of Batch Renormalization."""
    renorm_warmup_steps: int = 100_000
    """Training calls of each Batch Renormalization layer that normalise with the batch statistics only."""

    def validate(self) -> None:
        super().validate()
        self.validate_entropy()
        self.validate_network()
        require(self.network == "mlp", "CrossQ's critics are MLPs with Batch Renormalization and no target networks "
                "(its method); network='simba' (LayerNorm residual critics with targets) trains with SAC, TQC, TD3 or "
                "DDPG. normalize_obs and weight_decay apply to CrossQ")
        check_hidden(self.critic_hidden)
        self.validate_critics()
        check_positive(self, "policy_delay", "batch_norm_eps")
        check_positive(self, "renorm_warmup_steps", allow_zero=True)
        check_unit_interval(self, "adam_beta1", "batch_norm_momentum")


def joint_critic_forward(critic: CriticEnsemble, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor,
                         next_actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q(s, a) [n, B], Q(s', a') [n, B] detached) from one forward pass over the 2B rows [s, a; s', a'] with the
    critics' Batch Renormalization in training mode: both halves are normalised by the statistics of the mixture,
    and the running statistics are updated once."""
    b = obs.shape[0]
    with batch_renorm_mode(critic, True):
        q_all = critic(torch.cat([obs, next_obs]), torch.cat([actions, next_actions]))  # [n, 2B]
    return q_all[:, :b], q_all[:, b:].detach()


@register
class CrossQ(SquashedGaussianActorCritic, OffPolicyAlgorithm):
    """CrossQ for Box action spaces. ``CrossQ(env, **hyperparameters)``; see CrossQConfig."""

    name = "crossq"
    config_class = CrossQConfig
    stat_names = ("critic_loss", "q_values", "actor_loss", "ent_coef_loss", "ent_coef", "entropy")
    saved_state = ("actor", "critic", "log_alpha", "actor_optimizer", "critic_optimizer", "alpha_optimizer")
    bf16_learning_tested = True  # tests/test_learning_bf16.py: Pendulum at the float32 test's settings and threshold
    handwritten = HandwrittenBackend(
        by_hand="the critics' ReLU + Batch Renormalization layers of the training pass, forward and backward, in Numba "
                "(`rapidrl.kernels.batch_renorm`)",
        autograd="the linear layers, the actor, the losses", autocasts=True)

    def _bind_backend(self) -> None:
        """The handwritten backend: the critics' ReLU + Batch Renormalization layers of the training pass as compiled
        kernels (``BatchRenorm.compiled``)."""
        for layer in self.critic.modules():
            if isinstance(layer, BatchRenorm):
                layer.compiled = self.gradient_backend == "handwritten"

    def _build_networks(self) -> None:
        c = self.config
        norm = dict(momentum=c.batch_norm_momentum, eps=c.batch_norm_eps, warmup_steps=c.renorm_warmup_steps)
        self._build_actor_and_critics(c.critic_hidden, batch_renorm=norm, target=False)
        self.actor.trunk = interleave_batch_renorm(self.actor.trunk, after_last=True, **norm)
        self.actor.to(self.device)
        for net in (self.actor, self.critic):  # evaluation mode except inside a training pass (batch_renorm_mode)
            net.eval()
        betas = (c.adam_beta1, 0.999)
        self.actor_optimizer = network_optimizer(self.actor.parameters(), c, betas=betas)
        self.critic_optimizer = network_optimizer(self.critic.parameters(), c, betas=betas)
        self.alpha_optimizer = adam([self.log_alpha], c.learning_rate) if self.tune_alpha else None
        self._actor_update_fn = maybe_compile(self._actor_update, c.torch_compile)
        self._last_actor_stats = torch.zeros(4, device=self.device)

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """Critic step; returns [critic loss, mean Q]."""
        alpha = self.log_alpha.detach().exp()  # [1]
        with self._autocast():  # bf16 autocast under precision="bf16" (the networks return float32)
            with torch.no_grad():
                next_actions, next_log_prob = self.actor(batch.next_obs, generator=self.torch_rng)  # running stats
            q, next_q = joint_critic_forward(self.critic, batch.obs, batch.actions, batch.next_obs, next_actions)
        target = soft_target(batch.rewards, batch.discounts, next_q, next_log_prob, alpha)  # online critics
        loss_q = critic_loss(q, target)
        self.critic_optimizer.zero_grad(set_to_none=False)
        loss_q.backward()
        optimizer_step(self.critic_optimizer)
        return torch.stack([loss_q.detach(), q.detach().mean()])

    def _actor_update(self, obs: torch.Tensor) -> torch.Tensor:
        """Temperature and actor steps on a ~ pi(s) (the actor's normalisation in training mode, the critics' in
        evaluation mode); returns [actor loss, temperature loss, alpha, entropy]."""
        alpha = self.log_alpha.detach().exp()
        with self._autocast(), batch_renorm_mode(self.actor, True):
            actions_pi, log_prob = self.actor(obs, generator=self.torch_rng)  # [B, A], [B]
        if self.tune_alpha:
            loss_alpha = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
            self.alpha_optimizer.zero_grad(set_to_none=False)
            loss_alpha.backward()
            optimizer_step(self.alpha_optimizer)
        else:
            loss_alpha = torch.zeros((), device=self.device)
        with self._autocast():
            q_pi = self.critic(obs, actions_pi, detach_params=True)  # [n, B], gradients reach the actor only
        loss_pi = soft_actor_loss(q_pi, log_prob, alpha)
        self.actor_optimizer.zero_grad(set_to_none=False)
        loss_pi.backward()
        optimizer_step(self.actor_optimizer)
        return torch.stack([loss_pi.detach(), loss_alpha.detach(), alpha[0], -log_prob.detach().mean()])

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        # num_gradient_steps counts the critic steps before this one (sb3-contrib: _n_updates % policy_delay == 0)
        if (self.num_gradient_steps + 1) % self.config.policy_delay == 0:
            self._last_actor_stats = self._actor_update_fn(batch.obs)
        return torch.cat([out, self._last_actor_stats])  # the latest actor step's statistics
