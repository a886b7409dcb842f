"""Recurrent policies: the partially observed envs against their references, the LSTM/GRU actor-critic's
identities (segment replay = step-by-step acting, burn-in, resets), rollouts replayed exactly by the update,
truncation bootstrapping with the recurrent state, predict/evaluate/save/load, and clear errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.envs.pomdp import CARTPOLE_POSITIONS, MemoryCueEnv
from rapidrl.envs.pomdp.memory_cue import cue_block
from rapidrl.nn.recurrent import RecurrentActorCritic, segment_layout
from rapidrl.train.config import ConfigError
from rapidrl.train.recurrent import episode_starts

SMALL = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=2, recurrent_size=16, hidden=[16])


# -- envs --------------------------------------------------------------------------------------------
def test_cartpole_novel_equals_gymnasium_cartpole_with_velocities_masked():
    """Same states (copied from the batched env at each episode start) and actions: observations, rewards,
    terminations and truncations are Gymnasium's CartPole-v1 with columns (position, angle) kept."""
    n, steps = 3, 400
    vec = rr.make_vec("CartPoleNoVel-v1", n, seed=3, max_episode_steps=60)
    refs = [gym.make("CartPoleNoVel-v1", max_episode_steps=60) for _ in range(n)]
    assert vec.single_observation_space == refs[0].observation_space
    obs, _ = vec.reset(seed=3)

    def sync(i):
        refs[i].reset(seed=0)
        refs[i].unwrapped.state = vec.inner.get_state()[:, i].copy()

    for i in range(n):
        sync(i)
        np.testing.assert_array_equal(obs[i], np.asarray(refs[i].unwrapped.state, np.float32)[list(CARTPOLE_POSITIONS)])
    rng = np.random.default_rng(0)
    ended = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        actions = rng.integers(0, 2, n)
        obs, rewards, terminated, truncated, info = vec.step(actions)
        for i in range(n):
            o, r, te, tr, _ = refs[i].step(int(actions[i]))
            assert (r, te, tr) == (rewards[i], terminated[i], truncated[i])
            if te or tr:
                np.testing.assert_array_equal(info["final_obs"][i], o)
                ended["terminated" if te else "truncated"] += 1
                sync(i)
            else:
                np.testing.assert_array_equal(obs[i], o)
    assert ended["terminated"] > 0 and ended["truncated"] > 0


