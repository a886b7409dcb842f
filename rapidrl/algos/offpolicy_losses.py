"""The targets and losses of the off-policy algorithms, one definition each (pure functions of tensors).

Shared by DQN and discrete CQL (``dqn_loss``); DDPG, TD3 and TD3+BC (``td3_target``, ``smoothed_target_actions``);
SAC, CrossQ and CQL (``soft_target``, ``soft_actor_loss``); and every critic ensemble (``critic_loss``) and target
network (``polyak_update``); TQC, QR-DQN and IQN (the quantile Huber loss: ``quantile_huber_terms``, TQC's mean
``quantile_huber_loss``, QR-DQN's and IQN's ``quantile_regression_loss``, their greedy target
``quantile_greedy_next``); C51 and Rainbow (the categorical target ``categorical_projection`` and the cross-entropy
``c51_loss``). An algorithm's own loss (CQL's penalty, IQL's expectile) stays in its module.
"""

from __future__ import annotations

import torch

from rapidrl._unsafe.torch_private import polyak
from rapidrl.nn.distributions import apply_action_mask

__all__ = [
    "c51_loss",
    "categorical_critic_loss",
    "categorical_projection",
    "categorical_soft_target",
    "categorical_values",
    "critic_loss",
    "dqn_loss",
    "expected_values",
    "polyak_update",
    "projection_dense",
    "quantile_greedy_next",
    "quantile_huber_loss",
    "quantile_huber_terms",
    "quantile_regression_loss",
    "r2d2_priority",
    "sequence_nstep_returns",
    "smoothed_target_actions",
    "soft_actor_loss",
    "soft_target",
    "td3_target",
    "temperature_loss",
    "value_rescale",
    "value_rescale_inverse",
]


