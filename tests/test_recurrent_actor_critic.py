"""Recurrent SAC: one update against a plain per-step reference, the stored states, acting with a state, save/load and
exact resume, bad settings, and (slow) learning the velocity-hidden Pendulum where feed-forward SAC cannot."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from checkpoint_checks import resumed_and_uninterrupted

import rapidrl as rr
from rapidrl.algos.offpolicy_losses import critic_loss, soft_actor_loss, soft_target, temperature_loss
from rapidrl.train.config import ConfigError

SMALL = dict(num_envs=2, learning_starts=64, buffer_size=2_000, batch_size=4, sequence_length=6, burn_in=2,
             hidden=(16,), recurrent_size=8, head_hidden=(16, 16), log_every_steps=50)


def reference_losses(model, batch, noise_next: torch.Tensor, noise_pi: torch.Tensor):
    """SAC's three losses on ``batch`` written out with one ``step`` call per sequence and time step (no unroll), the
    sampling noise given: noise_next, noise_pi [T * B, A] in the update's (time-major) row order."""
    c, actor, critic, target = model.config, model.actor, model.critic, model.critic_target
    sa, k = actor.state_size, c.burn_in
    L, B = batch.rewards.shape
    alpha = model.log_alpha.detach().exp()
    rows = {name: [] for name in ("y", "q", "q_pi", "logp")}
    h_a_rows, h_c_rows, next_rows = {}, {}, {}
    for b in range(B):
        s_a, s_c, s_t = batch.state[b:b + 1, :sa], batch.state[b:b + 1, sa:], batch.state[b:b + 1, sa:]
        for t in range(L):
            start = batch.starts[t, b:b + 1]
            h_a, s_a = actor.encoder.step(batch.obs[t, b:b + 1], s_a, start)
            h_c, s_c = critic.encoder.step(batch.obs[t, b:b + 1], s_c, start)
            _, s_t = target.encoder.step(batch.obs[t, b:b + 1], s_t, start)
            if t < k:  # burn-in: no gradients reach these steps
                s_a, s_c, s_t = s_a.detach(), s_c.detach(), s_t.detach()
                continue
            h_a_rows[(t, b)], h_c_rows[(t, b)] = h_a, h_c
            next_rows[(t, b)] = (actor.encoder.step(batch.next_obs[t, b:b + 1], s_a.detach())[0],
                                 target.encoder.step(batch.next_obs[t, b:b + 1], s_t)[0])
    for t in range(k, L):
        for b in range(B):
            i = (t - k) * B + b
            head = actor.head(next_rows[(t, b)][0])
            from rapidrl.nn.qnets import squashed_gaussian

            a_next, logp_next, _ = squashed_gaussian(head, noise_next[i:i + 1], actor.scale, actor.center,
                                                     actor.log_std_min, actor.log_std_max)
            with torch.no_grad():
                next_q = target.heads(next_rows[(t, b)][1], a_next)
                discount = c.gamma * float(not batch.terminated[t, b])
                rows["y"].append(soft_target(batch.rewards[t, b:b + 1], torch.tensor([discount]), next_q,
                                             logp_next, alpha))
            rows["q"].append(critic.heads(h_c_rows[(t, b)], batch.actions[t, b:b + 1]))
            a_pi, logp, _ = squashed_gaussian(actor.head(h_a_rows[(t, b)]), noise_pi[i:i + 1], actor.scale,
                                              actor.center, actor.log_std_min, actor.log_std_max)
            rows["q_pi"].append(critic.heads(h_c_rows[(t, b)].detach(), a_pi, detach_params=True))
            rows["logp"].append(logp)
    q, y = torch.cat(rows["q"], 1), torch.cat(rows["y"])
    q_pi, logp = torch.cat(rows["q_pi"], 1), torch.cat(rows["logp"])
    return critic_loss(q, y), soft_actor_loss(q_pi, logp, alpha), temperature_loss(model.log_alpha, logp,
                                                                                    model.target_entropy)


def test_one_update_equals_a_plain_per_step_reference():
    model = rr.RecurrentSAC("PendulumNoVel-v1", seed=0, env_kwargs={"max_episode_steps": 20}, **SMALL)
    model.learn(120, progress_bar=False)  # truncations inside the stored sequences
    batch = model.buffer.sample(SMALL["batch_size"])
    assert batch.truncated.any() or batch.starts[1:].any()
    T, B, A = SMALL["sequence_length"] - SMALL["burn_in"], SMALL["batch_size"], 1
    gen_state = model.torch_rng.get_state()
    noise_next, noise_pi = torch.randn(T * B, A, generator=model.torch_rng), torch.randn(T * B, A,
                                                                                         generator=model.torch_rng)
    model.torch_rng.set_state(gen_state)  # the update draws the same noise, in the same order
    loss_q, loss_pi, loss_alpha = reference_losses(model, batch, noise_next, noise_pi)
    stats = model._update_step(batch)
    torch.testing.assert_close(stats[0], loss_q.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats[1], loss_pi.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats[2], loss_alpha.detach(), rtol=1e-5, atol=1e-6)