def test_pendulum_novel_equals_gymnasium_pendulum_with_the_velocity_masked():
    """Same states (copied from the batched env at each episode start) and actions: observations (cos, sin) and rewards
    are Gymnasium's Pendulum-v1 with the angular velocity column dropped, truncations at the same step."""
    n = 3
    vec = rr.make_vec("PendulumNoVel-v1", n, seed=3, max_episode_steps=50)
    refs = [gym.make("PendulumNoVel-v1", max_episode_steps=50) for _ in range(n)]
    assert vec.single_observation_space == refs[0].observation_space
    assert vec.single_observation_space.shape == (2,)
    obs, _ = vec.reset(seed=3)

    def sync(i):
        refs[i].reset(seed=0)
        refs[i].unwrapped.state = vec.get_state()[:, i].astype(np.float64)

    for i in range(n):
        sync(i)
        th = refs[i].unwrapped.state[0]
        np.testing.assert_allclose(obs[i], [np.cos(th), np.sin(th)], rtol=1e-6, atol=1e-6)
    rng = np.random.default_rng(0)
    truncations = 0
    for _ in range(120):
        actions = rng.uniform(-2, 2, (n, 1)).astype(np.float32)
        obs, rewards, terminated, truncated, info = vec.step(actions)
        for i in range(n):
            o, r, te, tr, _ = refs[i].step(actions[i])
            assert (te, tr) == (terminated[i], truncated[i])
            np.testing.assert_allclose(rewards[i], r, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(info["final_obs"][i] if tr else obs[i], o, rtol=1e-6, atol=1e-6)
            if tr:
                truncations += 1
                sync(i)
    assert truncations == 2 * n


def test_memory_cue_vec_equals_the_single_env_resets_included():
    n = 3
    vec = rr.make_vec("MemoryCue-v0", n, seed=11, num_cues=3, delay=4)
    refs = [MemoryCueEnv(num_cues=3, delay=4) for _ in range(n)]
    obs, _ = vec.reset(seed=11)
    ref_obs = [r.reset(seed=11 + i)[0] for i, r in enumerate(refs)]
    np.testing.assert_array_equal(obs, np.stack(ref_obs))
    rng = np.random.default_rng(1)
    for _ in range(5 * 5):
        obs, info, ended = _step_vec_and_singles(vec, refs, rng.integers(0, 3, n))
        for i, r in ended:
            assert info["_episode"][i] and info["episode"]["l"][i] == 5 and info["episode"]["r"][i] == r


def _step_vec_and_singles(vec, refs, actions) -> tuple[np.ndarray, dict, list]:
    """Step the vector env and its single-env references with ``actions``; assert they agree (rewards, flags, the
    final observation of an ended episode, the next observation, resetting a reference whose episode ended). Returns
    the vector env's observations and info and the (env, reward) of each episode that ended."""
    obs, rewards, terminated, truncated, info = vec.step(actions)
    ended = []
    for i, ref in enumerate(refs):
        o, r, te, tr, _ = ref.step(int(actions[i]))
        assert (r, te, tr) == (rewards[i], terminated[i], truncated[i])
        if te:
            np.testing.assert_array_equal(info["final_obs"][i], o)
            ended.append((i, r))
            o, _ = ref.reset()
        np.testing.assert_array_equal(obs[i], o)
    return obs, info, ended


def test_memory_cue_rewards_only_the_remembered_cue():
    """The cue is visible at step 0 only; answering it at the query step earns 1, anything else 0."""
    delay, k = 5, 4
    env = rr.make_vec("MemoryCue-v0", 64, seed=0, num_cues=k, delay=delay)
    obs, _ = env.reset(seed=0)
    cues = obs[:, :k].argmax(1)
    assert (obs[:, :k].sum(1) == 1).all() and (obs[:, k] == 0).all()
    for t in range(1, delay + 1):
        obs, rewards, terminated, _, info = env.step(np.zeros(64, np.int64))
        assert (obs[:, :k] == 0).all() and (obs[:, k] == (t == delay)).all() and (rewards == 0).all()
        assert not terminated.any()
    wrong = (cues + 1) % k
    answer = np.where(np.arange(64) % 2 == 0, cues, wrong)
    _, rewards, terminated, _, info = env.step(answer)
    assert terminated.all() and (rewards == (np.arange(64) % 2 == 0)).all()
    assert (info["episode"]["r"] == rewards).all() and (info["episode"]["l"] == delay + 1).all()


@pytest.mark.parametrize("num_cues", [2, 4, 9])
def test_memory_cue_pixels_vec_equals_the_single_env_and_draws_the_cue_then_the_query(num_cues):
    """pixels=True: the same task as uint8 [2, 10, 10] images of 0/1; the vector env equals the single env step by
    step (resets and final observations included); the cue is the one 2x2 block of channel 0 at step 0, the query all
    of channel 1 at step ``delay``, every other frame blank, and the blocks of different cues do not touch."""
    n, delay = 4, 3
    vec = rr.make_vec("MemoryCue-v0", n, seed=5, num_cues=num_cues, delay=delay, pixels=True)
    refs = [MemoryCueEnv(num_cues=num_cues, delay=delay, pixels=True) for _ in range(n)]
    assert vec.single_observation_space == gym.spaces.Box(0, 1, (2, 10, 10), np.uint8)
    obs, _ = vec.reset(seed=5)
    np.testing.assert_array_equal(obs, np.stack([r.reset(seed=5 + i)[0] for i, r in enumerate(refs)]))
    rng = np.random.default_rng(2)
    for t in range(4 * (delay + 1)):
        step_in_episode = t % (delay + 1)
        if step_in_episode == 0:
            assert (obs[:, 1] == 0).all() and (obs[:, 0].reshape(n, -1).sum(1) == 4).all()
            for i in range(n):  # the block names the cue
                assert obs[(i, 0, *cue_block(int(refs[i]._cue)))].all()
        else:
            assert (obs[:, 0] == 0).all() and (obs[:, 1] == (step_in_episode == delay)).all()
        obs, _, _ = _step_vec_and_singles(vec, refs, rng.integers(0, num_cues, n))
    blocks = np.zeros((10, 10), np.int64)
    for c in range(num_cues):
        grown = (slice(cue_block(c)[0].start - 1, cue_block(c)[0].stop + 1),
                 slice(cue_block(c)[1].start - 1, cue_block(c)[1].stop + 1))
        blocks[grown] += 1  # each block with a one-pixel border: two blocks never share a pixel or touch
        assert blocks[cue_block(c)].max() == 1


@pytest.mark.parametrize("kwargs, match", [({"num_cues": 1}, "num_cues"), ({"delay": 0}, "delay"),
                                           ({"num_cues": 10, "pixels": True}, "at most 9 cues|at most 9"),
                                           ({"pixels": "yes"}, "pixels must be True or False")])
def test_memory_cue_bad_settings_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rr.make_vec("MemoryCue-v0", 2, **kwargs)


@pytest.mark.parametrize("env_id", ["MemoryCue-v0", "CartPoleNoVel-v1"])
def test_pomdp_envs_reject_bad_actions(env_id):
    env = rr.make_vec(env_id, 2, seed=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="dtype"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError):
        env.step(np.full(2, 7, np.int64))
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros(2, np.int64))


