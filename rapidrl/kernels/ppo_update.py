"""One PPO epoch of minibatch updates for separate actor and critic MLPs in a single compiled call (CPU).

For CartPole-sized networks a minibatch update in PyTorch is over a hundred operator calls (forward, loss,
autograd's backward, clipping, Adam) at 5-15 us each: the per-op overhead, not the arithmetic, sets the
update's time. This kernel runs the same mathematics for every minibatch of one epoch without leaving
compiled code: the MLPs' forward and backward (``rapidrl.kernels.mlp``, in its layout: views of the flat
arrays below), the loss head as loops on the distribution formulas of ``rapidrl.kernels.distributions``,
global-norm clipping and PyTorch's Adam update on zero-copy NumPy views of the parameters, gradients and
``torch.optim.Adam`` state (so checkpoints, the optimizer's state dict and the PyTorch path see every step).

This is PPO's "handwritten" gradient backend. The reference is the "torch" backend of ``rapidrl.algos.ppo``: autograd
on ``ppo_loss`` (the one definition of the loss) and ``rapidrl.nn.optim.optimizer_step``; tests
(``tests/test_ppo_compiled_update.py``) compare parameters, Adam moments and statistics after whole updates. The
gradient of the loss with respect to the network outputs is derived by hand below (``_ppo_epoch``'s loss head:
dL/dr = -A where the unclipped term is the max, else 0; dlogp/dlogits = onehot - softmax, the entropy term adds
ent_coef/B * p (log p + H); for a Gaussian dlogp/dmu = z/sigma, dlogp/dlog_std = z^2 - 1).

Shapes (M = T*N samples, B = minibatch size, D = obs size, A = actions or logits):

- obs [M, D] float32, each network reading a column range of it (default all D); actions_discrete [M] int64
  (discrete) / actions_continuous [M, A] float32; action_masks [M, A] bool (discrete, an env with action masks:
  the valid actions each sample was chosen among; the categorical then covers them only, through
  ``rapidrl.kernels.distributions.apply_action_mask``, and an invalid action's logit gets gradient 0 as under
  PyTorch's ``masked_fill``);
- old_log_probs, old_values, advantages, returns [M] float32; perm [P] int64 (the epoch's samples in order: a
  permutation of all M, or of the P active ones of a masked rollout);
- params, grads, exp_avgs, exp_avg_sqs: tuples of K contiguous 1-D float32 arrays (views of the parameters
  and their state), in the order actor layers (weight, bias)..., critic layers (weight, bias)..., [log_std];
  steps: tuple of K 1-element float32 arrays (Adam's step counters); shapes [K, 2] int64 (rows, cols; a bias
  or log_std has cols 1).
- stats_out [ceil(P / B), 5] float64: per minibatch policy_loss, value_loss, entropy, approx_kl, clipfrac.

Non-finite values propagate as in PyTorch (``error_model="numpy"``: no exception on division by zero), so the
training driver's finiteness check reports a diverged run the same way on both paths.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from rapidrl.kernels import activations, adam, distributions, mlp
from rapidrl.kernels import advantages as advantage_kernels
from rapidrl.kernels.adam import clip_and_count_unchecked
from rapidrl.kernels.advantages import ADVANTAGE_EPS
from rapidrl.kernels.cache import invalidate_stale_cache
from rapidrl.kernels.distributions import (
    apply_action_mask,
    categorical_entropy,
    gaussian_entropy,
    gaussian_log_prob,
    log_sum_exp,
)
from rapidrl.kernels.mlp import RELU, TANH
from rapidrl.kernels.mlp import backward as mlp_backward
from rapidrl.kernels.mlp import forward as mlp_forward

NORM_NONE, NORM_MINIBATCH, NORM_BATCH = 0, 1, 2
STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _adam(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, eps):  # pragma: no cover
    """PyTorch's Adam (no weight decay, no AMSGrad) with the already incremented step counters."""
    for k in range(len(params)):
        step = float(steps[k][0])
        step_size = lr / (1.0 - beta1 ** step)
        bc2_sqrt = math.sqrt(1.0 - beta2 ** step)
        p, g, m, v = params[k], grads[k], exp_avgs[k], exp_avg_sqs[k]
        for i in range(p.shape[0]):
            gi = g[i]
            m[i] += (1.0 - beta1) * (gi - m[i])
            v[i] = beta2 * v[i] + (1.0 - beta2) * gi * gi
            p[i] -= step_size * m[i] / (math.sqrt(v[i]) / bc2_sqrt + eps)


