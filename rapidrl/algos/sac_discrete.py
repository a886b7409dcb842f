"""SAC for discrete actions (Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings"), as CleanRL's
``sac_atari.py`` writes it.

Read top to bottom: the config, the three losses (pure functions), the update, acting. Collection, replay and the
update driver come from the shared off-policy core (``rapidrl.algos.offpolicy``); the critic loss, the temperature's
loss and initial value and the target update are SAC's (``rapidrl.algos.offpolicy_losses``,
``rapidrl.algos.soft_actor_critic``).

With A discrete actions the actor outputs A logits, pi(.|s) = softmax(logits), and each critic outputs Q(s, .) for
all A actions, so every expectation over actions is a sum weighted by pi, computed exactly (no sampled action, no
reparameterisation, no squashing):
- critic target: r + discount * sum_a' pi(a'|s') (min_i Q'_i(s', a') - alpha log pi(a'|s'));
- actor loss: E_s[sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))], the critics' values held constant;
- temperature loss: -log alpha * E_s[sum_a pi(a|s) (log pi(a|s) + target entropy)], the target entropy
  ``target_entropy_scale * log A`` (the uniform policy's entropy times 0.89 by default: CleanRL's
  ``-0.89 log(1/A)``).
One update is one backward pass of the three losses (they touch disjoint parameters) and one Adam step (eps 1e-4, as
CleanRL), so the actor loss sees the critics of before this step's critic update; the target critics move by
``tau`` every ``target_update_interval`` env steps (CleanRL: a copy every 8,000).

Action masks (docs/masks.md): the policy is the masked categorical (invalid actions have probability exactly 0, and
their log-probability terms are set to 0, so no 0 * log 0 term can be NaN): in acting, in the target's expectation
over s' (with the mask stored with s'), in the actor and temperature losses (the mask of s). A state without a valid
action (a finished game's final state) has probabilities all 0: it is worth 0 in the target (``masked_max``'s
convention) and adds nothing to the actor and temperature losses. With masks the "auto" target entropy is per state,
``target_entropy_scale * log V`` for the state's V valid actions (the largest entropy it can reach is log V).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rapidrl.algos.offpolicy import (
    CriticEnsembleConfig,
    OffPolicyAlgorithm,
    OffPolicyConfig,
    frame_replay_spec,
)
from rapidrl.algos.offpolicy_losses import critic_loss, polyak_update, temperature_loss
from rapidrl.algos.registry import register
from rapidrl.algos.soft_actor_critic import EntropyConfig, initial_log_alpha, soft_stats
from rapidrl.nn.deploy import ArgmaxQ
from rapidrl.nn.distributions import apply_action_mask, categorical_log_probs
from rapidrl.nn.encoders import ENCODERS, make_encoder
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.policies import orthogonal_init
from rapidrl.nn.qnets import CriticEnsemble, QNetwork
from rapidrl.train.config import check_positive, check_unit_interval, require, with_defaults
from rapidrl.train.spaces import check_discrete_actions

__all__ = ["DiscreteCritics", "SACDiscrete", "SACDiscreteConfig", "discrete_soft_actor_loss", "discrete_soft_target",
           "discrete_temperature_loss", "logits_network", "masked_policy"]


@dataclass
@with_defaults(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=20_000, batch_size=64, tau=1.0,
               train_freq=4, gradient_steps=1)
class SACDiscreteConfig(OffPolicyConfig, EntropyConfig, CriticEnsembleConfig):
    """The defaults are CleanRL's ``sac_atari.py`` (its Atari settings; ``configs/sac_discrete_cartpole.toml`` has
    CartPole's): one gradient step of 64 every 4 env steps after 20,000 random ones, lr 3e-4 for every network and
    the temperature, Adam eps 1e-4, a hard target update every 8,000 env steps, alpha tuned from 1 towards
    0.89 log A."""

    target_update_interval: int = 8_000
    """Env steps (over all envs) between target-critic updates (each moves the targets by ``tau``: 1, a copy; with
    a small ``tau``, 1 gives SAC's soft update after every update phase)."""
    target_entropy_scale: float = 0.89
    """The "auto" target entropy is ``target_entropy_scale * log A`` (A actions; with action masks log V, V the
    state's valid actions): this fraction of the uniform policy's entropy. ``target_entropy`` (a number) overrides
    it."""
    adam_eps: float = 1e-4
    """Adam's epsilon (CleanRL's 1e-4 "increases numerical stability"; torch's default is 1e-8)."""
    frame_replay: bool = True
    """Store the observations of a frame-stacking env (``env.frame_stack > 1``: Atari) in ``FrameReplayBuffer``, each
    frame once (~7 KB per 84x84 transition instead of 56 KB); not with n_step > 1 or her."""
    encoder: str = "auto"
    """Observation encoder of the actor and of each critic (each has its own, as CleanRL's: a shared one would be
    trained by the actor's gradients too): "auto" (the Nature CNN for uint8 images of 36 pixels or more a side, the
    MinAtar CNN for smaller ones, "multi" for Dict/Tuple observations with images, else MLPs), "mlp", "nature",
    "minatar" or "multi" (``rapidrl.nn.encoders``)."""

    def validate(self) -> None:
        super().validate()
        self.validate_entropy()
        self.validate_critics()
        require(self.encoder in ENCODERS, f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        check_positive(self, "target_update_interval", "adam_eps")
        check_unit_interval(self, "target_entropy_scale")


# -- the losses: pure functions of tensors ---------------------------------------------------------------------------
def masked_policy(logits: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(pi, log pi) [B, A] of the categorical policy softmax(logits) [B, A], over the valid actions of ``mask``
    [B, A] bool when given: pi is exactly 0 and log pi is set to 0 at invalid actions (so sum_a pi(a) f(log pi(a))
    never meets 0 * -inf), and a row without a valid action has pi all 0 (log pi all 0)."""
    log_probs = categorical_log_probs(apply_action_mask(logits, mask))
    if mask is None:
        return log_probs.exp(), log_probs
    log_probs = log_probs.masked_fill(~mask, 0.0)
    return log_probs.exp() * mask, log_probs


def discrete_soft_target(rewards: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor,
                         next_probs: torch.Tensor, next_log_probs: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """r + discount * sum_a' pi(a'|s') (min_i Q'_i(s', a') - alpha log pi(a'|s')): the soft value of s' computed
    exactly from the action probabilities. next_q [n, B, A] (the target critics), next_probs and next_log_probs
    [B, A] (``masked_policy``), rewards and discounts [B], alpha [1] or [] -> [B]."""
    soft_q = next_q.min(0).values - alpha * next_log_probs  # [B, A]
    return rewards + discounts * (next_probs * soft_q).sum(-1)


def discrete_soft_actor_loss(q: torch.Tensor, probs: torch.Tensor, log_probs: torch.Tensor, alpha: torch.Tensor
                             ) -> torch.Tensor:
    """E_s[sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))]: q [n, B, A] (detached inside: the loss moves the
    actor only), probs and log_probs [B, A] (``masked_policy``), alpha [1] or [] -> []."""
    return (probs * (alpha * log_probs - q.detach().min(0).values)).sum(-1).mean()


def discrete_temperature_loss(log_alpha: torch.Tensor, probs: torch.Tensor, log_probs: torch.Tensor,
                              target_entropy: float | torch.Tensor) -> torch.Tensor:
    """-log alpha * E_s[sum_a pi(a|s) (log pi(a|s) + target entropy)] (``temperature_loss`` with the expected
    log-probability sum_a pi log pi = -H(pi(.|s)) in place of a sampled one): raises alpha while the policy's
    entropy is below the target. probs and log_probs [B, A] (detached inside), target_entropy a number or [B] (per
    state: with masks; 0 for a state without a valid action, whose term is then 0) -> []."""
    return temperature_loss(log_alpha, (probs * log_probs).sum(-1), target_entropy)


# -- the networks ----------------------------------------------------------------------------------------------------
def logits_network(obs_dim: int, num_actions: int, hidden, encoder: nn.Module | None) -> QNetwork:
    """The actor: a ``QNetwork``'s layers (an MLP, or an encoder and a linear layer) giving one logit per action, its
    output layer re-initialised orthogonal with gain 0.01 so the initial policy is near uniform. Its greedy action,
    argmax of the logits, is what ``rapidrl.nn.deploy.ArgmaxQ`` exports."""
    net = QNetwork(obs_dim, num_actions, hidden, encoder=encoder)
    orthogonal_init(net.net[-1], 0.01)
    return net


class DiscreteCritics(nn.Module):
    """n critics of every action: obs -> Q values [n, B, A]. MLP critics are one batched ``CriticEnsemble`` (no
    action input, A outputs each: one ``baddbmm`` per layer for all n); with ``encoder_factory`` (a function making
    a fresh encoder) they are n ``QNetwork``, each with its own encoder (as CleanRL's)."""

    def __init__(self, n: int, obs_dim: int, num_actions: int, hidden, encoder_factory=None):
        super().__init__()
        self.num_actions = int(num_actions)
        if encoder_factory is None:
            self.ensemble = CriticEnsemble(n, obs_dim, 0, hidden, out_dim=num_actions)
            self.members = None
        else:
            self.ensemble = None
            self.members = nn.ModuleList(QNetwork(obs_dim, num_actions, hidden, encoder=encoder_factory())
                                         for _ in range(n))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.members is not None:
            return torch.stack([q(obs) for q in self.members])  # [n, B, A]
        q = self.ensemble(obs, obs[:, :0])  # no action input
        return q if q.dim() == 3 else q.unsqueeze(-1)  # [n, B, A] (A = 1: the ensemble squeezes its output)


@register
class SACDiscrete(OffPolicyAlgorithm):
    """Soft Actor-Critic for Discrete action spaces. ``SACDiscrete(env, **hyperparameters)``; see
    SACDiscreteConfig."""

    name = "sac_discrete"
    config_class = SACDiscreteConfig
    saved_state = ("actor", "critic", "critic_target", "log_alpha", "optimizer")
    supports_action_masks = True
    multi_input = True
    stat_names = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef", "q_values", "entropy")
    bf16_learning_tested = True  # tests/test_learning_bf16.py: the CartPole preset's test in bf16, seeds 0-2

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_discrete_actions("SACDiscrete", self.action_space)

    def _buffer_spec(self):
        return (None if self.config.her else frame_replay_spec(self)) or super()._buffer_spec()

    def _build_networks(self) -> None:
        c, n_actions = self.config, int(self.action_space.n)
        kind = self._encoder_kind()
        encoder = None if kind == "mlp" else (lambda: make_encoder(self.observation_space, kind))
        self.actor = logits_network(self.obs_dim, n_actions, c.hidden, None if encoder is None else encoder()
                                    ).to(self.device)
        self.critic = DiscreteCritics(c.n_critics, self.obs_dim, n_actions, c.hidden, encoder).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        self.log_alpha, self.tune_alpha, target = initial_log_alpha(c, n_actions, self.device)
        self.target_entropy = c.target_entropy_scale * math.log(n_actions) if c.target_entropy == "auto" else target
        params = [*self.actor.parameters(), *self._critic_params]
        self.optimizer = adam([*params, self.log_alpha] if self.tune_alpha else params, c.learning_rate,
                              eps=c.adam_eps)
        self._last_target_update = 0

    def _target_entropies(self, mask: torch.Tensor | None) -> float | torch.Tensor:
        """The target entropy of each state [B] under masks (``target_entropy_scale * log V`` for "auto", V its valid
        actions; 0 where there is none), else the one number."""
        if mask is None:
            return self.target_entropy
        valid = mask.sum(1)
        if self.config.target_entropy == "auto":
            return self.config.target_entropy_scale * valid.clamp(min=1).float().log()
        return torch.where(valid > 0, self.target_entropy, 0.0)

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One update (module docstring); returns the statistics named by ``stat_names``."""
        obs, mask = self._split_rows(batch.obs)  # mask: the valid actions of s [B, A] bool (or None)
        next_obs, next_mask = self._split_rows(batch.next_obs)  # those of s'
        alpha = self.log_alpha.detach().exp()  # [1]
        with self._autocast():  # bf16 autocast under precision="bf16" (the networks return float32)
            probs, log_probs = masked_policy(self.actor(obs), mask)  # [B, A] each
            q = self.critic(obs)  # [n, B, A]
            with torch.no_grad():
                next_probs, next_log_probs = masked_policy(self.actor(next_obs), next_mask)  # [B, A] each
                next_q = self.critic_target(next_obs)  # [n, B, A]
        with torch.no_grad():
            target = discrete_soft_target(batch.rewards, batch.discounts, next_q, next_probs, next_log_probs, alpha)
        actions = batch.actions.long().view(1, -1, 1).expand(q.shape[0], -1, 1)
        q_data = q.gather(2, actions).squeeze(2)  # [n, B]: Q_i(s, a) of the stored actions
        loss_q = critic_loss(q_data, target)
        loss_pi = discrete_soft_actor_loss(q, probs, log_probs, alpha)
        loss_alpha = discrete_temperature_loss(self.log_alpha, probs, log_probs, self._target_entropies(mask)) \
            if self.tune_alpha else None
        loss = loss_q + loss_pi if loss_alpha is None else loss_q + loss_pi + loss_alpha
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()  # one backward pass: the losses touch disjoint parameters
        optimizer_step(self.optimizer)
        return soft_stats(loss_q, loss_pi, loss_alpha, alpha, q_data, (probs * log_probs).sum(-1))

    def _train(self) -> None:
        super()._train()
        c = self.config
        now = self.num_timesteps
        if now >= c.learning_starts and now - self._last_target_update >= c.target_update_interval:
            polyak_update(self._target_params, self._critic_params, c.tau)
            self._last_target_update = now

    # -- acting ----------------------------------------------------------------------------------
    def _logits(self, obs: np.ndarray, action_masks: np.ndarray | None) -> torch.Tensor:
        """The actor's logits [B, A] of observations as stored (uint8 images as they are; else float32, flat), with
        ``MASKED_LOGIT`` at the invalid actions of ``action_masks`` [B, A] bool when given."""
        if self.actor.has_encoder:
            x = torch.from_numpy(np.ascontiguousarray(obs, dtype=self._obs_dtype)).to(self.device)
        else:
            x = torch.from_numpy(np.ascontiguousarray(obs.reshape(obs.shape[0], -1), dtype=np.float32)).to(self.device)
        mask = None if action_masks is None else torch.from_numpy(np.asarray(action_masks, bool)).to(self.device)
        return apply_action_mask(self.actor(x), mask)

    @torch.no_grad()
    def _policy_actions(self, obs: np.ndarray, deterministic: bool, action_masks: np.ndarray | None = None
                        ) -> np.ndarray:
        """The greedy action (argmax of the logits) when deterministic, else a sample of the policy, drawn from the
        model's generator; among the valid actions of ``action_masks`` when given."""
        logits = self._logits(obs, action_masks)
        if deterministic:
            return logits.argmax(1).cpu().numpy()
        probs = categorical_log_probs(logits).exp()
        return torch.multinomial(probs, 1, generator=self.torch_rng).squeeze(1).cpu().numpy()

    def _explore_actions(self, obs: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        return self._policy_actions(obs, False, action_masks)

    def deterministic_module(self) -> torch.nn.Module:
        return ArgmaxQ(self.actor, self.observation_space.shape if self.actor.has_encoder else None,
                       masked=self.action_mask_size > 0)

    # -- persistence -----------------------------------------------------------------------------
    def _extra_training_state(self) -> dict:
        return {**super()._extra_training_state(), "last_target_update": self._last_target_update}

    def _load_extra_training_state(self, state: dict) -> None:
        super()._load_extra_training_state(state)
        self._last_target_update = int(state["last_target_update"])
