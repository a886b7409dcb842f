"""R2D2 and sequence replay: the pure functions on hand-computed cases, the sequence buffer's invariants, the recurrent
Q network's unroll against step-by-step stepping, one update against a plain per-sequence reference, acting with a
state, masks, save/load/resume, bad input, and learning a memory task that a feed-forward DQN cannot."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from checkpoint_checks import resumed_and_uninterrupted

import rapidrl as rr
from rapidrl.algos.offpolicy_losses import (
    r2d2_priority,
    sequence_nstep_returns,
    value_rescale,
    value_rescale_inverse,
)
from rapidrl.buffers.sequence import SequenceReplayBuffer
from rapidrl.nn.recurrent import segment_layout
from rapidrl.nn.recurrent_offpolicy import RecurrentQNetwork
from rapidrl.train.config import ConfigError

SMALL = dict(num_envs=4, learning_starts=64, buffer_size=2_000, batch_size=8, sequence_length=6, burn_in=2, n_step=2,
             hidden=(16,), recurrent_size=8, train_freq=1, gradient_steps=1, log_every_steps=50)


# -- the pure functions ------------------------------------------------------------------------------------------------
def test_value_rescale_by_hand_and_its_inverse():
    x = torch.tensor([0.0, 3.0, -8.0])
    # h(3) = sqrt(4) - 1 + 3e-3; h(-8) = -(sqrt(9) - 1) - 8e-3
    torch.testing.assert_close(value_rescale(x), torch.tensor([0.0, 1.003, -2.008]))
    big = torch.linspace(-1000, 1000, 41, dtype=torch.float64)
    torch.testing.assert_close(value_rescale_inverse(value_rescale(big)), big)
    torch.testing.assert_close(value_rescale(value_rescale_inverse(big)), big)


def test_sequence_nstep_returns_stop_at_episode_ends_and_bootstrap_truncations():
    r = torch.tensor([1.0, 2, 3, 4, 5, 6]).unsqueeze(1)
    term = torch.tensor([0, 0, 1, 0, 0, 0]).bool().unsqueeze(1)
    trunc = torch.tensor([0, 0, 0, 0, 1, 0]).bool().unsqueeze(1)
    v = torch.tensor([10.0, 20, 30, 40, 50, 60]).unsqueeze(1)
    g = 0.5
    out = sequence_nstep_returns(r, g * (~term).float(), term | trunc, v, n=3).squeeze(1)
    # t0: 1 + .5*2 + .25*3 (terminated: no bootstrap); t1: 2 + .5*3; t2: 3; t3: 4 + .5*5 + .25*50 (truncated at 4:
    # the final observation's value 50); t4: 5 + .5*50; t5: the sequence's last step, 6 + .5*60
    torch.testing.assert_close(out, torch.tensor([2.75, 3.5, 3.0, 19.0, 30.0, 36.0]))
    one = sequence_nstep_returns(r, g * (~term).float(), term | trunc, v, n=1).squeeze(1)
    torch.testing.assert_close(one, r.squeeze(1) + g * (~term).float().squeeze(1) * v.squeeze(1))


def test_sequence_nstep_returns_with_n_past_the_sequence_end_at_its_last_step():
    r, v = torch.tensor([[1.0], [2.0]]), torch.tensor([[10.0], [20.0]])
    no_end, d = torch.zeros(2, 1, dtype=torch.bool), torch.full((2, 1), 0.5)
    out = sequence_nstep_returns(r, d, no_end, v, n=5).squeeze(1)
    torch.testing.assert_close(out, torch.tensor([1 + 0.5 * 2 + 0.25 * 20, 2 + 0.5 * 20]))


def test_r2d2_priority_mixes_max_and_mean():
    td = torch.tensor([[1.0, -2.0], [-3.0, 0.0]])  # [L=2, B=2]
    torch.testing.assert_close(r2d2_priority(td, 0.9), torch.tensor([0.9 * 3 + 0.1 * 2, 0.9 * 2 + 0.1 * 1]))


# -- sequence replay ---------------------------------------------------------------------------------------------------
def fill(buf: SequenceReplayBuffer, steps: int, n: int) -> None:
    """obs of env e at time t = t * 10 + e; state = the same number repeated; a start every 5 steps."""
    for t in range(steps):
        code = t * 10 + np.arange(n, dtype=np.float32)
        buf.add(code[:, None], np.full(n, t), np.ones(n), code[:, None] + 10, np.zeros(n, bool), np.zeros(n, bool),
                np.repeat(code[:, None], buf.state_size, 1), np.full(n, t % 5 == 0))


@pytest.mark.parametrize("prioritized", [False, True])
def test_sequences_are_consecutive_steps_of_one_env_and_never_cross_the_newest_step(prioritized):
    buf = SequenceReplayBuffer(30, 3, (1,), 2, sequence_length=4, seed=0, prioritized=prioritized)
    fill(buf, 27, 3)  # the ring (10 steps per env) has wrapped twice
    for _ in range(20):
        b = buf.sample(16)
        codes = b.obs[..., 0].numpy()  # [L, B]
        np.testing.assert_array_equal(np.diff(codes, axis=0), 10)  # consecutive steps of one env
        assert (codes[0] >= 170).all() and (codes[-1] <= 269).all()  # only the 10 newest steps per env
        np.testing.assert_array_equal(b.state.numpy()[:, 0], codes[0])  # the state entering the first step
        np.testing.assert_array_equal(b.next_obs[..., 0].numpy(), codes + 10)
        np.testing.assert_array_equal(b.starts.numpy(), (codes // 10) % 5 == 0)


def test_prioritized_sequences_new_at_max_invalid_at_zero_and_sampled_by_priority():
    buf = SequenceReplayBuffer(20, 1, (1,), 1, sequence_length=3, seed=0, prioritized=True, alpha=1.0, eps=0.0)
    fill(buf, 6, 1)
    slots = np.arange(20)
    p = buf.tree.get(slots)
    np.testing.assert_array_equal(p[:4], 1.0)  # starts 0..3: their sequences are whole
    np.testing.assert_array_equal(p[4:], 0.0)  # starts 4, 5 would run past the newest step; 6.. are empty
    buf.update_priorities(np.array([0, 1, 2]), np.array([0.0, 0.0, 0.0]))
    assert set(buf.sample(64).indices.tolist()) == {3}
    buf.update_priorities(np.array([3]), np.array([5.0]))
    fill(buf, 1, 1)  # a new whole sequence (start 4) enters at the largest priority so far
    assert buf.tree.get(np.array([4]))[0] == 5.0
    w = buf.sample(32).weights.numpy()
    assert w.max() == 1.0 and (w > 0).all()


def test_sequence_buffer_save_and_load_round_trip(tmp_path):
    buf = SequenceReplayBuffer(40, 2, (1,), 3, sequence_length=4, seed=3, prioritized=True)
    fill(buf, 25, 2)
    buf.update_priorities(np.array([2, 5]), np.array([3.0, 0.5]))
    buf.save(tmp_path / "seq")
    other = SequenceReplayBuffer(40, 2, (1,), 3, sequence_length=4, seed=99, prioritized=True).load(tmp_path / "seq")
    a, b = buf.sample(8), other.sample(8)
    for x, y in zip(a[:-1], b[:-1]):
        torch.testing.assert_close(x, y)
    with pytest.raises(ValueError, match="not this buffer's"):
        SequenceReplayBuffer(40, 2, (1,), 3, sequence_length=5).load(tmp_path / "seq")


def test_sequence_buffer_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="multiple of num_envs"):
        SequenceReplayBuffer(10, 3, (1,), 2, sequence_length=2)
    with pytest.raises(ValueError, match="below the 5 steps"):
        SequenceReplayBuffer(10, 2, (1,), 2, sequence_length=5)
    buf = SequenceReplayBuffer(10, 2, (1,), 2, sequence_length=2)
    with pytest.raises(ValueError, match="whole sequence"):
        buf.sample(2)
    with pytest.raises(ValueError, match="states must have shape"):
        buf.add(np.zeros((2, 1)), np.zeros(2), np.zeros(2), np.zeros((2, 1)), np.zeros(2, bool), np.zeros(2, bool),
                np.zeros((2, 3)), np.zeros(2, bool))


# -- the recurrent Q network -------------------------------------------------------------------------------------------
def stepped(encoder, obs, next_obs, state, starts):
    """The reference of ``RecurrentEncoder.unroll``: one ``step`` at a time, each step's bootstrap features one
    ``step`` on next_obs from its state (h [L, B, size], h_next [L, B, size], the final state)."""
    hs, nexts = [], []
    for t in range(obs.shape[0]):
        h, state = encoder.step(obs[t], state, starts[t])
        hs.append(h)
        nexts.append(encoder.step(next_obs[t], state)[0])
    return torch.stack(hs), torch.stack(nexts), state


@pytest.mark.parametrize("cell, dueling", [("lstm", False), ("gru", True)])
def test_unroll_in_one_fused_call_equals_stepping_with_resets_and_bootstraps(cell, dueling):
    """The fused unroll (episode segments side by side, a bootstrap step after each) gives the outputs and bootstrap
    features of stepping one observation at a time, and the same gradients; the burn-in's state_after is stepping's
    final state. Starts at step 0, inside the sequence, at the last step, and none at all."""
    torch.manual_seed(0)
    net = RecurrentQNetwork(3, 4, (8,), cell=cell, size=5, dueling=dueling)
    enc, L, B = net.encoder, 7, 4
    obs, next_obs = torch.randn(L, B, 3, requires_grad=True), torch.randn(L, B, 3)
    starts = torch.zeros(L, B, dtype=torch.bool)
    starts[[0, 3, 3, 6, 1], [0, 1, 2, 2, 2]] = True
    for case in (starts, torch.zeros(L, B, dtype=torch.bool)):
        with_next = case.clone()
        next_obs_eq = next_obs.clone()
        for t in range(L - 1):  # inside a segment the next step's observation is the bootstrap one
            inside = ~with_next[t + 1]
            next_obs_eq[t, inside] = obs.detach()[t + 1, inside]
        state = torch.randn(B, net.state_size)
        h, h_next = enc.unroll(obs, state, case, next_obs_eq)
        ref_h, ref_next, ref_state = stepped(enc, obs, next_obs_eq, state, case)
        torch.testing.assert_close(h, ref_h, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(h_next, ref_next, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(enc.state_after(obs, state, case), ref_state, rtol=1e-5, atol=1e-6)
        grads = torch.autograd.grad(h.square().sum(), [obs, *enc.parameters()])  # the learners detach h_next
        ref_grads = torch.autograd.grad(ref_h.square().sum(), [obs, *enc.parameters()])
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        h_only, none = enc.unroll(obs, state, case)
        assert none is None
        torch.testing.assert_close(h_only, ref_h, rtol=1e-5, atol=1e-6)
    layout = segment_layout(starts, with_next=True)
    assert layout.count == 8 and layout.length == L + 1  # 1 + 2 + 4 + 1 segments; the longest and its bootstrap
    with pytest.raises(ValueError, match="segment layout"):
        enc.unroll(obs[:5], state, starts[:5], next_obs[:5], layout)
    with pytest.raises(ValueError, match="without next steps"):
        enc.unroll(obs, state, starts, next_obs, segment_layout(starts))
    with pytest.raises(ValueError, match="state must be a float tensor"):
        net.act(obs[0], torch.zeros(B, net.state_size + 1))


# -- the algorithm -----------------------------------------------------------------------------------------------------
def reference_update_loss(model, batch) -> torch.Tensor:
    """The R2D2 loss of ``batch`` written out per sequence and step with ``step`` calls (no unroll, no vectorised
    n-step returns)."""
    c = model.config
    L, B = batch.rewards.shape
    h, hinv = (lambda x: value_rescale(x, c.rescale_eps)), (lambda x: value_rescale_inverse(x, c.rescale_eps))
    total = torch.zeros(())
    for b in range(B):
        s_on, s_tg = batch.state[b:b + 1], batch.state[b:b + 1]
        qs, next_vals = [], []
        for t in range(L):
            start = batch.starts[t, b:b + 1]
            q_t, s_on = model.q_net.step(batch.obs[t, b:b + 1], s_on, start)
            with torch.no_grad():
                _, s_tg = model.q_target.step(batch.obs[t, b:b + 1], s_tg, start)
                q_next_online, _ = model.q_net.step(batch.next_obs[t, b:b + 1], s_on.detach())
                q_next_target, _ = model.q_target.step(batch.next_obs[t, b:b + 1], s_tg)
                next_vals.append(hinv(q_next_target[0, q_next_online.argmax()]))
            qs.append(q_t[0, batch.actions[t, b]])
        terms = []
        for t in range(c.burn_in, L):
            g, coef = 0.0, 1.0
            for k in range(c.n_step):
                j = t + k
                g = g + coef * batch.rewards[j, b]
                last = k == c.n_step - 1 or j == L - 1 or bool(batch.terminated[j, b] or batch.truncated[j, b])
                d = 0.0 if batch.terminated[j, b] else c.gamma
                if last:
                    g = g + coef * d * next_vals[j]
                    break
                coef = coef * d
            terms.append(0.5 * (qs[t] - h(torch.as_tensor(g))) ** 2)
        total = total + torch.stack(terms).mean() * batch.weights[b]
    return total / B


def test_one_update_equals_a_plain_per_sequence_reference():
    model = rr.R2D2("MemoryCue-v0", seed=0, env_kwargs={"delay": 2}, **SMALL)
    model.learn(100, progress_bar=False)  # replay with episode ends inside sequences
    batch = model.buffer.sample(4)
    assert batch.terminated.any() and batch.starts[1:].any()
    expect = reference_update_loss(model, batch)
    params = [p.detach().clone() for p in model.q_net.parameters()]
    out = model._update_step(batch)
    torch.testing.assert_close(out[0], expect.detach(), rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(params, model.q_net.parameters()))
    assert out.shape == (3 + 4,)  # loss, mean Q, mean |td|, one priority per sequence


def test_replay_holds_the_states_the_policy_acted_with():
    """The state stored with a step is the one the acting network entered it with, also during the random warm-up
    (no update yet here, so the network is the one that acted)."""
    model = rr.R2D2("MemoryCue-v0", seed=1, **{**SMALL, "learning_starts": 400})
    with pytest.warns(UserWarning, match="warm-up"):
        model.learn(120, progress_bar=False)
    assert model.num_gradient_steps == 0 and model._hidden.abs().sum() > 0
    buf, t = model.buffer, (model.buffer.pos - 1) % model.buffer.steps  # the newest stored step
    obs = torch.from_numpy(buf.obs[t])
    _, after = model.q_net.step(obs, torch.from_numpy(buf.states[t]))
    starts = torch.from_numpy(model._starts)
    torch.testing.assert_close(model._hidden * (~starts).unsqueeze(-1).float(), after * (~starts).unsqueeze(-1).float())


def test_predict_carries_the_state_and_episode_start_resets_it(tmp_path):
    model = rr.R2D2("MemoryCue-v0", seed=0, **SMALL)
    model.learn(100, progress_bar=False)
    obs = np.eye(5, dtype=np.float32)[:2]
    a1, s1 = model.predict(obs, deterministic=True)
    a2, s2 = model.predict(obs, state=s1, deterministic=True)
    net_state = torch.zeros(2, model.q_net.state_size)
    for want_a, want_s in ((a1, s1), (a2, s2)):
        q, net_state = model.q_net.step(torch.from_numpy(obs), net_state)
        np.testing.assert_array_equal(want_a, q.argmax(-1).numpy())
        np.testing.assert_allclose(want_s, net_state.detach().numpy(), rtol=1e-6)
    _, s3 = model.predict(obs, state=s2, episode_start=np.array([True, True]), deterministic=True)
    np.testing.assert_allclose(s3, s1, rtol=1e-6)
    model.save(tmp_path / "r2d2.pt")
    loaded = rr.R2D2.load(tmp_path / "r2d2.pt")
    np.testing.assert_allclose(loaded.predict(obs, state=s1, deterministic=True)[1], s2, rtol=1e-6)


def test_episode_actor_acts_as_predict_carrying_the_state():
    model = rr.R2D2("MemoryCue-v0", seed=0, **SMALL)
    model.learn(100, progress_bar=False)
    act, rng = model.episode_actor(2), np.random.default_rng(0)
    state, differs_from_fresh = None, False
    for t in range(60):
        obs = np.eye(5, dtype=np.float32)[rng.integers(5, size=2)]
        starts = np.ones(2, bool) if t == 0 else rng.random(2) < 0.2
        want, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
        np.testing.assert_array_equal(act(obs, starts), want)
        differs_from_fresh |= bool((model.predict(obs, deterministic=True)[0] != want).any())
    assert differs_from_fresh  # the actions depend on the state here, so the check above sees whether it is carried


@pytest.mark.parametrize("env_id", ["CartPoleNoVel-v1", "MemoryCue-v0"])
def test_resumed_training_equals_the_uninterrupted_run(tmp_path, env_id):
    """A checkpoint mid-run (replay, each env's state and episode starts, the env's own state included) continued to
    the end equals the uninterrupted run bit for bit."""
    one, three = resumed_and_uninterrupted(lambda: rr.R2D2(env_id, seed=2, prioritized=True, **SMALL), 200, 100,
                                           tmp_path)
    assert three.num_timesteps == 200 and three.num_gradient_steps == one.num_gradient_steps
    for a, b in zip(one.q_net.parameters(), three.q_net.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_action_masks_pick_valid_actions_when_acting_and_in_the_target():
    model = rr.R2D2("MaskedCue-v0", seed=0, **SMALL)
    model.learn(150, progress_bar=False)
    assert model.num_gradient_steps > 0 and model.action_mask_size > 0
    batch = model.buffer.sample(4)
    obs, masks = model._split_rows(batch.obs)
    assert obs.shape[-1] == model.obs_dim and masks.shape[-1] == model.action_space.n
    acts = batch.actions[masks.any(-1)]
    assert masks.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)[masks.any(-1)].all(), acts
    one = np.zeros((1, model.obs_dim), np.float32)
    only = np.zeros((1, model.action_space.n), bool)
    only[0, 1] = True
    assert model.predict(one, action_masks=only)[0][0] == 1  # epsilon-greedy, among the valid actions
    assert model.predict(one, action_masks=only, deterministic=True)[0][0] == 1


@pytest.mark.parametrize("bad, match", [
    (dict(burn_in=6), "burn_in=6 must be below sequence_length=6"),
    (dict(cell="rnn"), "cell must be one of"),
    (dict(encoder="multi"), "recurrent PPO"),
    (dict(replay_storage="mmap"), "kept in memory"),
])
def test_bad_settings_are_clear_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        rr.R2D2("MemoryCue-v0", **{**SMALL, **bad})


def test_continuous_actions_are_refused_with_the_alternative():
    with pytest.raises(TypeError, match="Discrete"):
        rr.R2D2("Pendulum-v1", **SMALL)


@pytest.mark.slow
def test_r2d2_remembers_the_cue_where_a_feed_forward_dqn_cannot():
    """MemoryCue-v0 with the answer asked 4 steps after the cue: R2D2 names the cue (mean reward of 100 greedy
    episodes >= 0.9); DQN, which sees only the present observation, stays at chance (1/4 of the cues: <= 0.4)."""
    settings = dict(num_envs=8, learning_starts=1_000, buffer_size=40_000, batch_size=32, sequence_length=20,
                    burn_in=4, n_step=3, gamma=0.99, learning_rate=1e-3, target_update_interval=400,
                    exploration_fraction=0.2, hidden=(64,), recurrent_size=64, train_freq=1, gradient_steps=2)
    model = rr.R2D2("MemoryCue-v0", seed=0, env_kwargs={"delay": 4}, **settings)
    model.learn(20_000, progress_bar=False)
    memory = model.evaluate(100)[0]
    dqn = rr.DQN("MemoryCue-v0", seed=0, env_kwargs={"delay": 4}, hidden=(64, 64), learning_starts=1_000)
    dqn.learn(20_000, progress_bar=False)
    assert memory >= 0.9 and dqn.evaluate(100)[0] <= 0.4 + math.ulp(1.0), (memory, dqn.evaluate(100)[0])


@pytest.mark.slow
def test_r2d2_remembers_a_cue_seen_in_pixels_where_a_feed_forward_dqn_cannot():
    """MemoryCue-v0 in pixels (uint8 [2, 10, 10]: the cue a 2x2 block at step 0, the query 4 steps later), the two
    presets of ``configs/variants/*_memorycue_pixels.toml`` for 10,000 steps: R2D2's MinAtar CNN before its LSTM names
    the cue (100 greedy episodes >= 0.9; the row ``r2d2-memory-pixels``: 1.0 at 10,000 steps in 3 of 3 seeds), DQN
    with the same CNN sees one frame and stays at chance (one answer for every cue: 1 in 4, <= 0.4)."""
    from rapidrl.algos.registry import algorithms
    from rapidrl.runs.config import PRESETS_DIR, read_toml

    scores = {}
    for algo in ("r2d2", "dqn"):
        preset = read_toml(PRESETS_DIR / "variants" / f"{algo}_memorycue_pixels.toml")
        model = algorithms()[algo](preset["run"]["env"], seed=0, env_kwargs=preset["env"], **preset["algo"])
        model.learn(10_000, progress_bar=False)
        scores[algo] = model.evaluate(100)[0]
    assert scores["r2d2"] >= 0.9 and scores["dqn"] <= 0.4 + math.ulp(1.0), scores


def test_docs_examples_run(tmp_path, monkeypatch):
    """Every python example of docs/r2d2.md runs, in order, in one namespace (in a scratch directory)."""
    from docs_examples import run_examples

    monkeypatch.chdir(tmp_path)
    ns = run_examples("r2d2.md", 4)
    assert ns["model"].num_gradient_steps > 0 and ns["state"].shape == (2, ns["model"].q_net.state_size)
    assert ns["sac"].num_gradient_steps > 0 and ns["actor_state"].shape == (1, ns["sac"].actor.state_size)
    assert ns["images"].num_gradient_steps > 0 and ns["pixel_state"].shape == (2, ns["images"].q_net.state_size)
    assert ns["seen"].num_gradient_steps > 0 and ns["frames"].shape == (2, 2, 10, 10)


def test_a_video_of_a_recurrent_policy_carries_its_state(tmp_path):
    """``rapidrl.monitor.video.record`` acts as evaluation does: R2D2 (``predict`` returns a state) records whole
    episodes."""
    from rapidrl.monitor.video import record

    model = rr.R2D2("CartPoleNoVel-v1", seed=0, **SMALL)
    path, returns = record(model, "CartPoleNoVel-v1", tmp_path / "r2d2.gif", episodes=1, max_frames=600)
    assert path.is_file() and len(returns) == 1 and returns[0] > 0


def test_sequence_buffer_storage_bytes_are_its_arrays():
    buf = SequenceReplayBuffer(40, 2, (3,), 5, sequence_length=4, action_shape=(2,), action_dtype=np.float32)
    stored = sum(getattr(buf, name).nbytes for name in buf._fields())
    assert SequenceReplayBuffer.storage_bytes(40, (3,), 5, (2,), action_dtype=np.float32) == stored
    frames = SequenceReplayBuffer(40, 2, (4, 6, 6), 5, sequence_length=4, obs_dtype=np.uint8, frame_stack=4)
    stored = sum(getattr(frames, name).nbytes for name in frames._fields())
    assert SequenceReplayBuffer.storage_bytes(40, (4, 6, 6), 5, obs_dtype=np.uint8, frame_stack=4,
                                              num_envs=2) == stored
    big = SequenceReplayBuffer(400, 2, (4, 6, 6), 1, sequence_length=4, obs_dtype=np.uint8, frame_stack=4)
    observations = sum(getattr(big, name).nbytes for name in SequenceReplayBuffer._FRAMES)
    assert observations < 0.27 * 2 * 400 * 4 * 36  # about 2 frames of the 8 in obs and next_obs


# -- frame storage for pixel sequences ---------------------------------------------------------------------------------
def stacked_stream(steps: int, n: int, stack: int, side: int, pad: str, rng: np.random.Generator):
    """(obs, next_obs, terminated, truncated, starts) of n envs observing stacks of ``stack`` random frames [side,
    side] uint8: resets padded with zeros or the first frame (``pad``), terminations, truncations, and lost lives
    (terminated, the stack continuing: Atari's episodic life)."""
    def first_stack():
        frame = rng.integers(0, 256, (side, side), dtype=np.uint8)
        stacked = np.zeros((stack, side, side), np.uint8) if pad == "zero" else np.repeat(frame[None], stack, 0)
        stacked[-1] = frame
        return stacked

    obs, starts = np.stack([first_stack() for _ in range(n)]), np.ones(n, bool)
    for _ in range(steps):
        next_obs = np.concatenate([obs[:, 1:], rng.integers(0, 256, (n, 1, side, side), dtype=np.uint8)], 1)
        u = rng.random(n)
        terminated, truncated, life_lost = u < 0.05, (u >= 0.05) & (u < 0.08), (u >= 0.08) & (u < 0.12)
        yield obs, next_obs, terminated | life_lost, truncated, starts
        obs = next_obs.copy()
        for e in np.flatnonzero(terminated | truncated):
            obs[e] = first_stack()
        starts = terminated | truncated | life_lost


@pytest.mark.parametrize("pad", ["zero", "first"])
@pytest.mark.parametrize("prioritized", [False, True])
def test_frame_storage_gives_the_batches_of_whole_observations(pad, prioritized):
    """The same stream into a buffer of whole observations and one of frames (seeded alike): every sampled batch is
    bitwise the same, across the ring's wrap, episode starts of both paddings, truncations and lost lives."""
    n, stack, side, steps = 3, 4, 5, 60
    whole, frames = (SequenceReplayBuffer(steps * n, n, (stack, side, side), 2, 8, obs_dtype=np.uint8, seed=1,
                                          prioritized=prioritized, frame_stack=k) for k in (1, stack))
    assert frames.codes.shape[0] == steps + stack - 1 and not hasattr(frames, "obs")
    for t, (obs, next_obs, terminated, truncated, starts) in enumerate(
            stacked_stream(400, n, stack, side, pad, np.random.default_rng(0))):
        for buf in (whole, frames):
            buf.add(obs, np.full(n, t), np.ones(n, np.float32), next_obs, terminated, truncated,
                    np.full((n, 2), t, np.float32), starts)
        if t >= 10 and t % 7 == 0:
            a, b = whole.sample(16), frames.sample(16)
            for name, x, y in zip(a._fields, a, b):
                assert np.array_equal(x, y) if isinstance(x, np.ndarray) else torch.equal(x, y), (name, t)
            if prioritized:
                priorities = np.random.default_rng(t).random(16)
                whole.update_priorities(a.indices, priorities)
                frames.update_priorities(b.indices, priorities)
    codes = set(np.unique(frames.codes).tolist())
    assert codes == {0, 1 if pad == "zero" else 2}  # slides and padded starts both stored


def test_frame_storage_refuses_what_it_cannot_rebuild_and_writes_nothing(tmp_path):
    buf = SequenceReplayBuffer(40, 2, (3, 2, 2), 1, 4, obs_dtype=np.uint8, frame_stack=3)
    obs = np.zeros((2, 3, 2, 2), np.uint8)
    obs[:, -1] = 7
    nxt = np.concatenate([obs[:, 1:], np.full((2, 1, 2, 2), 9, np.uint8)], 1)
    args = (np.zeros(2), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), np.zeros((2, 1)), np.ones(2, bool))
    bad_next = nxt.copy()
    bad_next[1, 0] = 1
    with pytest.raises(ValueError, match="env 1's is not"):
        buf.add(obs, args[0], args[1], bad_next, *args[2:])
    not_padded = obs.copy()
    not_padded[0, 0] = 3  # older frames neither zero, nor the first frame, nor a continuation
    with pytest.raises(ValueError, match="env 0's observation neither continues"):
        buf.add(not_padded, args[0], args[1], np.concatenate([not_padded[:, 1:], nxt[:, -1:]], 1), *args[2:])
    assert buf.total == buf.pos == buf.stored == 0
    for _ in range(5):
        buf.add(obs, args[0], args[1], nxt, *args[2:])
        obs, nxt = nxt, np.concatenate([nxt[:, 1:], nxt[:, -1:] + 1], 1)
    buf.save(tmp_path / "frames")
    other = SequenceReplayBuffer(40, 2, (3, 2, 2), 1, 4, obs_dtype=np.uint8, frame_stack=3, seed=5)
    other.load(tmp_path / "frames")
    buf.rng = np.random.default_rng(5)
    other.rng = np.random.default_rng(5)
    for x, y in zip(buf.sample(6)[:-1], other.sample(6)[:-1]):
        assert torch.equal(x, y)
    with pytest.raises(ValueError, match="not this buffer's"):
        SequenceReplayBuffer(40, 2, (3, 2, 2), 1, 4, obs_dtype=np.uint8).load(tmp_path / "frames")
    with pytest.raises(ValueError, match="frame_stack=3 needs observations"):
        SequenceReplayBuffer(40, 2, (2, 2, 2), 1, 4, frame_stack=3)


# -- images: a CNN before the cell -------------------------------------------------------------------------------------
def test_a_cnn_before_the_cell_on_minatar_trains_acts_with_a_state_saves_and_resumes(tmp_path):
    """R2D2 on MinAtar puts the MinAtar CNN before the LSTM, stores and acts on the uint8 images as they are; its
    unroll equals stepping; predict carries the state; the exported policy acts as predict does; a resumed run equals
    the uninterrupted one bit for bit."""
    settings = dict(SMALL, num_envs=2, hidden=(), recurrent_size=16, learning_starts=40)
    model = rr.R2D2("MinAtar/Breakout-v1", seed=0, **settings)
    assert type(model.q_net.encoder.trunk[0]).__name__ == "MinAtarCNN" and model.q_net.encoder.image_input
    model.learn(80, progress_bar=False)
    assert model.num_gradient_steps > 0 and model.buffer.obs.dtype == np.uint8
    assert model.buffer.obs.shape[2:] == model.observation_space.shape
    batch = model.buffer.sample(3)
    h, h_next = model.q_net.encoder.unroll(batch.obs, batch.state, batch.starts, batch.next_obs)
    ref_h, ref_next, _ = stepped(model.q_net.encoder, batch.obs, batch.next_obs, batch.state, batch.starts)
    torch.testing.assert_close(h, ref_h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h_next, ref_next, rtol=1e-5, atol=1e-6)
    obs = model.buffer.obs[0]
    actions, state = model.predict(obs, deterministic=True)
    model.save(tmp_path / "r2d2.pt")
    loaded = rr.R2D2.load(tmp_path / "r2d2.pt")
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], actions)
    np.testing.assert_allclose(loaded.predict(obs, state, deterministic=True)[1],
                               model.predict(obs, state, deterministic=True)[1], rtol=1e-6)
    from rapidrl.export import export_policy

    exported = torch.jit.load(str(export_policy(model, tmp_path / "policy.ts")))  # takes flat float rows too
    net_state, state = torch.zeros(len(obs), model.q_net.state_size), None
    for _ in range(3):
        actions, state = model.predict(obs, state, deterministic=True)
        got, net_state = exported(torch.from_numpy(obs).float(), net_state, torch.zeros(len(obs), dtype=torch.bool))
        np.testing.assert_array_equal(got.numpy(), actions)
        np.testing.assert_allclose(net_state.numpy(), state, rtol=1e-5, atol=1e-6)
    one, three = resumed_and_uninterrupted(lambda: rr.R2D2("MinAtar/Breakout-v1", seed=1, **settings), 120, 60,
                                           tmp_path / "resume")
    for a, b in zip(one.q_net.parameters(), three.q_net.parameters()):
        assert torch.equal(a, b)


def test_atari_trains_the_same_with_frame_storage_as_with_whole_stacks():
    """On Atari (the Nature CNN, stacks of 4 frames padded with zeros at resets) R2D2 stores two frames a step; its
    parameters after learning are bitwise those of storing whole stacks."""
    settings = dict(buffer_size=1_000, learning_starts=150, sequence_length=8, burn_in=2, batch_size=2, hidden=(),
                    recurrent_size=8, seed=3, prioritized=True)
    frames, whole = (rr.R2D2("ALE/Pong-v5", frame_replay=on, **settings) for on in (True, False))
    assert frames.buffer.frame_stack == 4 and whole.buffer.frame_stack == 1
    for model in (frames, whole):
        model.learn(250, progress_bar=False)
    assert frames.num_gradient_steps > 0
    for a, b in zip(frames.q_net.parameters(), whole.q_net.parameters()):
        assert torch.equal(a, b)


def test_observations_with_images_in_a_dict_are_refused_with_the_alternative():
    from space_envs import ImageSide  # noqa: F401  (registers ImageSide-v0)

    with pytest.raises(TypeError, match="recurrent PPO"):
        rr.R2D2("ImageSide-v0", **SMALL)