def polyak_update(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """target <- target + tau (online - target), all tensors in one foreach call (tau = 1 copies)."""
    polyak(target, online, tau)


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over critics of 0.5 * mean squared error: q [n, B], target [B] (the critic ensembles' loss)."""
    return 0.5 * (q - target).square().mean(1).sum()


def dqn_loss(q: torch.Tensor, next_q_target: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
             weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Huber TD loss (DQN's, and discrete CQL's TD term); every tensor is [B].

    target = r + discount * Q_target(s', a'), discount = gamma^n for a bootstrapped n-step return and 0
    after termination; loss = mean_i w_i huber(q_i - target_i) (w = 1 without prioritized replay).
    Returns (loss, TD errors q - target, detached).
    """
    target = rewards + discounts * next_q_target
    td = q - target
    per_sample = torch.nn.functional.smooth_l1_loss(q, target, reduction="none")
    loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
    return loss, td.detach()


def td3_target(rewards: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor) -> torch.Tensor:
    """r + discount * min_i Q'_i(s', a'): next_q [n, B], the rest [B] (TD3's and TD3+BC's critic target; DDPG's with
    its one critic, n = 1)."""
    return rewards + discounts * next_q.min(0).values


def smoothed_target_actions(target_actions: torch.Tensor, noise: torch.Tensor, scale: torch.Tensor,
                            center: torch.Tensor, sigma: float, clip: float) -> torch.Tensor:
    """clip(mu'(s') + clip(sigma * scale * noise, -clip * scale, clip * scale)) into the action bounds."""
    eps = torch.clamp(noise * (sigma * scale), -clip * scale, clip * scale)
    return torch.clamp(target_actions + eps, center - scale, center + scale)


def soft_target(rewards: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor, next_log_prob: torch.Tensor,
                alpha: torch.Tensor) -> torch.Tensor:
    """r + discount * (min_i Q_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s'): next_q [n, B], the rest [B] (SAC's
    target critics; CrossQ's online critics; CQL's with ``backup_entropy``)."""
    return rewards + discounts * (next_q.min(0).values - alpha * next_log_prob)


def soft_actor_loss(q_pi: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """E[alpha log pi(a|s) - min_i Q_i(s, a)], a ~ pi(s): q_pi [n, B], log_prob [B] -> [] (SAC, CrossQ, CQL)."""
    return (alpha * log_prob - q_pi.min(0).values).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """-log alpha * E[log pi + target entropy]: raises alpha while the entropy is below target."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


def quantile_huber_terms(quantiles: torch.Tensor, target: torch.Tensor, tau: torch.Tensor | None = None
                         ) -> torch.Tensor:
    """The quantile Huber terms rho_tau(delta) = |tau_j - 1{delta < 0}| * huber(delta) of every pair of a current
    quantile and a target, delta = target[b, k] - quantiles[..., b, j], huber(x) = x^2 / 2 for |x| <= 1, else
    |x| - 1/2 (kappa = 1; Dabney et al. 2018a, eq. 10).

    quantiles [..., B, N] (TQC: [n, B, Q], one row per critic; QR-DQN, IQN: [B, N] of the taken action); target
    [B, M] (constants: no gradient flows into them through the weight); tau: the fractions of the current quantiles,
    [N] or broadcastable to ``quantiles`` (IQN's sampled [B, N]), None: the midpoints (j + 0.5) / N (TQC, QR-DQN).
    Returns [..., B, N, M].
    """
    if tau is None:
        n = quantiles.shape[-1]
        tau = (torch.arange(n, device=quantiles.device, dtype=quantiles.dtype) + 0.5) / n  # [N]
    delta = target.unsqueeze(-2) - quantiles.unsqueeze(-1)  # [..., B, N, M]
    abs_delta = delta.abs()
    huber = torch.where(abs_delta > 1.0, abs_delta - 0.5, 0.5 * delta.square())
    weight = (tau[..., None] - (delta.detach() < 0).to(delta.dtype)).abs()  # [..., B, N, M]
    return weight * huber


def quantile_huber_loss(quantiles: torch.Tensor, target: torch.Tensor, tau: torch.Tensor | None = None
                        ) -> torch.Tensor:
    """The mean of ``quantile_huber_terms`` over every (..., b, j, k): TQC's critic loss (quantiles [n, B, Q], its
    pooled truncated targets [B, M]; sb3-contrib's ``quantile_huber_loss(sum_over_quantiles=False)``) -> []."""
    return quantile_huber_terms(quantiles, target, tau).mean()


def quantile_regression_loss(quantiles: torch.Tensor, target: torch.Tensor, tau: torch.Tensor | None = None,
                             weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """QR-DQN's and IQN's loss: ``quantile_huber_terms`` summed over the N current quantiles and averaged over the M
    target quantiles, per sample, then averaged over the batch with weights w (1 without prioritized replay):

        loss = 1/B sum_b w_b l_b,    l_b = sum_j 1/M sum_k rho_{tau_bj}(target_bk - quantiles_bj)

    (sb3-contrib's ``quantile_huber_loss(sum_over_quantiles=True)``, Dopamine's IQN: the same reduction).
    quantiles [B, N] (of the taken actions), target [B, M], tau as ``quantile_huber_terms``, weights [B].
    Returns (loss [], l [B] detached: the priorities of prioritized replay).
    """
    per_sample = quantile_huber_terms(quantiles, target, tau).sum(-2).mean(-1)  # [B]
    loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
    return loss, per_sample.detach()


def quantile_greedy_next(next_quantiles: torch.Tensor, select_quantiles: torch.Tensor,
                         next_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The quantiles of s' at the greedy action: next_quantiles[b, a*_b] with a*_b = argmax over the valid actions of
    the mean over quantiles of ``select_quantiles`` (the target network's own, or the online network's with double Q).

    next_quantiles [B, A, N'], select_quantiles [B, A, K] (any K), next_mask [B, A] bool or None (every action valid).
    A state without valid actions is worth 0 (``masked_max``'s convention). Returns [B, N'].
    """
    best = apply_action_mask(select_quantiles.mean(-1), next_mask).argmax(1)  # [B]
    chosen = next_quantiles[torch.arange(best.shape[0], device=best.device), best]  # [B, N']
    if next_mask is not None:
        chosen = torch.where(next_mask.any(1, keepdim=True), chosen, torch.zeros_like(chosen))
    return chosen


def categorical_projection(rewards: torch.Tensor, discounts: torch.Tensor, next_probs: torch.Tensor,
                           support: torch.Tensor) -> torch.Tensor:
    """The distribution of r + discount * Z' projected onto the fixed atoms (C51's target; Bellemare et al. 2017,
    Algorithm 1). rewards, discounts [B] (discount = gamma^n, 0 after termination); next_probs [B, N] the
    probabilities of Z' on the atoms (rows summing to 1); support [N] the atoms z_0 < ... < z_{N-1}, evenly spaced by
    dz = (z_{N-1} - z_0) / (N - 1), N >= 2.

    Atom j moves to Tz_j = clip(r + discount z_j, z_0, z_{N-1}) and gives its probability to the two atoms around it
    in proportion to their closeness: m_i = sum_j p_j max(0, 1 - |Tz_j - z_i| / dz) (an atom landing exactly on z_i
    gives it all its mass). Returns m [B, N], rows summing to 1.

    Two evaluations of the same sum: on the CPU each atom's mass goes to its two neighbours with ``scatter_add_``
    (O(B N); sequential there, so deterministic), elsewhere the sum is written densely (``projection_dense``:
    [B, N, N] products, no atomics, deterministic on a GPU; 3x the CPU form's time at N = 51, 20x at N = 101).
    """
    if next_probs.device.type != "cpu":
        return projection_dense(rewards, discounts, next_probs, support)
    n = support.shape[0]
    v_min, v_max = support[0], support[-1]
    b = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support).clamp(v_min, v_max)  # [B, N] Tz_j
    b = (b - v_min) / ((v_max - v_min) / (n - 1))  # its position in atoms, in [0, N - 1]
    lower = b.floor().clamp(max=n - 2)  # the atom below (N - 2 for Tz_j = z_{N-1}: all its mass then goes up)
    upper_share = b - lower  # in [0, 1]
    lower = lower.long()
    m = torch.zeros_like(next_probs)
    m.scatter_add_(1, lower, next_probs * (1 - upper_share))
    m.scatter_add_(1, lower + 1, next_probs * upper_share)
    return m


def projection_dense(rewards: torch.Tensor, discounts: torch.Tensor, next_probs: torch.Tensor,
                     support: torch.Tensor) -> torch.Tensor:
    """``categorical_projection`` as the dense sum m_i = sum_j p_j max(0, 1 - |Tz_j - z_i| / dz) (its form off the
    CPU): [B, N, N] products and no scatter."""
    n = support.shape[0]
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (n - 1)
    tz = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support).clamp(v_min, v_max)  # [B, N] (index j)
    closeness = (1 - (tz.unsqueeze(1) - support.view(1, n, 1)).abs() / dz).clamp(min=0)  # [B, N (i), N (j)]
    return (closeness * next_probs.unsqueeze(1)).sum(-1)  # [B, N]


def c51_loss(logits: torch.Tensor, target_probs: torch.Tensor, weights: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """C51's cross-entropy: logits [B, N] of the taken actions' distributions, target_probs [B, N] the projected
    targets (``categorical_projection``, no gradient), weights [B] importance weights of prioritized replay (None: 1).

    per-sample loss_b = -sum_i m_bi log softmax(logits_b)_i; loss = mean_b w_b loss_b. Returns (loss, the per-sample
    losses [B], detached: Rainbow's priorities).
    """
    per_sample = -(target_probs * torch.log_softmax(logits, -1)).sum(-1)  # [B]
    loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
    return loss, per_sample.detach()


# -- SimbaV2's categorical soft critic (Lee et al. 2025) -------------------------------------------------------------
def categorical_values(logits: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """The expected values sum_i softmax(logits)_i z_i of categorical distributions: logits [..., N], support [N] ->
    [...]."""
    return expected_values(torch.softmax(logits, -1), support)


def expected_values(probs: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """sum_i p_i z_i: probabilities [..., N] over the atoms support [N] -> [...]."""
    return (probs * support).sum(-1)


def categorical_soft_target(rewards: torch.Tensor, discounts: torch.Tensor, next_logits: torch.Tensor,
                            next_log_prob: torch.Tensor, alpha: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """SimbaV2's target distribution: r + discount * (Z' - alpha log pi(a'|s')) projected onto the atoms.

    rewards, discounts [B] (discount = gamma^n, 0 after termination); next_logits [n, B, N] the target critics'
    logits at (s', a'), a' ~ pi(s'); next_log_prob [B]; alpha [1]. Of the n target distributions each sample takes
    the one of least expected value (clipped double Q on distributions); the entropy term shifts every atom, which is
    the projection of ``categorical_projection`` with reward r - discount alpha log pi(a'|s'). Returns [B, N].
    """
    next_probs = torch.softmax(next_logits, -1)  # [n, B, N]
    chosen = expected_values(next_probs, support).argmin(0)  # [B]: the member of least expected value
    probs = next_probs[chosen, torch.arange(next_logits.shape[1], device=chosen.device)]  # [B, N]
    shifted = rewards - discounts * alpha * next_log_prob
    return categorical_projection(shifted, discounts, probs, support)


def categorical_critic_loss(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Each critic's cross-entropy against the target, summed over the n critics: logits [n, B, N], target_probs
    [B, N] (no gradient) -> sum_i mean_b -sum_j m_bj log softmax(logits_ib)_j."""
    return -(target_probs * torch.log_softmax(logits, -1)).sum(-1).mean(-1).sum()


# -- R2D2 (Kapturowski et al. 2019) ------------------------------------------------------------------------------------
def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018): the value rescaling of R2D2's targets."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def value_rescale_inverse(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1), the inverse of ``value_rescale``."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root.square() - 1.0)


def sequence_nstep_returns(rewards: torch.Tensor, discounts: torch.Tensor, ends: torch.Tensor,
                           next_values: torch.Tensor, n: int) -> torch.Tensor:
    """n-step returns of every step of sequences, all [L, B] (time-major):

        G_t = sum_{k<m} (prod_{j<k} d_{t+j}) r_{t+k} + (prod_{j<m} d_{t+j}) v_{t+m-1}

    where m is the smallest of n, the steps left in the sequence (L - t) and 1 + the steps to the first episode end
    at or after t (``ends``: terminated or truncated). discounts d = gamma, 0 after a termination; next_values v_t:
    the value of the observation to bootstrap from after step t (the true final observation after a truncation)."""
    length = rewards.shape[0]
    returns = torch.zeros_like(rewards)
    coef = torch.ones_like(rewards)
    active = torch.ones_like(ends)
    for k in range(min(n, length)):  # n past the sequence's length: every return ends at its last step
        steps = length - k  # the t whose step t + k lies in the sequence
        r, d, v, e = rewards[k:], discounts[k:], next_values[k:], ends[k:].clone()
        if k == n - 1:
            e[:] = True
        e[-1] = True  # the sequence's last step
        a = active[:steps]
        returns[:steps] += torch.where(a, coef[:steps] * r, 0.0)
        returns[:steps] += torch.where(a & e, coef[:steps] * d * v, 0.0)
        coef[:steps] = coef[:steps] * d
        active[:steps] = a & ~e
    return returns


def r2d2_priority(td: torch.Tensor, eta: float = 0.9) -> torch.Tensor:
    """R2D2's sequence priority eta max_t |td| + (1 - eta) mean_t |td|: td [L, B] -> [B]."""
    a = td.abs()
    return eta * a.max(0).values + (1.0 - eta) * a.mean(0)
