"""The compiled off-policy gradient backends equal the PyTorch definitions: DQN and SAC take the same optimizer
steps (parameters, optimizer moments, statistics) through ``_compiled_step`` as through ``_autograd_step`` (the
"torch" backend, autograd on the losses), DDPG and TD3 through their compiled critic and actor steps as through
autograd; the batched ensemble backward equals autograd through
``CriticEnsemble``; the compiled loss heads and the squashed-Gaussian backward equal autograd through ``dqn_loss``
and ``squashed_gaussian``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rapidrl.algos.c51 import C51
from rapidrl.algos.ddpg import DDPG
from rapidrl.algos.dqn import DQN, dqn_loss
from rapidrl.algos.qrdqn import QRDQN
from rapidrl.algos.sac import SAC
from rapidrl.algos.td3 import TD3
from rapidrl.kernels.categorical import c51_grads
from rapidrl.kernels.quantile import qrdqn_grads
from rapidrl.kernels.td import dqn_td_grads
from rapidrl.nn.mlp_grad import ensemble_backward, ensemble_forward
from rapidrl.nn.qnets import CriticEnsemble, squashed_gaussian

SMALL = dict(hidden=(16, 16), batch_size=32, learning_starts=10_000, buffer_size=1_000, seed=3)


def _filled(cls, env_id, **kw):
    model = cls(env_id, **{**SMALL, **kw})
    model.learn(200, progress_bar=False)  # random actions only: fills the buffer, no update
    return model


def _params_and_moments(model):
    out = [p.detach().clone() for g in model.optimizer.param_groups for p in g["params"]]
    for s in model.optimizer.state.values():
        out += [s["exp_avg"].clone(), s["exp_avg_sq"].clone()]
    return out


DQN_CASES = [dict(), dict(double_q=False, max_grad_norm=0.0), dict(prioritized=True, max_grad_norm=0.05)]  # clip binds
C51_CASES = [dict(n_atoms=11, v_min=0.0, v_max=20.0), dict(n_atoms=11, double_q=True, max_grad_norm=0.0),
             dict(prioritized=True, n_step=3, max_grad_norm=0.05)]
QRDQN_CASES = [dict(n_quantiles=5), dict(n_quantiles=5, double_q=True, max_grad_norm=0.0),
               dict(n_quantiles=5, prioritized=True, n_step=3, max_grad_norm=0.05)]


SAC_CASES = [("Pendulum-v1", dict()), ("Pendulum-v1", dict(ent_coef=0.2, n_critics=3)),
             ("MountainCarContinuous-v0", dict(hidden=(8, 8, 8)))]


@pytest.mark.parametrize("cls, env_id, kw", [
    *[(DQN, "CartPole-v1", kw) for kw in DQN_CASES],
    *[(C51, "CartPole-v1", kw) for kw in C51_CASES],
    *[(QRDQN, "CartPole-v1", kw) for kw in QRDQN_CASES],
    *[(SAC, env_id, kw) for env_id, kw in SAC_CASES],
])
def test_compiled_update_equals_autograd(cls, env_id, kw):
    compiled, ref = _filled(cls, env_id, **kw), _filled(cls, env_id, **kw)
    assert compiled.gradient_backend == "handwritten"  # on CPU the handwritten backend is the default
    assert compiled._update_fn == compiled._update_step  # eager: the compiled step is what training runs
    stats = []
    for step in range(4):
        batch = ref.buffer.sample(32, as_torch=True)
        for fn in (compiled._compiled_step, ref._autograd_step):
            torch.manual_seed(step)  # SAC: the same action noise
            stats.append(fn(batch).clone())
        torch.testing.assert_close(stats[-2], stats[-1], rtol=1e-5, atol=1e-6)
        for a, b in zip(_params_and_moments(compiled), _params_and_moments(ref)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    moved = [not torch.equal(a, b) for a, b in zip(_params_and_moments(compiled), _params_and_moments(_filled(
        cls, env_id, **kw)))]
    assert all(moved[: len(list(compiled.optimizer.param_groups[0]["params"]))])  # every parameter was trained


def _deterministic_state(model):
    """Parameters of the actor, the critics and their targets, and both optimizers' Adam moments."""
    out = [p.detach().clone() for m in (model.actor, model.critic, model.actor_target, model.critic_target)
           for p in m.parameters()]
    for opt in (model.actor_optimizer, model.critic_optimizer):
        out += [t.clone() for s in opt.state.values() for t in (s["exp_avg"], s["exp_avg_sq"])]
    return out