@numba.njit(cache=True, nogil=True)
def _minibatch_inputs(obs, advantages, idx, actor_lo, actor_hi, critic_lo, critic_hi, norm_mode, batch_mean,
                      batch_std):  # pragma: no cover
    """The minibatch ``idx`` [m]: the actor's input columns x [m, I_a], the critic's xc [m, I_c] (x itself when the
    two read the same columns) and the advantages [m] float64, normalized by ``norm_mode``."""
    m = idx.shape[0]
    x = np.empty((m, actor_hi - actor_lo), np.float32)  # the actor's input columns of the minibatch's rows
    adv = np.empty(m, np.float64)
    for r in range(m):
        x[r] = obs[idx[r], actor_lo:actor_hi]
        adv[r] = advantages[idx[r]]
    if actor_lo == critic_lo and actor_hi == critic_hi:
        xc = x
    else:  # the critic reads other columns of the rows (multi-agent PPO: the global state)
        xc = np.empty((m, critic_hi - critic_lo), np.float32)
        for r in range(m):
            xc[r] = obs[idx[r], critic_lo:critic_hi]
    if norm_mode == NORM_MINIBATCH:
        mean = adv.mean()
        std = math.sqrt(((adv - mean) ** 2).mean()) + ADVANTAGE_EPS
        adv = (adv - mean) / std
    elif norm_mode == NORM_BATCH:
        adv = (adv - batch_mean) / batch_std
    return x, xc, adv


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _actor_minibatch(x, idx, adv, actions_discrete, actions_continuous, discrete, action_masks, masked, old_log_probs,
                     actor, act, log_std, log_std_grad, clip_coef, ent_coef, sums):  # pragma: no cover
    """The actor's half of one minibatch update: forward, the clipped surrogate and entropy terms, and the backward
    into the actor's gradients (and ``log_std_grad`` [A] for a Gaussian head; ``log_std`` [A] its parameter). Writes
    the minibatch's sums of (policy loss, entropy, approx_kl, clipped) into ``sums`` [4] float64. Touches nothing of
    the critic: it runs beside ``_critic_minibatch`` in another thread."""
    m = idx.shape[0]
    aws, abs_, agws, agbs, ahs, head_scratch = actor
    mlp_forward(x, aws, abs_, act, ahs, head_scratch)
    head = head_scratch[:m]
    d_head = np.zeros_like(head)
    n_act = head.shape[1]
    pg_sum = ent_sum = kl_sum = clip_sum = 0.0
    d_log_std = np.zeros(n_act, np.float64)
    ent_row = 0.0
    if not discrete:
        for j in range(n_act):
            ent_row += gaussian_entropy(log_std[j])
    for r in range(m):
        i = idx[r]
        a_r = adv[r]
        if discrete:
            if masked:
                apply_action_mask(head[r], action_masks[i])
            lse = log_sum_exp(head[r])
            ent = categorical_entropy(head[r], lse)
            new_logp = head[r, actions_discrete[i]] - lse
        else:
            new_logp = 0.0
            for j in range(n_act):
                new_logp += gaussian_log_prob(actions_continuous[i, j], head[r, j], log_std[j])
            ent = ent_row
        log_ratio = new_logp - old_log_probs[i]
        ratio = math.exp(log_ratio)
        unclipped = -a_r * ratio
        clipped = -a_r * min(max(ratio, 1.0 - clip_coef), 1.0 + clip_coef)
        pg_sum += max(unclipped, clipped)
        ent_sum += ent
        kl_sum += (ratio - 1.0) - log_ratio
        if abs(ratio - 1.0) > clip_coef:
            clip_sum += 1.0
        d_logp = (-a_r if unclipped >= clipped else 0.0) * ratio / m
        if discrete:
            a_i = actions_discrete[i]
            for j in range(n_act):
                lp = head[r, j] - lse
                p = math.exp(lp)
                g = -p * d_logp
                if j == a_i:
                    g += d_logp
                if ent_coef != 0.0:
                    g += ent_coef / m * p * (lp + ent)
                d_head[r, j] = g
        else:
            for j in range(n_act):
                inv_std = math.exp(-log_std[j])
                z = (actions_continuous[i, j] - head[r, j]) * inv_std
                d_head[r, j] = z * inv_std * d_logp
                d_log_std[j] += d_logp * (z * z - 1.0)
    mlp_backward(d_head, x, ahs, aws, act, agws, agbs)
    if not discrete:
        for j in range(n_act):
            log_std_grad[j] = d_log_std[j] - ent_coef
    sums[0], sums[1], sums[2], sums[3] = pg_sum, ent_sum, kl_sum, clip_sum


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _critic_minibatch(xc, idx, old_values, returns, critic, act, clip_coef, clip_vloss, vf_coef):  # pragma: no cover
    """The critic's half of one minibatch update: forward, the (clipped) value loss and the backward into the
    critic's gradients; returns the minibatch's summed value loss. Touches nothing of the actor."""
    m = idx.shape[0]
    cws, cbs, cgws, cgbs, chs, values_scratch = critic
    mlp_forward(xc, cws, cbs, act, chs, values_scratch)
    values = values_scratch[:m]
    d_values = np.empty((m, 1), np.float32)
    v_sum = 0.0
    for r in range(m):
        i = idx[r]
        v = values[r, 0]
        v_err = v - returns[i]
        if clip_vloss:
            dv = v - old_values[i]
            c_err = old_values[i] + min(max(dv, -clip_coef), clip_coef) - returns[i]
            if v_err * v_err >= c_err * c_err:
                d_values[r, 0] = v_err * (vf_coef / m)
                v_sum += 0.5 * v_err * v_err
            else:
                d_values[r, 0] = c_err * (vf_coef / m) if abs(dv) <= clip_coef else 0.0
                v_sum += 0.5 * c_err * c_err
        else:
            d_values[r, 0] = v_err * (vf_coef / m)
            v_sum += 0.5 * v_err * v_err
    mlp_backward(d_values, xc, chs, cws, act, cgws, cgbs)
    return v_sum


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _clip_and_step(params, grads, exp_avgs, exp_avg_sqs, steps, max_grad_norm, lr, beta1, beta2, eps, sums, v_sum,
                   m, stats_row):  # pragma: no cover
    """The end of one minibatch update, once both halves wrote their gradients: global-norm clipping over the actor
    and the critic together, Adam, and the minibatch's statistics (means of ``sums`` and ``v_sum``) into
    ``stats_row`` [5]."""
    clip_and_count_unchecked(grads, steps, max_grad_norm)
    _adam(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, eps)
    stats_row[0] = sums[0] / m
    stats_row[1] = v_sum / m
    stats_row[2] = sums[1] / m
    stats_row[3] = sums[2] / m
    stats_row[4] = sums[3] / m


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _ppo_epoch(obs, actions_discrete, actions_continuous, discrete, action_masks, masked, old_log_probs, old_values,
               advantages, returns, perm, batch_size, norm_mode, batch_mean, batch_std, params, grads, exp_avgs,
               exp_avg_sqs, steps, actor, critic, act, actor_lo, actor_hi, critic_lo, critic_hi, clip_coef, clip_vloss,
               ent_coef, vf_coef, max_grad_norm, lr, beta1, beta2, eps, stats_out):  # pragma: no cover
    """Every minibatch of one epoch in one thread: each minibatch's actor half, critic half, then clipping and
    Adam. ``PPOEpochKernel`` runs the same three pieces with the halves in two threads (``threads=2``)."""
    total = perm.shape[0]
    n_mb = 0
    log_std_k = len(params) - 1  # a Gaussian head's log_std (unused by a categorical one)
    sums = np.zeros(4, np.float64)
    for start in range(0, total, batch_size):
        m = min(batch_size, total - start)
        idx = perm[start:start + m]
        x, xc, adv = _minibatch_inputs(obs, advantages, idx, actor_lo, actor_hi, critic_lo, critic_hi, norm_mode,
                                       batch_mean, batch_std)
        _actor_minibatch(x, idx, adv, actions_discrete, actions_continuous, discrete, action_masks, masked,
                         old_log_probs, actor, act, params[log_std_k], grads[log_std_k], clip_coef, ent_coef, sums)
        v_sum = _critic_minibatch(xc, idx, old_values, returns, critic, act, clip_coef, clip_vloss, vf_coef)
        _clip_and_step(params, grads, exp_avgs, exp_avg_sqs, steps, max_grad_norm, lr, beta1, beta2, eps, sums,
                       v_sum, m, stats_out[n_mb])
        n_mb += 1
    return n_mb


