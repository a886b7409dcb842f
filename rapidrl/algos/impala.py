"""IMPALA (Espeholt et al. 2018): actor-critic on off-policy rollouts corrected by V-trace.

A collector thread acts with a behaviour copy of the policy while the learner trains (``async_collect``,
``rapidrl.train.collect.threaded``): each rollout is one or more updates stale (policy lag >= 1). V-trace
(``rapidrl.buffers.vtrace_targets`` on ``rapidrl.kernels.vtrace``; truncated importance weights
rho = min(rho_bar, pi/mu), c = min(c_bar, pi/mu)) turns it into value targets ``vs`` and policy-gradient
advantages for the learner's current policy.

Read top to bottom: the config, the targets and the loss (pure functions), the update. Collection comes
from the shared on-policy core (``rapidrl.algos.onpolicy``); GAE is not used (``gae_lambda`` is ignored).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.actor_critic import ActorCriticOptimizerConfig, actor_critic_loss, explained_variance
from rapidrl.algos.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from rapidrl.algos.registry import register
from rapidrl.buffers import normalize_advantages, vtrace_targets
from rapidrl.nn.optim import optimizer_step
from rapidrl.train.config import check_positive, require
from rapidrl.train.paths import PathChoice

__all__ = ["IMPALA", "IMPALAConfig", "impala_loss"]


@dataclass
class IMPALAConfig(OnPolicyConfig, ActorCriticOptimizerConfig):
    num_steps: int = 32
    """Steps per env in each rollout (the V-trace unroll length)."""
    learning_rate: float = 1e-3
    """Optimizer learning rate (start value when annealed)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    async_collect: bool = True
    """Collect the next rollout in a thread while learning on the last (policy lag 1); False: lag 0."""
    rho_bar: float = 1.0
    """Truncation of the importance weights in the V-trace TD errors and policy gradient."""
    c_bar: float = 1.0
    """Truncation of the importance weights in the V-trace traces (plays the role of lambda)."""
    update_epochs: int = 1
    """Gradient steps per rollout on the whole rollout; each recomputes V-trace with the current weights."""
    normalize_advantage: str = "batch"
    """Normalisation of the policy-gradient advantages (``OnPolicyConfig``): "batch" here, over the rollout."""
    optimizer: str = "adam"
    """"adam" or "rmsprop" (the paper's)."""

    def validate(self) -> None:
        super().validate()
        self.validate_optimizer()
        check_positive(self, "rho_bar", "c_bar", "update_epochs")
        require(self.device == "cpu" and self.env_device == "cpu",
                "IMPALA runs on the CPU (its V-trace kernel is NumPy/Numba): device and env_device must be 'cpu'")


def impala_loss(log_probs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, vs: torch.Tensor,
                pg_advantages: torch.Tensor, *, ent_coef: float, vf_coef: float
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """L = -E[A_vtrace log pi(a|s)] + vf_coef * 0.5 E[(vs - V(s))^2] - ent_coef * E[H]; every tensor [B]
    (``actor_critic_loss`` with V-trace's advantages and targets)."""
    return actor_critic_loss(log_probs, entropy, values, pg_advantages, vs, ent_coef=ent_coef, vf_coef=vf_coef,
                             value_scale=0.5)


@register
class IMPALA(OnPolicyAlgorithm):
    """IMPALA with V-trace. ``IMPALA(env, **hyperparameters)``; see IMPALAConfig for the fields."""

    name = "impala"
    config_class = IMPALAConfig
    supports_async_collect = True
    supports_loss_masks = False

    def _advantage_estimator(self) -> PathChoice:
        return PathChoice("advantages", "vtrace", "IMPALA: V-trace targets with the learner's policy in each gradient "
                          "step")

    def _make_optimizer(self) -> torch.optim.Optimizer:
        return self.config.make_optimizer(self.policy.parameters(), self.config.learning_rate)

    def _update(self) -> None:
        c, policy, b = self.config, self.policy, self.buffer.tensors
        T, N = c.num_steps, c.num_envs
        obs, actions = b.obs.reshape(T * N, *b.obs.shape[2:]), b.actions.reshape(T * N, *b.actions.shape[2:])
        masks = self.buffer.flat_action_masks()  # [T * N, M]: the valid actions each was chosen among (None: no masks)
        last_obs = torch.from_numpy(self._last_obs)
        params = list(policy.parameters())
        for _epoch in range(c.update_epochs):
            with self._autocast():  # bf16 autocast under precision="bf16" (the heads return float32)
                log_probs, entropy, values = policy.evaluate(obs, actions, action_masks=masks)  # [T * N] each
            with torch.no_grad(), self._autocast():
                last_values = policy.value(last_obs)
            with torch.no_grad():
                vs, pg_adv = vtrace_targets(log_probs.view(T, N), b.log_probs, b.rewards, values.view(T, N),
                                            last_values, b.terminated, b.truncated, b.final_values,
                                            gamma=c.gamma, rho_bar=c.rho_bar, c_bar=c.c_bar)
                pg_adv = pg_adv.reshape(-1)
                if c.normalize_advantage != "none":  # "minibatch" and "batch" alike: the whole rollout
                    pg_adv = normalize_advantages(pg_adv)
            loss, stats = impala_loss(log_probs, entropy, values, vs.reshape(-1), pg_adv, ent_coef=c.ent_coef,
                                      vf_coef=c.vf_coef)
            self.optimizer.zero_grad(set_to_none=False)  # every on-policy update keeps its .grad tensors (ppo.py)
            loss.backward()
            self._sync_grads(params)
            optimizer_step(self.optimizer, c.max_grad_norm)
        if not self.reporting:
            return  # scalars are read back at reports only (log_every_steps)
        with torch.no_grad():
            rhos = (log_probs.detach().view(T, N) - b.log_probs).exp()
            ev = explained_variance(vs, values.detach())
        record = {f"losses/{k}": float(v) for k, v in stats.items()}
        record.update({"losses/explained_variance": ev, "losses/mean_rho": float(rhos.mean()),
                       "losses/clipped_rho_frac": float((rhos > c.rho_bar).float().mean()),
                       "charts/learning_rate": self.optimizer.param_groups[0]["lr"]})
        self.record(record)