# -- the policy --------------------------------------------------------------------------------------
def _policy(cell: str, action_space=None, hidden=(8,), critic_core=False) -> RecurrentActorCritic:
    """critic_core: the critic's own recurrent layer, with 6-unit actor and critic MLPs after the layers."""
    torch.manual_seed(0)
    extra = dict(critic_core=True, head_hidden=(6,)) if critic_core else {}
    return RecurrentActorCritic(gym.spaces.Box(-1, 1, (3,)), action_space or gym.spaces.Discrete(3), hidden,
                                cell=cell, size=12, **extra)


@pytest.mark.parametrize("cell, critic_core", [("lstm", False), ("gru", False), ("lstm", True), ("gru", True)])
def test_sequence_scoring_equals_step_by_step_acting(cell, critic_core):
    """evaluate_sequence (one padded call over episode segments) gives, at every step, the log-prob and value
    that acting step by step with the carried state gave; also with Gaussian actions, and gradients agree with
    the per-stretch unroll."""
    for space in (gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))):
        p = _policy(cell, space, critic_core=critic_core)
        rng = torch.Generator().manual_seed(1)
        for T, B in [(1, 1), (7, 3), (20, 5)]:
            obs = torch.randn(T, B, 3, generator=rng)
            starts = torch.rand(T, B, generator=rng) < 0.25
            state0 = torch.randn(B, p.state_size, generator=rng)
            state, acts, logps, values = state0, [], [], []
            with torch.no_grad():
                for t in range(T):
                    a, lp, v, state = p.act(obs[t], state, starts[t])
                    acts.append(a)
                    logps.append(lp)
                    values.append(v)
            logp, entropy, value = p.evaluate_sequence(obs, torch.stack(acts), state0, starts)
            torch.testing.assert_close(logp, torch.stack(logps), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(value, torch.stack(values), atol=1e-5, rtol=1e-5)
            assert entropy.shape == (T, B)
        feats = torch.randn(12, 4, 8, requires_grad=True)
        starts = torch.rand(12, 4) < 0.3
        state0 = torch.randn(4, p.state_size)
        g1 = torch.autograd.grad(p.unroll(feats, state0, starts)[0].square().sum(), [feats, *p.rnn.parameters()])
        g2 = torch.autograd.grad(p.unroll_segments(feats, state0, starts).square().sum(),
                                 [feats, *p.rnn.parameters()])
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_segment_layout_is_reusable_and_checked():
    """A layout computed once serves every call on the same starts (the epochs of an update), with or without
    episode starts after step 0, and a layout of other dimensions is refused."""
    p = _policy("lstm")
    feats, state = torch.randn(9, 4, 8), torch.randn(4, p.state_size)
    inside = torch.zeros(9, 4, dtype=torch.bool)
    inside[[0, 3, 5, 5], [1, 0, 0, 2]] = True
    for starts in (inside, torch.zeros(9, 4, dtype=torch.bool), inside[:1].expand(9, 4).clone()):
        layout = segment_layout(starts)
        assert (layout.rows is None) == (not starts[1:].any())
        reference = p.unroll(feats, state, starts)[0]
        for _ in range(2):
            torch.testing.assert_close(p.unroll_segments(feats, state, starts, layout), reference,
                                       atol=1e-6, rtol=1e-5)
    assert (segment_layout(inside).count, segment_layout(inside).length) == (7, 9)  # columns 1 and 3 unbroken
    with pytest.raises(ValueError, match="segment layout"):
        p.unroll_segments(feats[:5], state, inside[:5], segment_layout(inside))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_burn_in_only_advances_the_state(cell):
    p = _policy(cell)
    obs, acts = torch.randn(10, 2, 3), torch.randint(0, 3, (10, 2))
    starts = torch.zeros(10, 2, dtype=torch.bool)
    starts[6, 1] = True
    state = torch.randn(2, p.state_size)
    full = p.evaluate_sequence(obs, acts, state, starts)
    tail = p.evaluate_sequence(obs, acts, state, starts, burn_in=4)
    for a, b in zip(full, tail):
        torch.testing.assert_close(a[4:], b, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="burn_in"):
        p.evaluate_sequence(obs, acts, state, starts, burn_in=10)


@pytest.mark.parametrize("critic_core", [False, True])
def test_an_episode_start_forgets_the_state(critic_core):
    p = _policy("lstm", critic_core=critic_core)
    obs = torch.randn(4, 3)
    fresh = p.act(obs, p.initial_state(4), None, deterministic=True)
    reset = p.act(obs, torch.randn(4, p.state_size), torch.ones(4, dtype=torch.bool), deterministic=True)
    kept = p.act(obs, torch.randn(4, p.state_size), None, deterministic=True)
    torch.testing.assert_close(fresh[2], reset[2])
    torch.testing.assert_close(fresh[3], reset[3])
    assert not torch.allclose(fresh[2], kept[2])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_critic_core_has_its_own_state_and_gradients(cell):
    """critic_core: the state is [actor's layer | critic's layer] (twice one layer's width); the actor reads only
    the first half and the values only the second; value() equals act()'s values; the actor's loss reaches
    neither the critic's layer nor its MLP, the value's loss not the actor's; head_hidden puts an MLP of its own
    before each output layer."""
    p, plain = _policy(cell, critic_core=True), _policy(cell)
    k = plain.state_size
    assert (p.state_size, p.core_state_size, p.output_size) == (2 * k, k, 24)
    assert p.critic_rnn is not p.rnn and [m.out_features for m in p.actor if isinstance(m, torch.nn.Linear)] == [6, 3]
    obs, state = torch.randn(5, 3), torch.randn(5, p.state_size)
    with torch.no_grad():
        _, _, values, new_state = p.act(obs, state)
        assert new_state.shape == (5, 2 * k)
        torch.testing.assert_close(p.value(obs, state), values)
        h, _ = p._step(obs, state, None)
        other_critic = torch.cat([state[:, :k], torch.randn(5, k)], -1)
        other_actor = torch.cat([torch.randn(5, k), state[:, k:]], -1)
        h_c, _ = p._step(obs, other_critic, None)
        h_a, _ = p._step(obs, other_actor, None)
        torch.testing.assert_close(p.actor_output(h_c), p.actor_output(h))  # the critic's state: not the actor's
        torch.testing.assert_close(p.values_of(h_a), p.values_of(h))  # the actor's state: not the values
        assert not torch.allclose(p.values_of(h_c), p.values_of(h))
        assert not torch.allclose(p.actor_output(h_a), p.actor_output(h))
    acts = torch.randint(0, 3, (4, 5))
    logp, _, value = p.evaluate_sequence(torch.randn(4, 5, 3), acts, state, torch.zeros(4, 5, dtype=torch.bool))
    actor_grads = torch.autograd.grad(logp.sum(), list(p.parameters()), allow_unused=True, retain_graph=True)
    critic_grads = torch.autograd.grad(value.sum(), list(p.parameters()), allow_unused=True)
    for (name, _), ga, gc in zip(p.named_parameters(), actor_grads, critic_grads):
        if name.startswith(("critic_rnn.", "critic.")):
            assert ga is None or not ga.any(), name
        if name.startswith(("rnn.", "actor.")):
            assert gc is None or not gc.any(), name
    with pytest.raises(ValueError, match="head_hidden"):
        RecurrentActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), head_hidden=(0,))