def test_replay_stores_the_actor_and_critic_states_the_step_was_entered_with():
    model = rr.RecurrentSAC("PendulumNoVel-v1", seed=1, **{**SMALL, "learning_starts": 400})
    with pytest.warns(UserWarning, match="warm-up"):
        model.learn(60, progress_bar=False)
    buf = model.buffer
    t = (buf.pos - 1) % buf.steps
    x, state = torch.from_numpy(buf.obs[t]), torch.from_numpy(buf.states[t])
    _, after = model._advance(x, state)
    keep = (~torch.from_numpy(model._starts)).unsqueeze(-1).float()
    torch.testing.assert_close(model._hidden * keep, after * keep)
    assert buf.states.shape[-1] == model.actor.state_size + model.critic.state_size


def test_predict_with_a_state_save_load_and_exact_resume(tmp_path):
    model = rr.RecurrentSAC("PendulumNoVel-v1", seed=0, **SMALL)
    model.learn(120, progress_bar=False)
    obs = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    a1, s1 = model.predict(obs, deterministic=True)
    a2, s2 = model.predict(obs, state=s1, deterministic=True)
    assert a1.shape == (2, 1) and s1.shape == (2, model.actor.state_size) and not np.allclose(s1, s2)
    assert np.all(np.abs(a1) <= 2.0)
    model.save(tmp_path / "m.pt")
    loaded = rr.RecurrentSAC.load(tmp_path / "m.pt")
    np.testing.assert_allclose(loaded.predict(obs, state=s1, deterministic=True)[0], a2, rtol=1e-6)
    one, three = resumed_and_uninterrupted(lambda: rr.RecurrentSAC("PendulumNoVel-v1", seed=3, **SMALL), 160, 100,
                                           tmp_path)
    for a, b in zip(one.actor.parameters(), three.actor.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert np.isfinite(model.evaluate(2)[0])


@pytest.mark.parametrize("bad, match", [
    (dict(burn_in=6), "burn_in=6 must be below sequence_length=6"),
    (dict(cell="rnn"), "cell must be one of"),
    (dict(n_step=3), "one-step targets"),
    (dict(her=True), "replays sequences"),
])
def test_bad_settings_are_clear_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        rr.RecurrentSAC("PendulumNoVel-v1", **{**SMALL, **bad})


def test_discrete_actions_are_refused_with_the_alternatives():
    with pytest.raises(TypeError, match="Box action space"):
        rr.RecurrentSAC("CartPoleNoVel-v1", **SMALL)


@pytest.mark.slow
def test_recurrent_sac_swings_up_the_pendulum_without_its_velocity():
    """PendulumNoVel-v1 at the preset's setting (``configs/recurrent_sac_pendulumnovel.toml``) with half its batch (16
    sequences: a third less CI time): recurrent SAC reaches an evaluation of -300 within 9,000 steps (seed 0 here:
    -207 at 9,000; the preset's batch of 32: -183); SAC without memory at its Pendulum test's setting stays below -500
    (it cannot tell the swing's direction from the angle alone; -947 at best here)."""
    from rapidrl.train.callbacks import EvalCallback

    model = rr.RecurrentSAC("PendulumNoVel-v1", seed=0, hidden=(64,), recurrent_size=64, head_hidden=(64, 64),
                            sequence_length=16, burn_in=4, learning_rate=1e-3, batch_size=16)
    ev = EvalCallback(eval_freq=1_500, n_episodes=10)
    model.learn(9_000, callback=ev, progress_bar=False)
    memory = max(mean for _, mean, _, _ in ev.history)
    plain = rr.SAC("PendulumNoVel-v1", seed=0, hidden=(64, 64), batch_size=128)
    ev_plain = EvalCallback(eval_freq=1_500, n_episodes=10)
    plain.learn(9_000, callback=ev_plain, progress_bar=False)
    feed_forward = max(mean for _, mean, _, _ in ev_plain.history)
    assert memory >= -300 and feed_forward < -500, (ev.history, ev_plain.history)


# -- recurrent TD3 --------------------------------------------------------------------------------------------------
TD3_SMALL = {**SMALL, "policy_delay": 2}


def test_recurrent_td3_update_equals_a_plain_per_step_reference():
    """The critic loss with smoothed target actions, then (every policy_delay-th update) the actor loss through the
    first critic head after the critic's step, written out with one ``step`` call per sequence and time step."""
    from rapidrl.algos.offpolicy_losses import smoothed_target_actions, td3_target

    model = rr.RecurrentTD3("PendulumNoVel-v1", seed=0, env_kwargs={"max_episode_steps": 20}, **TD3_SMALL)
    model.learn(120, progress_bar=False)
    if model.num_gradient_steps % 2 == 0:
        model._train_step()
    assert model.num_gradient_steps % 2 == 1  # the next update steps the actor too
    batch = model.buffer.sample(SMALL["batch_size"])
    c, actor, critic = model.config, model.actor, model.critic
    sa, k = actor.state_size, c.burn_in
    L, B = batch.rewards.shape
    T = L - k
    gen = model.torch_rng.get_state()
    noise = torch.randn(T * B, 1, generator=model.torch_rng)
    model.torch_rng.set_state(gen)
    ys, qs, h_a = [], [], {}
    for b in range(B):
        s = {name: batch.state[b:b + 1, :sa] if "actor" in name else batch.state[b:b + 1, sa:]
             for name in ("actor", "critic", "actor_target", "critic_target")}
        for t in range(L):
            start = batch.starts[t, b:b + 1]
            out = {}
            for name in s:
                out[name], s[name] = getattr(model, name).encoder.step(batch.obs[t, b:b + 1], s[name], start)
            if t < k:
                s = {name: v.detach() for name, v in s.items()}
                continue
            i = (t - k) * B + b
            with torch.no_grad():
                mu_next = model.actor_target.mu(model.actor_target.encoder.step(batch.next_obs[t, b:b + 1],
                                                                                s["actor_target"])[0])
                a_next = smoothed_target_actions(mu_next, noise[i:i + 1], actor.scale, actor.center,
                                                 c.target_policy_noise, c.target_noise_clip)
                q_next = model.critic_target.heads(model.critic_target.encoder.step(batch.next_obs[t, b:b + 1],
                                                                                    s["critic_target"])[0], a_next)
                d = torch.tensor([c.gamma * float(not batch.terminated[t, b])])
                ys.append((i, td3_target(batch.rewards[t, b:b + 1], d, q_next)))
            qs.append((i, critic.heads(out["critic"], batch.actions[t, b:b + 1])))
            h_a[i] = out["actor"]
    order = [i for i, _ in sorted(ys, key=lambda x: x[0])]
    y = torch.cat([v for _, v in sorted(ys, key=lambda x: x[0])])
    q = torch.cat([v for _, v in sorted(qs, key=lambda x: x[0])], 1)
    expect_q = critic_loss(q, y)
    actor_before = copy.deepcopy(actor)
    stats = model._update_step(batch)
    torch.testing.assert_close(stats[0], expect_q.detach(), rtol=1e-5, atol=1e-6)
    # the actor loss: the actor of before this update, the critic after its step
    q_pi = []
    for b in range(B):
        s_a, s_c = batch.state[b:b + 1, :sa], batch.state[b:b + 1, sa:]
        for t in range(L):
            start = batch.starts[t, b:b + 1]
            h, s_a = actor_before.encoder.step(batch.obs[t, b:b + 1], s_a, start)
            h_c, s_c = critic.encoder.step(batch.obs[t, b:b + 1], s_c, start)
            if t >= k:
                q_pi.append(critic.heads(h_c, actor_before.mu(h), members=1))
    torch.testing.assert_close(stats[2], -torch.cat(q_pi, 1).mean().detach(), rtol=1e-5, atol=1e-6)
    assert len(order) == T * B


def test_recurrent_td3_acts_saves_and_resumes_exactly(tmp_path):
    model = rr.RecurrentTD3("PendulumNoVel-v1", seed=0, **TD3_SMALL)
    model.learn(120, progress_bar=False)
    obs = np.array([[1.0, 0.0]], np.float32)
    mu, state = model.predict(obs, deterministic=True)
    noisy, _ = model.predict(obs)
    assert state.shape == (1, model.actor.state_size) and np.all(np.abs(noisy) <= 2.0) and not np.allclose(mu, noisy)
    model.save(tmp_path / "m.pt")
    np.testing.assert_allclose(rr.RecurrentTD3.load(tmp_path / "m.pt").predict(obs, deterministic=True)[0], mu)
    one, three = resumed_and_uninterrupted(lambda: rr.RecurrentTD3("PendulumNoVel-v1", seed=3, **TD3_SMALL), 160,
                                           100, tmp_path)
    for a, b in zip(one.critic.parameters(), three.critic.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("bad, match", [
    (dict(burn_in=6), "burn_in=6 must be below sequence_length=6"),
    (dict(n_step=2), "one-step targets"),
    (dict(policy_delay=0), "policy_delay"),
])
def test_recurrent_td3_bad_settings_are_clear_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        rr.RecurrentTD3("PendulumNoVel-v1", **{**TD3_SMALL, **bad})


@pytest.mark.parametrize("cls", [rr.RecurrentSAC, rr.RecurrentTD3, rr.R2D2])
def test_hidden_may_be_empty_for_the_recurrent_learners_only(cls):
    """hidden=(): the observation goes straight into the recurrent layer (skrl's examples' layout); the feed-forward
    learners still refuse it."""
    env = "CartPoleNoVel-v1" if cls is rr.R2D2 else "PendulumNoVel-v1"
    settings = {k: v for k, v in SMALL.items() if not (cls is rr.R2D2 and k == "head_hidden")}
    model = cls(env, seed=0, **{**settings, "hidden": ()})
    encoder = model.q_net.encoder if cls is rr.R2D2 else model.actor.encoder
    assert len(encoder.trunk) == 0 and encoder.rnn.input_size == model.obs_dim
    model.learn(80, progress_bar=False)
    with pytest.raises(ConfigError, match="hidden must be a non-empty"):
        rr.SAC("Pendulum-v1", hidden=())
