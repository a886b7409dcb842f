"""Networks of the off-policy algorithms: Q networks (optionally dueling), the batched critic ensemble,
the squashed Gaussian actor (SAC) and the deterministic actor (TD3).

``CriticEnsemble`` holds n critics as stacked weights ``[n, in, out]`` and evaluates all of them with one
``torch.baddbmm`` per layer: two 256x256 critics cost three matmul calls instead of six, forward and
backward, and its parameters are three weight and three bias tensors whatever n is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from rapidrl.nn.batch_renorm import BatchRenorm
from rapidrl.nn.distributions import squashed_gaussian_log_prob
from rapidrl.nn.dtypes import float32_region, full_precision
from rapidrl.nn.noisy import NoisyLinear, noisy_mlp, remove_noise, sample_noise
from rapidrl.nn.policies import mlp, orthogonal_init


class QNetwork(nn.Module):
    """Q values of every discrete action: obs [B, O] -> [B, A] (or obs [B, C, H, W] with a CNN ``encoder``).

    dueling: Q(s, a) = V(s) + A(s, a) - mean_a A(s, a) with separate value and advantage heads on a
    shared trunk (Wang et al. 2016); else one MLP.
    encoder: a CNN encoder (``rapidrl.nn.encoders``, features [B, F]); the heads are then linear layers on its
    features (plain: one [F, A] layer as in Mnih et al. 2015; dueling: a [F, 1] value and a [F, A] advantage
    layer) and ``obs_dim``/``hidden`` are not used.
    layer_norm: a LayerNorm before each hidden ReLU of the MLP (PQN; a CNN encoder gets its own ``layer_norm``).
    outputs_per_action: N > 1 gives N raw outputs per action, [B, A, N] (C51's logits over atoms, QR-DQN's
    quantiles); dueling then combines them per output, V [B, 1, N] + A [B, A, N] - mean_a A.
    noisy: every linear layer after the encoder (all of an MLP's) is a factorised-Gaussian ``NoisyLinear``
    (Rainbow's exploration; ``sample_noise`` / ``remove_noise``); the encoder's own layers stay as they are.
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden: Sequence[int], *, dueling: bool = False,
                 encoder: nn.Module | None = None, layer_norm: bool = False, outputs_per_action: int = 1,
                 noisy: bool = False):
        super().__init__()
        if outputs_per_action < 1:
            raise ValueError(f"outputs_per_action must be >= 1, got {outputs_per_action}")
        self.dueling = dueling
        self.has_encoder = encoder is not None
        self.num_actions, self.outputs_per_action, self.noisy = int(num_actions), int(outputs_per_action), noisy
        n = self.outputs_per_action
        if encoder is not None:
            if dueling:
                self.trunk = encoder
                self.value = _head(encoder.out_dim, n, noisy)
                self.advantage = _head(encoder.out_dim, num_actions * n, noisy)
            else:
                self.net = nn.Sequential(encoder, _head(encoder.out_dim, num_actions * n, noisy))
        elif dueling:
            self.trunk = _body(obs_dim, hidden[:-1], None, layer_norm, noisy)
            width = hidden[-2] if len(hidden) > 1 else obs_dim
            self.value = _body(width, hidden[-1:], n, layer_norm, noisy)
            self.advantage = _body(width, hidden[-1:], num_actions * n, layer_norm, noisy)
        else:
            self.net = _body(obs_dim, hidden, num_actions * n, layer_norm, noisy)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q values [B, A] (``outputs_per_action`` N > 1: [B, A, N]), float32 (under bfloat16 autocast the layers
        compute in bf16; ``full_precision``: a no-op otherwise)."""
        n = self.outputs_per_action
        if not self.dueling:
            out = full_precision(self.net(obs))
            return out if n == 1 else out.view(out.shape[0], self.num_actions, n)
        h = self.trunk(obs)  # [B, H]
        adv = full_precision(self.advantage(h))  # [B, A] or [B, A * N]
        if n == 1:
            return full_precision(self.value(h)) + adv - adv.mean(-1, keepdim=True)
        adv = adv.view(adv.shape[0], self.num_actions, n)
        return full_precision(self.value(h)).unsqueeze(1) + adv - adv.mean(1, keepdim=True)  # [B, A, N]

    def sample_noise(self, generator: torch.Generator | None = None) -> None:
        """New noise in the ``NoisyLinear`` layers (``noisy=True``; nothing otherwise)."""
        sample_noise(self, generator)

    def remove_noise(self) -> None:
        """Zero noise: the mean network (``noisy=True``; nothing otherwise)."""
        remove_noise(self)


def _head(d_in: int, d_out: int, noisy: bool) -> nn.Module:
    """A Q head's linear layer on encoder features: orthogonal with gain 1, or noisy."""
    return NoisyLinear(d_in, d_out) if noisy else orthogonal_init(nn.Linear(d_in, d_out), 1.0)


def _body(d_in: int, hidden: Sequence[int], d_out: int | None, layer_norm: bool, noisy: bool) -> nn.Sequential:
    """A ReLU MLP of ``QNetwork``: ``rapidrl.nn.policies.mlp``, or its noisy twin."""
    if noisy:
        return noisy_mlp(d_in, hidden, d_out, layer_norm=layer_norm)
    return mlp(d_in, hidden, d_out, "relu", layer_norm=layer_norm)


class CriticEnsemble(nn.Module):
    """n independent MLP critics Q_i(s, a) evaluated together: (obs [B, O], actions [B, A]) -> [n, B].

    Layer l has ``weights[l]`` [n, in, out] and ``biases[l]`` [n, 1, out]; member i equals the MLP whose
    ``nn.Linear`` layers have ``weight = weights[l][i].T`` and ``bias = biases[l][i, 0]``, ReLU between
    layers. Each member is initialised like ``rapidrl.nn.mlp`` (orthogonal, gain sqrt 2, output gain 1).

    out_dim: outputs per critic (1: values [n, B]; more: [n, B, out_dim], TQC's quantiles).
    batch_renorm: keyword arguments of a ``rapidrl.nn.batch_renorm.BatchRenorm`` before every layer, with
    statistics per member (CrossQ's critics; ``norms[l]`` before layer l), or None (no normalisation).
    float32_output: the output layer computes in float32 under bf16 autocast, as ``rapidrl.nn.dtypes.Float32Linear``
    (IQL's critics, whose values are differenced into advantages).
    """

    def __init__(self, n: int, obs_dim: int, act_dim: int, hidden: Sequence[int], out_dim: int = 1,
                 batch_renorm: dict | None = None, float32_output: bool = False):
        super().__init__()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n, self.out_dim, self.float32_output = n, int(out_dim), float32_output
        sizes = [obs_dim + act_dim, *hidden, self.out_dim]
        self.norms = None if batch_renorm is None else nn.ModuleList(
            BatchRenorm((n, d), **batch_renorm) for d in sizes[:-1])
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for layer, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            gain = 1.0 if layer == len(sizes) - 2 else math.sqrt(2.0)
            w = torch.stack([nn.init.orthogonal_(torch.empty(d_out, d_in), gain).T for _ in range(n)])
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(torch.zeros(n, 1, d_out)))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, members: int | None = None,
                detach_params: bool = False) -> torch.Tensor:
        """Q values [k, B] (``out_dim`` > 1: [k, B, out_dim]) of the first ``members`` critics (default all n;
        all n with ``batch_renorm``).

        detach_params: treat the weights as constants, so a backward pass computes gradients for the inputs
        (an actor loss) without the weight gradients it would otherwise accumulate.
        """
        k = self.n if members is None else members
        x = torch.cat([obs, actions], -1)  # [B, O + A]
        h = x.unsqueeze(0).expand(k, *x.shape)  # [k, B, O + A], no copy
        last = len(self.weights) - 1
        for layer, (w, b) in enumerate(zip(self.weights, self.biases)):
            if self.norms is not None:  # [n, B, in]; past layer 0 it applies the ReLU (fused on the compiled path)
                h = self.norms[layer](h, detach_params, relu=layer > 0)
            if detach_params:
                w, b = w.detach(), b.detach()
            if k < self.n:  # no slice otherwise: its backward writes a zero tensor as large as w (~3 ms at 2x1024x1024)
                w, b = w[:k], b[:k]
            if layer == last and self.float32_output and torch.is_autocast_enabled(h.device.type):
                with float32_region(h):
                    h = torch.baddbmm(b, h.float(), w)  # [k, B, out] in float32
            else:
                h = torch.baddbmm(b, h, w)  # [k, B, out]
            if layer < last and self.norms is None:
                h = torch.relu(h)
        # [k, B] (or [k, B, out_dim]), float32 (bf16 autocast: the layers in bf16)
        return full_precision(h.squeeze(-1) if self.out_dim == 1 else h)


