"""The networks of the off-policy actor-critics (SAC, TQC, TD3, DDPG, CrossQ): ReLU MLPs or SimBa, chosen by the
config's ``network`` (``NetworkConfig``), built by ``actor_trunk`` and ``critic_ensemble``, trained by
``network_optimizer`` (Adam, or AdamW with ``weight_decay``).

"mlp" (the default) is each algorithm's published network: ReLU MLPs of ``hidden``. "simba" is SimBa (Lee et al.,
ICLR 2025; ``rapidrl.nn.simba``): residual pre-LayerNorm blocks of ``actor_width``/``actor_blocks`` and
``critic_width``/``critic_blocks``. "simbav2" is SimbaV2 (Lee et al., ICML 2025; ``rapidrl.nn.simbav2``):
hyperspherical networks of the same widths and blocks, projected back onto the sphere after every update
(``spherical_networks``), rewards scaled by the return statistics (``rapidrl.nn.normalize.RewardScaler``), and for
SAC its categorical critics of ``critic_bins`` atoms on [-value_range, value_range] (TQC keeps its quantiles, TD3
and DDPG their scalar Q). SimBa's running-statistics normalisation of the observations is ``normalize_obs``, which
the off-policy core applies to every network input (``rapidrl.algos.offpolicy``), with any network. The SimBa
networks train on the "torch" gradient backend (their gradients are not written by hand).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rapidrl.nn.optim import adam
from rapidrl.nn.qnets import CriticEnsemble
from rapidrl.nn.simba import SimbaCriticEnsemble, SimbaEncoder
from rapidrl.nn.simbav2 import SimbaV2Actor, SimbaV2CriticEnsemble, SimbaV2Network
from rapidrl.train.config import check_positive, require

__all__ = ["NETWORKS", "SIMBA_LOG_STD_MIN", "NetworkConfig", "actor_trunk", "critic_ensemble", "network_of",
           "network_optimizer", "simba_without_handwritten", "simbav2_actor", "spherical_networks"]

NETWORKS = ("mlp", "simba", "simbav2")
SIMBA_LOG_STD_MIN = -10.0
"""The lower bound of a SimBa SAC actor's log std (SimBa's ``NormalTanhPolicy``; rapidrl's MLP actor keeps -5)."""


@dataclass
class NetworkConfig:
    """The network fields of SAC's, TQC's, TD3's, DDPG's and CrossQ's configs (a dataclass mixin)."""

    network: str = "mlp"
    """"mlp": ReLU MLPs of ``hidden`` (the algorithm's published network); "simba": SimBa's residual networks
    (``rapidrl.nn.simba``) of ``actor_width``/``actor_blocks`` and ``critic_width``/``critic_blocks`` (``hidden`` is
    then unused); "simbav2": SimbaV2's hyperspherical networks of the same sizes and its reward scaling, with SAC its
    categorical critics too (``rapidrl.nn.simbav2``). Both train on the "torch" gradient backend."""
    actor_width: int = 128
    """network="simba"/"simbav2": width of the actor's residual blocks (SimBa's 128)."""
    actor_blocks: int = 1
    """network="simba"/"simbav2": residual blocks of the actor (SimBa's 1)."""
    critic_width: int = 512
    """network="simba"/"simbav2": width of each critic's residual blocks (SimBa's 512)."""
    critic_blocks: int = 2
    """network="simba"/"simbav2": residual blocks of each critic (SimBa's 2)."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW, Loshchilov & Hutter 2019) of the actor's and critics' parameters, not the
    temperature's (SimBa's 0.01); 0: Adam."""
    normalize_obs: bool = False
    """Normalise every network input by the running mean and variance of the observations acted on while training
    (SimBa's RSNorm): (obs - mean) / sqrt(var + 1e-8). The replay keeps raw observations; the statistics are saved,
    and folded into the exported policy."""
    critic_bins: int = 101
    """network="simbav2" with SAC: atoms of the categorical critics (SimbaV2's 101)."""
    value_range: float = 5.0
    """network="simbav2": the rewards are divided by max(std of the discounted return, its largest magnitude /
    value_range) (SimbaV2's G_max = 5), and SAC's categorical atoms span [-value_range, value_range]."""

    def validate_network(self) -> None:
        require(self.network in NETWORKS, f"network must be one of {NETWORKS}, got {self.network!r}")
        check_positive(self, "actor_width", "actor_blocks", "critic_width", "critic_blocks", "value_range")
        check_positive(self, "weight_decay", allow_zero=True)
        require(isinstance(self.critic_bins, int) and self.critic_bins >= 2,
                f"critic_bins must be an int >= 2, got {self.critic_bins!r}")