def test_ortho_init_false_leaves_pytorchs_default_initialisation():
    """ortho_init=True: zero biases, the actor's output layer at gain 0.01; False: PyTorch's uniform initialisation
    of every layer (nonzero biases, an actor output as wide as its fan-in allows), the critic's layer included."""
    space, actions = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(3)
    torch.manual_seed(0)
    ortho = RecurrentActorCritic(space, actions, (), cell="lstm", size=16, critic_core=True, head_hidden=(8,))
    torch.manual_seed(0)
    plain = RecurrentActorCritic(space, actions, (), cell="lstm", size=16, critic_core=True, head_hidden=(8,),
                                 ortho_init=False)
    assert not ortho.rnn.bias_ih_l0.any() and ortho.actor[-1].weight.abs().max() < 0.02
    for layer in (plain.rnn, plain.critic_rnn):
        assert layer.bias_ih_l0.any() and layer.weight_hh_l0.abs().max() <= 1 / 16 ** 0.5
    assert plain.actor[-1].weight.abs().max() > 0.1 and plain.actor[-1].bias.any()


def test_recurrent_policy_rejects_flat_scoring_and_bad_states():
    p = _policy("gru")
    with pytest.raises(TypeError, match="evaluate_sequence"):
        p.evaluate(torch.zeros(2, 3), torch.zeros(2))
    with pytest.raises(ValueError, match="shape"):
        p.act(torch.zeros(2, 3), torch.zeros(2, 5))
    with pytest.raises(TypeError, match="state"):
        p.act(torch.zeros(2, 3), np.zeros((2, 12)))
    with pytest.raises(ValueError, match="cell"):
        RecurrentActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), cell="rnn")


