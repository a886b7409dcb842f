"""Advantage estimation on rollout tensors (torch): GAE, V-trace targets, and advantage normalisation.

The NumPy/Numba kernels (``rapidrl.kernels.gae``, ``rapidrl.kernels.vtrace``) are the definitions; these are
their torch-facing forms for the on-policy algorithms. Layout is time-major: ``[T, N]``.

``normalize_advantages`` is the one definition of advantage normalisation every PyTorch update uses (PPO's
minibatch and batch modes, A2C, IMPALA, masked multi-agent minibatches); the compiled PPO epoch
(``rapidrl.kernels.ppo_update``) is the only other, tested equal to it.
"""

from __future__ import annotations

import torch

from rapidrl.kernels import vtrace
from rapidrl.kernels.advantages import ADVANTAGE_EPS
from rapidrl.kernels.validation import check_scalar

__all__ = ["ADVANTAGE_EPS", "advantage_moments", "gae_torch", "normalize_advantages", "vtrace_targets"]


def advantage_moments(advantages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, population std) of ``advantages`` [M], as 0-d tensors (no host sync)."""
    return advantages.mean(), advantages.std(correction=0)


def normalize_advantages(advantages: torch.Tensor, moments: tuple | None = None, *,
                         inplace: bool = False) -> torch.Tensor:
    """(A - mean) / (std + ADVANTAGE_EPS), with ``moments`` = (mean, std) (default: ``advantage_moments(A)``,
    the minibatch's own). inplace: overwrite ``advantages`` (a reused minibatch tensor) and return it."""
    mean, std = advantage_moments(advantages) if moments is None else moments
    std = std + ADVANTAGE_EPS
    if inplace:
        return advantages.sub_(mean).div_(std)
    return (advantages - mean) / std


def gae_torch(rewards: torch.Tensor, values: torch.Tensor, last_values: torch.Tensor, terminated: torch.Tensor,
              truncated: torch.Tensor, *, gamma: float, lam: float, final_values: torch.Tensor | None = None,
              out_advantages: torch.Tensor | None = None, out_returns: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``rapidrl.kernels.gae`` for torch tensors on any device (same semantics, same argument shapes).

    rewards, values: [T, N] float; last_values: [N]; terminated, truncated: [T, N] bool;
    final_values: [T, N] (read where truncated; None only if nothing is truncated).
    Vectorized over time except the advantage recursion, one fused op per step:

        nv[t] = 0 if terminated[t] else final_values[t] if truncated[t] else values[t+1] (last_values)
        delta[t] = r[t] + gamma * nv[t] - V[t]
        A[t] = delta[t] + gamma * lam * (1 - ended[t]) * A[t+1],  returns = A + V

    Writes into out_advantages/out_returns ([T, N], rewards' dtype/device) when given. Returns them.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape [T, N], got {tuple(rewards.shape)}")
    T, N = rewards.shape
    for name, x, shape in (("values", values, (T, N)), ("last_values", last_values, (N,)),
                           ("terminated", terminated, (T, N)), ("truncated", truncated, (T, N)),
                           ("final_values", final_values, (T, N)), ("out_advantages", out_advantages, (T, N)),
                           ("out_returns", out_returns, (T, N))):
        if x is not None and tuple(x.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    if terminated.dtype != torch.bool or truncated.dtype != torch.bool:
        raise TypeError("terminated and truncated must be torch.bool tensors")
    gamma = check_scalar("gamma", gamma, low=0.0, high=1.0)
    lam = check_scalar("lam", lam, low=0.0, high=1.0)
    if final_values is None:
        if bool((truncated & ~terminated).any()):
            raise ValueError("final_values is None but some steps are truncated (and not terminated)")
        final_values = values
    adv = torch.empty_like(rewards) if out_advantages is None else out_advantages
    ret = torch.empty_like(rewards) if out_returns is None else out_returns
    next_values = torch.cat([values[1:], last_values.unsqueeze(0)])  # [T, N]
    nv = torch.where(truncated, final_values, next_values).masked_fill_(terminated, 0.0)  # [T, N]
    delta = rewards + gamma * nv - values  # [T, N]
    carry = (~(terminated | truncated)).to(rewards.dtype).mul_(gamma * lam)  # [T, N]
    adv[T - 1] = delta[T - 1]
    for t in range(T - 2, -1, -1):
        torch.addcmul(delta[t], carry[t], adv[t + 1], out=adv[t])
    torch.add(adv, values, out=ret)
    return adv, ret




def vtrace_targets(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor, rewards: torch.Tensor,
                   values: torch.Tensor, bootstrap_value: torch.Tensor, terminated: torch.Tensor,
                   truncated: torch.Tensor, final_values: torch.Tensor, *, gamma: float, rho_bar: float,
                   c_bar: float) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets and policy-gradient advantages of the learner's policy; CPU tensors [T, N].

    log_rhos = log pi(a|s) - log mu(a|s) (learner over behaviour). bootstrap_value [N] = V(s_T); final_values
    [T, N] = V(final observation) where an episode was truncated. Returns (vs, pg_advantages), [T, N] each.
    """
    log_rhos = (log_probs - behaviour_log_probs).numpy()
    vs, pg = vtrace(log_rhos, rewards.numpy(), values.numpy(), bootstrap_value.numpy(), terminated.numpy(),
                    gamma=gamma, rho_bar=rho_bar, c_bar=c_bar, truncated=truncated.numpy(),
                    final_values=final_values.numpy())
    return torch.from_numpy(vs), torch.from_numpy(pg)