def _check(name: str, a, dtype, ndim: int, rows: int | None = None) -> None:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != dtype or a.ndim != ndim or not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous {ndim}-D {np.dtype(dtype).name} array, "
                        f"got {a.ndim}-D {a.dtype} (contiguous: {a.flags.c_contiguous})")
    if rows is not None and a.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows, got {a.shape[0]}")


class PPOEpochKernel:
    """The compiled epoch bound to one policy's arrays, checked once (``__init__``); ``__call__`` runs an epoch.

    Args:
        params, grads, exp_avgs, exp_avg_sqs, steps: see the module docstring (zero-copy views; the caller
            keeps the tensors alive and rebinds when a tensor object is replaced).
        shapes: [K, 2] int64; n_actor, n_critic: Linear layers of each MLP; discrete: categorical head (else a
            Gaussian with log_std last); relu: ReLU hidden activations (else tanh).
        actor_columns, critic_columns: the column range ``[lo, hi)`` of ``obs`` each network reads (default: the
            first ``in`` columns; multi-agent PPO's critic reads the global state at the end of each row).
    """

    def __init__(self, params: tuple, grads: tuple, exp_avgs: tuple, exp_avg_sqs: tuple, steps: tuple,
                 shapes: np.ndarray, *, n_actor: int, n_critic: int, discrete: bool, relu: bool,
                 actor_columns: tuple[int, int] | None = None, critic_columns: tuple[int, int] | None = None):
        k = 2 * (n_actor + n_critic) + (0 if discrete else 1)
        for name, arrays in (("params", params), ("grads", grads), ("exp_avgs", exp_avgs),
                             ("exp_avg_sqs", exp_avg_sqs), ("steps", steps)):
            if not isinstance(arrays, tuple) or len(arrays) != k:
                raise ValueError(f"{name} must be a tuple of {k} arrays")
            for j, a in enumerate(arrays):
                _check(f"{name}[{j}]", a, np.float32, 1)
                if not a.flags.writeable:
                    raise ValueError(f"{name}[{j}] must be writable")
                want = 1 if name == "steps" else int(np.prod(shapes[j]))
                if a.shape[0] != want:
                    raise ValueError(f"{name}[{j}] must have {want} elements, got {a.shape[0]}")
        _check("shapes", shapes, np.int64, 2, k)
        for l in range(n_actor + n_critic - 1):
            if l == n_actor - 1:
                continue
            if shapes[2 * l, 0] != shapes[2 * l + 2, 1]:
                raise ValueError(f"layer {l} has {shapes[2 * l, 0]} outputs but the next takes {shapes[2 * l + 2, 1]}")
        actor_in, critic_in = int(shapes[0, 1]), int(shapes[2 * n_actor, 1])
        actor_columns = (0, actor_in) if actor_columns is None else tuple(int(v) for v in actor_columns)
        critic_columns = (0, actor_in) if critic_columns is None else tuple(int(v) for v in critic_columns)
        for name, (lo, hi), width in (("actor_columns", actor_columns, actor_in),
                                      ("critic_columns", critic_columns, critic_in)):
            if not 0 <= lo < hi or hi - lo != width:
                raise ValueError(f"{name}={(lo, hi)} must be a column range [lo, hi) of the {width} inputs its first "
                                 "layer takes")
        if shapes[2 * (n_actor + n_critic) - 2, 0] != 1:
            raise ValueError("the critic must output one value")
        if n_actor < 2 or n_critic < 2:
            raise ValueError("the actor and the critic need at least one hidden layer each")

        def layout(flat: tuple, first: int, n: int) -> tuple[tuple, tuple]:
            """Layers first..first+n-1 of ``flat`` in ``rapidrl.kernels.mlp``'s layout: (weights [out, in], biases)."""
            return (tuple(flat[first + 2 * l].reshape(tuple(shapes[first + 2 * l])) for l in range(n)),
                    tuple(flat[first + 2 * l + 1] for l in range(n)))

        self.actor = (*layout(params, 0, n_actor), *layout(grads, 0, n_actor))  # ws, bs, gws, gbs
        self.critic = (*layout(params, 2 * n_actor, n_critic), *layout(grads, 2 * n_actor, n_critic))
        self.args = (params, grads, exp_avgs, exp_avg_sqs, steps)  # the flat arrays of Adam and clipping
        self.columns = (*actor_columns, *critic_columns)
        self.act = RELU if relu else TANH
        self.discrete = discrete
        self.obs_dim = max(actor_columns[1], critic_columns[1])
        self.n_out = int(shapes[2 * n_actor - 2, 0])
        self._scratch: dict[int, tuple] = {}  # batch_size -> (actor's, critic's (hidden activations, output))
        self._worker: ThreadPoolExecutor | None = None  # the critic's thread of threads=2, started on first use

    def _scratch_for(self, batch_size: int) -> tuple[tuple, tuple]:
        """The forward's scratch for minibatches of up to ``batch_size`` rows: (hidden activations, output) of the
        actor and of the critic."""
        if batch_size not in self._scratch:
            def scratch(ws: tuple) -> tuple:
                return (tuple(np.zeros((batch_size, w.shape[0]), np.float32) for w in ws[:-1]),
                        np.zeros((batch_size, ws[-1].shape[0]), np.float32))

            self._scratch = {batch_size: (scratch(self.actor[0]), scratch(self.critic[0]))}
        return self._scratch[batch_size]

    def __call__(self, obs, actions, old_log_probs, old_values, advantages, returns, perm, *, batch_size: int,
                 norm_mode: int, batch_mean: float, batch_std: float, clip_coef: float, clip_vloss: bool,
                 ent_coef: float, vf_coef: float, max_grad_norm: float, lr: float, beta1: float, beta2: float,
                 eps: float, action_masks: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
        """One epoch over ``perm`` [P] (indices of the M samples to train on, in minibatch order: all M, or the
        active ones of a masked rollout), cut into minibatches of ``batch_size`` (the last one smaller); returns
        the per-minibatch statistics [ceil(P / batch_size), 5] (``STAT_NAMES``). action_masks: [M, A] bool, the
        valid actions of each sample (discrete actions; None: all valid). threads: 2 runs each minibatch's actor
        and critic halves in two threads (bitwise the same result as 1; faster where two threads' small matrix
        products scale, see ``PPOConfig.update_threads``)."""
        _check("perm", perm, np.int64, 1)
        _check("obs", obs, np.float32, 2)
        total, rows = perm.shape[0], obs.shape[0]
        if obs.shape[1] < self.obs_dim:
            raise ValueError(f"obs must have at least {self.obs_dim} columns (the networks' input ranges), "
                             f"got {obs.shape[1]}")
        for name, a in (("old_log_probs", old_log_probs), ("old_values", old_values), ("advantages", advantages),
                        ("returns", returns)):
            _check(name, a, np.float32, 1, rows)
        if self.discrete:
            _check("actions", actions, np.int64, 1, rows)
            a_d, a_c = actions, np.zeros((1, 1), np.float32)
            if rows and (actions.min() < 0 or actions.max() >= self.n_out):
                raise ValueError(f"actions must lie in [0, {self.n_out})")
            if action_masks is not None:
                _check("action_masks", action_masks, np.bool_, 2, rows)
                if action_masks.shape[1] != self.n_out:
                    raise ValueError(f"action_masks must have {self.n_out} columns, got {action_masks.shape[1]}")
                if rows and not action_masks[np.arange(rows), actions].all():
                    raise ValueError("an action is invalid under its own action mask")
        else:
            _check("actions", actions, np.float32, 2, rows)
            if actions.shape[1] != self.n_out:
                raise ValueError(f"actions must have {self.n_out} columns, got {actions.shape[1]}")
            a_d, a_c = np.zeros(1, np.int64), actions
            if action_masks is not None:
                raise ValueError("action_masks apply to discrete actions only")
        if total and (perm.min() < 0 or perm.max() >= rows):
            raise ValueError(f"perm must index [0, {rows})")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if norm_mode not in (NORM_NONE, NORM_MINIBATCH, NORM_BATCH):
            raise ValueError(f"norm_mode must be 0, 1 or 2, got {norm_mode!r}")
        if isinstance(threads, bool) or threads not in (1, 2):
            raise ValueError(f"threads must be 1 or 2, got {threads!r}")
        stats = np.zeros((-(-total // batch_size), 5), np.float64)
        actor_scratch, critic_scratch = self._scratch_for(batch_size)
        masked = action_masks is not None
        masks = action_masks if masked else np.ones((1, 1), np.bool_)
        actor, critic = (*self.actor, *actor_scratch), (*self.critic, *critic_scratch)
        scalars = (float(clip_coef), bool(clip_vloss), float(ent_coef), float(vf_coef), float(max_grad_norm),
                   float(lr), float(beta1), float(beta2), float(eps))
        if threads == 1:
            _ppo_epoch(obs, a_d, a_c, self.discrete, masks, masked, old_log_probs, old_values, advantages, returns,
                       perm, batch_size, norm_mode, float(batch_mean), float(batch_std), *self.args, actor, critic,
                       self.act, *self.columns, *scalars, stats)
        else:
            self._epoch_two_threads(obs, a_d, a_c, masks, masked, old_log_probs, old_values, advantages, returns, perm,
                                    batch_size, norm_mode, float(batch_mean), float(batch_std), actor, critic,
                                    scalars, stats)
        return stats

    def _epoch_two_threads(self, obs, a_d, a_c, masks, masked, old_log_probs, old_values, advantages, returns, perm,
                           batch_size, norm_mode, batch_mean, batch_std, actor, critic, scalars, stats) -> None:
        """``_ppo_epoch`` with each minibatch's critic half in a second thread while this one runs the actor half
        (both compiled ``nogil``), then clipping and Adam here once both are done: the same operations on the same
        arrays in the same order per network, so bitwise the same parameters, Adam state and statistics."""
        clip_coef, clip_vloss, ent_coef, vf_coef, max_grad_norm, lr, beta1, beta2, eps = scalars
        params, grads = self.args[0], self.args[1]
        log_std, log_std_grad = params[-1], grads[-1]  # a Gaussian head's (unused by a categorical one)
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="rapidrl-ppo-critic")
        sums = np.zeros(4, np.float64)
        for n_mb, start in enumerate(range(0, perm.shape[0], batch_size)):
            idx = perm[start:start + batch_size]
            x, xc, adv = _minibatch_inputs(obs, advantages, idx, *self.columns, norm_mode, batch_mean, batch_std)
            critic_half = self._worker.submit(_critic_minibatch, xc, idx, old_values, returns, critic, self.act,
                                              clip_coef, clip_vloss, vf_coef)
            try:
                _actor_minibatch(x, idx, adv, a_d, a_c, self.discrete, masks, masked, old_log_probs, actor, self.act,
                                 log_std, log_std_grad, clip_coef, ent_coef, sums)
            finally:
                v_sum = critic_half.result()  # never leave the critic's thread writing after an error here
            _clip_and_step(*self.args, max_grad_norm, lr, beta1, beta2, eps, sums, v_sum, idx.shape[0], stats[n_mb])

    def close(self) -> None:
        """Stop the critic's thread of ``threads=2`` (if it was started); a later two-threaded epoch starts another."""
        if self._worker is not None:
            self._worker.shutdown()
            self._worker = None


# The epoch calls jitted functions and constants of other modules: recompile it when they change.
invalidate_stale_cache(_ppo_epoch, [m.__file__ for m in (activations, adam, advantage_kernels, distributions, mlp)]
                       + [__file__])