def network_of(config: Any) -> str:
    """The config's ``network`` ("mlp" for the configs without ``NetworkConfig``: CQL, TD3+BC)."""
    return getattr(config, "network", "mlp")


def actor_trunk(config: Any, obs_dim: int) -> nn.Module | None:
    """The actor's trunk for network="simba" (a ``SimbaEncoder``), None for the MLP (the actor builds its own) and for
    "simbav2" (whose actor is a network of its own with two heads: ``rapidrl.nn.simbav2.SimbaV2Actor``)."""
    if network_of(config) != "simba":
        return None
    return SimbaEncoder(obs_dim, config.actor_width, config.actor_blocks)


def simbav2_actor(config: Any, obs_dim: int, act_dim: int, heads: int) -> nn.Module | None:
    """network="simbav2": the actor's whole network (``SimbaV2Actor``: obs [B, O] -> [B, heads * act_dim]; SAC's two
    heads give the means and log stds, TD3's and DDPG's one the pre-tanh actions); None for the other networks."""
    if network_of(config) != "simbav2":
        return None
    return SimbaV2Actor(obs_dim, act_dim, config.actor_width, config.actor_blocks, heads=heads)


def spherical_networks(algorithm: Any) -> list[SimbaV2Network]:
    """The SimbaV2 networks among ``algorithm``'s trained modules (not the targets, which the authors average
    without projecting): what ``project_weights`` puts back onto the sphere after every update."""
    found = []
    for module in algorithm.trainable_modules():
        for m in module.modules():
            if isinstance(m, SimbaV2Network) and any(p.requires_grad for p in m.parameters()):
                found.append(m)
    return found


def critic_ensemble(config: Any, n: int, obs_dim: int, act_dim: int, hidden: Sequence[int], *, out_dim: int = 1,
                    batch_renorm: dict | None = None) -> nn.Module:
    """n critics over (s, a) evaluated together: a ``CriticEnsemble`` of ReLU MLPs of ``hidden`` (with
    ``batch_renorm``: CrossQ's), or a ``SimbaCriticEnsemble`` for network="simba"."""
    if network_of(config) == "simba":
        return SimbaCriticEnsemble(n, obs_dim, act_dim, config.critic_width, config.critic_blocks, out_dim)
    if network_of(config) == "simbav2":
        return SimbaV2CriticEnsemble(n, obs_dim, act_dim, config.critic_width, config.critic_blocks, out_dim)
    return CriticEnsemble(n, obs_dim, act_dim, hidden, out_dim=out_dim, batch_renorm=batch_renorm)


def network_optimizer(params: Iterable[torch.Tensor], config: Any, *, undecayed: Sequence[torch.Tensor] = (),
                      betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.Optimizer:
    """``rapidrl.nn.optim.adam`` over ``params`` then ``undecayed`` at the config's learning rate, with the config's
    ``weight_decay`` (AdamW) on ``params`` only (the temperature goes in ``undecayed``)."""
    return adam(params, config.learning_rate, betas=betas, weight_decay=getattr(config, "weight_decay", 0.0),
                undecayed=undecayed)


def simba_without_handwritten(config: Any) -> str | None:
    """Why the handwritten gradient backend cannot run the config's networks (None: it can)."""
    if network_of(config) != "mlp":
        return f"network={network_of(config)!r} trains through autograd (its gradients are not written by hand)"
    return None
