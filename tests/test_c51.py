"""C51 and Rainbow: the categorical projection and the cross-entropy on hand-computed cases and against a loop of the
paper's Algorithm 1, the update's target (C51: the target network's greedy action; Double Q: the online network's),
Rainbow's noise (drawn for each update and exploring step, removed for deterministic acting and export), masks at
1,024 actions, save/load, determinism, and learning CartPole."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from docs_examples import run_examples

from rapidrl.algos.c51 import C51, Rainbow
from rapidrl.algos.offpolicy_losses import c51_loss, categorical_projection, projection_dense
from rapidrl.nn.noisy import NoisyLinear
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.config import ConfigError

TINY = dict(hidden=(32,), learning_starts=64, batch_size=32, buffer_size=2_000, train_freq=4, gradient_steps=2,
            log_every_steps=10, v_min=0.0, v_max=50.0, n_atoms=11)


# -------------------------------------------------------------------------- the pure functions


def test_projection_hand_computed_on_three_atoms():
    """Atoms -1, 0, 1 (dz = 1), next probabilities p = (0.2, 0.3, 0.5). Each atom j moves to
    Tz_j = clip(r + discount z_j, -1, 1) and splits its mass between its neighbours by closeness:
    - terminal (discount 0), r = 0.5: all mass at 0.5 -> half to 0, half to 1;
    - r = 0.25, discount 0.5: Tz = (-0.25, 0.25, 0.75): 0.2 -> (-1: 0.05, 0: 0.15), 0.3 -> (0: 0.225, 1: 0.075),
      0.5 -> (0: 0.125, 1: 0.375); m = (0.05, 0.5, 0.45);
    - r = 2, discount 0.9: Tz = (1.1, 2, 2.9) all clip to 1 -> (0, 0, 1);
    - r = -3, discount 1: Tz = (-4, -3, -2) all clip to -1 -> (1, 0, 0);
    - r = 1, discount 1: Tz = (0, 1, 2 -> 1), landing on atoms: (0, 0.2, 0.8);
    - r = 0, discount 1: the identity, m = p."""
    support = torch.tensor([-1.0, 0.0, 1.0])
    p = torch.tensor([0.2, 0.3, 0.5]).expand(6, 3)
    rewards = torch.tensor([0.5, 0.25, 2.0, -3.0, 1.0, 0.0])
    discounts = torch.tensor([0.0, 0.5, 0.9, 1.0, 1.0, 1.0])
    m = categorical_projection(rewards, discounts, p, support)
    torch.testing.assert_close(projection_dense(rewards, discounts, p, support), m)
    expected = torch.tensor([[0.0, 0.5, 0.5], [0.05, 0.5, 0.45], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.2, 0.8],
                             [0.2, 0.3, 0.5]])
    torch.testing.assert_close(m, expected)


def _project_loop(r: float, d: float, p: list[float], z: list[float]) -> list[float]:
    """Algorithm 1 of Bellemare et al. (2017) as written: floor/ceil neighbours, all mass to an atom hit exactly."""
    n = len(z)
    dz = (z[-1] - z[0]) / (n - 1)
    m = [0.0] * n
    for j in range(n):
        tz = min(max(r + d * z[j], z[0]), z[-1])
        b = (tz - z[0]) / dz
        lo, hi = math.floor(b), math.ceil(b)
        if lo == hi:
            m[lo] += p[j]
        else:
            m[lo] += p[j] * (hi - b)
            m[hi] += p[j] * (b - lo)
    return m


@pytest.mark.parametrize("n", [2, 5, 51])
def test_projection_equals_the_loop_of_algorithm_1_on_random_inputs(n):
    g = torch.Generator().manual_seed(n)
    b = 64
    v_min = float(torch.empty(()).uniform_(-20, 0, generator=g))
    v_max = v_min + float(torch.empty(()).uniform_(1, 40, generator=g))
    support = torch.linspace(v_min, v_max, n, dtype=torch.float64)
    p = torch.rand(b, n, generator=g, dtype=torch.float64).pow(3)
    p /= p.sum(1, keepdim=True)
    rewards = torch.randn(b, generator=g, dtype=torch.float64) * (v_max - v_min) / 4
    rewards[:4] = torch.tensor([v_max * 3, v_min * 3 - 1, 0.0, support[1].item()])  # far outside, on an atom
    discounts = torch.tensor([0.0, 0.99, 0.99 ** 3])[torch.randint(3, (b,), generator=g)].double()
    m = categorical_projection(rewards, discounts, p, support)
    torch.testing.assert_close(projection_dense(rewards, discounts, p, support), m, rtol=0, atol=1e-12)  # off the CPU
    ref = torch.tensor([_project_loop(rewards[i].item(), discounts[i].item(), p[i].tolist(), support.tolist())
                        for i in range(b)], dtype=torch.float64)
    torch.testing.assert_close(m, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(m.sum(1), torch.ones(b, dtype=torch.float64))
    m32 = categorical_projection(rewards.float(), discounts.float(), p.float(), support.float())
    torch.testing.assert_close(m32, ref.float(), rtol=0, atol=1e-5)


def test_c51_loss_hand_computed_and_weighted():
    """Uniform logits over 3 atoms: -log p = log 3 on every atom, so the cross-entropy with any target is log 3;
    logits (0, log 2, 0): p = (1/4, 1/2, 1/4), target all on the middle atom -> log 2."""
    logits = torch.tensor([[0.0, 0.0, 0.0], [0.0, math.log(2.0), 0.0]], requires_grad=True)
    target = torch.tensor([[0.0, 0.5, 0.5], [0.0, 1.0, 0.0]])
    loss, per_sample = c51_loss(logits, target)
    torch.testing.assert_close(per_sample, torch.tensor([math.log(3.0), math.log(2.0)]))
    torch.testing.assert_close(loss, torch.tensor((math.log(3.0) + math.log(2.0)) / 2))
    loss_w, _ = c51_loss(logits, target, torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(loss_w, torch.tensor(math.log(3.0)))  # (2 log 3 + 0) / 2
    loss.backward()  # d CE / d logits = softmax - target, over the batch mean
    torch.testing.assert_close(logits.grad, torch.tensor([[1 / 3, 1 / 3 - 0.5, 1 / 3 - 0.5],
                                                          [0.25, 0.5 - 1.0, 0.25]]) / 2)


# -------------------------------------------------------------------------- the update and acting


@pytest.mark.parametrize("backend", ["handwritten", "torch"])
@pytest.mark.parametrize("double_q", [False, True])
def test_update_target_is_the_projected_distribution_at_the_greedy_next_action(double_q, backend):
    """The first update's loss equals a reference built from the networks: a* = argmax of the expected Q of s' (the
    target network's; Double Q: the online network's), the target network's distribution there projected by the loop
    of Algorithm 1 onto the atoms, the cross-entropy with the online logits of (s, a). On both gradient backends."""
    model = C51("CartPole-v1", double_q=double_q, n_step=3, gradient_backend=backend,
                **{**TINY, "learning_starts": 400})
    assert model.gradient_backend == backend
    with pytest.warns(UserWarning, match="warm-up"):
        model.learn(200, progress_bar=False)  # replay only
    assert model.num_gradient_steps == 0
    batch = model.buffer.sample(32, as_torch=True)
    z = model.support.tolist()
    with torch.no_grad():
        logits = model.q_net(batch.obs)[torch.arange(32), batch.actions]
        nt, no = model.q_target(batch.next_obs), model.q_net(batch.next_obs)
    expect = []
    for i in range(32):
        select = no[i] if double_q else nt[i]
        a = int((select.softmax(-1) * model.support).sum(-1).argmax())
        m = _project_loop(batch.rewards[i].item(), batch.discounts[i].item(), nt[i, a].softmax(-1).tolist(), z)
        expect.append(-(torch.tensor(m) * logits[i].log_softmax(-1)).sum())
    out = model._update_step(batch)
    torch.testing.assert_close(out[0], torch.stack(expect).mean(), rtol=1e-5, atol=1e-6)
    assert (batch.discounts == 0).any() and (batch.discounts > 0.9).any()  # terminal and 3-step rows both seen


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="n_atoms"):
        C51("CartPole-v1", n_atoms=1)
    with pytest.raises(ConfigError, match="v_max"):
        C51("CartPole-v1", v_min=1.0, v_max=1.0)
    with pytest.raises(ConfigError, match="adam_eps"):
        Rainbow("CartPole-v1", adam_eps=0.0)
    with pytest.raises(ConfigError, match="per_beta_anneal_steps"):
        Rainbow("CartPole-v1", per_beta_anneal_steps=0)
    with pytest.raises(TypeError, match="Rainbow needs a Discrete action space"):
        Rainbow("Pendulum-v1", **TINY)


def test_rainbow_defaults_are_the_published_combination():
    c = Rainbow("CartPole-v1", **TINY).config
    assert (c.double_q, c.dueling, c.noisy, c.n_step, c.prioritized, c.per_alpha, c.per_beta) == \
        (True, True, True, 3, True, 0.5, 0.4)
    assert c.exploration_initial_eps == c.exploration_final_eps == 0.0 and c.adam_eps == 1.5e-4
    c51 = C51("CartPole-v1", **TINY)
    assert not (c51.config.double_q or c51.config.dueling or c51.config.noisy or c51.config.prioritized)
    assert c51.gradient_backend == "handwritten"  # a plain MLP on the CPU; Rainbow's noisy dueling one: autograd
    assert Rainbow("CartPole-v1", **TINY).gradient_backend == "torch"


def test_smoke_rainbow_learns_writes_priorities_and_anneals_beta():
    model = Rainbow("CartPole-v1", per_beta_anneal_steps=100, **TINY)
    model.learn(600, progress_bar=False)
    assert model.num_gradient_steps > 100 and model.buffer.beta == 1.0
    assert {"losses/loss", "losses/q_values", "losses/cross_entropy"} <= set(model.metrics)
    rows = np.arange(len(model.buffer))
    assert np.unique(model.buffer.priorities(rows)).size > 1  # per-sample cross-entropies written back
    assert model.epsilon() == 0.0
    assert sum(isinstance(m, NoisyLinear) for m in model.q_net.modules()) == 4  # value and advantage MLPs, 2 each


def test_rainbow_noise_is_drawn_for_updates_and_exploring_steps_and_removed_for_deterministic_acting(tmp_path):
    model = Rainbow("CartPole-v1", **TINY)
    model.learn(200, progress_bar=False)
    noisy = [m for m in model.q_net.modules() if isinstance(m, NoisyLinear)]
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    model.predict(obs, deterministic=False)
    first = noisy[0].weight_epsilon.clone()
    model.predict(obs, deterministic=False)
    assert first.abs().sum() > 0 and not torch.equal(first, noisy[0].weight_epsilon)  # new noise per step
    target_noise = next(m for m in model.q_target.modules() if isinstance(m, NoisyLinear)).weight_epsilon.clone()
    model._train_step()
    assert not torch.equal(target_noise, next(m for m in model.q_target.modules()
                                              if isinstance(m, NoisyLinear)).weight_epsilon)
    held = [m.weight_epsilon.clone() for m in noisy]
    greedy = model.predict(obs, deterministic=True)
    assert all(torch.equal(m.weight_epsilon, h) for m, h in zip(noisy, held))  # acting changed no held noise
    model.predict(obs, deterministic=False)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), greedy)
    module = model.deterministic_module()  # the mean network, as predict's
    assert all(m.weight_epsilon.abs().sum() == 0 for m in module.modules() if isinstance(m, NoisyLinear))
    np.testing.assert_array_equal(module(torch.from_numpy(obs)).numpy(), greedy)
    with torch.no_grad():  # against the mean network computed by hand: mu only
        for m in noisy:
            m.weight_sigma.zero_()
            m.bias_sigma.zero_()
    np.testing.assert_array_equal(model.predict(obs, deterministic=False), greedy)
    loaded = Rainbow.load(model.save(tmp_path / "rainbow.pt"))
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True), greedy)


def test_masked_acting_and_targets_are_finite_at_1024_actions():
    """1,024 actions of which 1,000 are invalid in every state: exploration, warm-up and greedy acting pick valid
    actions only (an invalid one would show as reward 0 often: the target is always valid and is rewarded 1); the
    expected Q of 1,024 actions x 11 atoms is finite."""
    model = Rainbow("InvalidActionDiscrete-v0", env_kwargs=dict(dim=1024, n_invalid_actions=1000), num_envs=2,
                    **{**TINY, "learning_starts": 32, "batch_size": 16, "v_min": 0.0, "v_max": 10.0})
    model.learn(128, progress_bar=False)
    assert model.num_gradient_steps > 0 and np.isfinite(model.metrics["losses/loss"])
    env = model.env
    obs, info = env.reset(seed=3)
    for deterministic in (True, False):
        for _ in range(5):
            actions = model.predict(obs, deterministic=deterministic, action_masks=info["action_mask"])
            assert info["action_mask"][np.arange(2), actions].all()
            obs, *_, info = env.step(actions)
    q = model._q_values(obs)
    assert q.shape == (2, 1024) and torch.isfinite(q).all()


def test_c51_on_atari_uses_frame_replay_and_the_nature_cnn(tmp_path):
    """Without prioritized or n-step replay, C51 keeps DQN's frame replay on a frame-stacking env; noisy heads on the
    Nature CNN train, save and act deterministically after loading as before."""
    import rapidrl as rr

    model = C51("ALE/Breakout-v5", num_envs=2, seed=0, buffer_size=2000, learning_starts=160, train_freq=4,
                gradient_steps=1, batch_size=8, n_atoms=11, noisy=True, exploration_final_eps=0.0)
    assert isinstance(model.buffer, rr.buffers.FrameReplayBuffer) and model.q_net.has_encoder
    model.learn(240, progress_bar=False)
    assert model.num_gradient_steps > 0 and np.isfinite(model.metrics["losses/loss"])
    obs, _ = rr.make_vec("ALE/Breakout-v5", 2, seed=5, training=False).reset()
    loaded = C51.load(model.save(tmp_path / "c51.pt"))
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), loaded.predict(obs, deterministic=True))


def test_same_seed_same_losses():
    def run():
        model = Rainbow("CartPole-v1", seed=3, **TINY)
        model.learn(400, progress_bar=False)
        return [{k: v for k, v in h.items() if k.startswith("losses/")} for h in model.history]

    first, second = run(), run()
    assert any(first) and first == second


def test_docs_examples_run(tmp_path, monkeypatch):
    """Every python example of docs/c51-rainbow.md runs, in order, in one namespace (in a scratch directory)."""
    monkeypatch.chdir(tmp_path)
    ns = run_examples("c51-rainbow.md", 2)
    assert (tmp_path / "rainbow.pt").is_file() and "losses/loss" in ns["c51"].metrics


@pytest.mark.slow
def test_c51_solves_cartpole():
    """C51 with DQN's CartPole training defaults, atoms on [0, 100] (CartPole's discounted returns lie in [0, 100)):
    evaluation >= 475 within 50k steps. Seed 0 here (~30k steps, ~27 s on one core); seeds 0, 1, 2 all reached 500,
    at 30,720, 30,720 and 40,960 steps (docs/c51-rainbow.md)."""
    model = C51("CartPole-v1", seed=0, hidden=(64, 64), v_min=0.0, v_max=100.0)
    ev = EvalCallback(eval_freq=5_000, n_episodes=10, reward_threshold=475)
    model.learn(50_000, callback=ev, progress_bar=False)
    assert max(mean for _, mean, _, _ in ev.history) >= 475, [(step, mean) for step, mean, _, _ in ev.history]


@pytest.mark.slow
def test_rainbow_learns_cartpole():
    """Rainbow (noise, no epsilon) from a random policy's ~10 to >= 150 in 8k steps (~17 s on one core). Measured
    after 8k steps, seeds 0, 1, 2: 238, 206, 355; seed 0 reached 500 at 30,720 steps (~60 s: too long for CI)."""
    model = Rainbow("CartPole-v1", seed=0, hidden=(64, 64), v_min=0.0, v_max=100.0)
    before = model.evaluate(10)[0]
    model.learn(8_000, progress_bar=False)
    after = model.evaluate(10)[0]
    assert before < 50 and after >= 150, (before, after)


def test_acting_through_the_compiled_forward_equals_the_torch_network():
    """A plain float32 MLP on the CPU acts through ``MLPForward`` (paths["acting"] == "compiled"): the same expected Q
    as the PyTorch network; dueling or noisy networks act through PyTorch."""
    model = C51("CartPole-v1", seed=0, hidden=(16, 16), n_atoms=11, v_min=0.0, v_max=10.0, learning_starts=8,
                   batch_size=8, train_freq=8, gradient_steps=2)
    model.learn(64)
    assert model.paths["acting"].value == "compiled"
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    with torch.no_grad():
        expected = model.expected_q(model.q_net(torch.from_numpy(obs)))
    torch.testing.assert_close(model._q_values(obs), expected)
    assert np.array_equal(model.predict(obs, deterministic=True), expected.argmax(1).numpy())
    assert Rainbow("CartPole-v1", seed=0, hidden=(16, 16)).paths["acting"].value == "torch"


# -------------------------------------------------------------------------- the handwritten backend


@pytest.mark.parametrize("double_q, weighted, masked", [(False, False, False), (True, True, False), (True, False, True),
                                                        (False, True, True)])
def test_compiled_loss_head_equals_autograd(double_q, weighted, masked):
    """``c51_grads`` against ``categorical_projection`` and ``c51_loss`` through autograd: the loss, mean Q, mean
    cross-entropy, per-sample losses and d loss / d logits, with rewards pushing atoms past both ends of the support
    and (masked) a row of s' without valid actions."""
    from rapidrl.kernels.categorical import c51_grads

    g = torch.Generator().manual_seed(int(double_q) + 2 * int(weighted) + 4 * int(masked))
    b, a, n = 6, 3, 7
    support = torch.linspace(-2.0, 4.0, n)
    q_both = torch.randn(2 * b if double_q else b, a * n, generator=g)
    next_target = torch.randn(b, a * n, generator=g)
    actions = torch.randint(0, a, (b,), generator=g)
    rewards = torch.tensor([-5.0, 0.3, 1.0, 6.0, -0.7, 0.0])  # below v_min, on an atom, above v_max
    discounts = torch.tensor([0.9, 0.0, 0.99, 0.5, 0.9, 0.81])
    weights = torch.rand(b, generator=g) + 0.5 if weighted else None
    next_mask = torch.rand(b, a, generator=g) > 0.4 if masked else None
    if masked:
        next_mask[0] = False
    select = (q_both[b:] if double_q else next_target).view(b, a, n)
    expected_q = (select.softmax(-1) * support).sum(-1)
    if masked:
        expected_q = expected_q.masked_fill(~next_mask, -torch.inf)
    best = expected_q.argmax(1)
    disc = torch.where(next_mask.any(1), discounts, 0.0) if masked else discounts
    target = categorical_projection(rewards, disc, next_target.view(b, a, n)[torch.arange(b), best].softmax(-1),
                                    support)
    logits = q_both[:b].clone().requires_grad_(True)
    taken = logits.view(b, a, n)[torch.arange(b), actions]
    loss, per_sample = c51_loss(taken, target, weights)
    loss.backward()
    d_out, out = np.empty((b, a * n), np.float32), np.empty(3 + b, np.float32)
    c51_grads(q_both.numpy(), next_target.numpy(), actions.numpy(), rewards.numpy(), discounts.numpy(),
              None if weights is None else weights.numpy(), double_q, support.numpy(), d_out, out,
              next_mask=None if next_mask is None else next_mask.numpy())
    q = (taken.detach().softmax(-1) * support).sum(-1)
    expected = torch.cat([torch.stack([loss.detach(), q.mean(), per_sample.mean()]), per_sample])
    torch.testing.assert_close(torch.from_numpy(out), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.from_numpy(d_out), logits.grad, rtol=1e-5, atol=1e-7)