# -- PPO / A2C with a recurrent policy ---------------------------------------------------------------
CRITIC_CORE = dict(critic_recurrent=True, head_hidden=[8])
"""The critic's own recurrent layer and MLP heads after the layers (rl-zoo3's CartPoleNoVel network, smaller)."""


@pytest.mark.parametrize("extra", [{}, CRITIC_CORE], ids=["shared-core", "critic-core"])
def test_the_update_replays_the_collected_rollout_exactly(extra):
    """Scoring the stored rollout from the state saved at its start, with the starts rebuilt from the stored
    episode ends, gives back the stored log-probs and values: the first PPO epoch's ratios are exactly 1."""
    model = rr.PPO("MemoryCue-v0", recurrent="lstm", seed=0, env_kwargs={"delay": 3}, **SMALL, **extra)
    for _ in range(2):  # the second rollout starts mid-episode with a carried state
        model._collect()
        b = model.buffer.tensors
        logp, _, values = model._sequences.whole().evaluate(model.policy)
        torch.testing.assert_close(logp.view_as(b.log_probs), b.log_probs, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(values.view_as(b.values), b.values, atol=1e-5, rtol=1e-5)
        idx = torch.tensor([2, 0])  # a minibatch of columns
        columns = model._sequences.batch(idx)
        logp, _, values = columns.evaluate(model.policy)
        torch.testing.assert_close(logp.view(-1, 2), b.log_probs[:, idx], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(columns.values.view(-1, 2), b.values[:, idx])
    assert b.terminated.any()


@pytest.mark.parametrize("extra", [{}, CRITIC_CORE], ids=["shared-core", "critic-core"])
def test_truncated_episodes_bootstrap_from_the_state_they_reached(extra):
    """final_values of truncated steps = the critic on the true final observation, entered with the state after
    the episode's last step (recomputed here by replaying the same actions on a twin env); with the critic's own
    layer, the state that layer reached."""
    kw = dict(SMALL, num_steps=24, minibatch_size=48, **extra)
    model = rr.PPO("CartPoleNoVel-v1", recurrent="gru", seed=4, env_kwargs={"max_episode_steps": 7}, **kw)
    twin = rr.make_vec("CartPoleNoVel-v1", 4, seed=model._env_seed, max_episode_steps=7)
    model._collect()
    b, col = model.buffer.tensors, model.collector
    assert (b.truncated & ~b.terminated).any()
    obs, _ = twin.reset(seed=model._env_seed)
    np.testing.assert_array_equal(obs, b.obs[0].numpy())
    state, starts = col.initial_state.clone(), torch.from_numpy(col.initial_starts.copy())
    checked = 0
    with torch.no_grad():
        for t in range(kw["num_steps"]):
            _, _, _, state = model.policy.act(b.obs[t], state, starts)
            _, _, terminated, truncated, info = twin.step(b.actions[t].numpy())
            for i in np.flatnonzero(truncated & ~terminated):
                final = torch.from_numpy(info["final_obs"][i:i + 1].copy())
                expected = model.policy.value(final, state[i:i + 1])
                torch.testing.assert_close(b.final_values[t, i:i + 1], expected, atol=1e-6, rtol=1e-6)
                checked += 1
            starts = torch.from_numpy(terminated | truncated)
    assert checked > 0


def test_episode_starts_are_rebuilt_from_the_episode_ends():
    term = torch.tensor([[0, 1], [0, 0], [1, 0]], dtype=torch.bool)
    trunc = torch.tensor([[1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    starts = episode_starts(torch.tensor([True, False]), term, trunc)
    assert starts.tolist() == [[True, False], [True, True], [False, False]]


@pytest.mark.parametrize("algo, cell, extra", [("ppo", "lstm", {}), ("a2c", "gru", {}), ("ppo", "lstm", CRITIC_CORE),
                                               ("a2c", "gru", CRITIC_CORE)],
                         ids=["ppo-lstm", "a2c-gru", "ppo-lstm-critic-core", "a2c-gru-critic-core"])
def test_recurrent_training_predict_and_save_load(tmp_path, algo, cell, extra):
    cls = {"ppo": rr.PPO, "a2c": rr.A2C}[algo]
    kw = dict(SMALL) if algo == "ppo" else {k: v for k, v in SMALL.items() if k in ("num_envs", "num_steps",
                                                                                     "recurrent_size", "hidden")}
    kw.update(extra)
    model = cls("CartPoleNoVel-v1", recurrent=cell, seed=0, **kw)
    model.learn(256, progress_bar=False)
    obs = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32) * 0.05
    actions, state = model.predict(obs, deterministic=True)
    assert actions.shape == (5,) and state.shape == (5, model.policy.state_size) and state.dtype == np.float32
    a2, s2 = model.predict(obs, state, np.zeros(5, bool), deterministic=True)
    a3, _ = model.predict(obs, s2, np.ones(5, bool), deterministic=True)  # episode starts: as from None
    np.testing.assert_array_equal(a3, actions)
    single, s1 = model.predict(obs[0], None, None, deterministic=True)
    assert single.shape == () and s1.shape == (1, model.policy.state_size)
    path = model.save(tmp_path / "m.pt")
    loaded = cls.load(path)
    assert loaded.policy.recurrent and loaded.policy.cell == cell
    assert loaded.policy.critic_core == bool(extra) and loaded.policy.state_size == model.policy.state_size
    b2, t2 = loaded.predict(obs, state, None, deterministic=True)
    np.testing.assert_array_equal(b2, a2)
    np.testing.assert_allclose(t2, s2, atol=1e-6)
    # evaluate() carries each env's state from step to step: it scores what predict() with the state does. After
    # 256 steps the greedy actions hardly depend on the state; with the weights x3 they do, so a state that is not
    # carried changes the returns
    with torch.no_grad():
        for p in loaded.policy.parameters():
            p.mul_(3.0)
    returns = episode_returns_with_predict(loaded, 3)
    assert loaded.evaluate(3) == pytest.approx((returns.mean(), returns.std()))


def episode_returns_with_predict(model, n: int) -> np.ndarray:
    """The first-episode return of each of ``n`` eval envs reset as ``evaluate`` resets them, acting with
    ``predict(obs, state, episode_starts, deterministic=True)`` and carrying its state: ``evaluate``'s reference."""
    env = model._get_eval_env(n)
    obs, _ = model._reset_for_evaluation(env)
    state, starts = None, np.ones(n, dtype=bool)
    returns, finished = np.zeros(n), np.zeros(n, dtype=bool)
    while not finished.all():
        actions, state = model.predict(obs, state, starts, deterministic=True)
        obs, rewards, term, trunc, _ = env.step(actions)
        returns += np.where(finished, 0.0, rewards)
        starts = term | trunc
        finished |= starts
    return returns


def test_recurrent_ppo_on_a_cnn_encoder():
    model = rr.PPO("MinAtar/Breakout-v1", recurrent="lstm", recurrent_size=32, num_envs=2, num_steps=16,
                   minibatch_size=16, update_epochs=1, seed=0)
    assert model.policy.encoder_kind == "minatar" and model.policy.input_dtype == np.uint8
    model.learn(64, progress_bar=False)
    actions, state = model.predict(model.env.reset(seed=0)[0], deterministic=True)
    assert actions.shape == (2,) and state.shape == (2, 64)


def test_predict_of_a_feed_forward_policy_takes_no_state():
    model = rr.PPO("CartPole-v1", num_envs=2, num_steps=8, minibatch_size=16)
    with pytest.raises(ValueError, match="recurrent"):
        model.predict(np.zeros(4, np.float32), np.zeros((1, 4)))


def test_recurrent_predict_rejects_bad_state_and_starts():
    model = rr.PPO("CartPoleNoVel-v1", recurrent="lstm", **SMALL)
    obs = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="state"):
        model.predict(obs, np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="episode_start"):
        model.predict(obs, None, np.zeros(2, bool))


@pytest.mark.parametrize("make, match", [
    (lambda: rr.IMPALA("CartPoleNoVel-v1", recurrent="lstm"), "IMPALA has no recurrent"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="lstm", async_collect=True, **SMALL), "async_collect"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="lstm", precision="bf16", **SMALL), "precision='bf16'"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="lstm", **dict(SMALL, minibatch_size=24)), "multiple of num_steps"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="lstm", burn_in=16, **SMALL), "burn_in"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="rnn"), "recurrent must be"),
    (lambda: rr.PPO("CartPoleNoVel-v1", hidden=[]), "non-empty"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="lstm", collection="fused", **SMALL), "collection='fused'"),
    (lambda: rr.PPO("CartPoleNoVel-v1", critic_recurrent=True), "apply to recurrent policies"),
    (lambda: rr.A2C("CartPoleNoVel-v1", head_hidden=[64]), "apply to recurrent policies"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="lstm", head_hidden=[0], **SMALL), "head_hidden must be"),
    (lambda: rr.PPO("CartPoleNoVel-v1", recurrent="lstm", critic_recurrent="yes", **SMALL), "critic_recurrent must"),
    (lambda: rr.PPO("CartPoleNoVel-v1", ortho_init=False), "apply to recurrent policies"),
])
def test_recurrent_configuration_errors(make, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        make()


def test_docs_examples_run():
    """Every python block of docs/recurrent.md runs as written (the first one's printed result is checked)."""
    import contextlib
    import io
    import re
    from pathlib import Path

    src = (Path(__file__).resolve().parents[1] / "docs" / "recurrent.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", src, re.S)
    assert len(blocks) == 4
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, "docs/recurrent.md", "exec"), {})
        if "MemoryCue" in block:
            assert out.getvalue().startswith("(1.0, 0.0)"), out.getvalue()