@pytest.mark.parametrize("cls, env_id, kw", [
    (DDPG, "Pendulum-v1", dict()), (DDPG, "Pendulum-v1", dict(policy_delay=2)), (TD3, "Pendulum-v1", dict()),
    (TD3, "MountainCarContinuous-v0", dict(hidden=(8, 8, 8), n_critics=3, policy_delay=1)),
])
def test_deterministic_actor_critic_compiled_steps_equal_autograd(cls, env_id, kw):
    """Critic steps every gradient step, actor steps and Polyak updates every policy_delay-th (``compiled_steps``
    against ``td3_steps``): parameters, targets, Adam moments and statistics as through autograd (TD3's smoothing
    noise drawn alike)."""
    compiled, ref = _filled(cls, env_id, **kw), _filled(cls, env_id, gradient_backend="torch", **kw)
    assert (compiled.gradient_backend, ref.gradient_backend) == ("handwritten", "torch")
    assert compiled._update_fn == compiled._update_step  # eager: the update is what training runs
    for step in range(5):
        batch = ref.buffer.sample(32, as_torch=True)
        stats = []
        for model in (compiled, ref):
            torch.manual_seed(step)
            stats.append(model._update_fn(batch).clone())
            model.num_gradient_steps += 1
        torch.testing.assert_close(stats[0], stats[1], rtol=1e-5, atol=1e-6)
        for a, b in zip(_deterministic_state(compiled), _deterministic_state(ref)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    fresh = _deterministic_state(_filled(cls, env_id, **kw))
    n_params = sum(1 for m in (compiled.actor, compiled.critic, compiled.actor_target, compiled.critic_target)
                   for _ in m.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(_deterministic_state(compiled)[:n_params], fresh))


@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_deterministic_actor_compiled_acting_equals_the_torch_actor(cls):
    compiled, ref = _filled(cls, "Pendulum-v1"), _filled(cls, "Pendulum-v1", gradient_backend="torch")
    assert compiled.paths["acting"].value == "compiled" and ref._acting_forward is None
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(compiled.predict(obs, deterministic=True)[0], ref.predict(obs, deterministic=True)[0],
                               rtol=1e-5, atol=1e-6)
    explore = compiled._explore_actions(obs), ref._explore_actions(obs)  # the same seeded noise, clipped alike
    np.testing.assert_allclose(*explore, rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(explore[0]) <= 2.0) and not np.allclose(explore[0], compiled.predict(obs, True)[0])


@pytest.mark.parametrize("cls, env_id", [(DQN, "CartPole-v1"), (SAC, "Pendulum-v1")])
def test_the_torch_backend_trains_when_chosen(cls, env_id):
    model = _filled(cls, env_id, gradient_backend="torch", learning_starts=64)
    assert model.gradient_backend == "torch" and model._acting_forward is None
    assert model.num_gradient_steps > 0 and any(k.startswith("losses/") for k in model.metrics)


def test_ensemble_backward_equals_autograd_with_param_rows():
    torch.manual_seed(0)
    critic = CriticEnsemble(3, 5, 2, (7, 6))
    x = torch.randn(10, 7, requires_grad=True)  # rows 0-3 train the weights, 4-9 only want input gradients
    out = critic(x[:, :5], x[:, 5:])  # [3, 10]
    w = torch.randn(3, 10)
    loss_params = (out[:, :4] * w[:, :4]).sum()
    params = list(critic.parameters())
    ref_param_grads = torch.autograd.grad(loss_params, params, retain_graph=True)
    ref_x_grad = torch.autograd.grad((out * w).sum(), x)[0]
    weights, biases = list(critic.weights), list(critic.biases)
    y, inputs = ensemble_forward(x.detach(), weights, biases)
    torch.testing.assert_close(y.squeeze(-1), out.detach())
    d_x = ensemble_backward(w.unsqueeze(-1), inputs, weights, biases, param_rows=4)
    for p, g in zip(params, ref_param_grads):
        torch.testing.assert_close(p.grad, g)
    torch.testing.assert_close(d_x.sum(0), ref_x_grad)


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
def test_dqn_compiled_loss_head_equals_autograd(double_q, weighted):
    g = torch.Generator().manual_seed(7)
    b, a = 40, 3
    q_both = torch.randn(2 * b if double_q else b, a, generator=g) * 2
    q_both[b:b + 5] = 1.0  # ties: the first maximum wins, as with torch.argmax
    next_target = torch.randn(b, a, generator=g)
    actions = torch.randint(0, a, (b,), generator=g)
    rewards, discounts = torch.randn(b, generator=g), (torch.rand(b, generator=g) > 0.2).float() * 0.99
    weights = torch.rand(b, generator=g) if weighted else None
    next_q = (next_target.gather(1, q_both[b:].argmax(1, keepdim=True)).squeeze(1) if double_q
              else next_target.max(1).values)
    q_all = q_both[:b].clone().requires_grad_(True)  # the reference: autograd through dqn_loss
    q = q_all.gather(1, actions.unsqueeze(1)).squeeze(1)
    loss, td = dqn_loss(q, next_q, rewards, discounts, weights)
    d_ref = torch.autograd.grad(loss, q_all)[0]
    loss, q = loss.detach(), q.detach()
    d_out, out = torch.empty(b, a), torch.empty(3 + b)
    dqn_td_grads(q_both.numpy(), next_target.numpy(), actions.numpy(), rewards.numpy(), discounts.numpy(),
                 None if weights is None else weights.numpy(), double_q, d_out.numpy(), out.numpy())
    torch.testing.assert_close(d_out, d_ref)
    torch.testing.assert_close(out, torch.cat([torch.stack([loss, q.mean(), td.abs().mean()]), td.abs()]))
    assert (td.abs() > 1).any() and (td.abs() < 1).any()  # both branches of the Huber loss were exercised


def test_dqn_cpu_kernels_rejects_bad_input():
    z = np.zeros(4, np.float32)
    good = dict(q_both=np.zeros((8, 2), np.float32), next_target=np.zeros((4, 2), np.float32),
                actions=np.zeros(4, np.int64), rewards=z, discounts=z, weights=None, double_q=True,
                d_out=np.zeros((4, 2), np.float32), out=np.zeros(7, np.float32))
    dqn_td_grads(**good)
    for change, error in [(dict(q_both=np.zeros((4, 2), np.float32)), "q_both"),
                          (dict(actions=np.full(4, 2, np.int64)), "actions must lie"),
                          (dict(actions=np.zeros(4, np.int32)), "actions"),
                          (dict(rewards=np.zeros(4)), "rewards"),
                          (dict(out=np.zeros(6, np.float32)), "out")]:
        with pytest.raises((TypeError, ValueError), match=error):
            dqn_td_grads(**{**good, **change})


LOSS_HEADS = {"c51": (c51_grads, dict(support=np.linspace(-1, 1, 3, dtype=np.float32))),
              "qrdqn": (qrdqn_grads, dict(n_quantiles=3))}


@pytest.mark.parametrize("name", list(LOSS_HEADS))
def test_distributional_loss_heads_reject_bad_input(name):
    """C51's and QR-DQN's compiled loss heads (3 outputs per action, 2 actions) refuse what DQN's refuses, and an
    output count that is not a whole number of actions; C51's a support that is not increasing."""
    kernel, extra = LOSS_HEADS[name]
    b, width = 4, 6
    good = dict(q_both=np.zeros((b, width), np.float32), next_target=np.zeros((b, width), np.float32),
                actions=np.zeros(b, np.int64), rewards=np.zeros(b, np.float32), discounts=np.ones(b, np.float32),
                weights=None, double_q=False, d_out=np.empty((b, width), np.float32), out=np.empty(3 + b, np.float32),
                **extra)
    kernel(**good)
    changes = [(dict(next_target=np.zeros((b, 4), np.float32)), ValueError, "whole number"),
               (dict(double_q=True), ValueError, "q_both"),
               (dict(actions=np.array([0, 1, 2, 0])), ValueError, r"actions must lie in \[0, 2\)"),
               (dict(actions=np.zeros(b, np.int32)), TypeError, "actions"),
               (dict(discounts=np.ones(b, np.float64)), TypeError, "discounts"),
               (dict(weights=np.ones(b + 1, np.float32)), ValueError, "weights"),
               (dict(next_mask=np.ones((b + 1, 2), bool)), ValueError, "next_mask")]
    if name == "c51":
        changes += [(dict(support=np.array([1.0, 0.0, -1.0], np.float32)), ValueError, "increasing"),
                    (dict(support=np.linspace(-1, 1, 3)), TypeError, "support")]
    for change, error, match in changes:
        with pytest.raises(error, match=match):
            kernel(**{**good, **change})


def test_sac_squash_kernels_equal_torch_including_saturated_actions():
    from rapidrl.kernels import sac as sac_kernels

    g = torch.Generator().manual_seed(5)
    rows, a = 12, 3
    head = torch.randn(rows, 2 * a, generator=g) * 4
    head[0, :a] = 30.0  # tanh saturates: the log-density must stay finite (the stable softplus form)
    noise = torch.randn(rows, a, generator=g)
    scale, center = torch.tensor([2.0, 0.5, 1.0]), torch.tensor([0.0, 1.0, -1.0])
    actions, log_prob, saved = squashed_gaussian(head, noise, scale, center, -5.0, 2.0)
    out = [np.zeros((rows, a), np.float32), np.zeros(rows, np.float32)]
    saved_np = [np.zeros((rows, a), np.float32) for _ in range(3)]
    sac_kernels.squash(head.numpy(), noise.numpy(), scale.numpy(), center.numpy(), -5.0, 2.0, out[0], out[1],
                       *saved_np)
    torch.testing.assert_close(torch.from_numpy(out[0]), actions)
    torch.testing.assert_close(torch.from_numpy(out[1]), log_prob, rtol=1e-5, atol=1e-4)
    assert np.isfinite(out[1]).all()
    for ours, ref in zip(saved_np, saved):
        torch.testing.assert_close(torch.from_numpy(ours), ref)
    b = rows // 2
    d_x = torch.randn(2, rows, 4 + a, generator=g)
    head_b = head[:b].clone().requires_grad_(True)  # the reference: autograd through squashed_gaussian
    actions_b, log_prob_b, _ = squashed_gaussian(head_b, noise[:b], scale, center, -5.0, 2.0)
    ref = torch.autograd.grad((actions_b * d_x[:, b:, -a:].sum(0)).sum() + 0.3 * log_prob_b.sum(), head_b)[0]
    d_head = np.zeros((b, 2 * a), np.float32)
    sac_kernels.squash_backward(d_x.numpy(), 0.3, noise[:b].numpy(), scale.numpy(), *(x[:b] for x in saved_np),
                                -5.0, 2.0, d_head)
    torch.testing.assert_close(torch.from_numpy(d_head), ref)


def test_sac_kernels_reject_bad_input():
    from rapidrl.kernels import sac as sac_kernels

    f = np.zeros
    with pytest.raises(ValueError, match="head"):
        sac_kernels.squash(f((4, 3), np.float32), f((4, 1), np.float32), f(1, np.float32), f(1, np.float32),
                           -5.0, 2.0, f((4, 1), np.float32), f(4, np.float32), *[f((4, 1), np.float32)] * 3)
    with pytest.raises(TypeError, match="noise"):
        sac_kernels.squash(f((4, 2), np.float32), f((4, 1)), f(1, np.float32), f(1, np.float32),
                           -5.0, 2.0, f((4, 1), np.float32), f(4, np.float32), *[f((4, 1), np.float32)] * 3)
    with pytest.raises(ValueError, match="d_x"):
        sac_kernels.squash_backward(f((2, 3, 4), np.float32), 0.1, f((2, 1), np.float32), f(1, np.float32),
                                    *[f((2, 1), np.float32)] * 3, -5.0, 2.0, f((2, 2), np.float32))
    with pytest.raises(ValueError, match="q_both"):
        sac_kernels.loss_head(f((2, 3), np.float32), f((2, 2), np.float32), f(2, np.float32), f(2, np.float32),
                              f(4, np.float32), 0.1, 0.0, -1.0, f((2, 4), np.float32), f(7, np.float32))


@pytest.mark.parametrize("deterministic", [True, False])
def test_compiled_acting_equals_pytorch_acting(deterministic):
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    sac = SAC("Pendulum-v1", hidden=(32, 32), seed=1)
    actions, compiled_forward = [], sac._acting_forward
    for forward in (compiled_forward, None):
        sac._acting_forward = forward  # None: the PyTorch actor
        sac.torch_rng.manual_seed(4)  # the same exploration noise (the model's own generator)
        actions.append(sac._policy_actions(obs, deterministic))
    np.testing.assert_allclose(actions[0], actions[1], rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(actions[0]) <= 2.0)
    dqn = DQN("CartPole-v1", hidden=(32, 32), seed=1)
    cart = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    greedy = dqn._greedy(cart)  # 16 rows: the compiled forward
    with torch.no_grad():
        expected = dqn.q_net(torch.from_numpy(cart)).argmax(1).numpy()
    np.testing.assert_array_equal(greedy, expected)