class SquashedGaussianActor(nn.Module):
    """SAC policy: a = low + (tanh(u) + 1) (high - low) / 2, u ~ N(mu(s), sigma(s)^2).

    ``forward(obs) -> (actions [B, A] in the env's bounds, log_probs [B])``: reparameterised samples (or
    the mean action when deterministic) and the log-density of the env action, with the change of variables
    log pi(a) = log N(u) - sum_j log(scale_j (1 - tanh(u_j)^2)), written stably as
    log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)). log sigma is squashed into [log_std_min, log_std_max].
    """

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden: Sequence[int],
                 log_std_min: float = -5.0, log_std_max: float = 2.0, *, trunk: nn.Module | None = None,
                 head_gain: float = 0.01, head: nn.Module | None = None):
        """trunk: the network before the head (a module with ``out_dim``: ``rapidrl.nn.simba.SimbaEncoder``), in place
        of the ReLU MLP of ``hidden``; head_gain: the orthogonal gain of the head's [width, 2A] layer; head: a head
        of the caller's in place of that layer (``nn.Identity()`` behind a trunk that gives [B, 2A] itself:
        ``rapidrl.nn.simbav2.SimbaV2Actor``)."""
        super().__init__()
        act_dim = int(low.shape[0])
        self.trunk = mlp(obs_dim, hidden, None, "relu") if trunk is None else trunk
        width = hidden[-1] if trunk is None else trunk.out_dim
        self.head = orthogonal_init(nn.Linear(width, 2 * act_dim), head_gain) if head is None else head
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("center", (high + low).float() / 2)

    def forward(self, obs: torch.Tensor, deterministic: bool = False, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """generator: where the noise is drawn from, on the actor's device (an algorithm passes its own,
        ``Algorithm.torch_rng``); None: torch's global generator."""
        head = full_precision(self.head(self.trunk(obs)))  # [B, 2A]: means, then unsquashed log stds
        return sample_squashed_gaussian(head, self.scale, self.center, self.log_std_min, self.log_std_max,
                                        deterministic, generator)


def sample_squashed_gaussian(head: torch.Tensor, scale: torch.Tensor, center: torch.Tensor, log_std_min: float,
                             log_std_max: float, deterministic: bool = False,
                             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(actions [B, A] in the bounds, log pi [B]) from a head output [B, 2A] (means, then unsquashed log stds):
    ``squashed_gaussian`` with standard normal noise drawn from ``generator``, or none (the squashed mean) when
    deterministic. SAC's actor and recurrent SAC's sample through it."""
    noise = torch.zeros_like(head[:, : head.shape[1] // 2])
    if not deterministic:
        noise.normal_(generator=generator)
    actions, log_prob, _ = squashed_gaussian(head, noise, scale, center, log_std_min, log_std_max)
    return actions, log_prob


def squashed_gaussian(head: torch.Tensor, noise: torch.Tensor, scale: torch.Tensor, center: torch.Tensor,
                      log_std_min: float, log_std_max: float
                      ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The sample of ``SquashedGaussianActor`` from its head output [B, 2A] and standard normal noise [B, A].

    Returns (actions [B, A], log_prob [B], (tanh(u), std, tanh(raw log std)) [B, A] each: what the compiled
    backward, ``rapidrl.kernels.sac.squash_backward``, needs).
    """
    mean, raw = head.chunk(2, -1)  # [B, A] each
    tanh_raw = torch.tanh(raw)
    log_std = log_std_min + 0.5 * (log_std_max - log_std_min) * (tanh_raw + 1.0)
    std = log_std.exp()
    u = mean + noise * std
    log_prob = squashed_gaussian_log_prob(noise, log_std, u, scale)  # [B]
    tanh_u = torch.tanh(u)
    return center + scale * tanh_u, log_prob, (tanh_u, std, tanh_raw)


class DeterministicActor(nn.Module):
    """TD3 policy: obs [B, O] -> actions [B, A] = center + scale * tanh(MLP(obs))."""

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden: Sequence[int], *,
                 trunk: nn.Module | None = None, head_gain: float = 0.01, network: nn.Module | None = None):
        """trunk: the network before the [width, A] output layer (a module with ``out_dim``:
        ``rapidrl.nn.simba.SimbaEncoder``), in place of the ReLU MLP of ``hidden``; head_gain: that layer's
        orthogonal gain; network: the whole obs [B, O] -> [B, A] network before the tanh
        (``rapidrl.nn.simbav2.SimbaV2Actor``)."""
        super().__init__()
        if network is not None:
            self.net = network
        elif trunk is None:
            self.net = mlp(obs_dim, hidden, int(low.shape[0]), "relu", out_gain=head_gain)
        else:
            self.net = nn.Sequential(trunk, orthogonal_init(nn.Linear(trunk.out_dim, int(low.shape[0])), head_gain))
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("center", (high + low).float() / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.center + self.scale * torch.tanh(full_precision(self.net(obs)))  # float32 under bf16 autocast
