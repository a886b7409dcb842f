"""Action masks (docs/masks.md): one contract (envs written as Numba functions, Gymnasium and PettingZoo envs), one
definition of the masked distribution (PyTorch and its Numba twin), the masked envs, ``check``, and every discrete
algorithm acting on the valid actions only."""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.algos.offpolicy_losses import dqn_loss
from rapidrl.envs import EnvContractError, NumbaEnv, check, make_vec
from rapidrl.envs.masked import identity
from rapidrl.envs.masked.tictactoe import LINES
from rapidrl.kernels import distributions as nk
from rapidrl.kernels.exploration import epsilon_greedy
from rapidrl.kernels.rng import derive_keys
from rapidrl.kernels.td import dqn_td_grads
from rapidrl.nn import distributions as td

MASKED = {"InvalidActionDiscrete-v0": dict(dim=8, n_invalid_actions=5), "TicTacToe-v3": dict(lookahead=0.5),
          "MaskedCue-v0": {}}


# -------------------------------------------------------------------------- the masked distribution


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_categorical_at_1024_actions_is_finite_and_covers_the_valid_actions_only(dtype):
    """1,024 and 4,096 actions, 1 to all valid, logits up to +-30: log-probabilities, entropy, sampling and gradients
    of the masked distribution equal those of the valid actions' own distribution (computed in float64), finite, in
    float32 and bfloat16 (sb3-contrib issue 322's Simplex error came at 992 actions from renormalised float32
    probabilities)."""
    g = torch.Generator().manual_seed(0)
    for k in (1024, 4096):
        logits64 = torch.randn(6, k, generator=g, dtype=torch.float64) * 10
        logits64[0] = 30.0  # all equal and large
        mask = torch.rand(6, k, generator=g) < torch.tensor([[0.5], [0.01], [0.99], [0.3], [1.0], [0.0]])
        mask[5, 123] = True  # one valid action
        mask[1, :2] = True
        logits = logits64.to(dtype).requires_grad_(True)
        log_probs = td.categorical_log_probs(td.apply_action_mask(logits, mask))
        entropy = td.categorical_entropy(log_probs)
        assert log_probs.dtype == dtype and torch.isfinite(log_probs).all() and torch.isfinite(entropy).all()
        assert (log_probs.exp()[~mask] == 0).all()
        (log_probs[mask].sum() + entropy.sum()).float().backward()
        assert torch.isfinite(logits.grad).all() and (logits.grad[~mask] == 0).all()
        tol = 1e-4 if dtype == torch.float32 else 0.05
        for row in range(6):
            valid = logits.detach()[row][mask[row]].double()
            ref = torch.log_softmax(valid, -1)
            err = (log_probs.detach()[row][mask[row]].double() - ref).abs() / (1 + ref.abs())
            assert err.max() < tol, (row, err.max())
            ref_entropy = -(ref.exp() * ref).sum()
            assert abs(entropy[row].item() - ref_entropy.item()) < tol * (1 + ref_entropy.item()), row
        picks = torch.multinomial(log_probs.detach().float().exp(), 2000, replacement=True, generator=g)
        assert mask.gather(1, picks).all()


def test_masked_max_and_argmax():
    q = torch.tensor([[1.0, 5.0, 3.0], [1.0, 5.0, 3.0], [-2.0, -1.0, -3.0], [4.0, 4.0, 4.0]])
    mask = torch.tensor([[True, False, True], [False, False, False], [True, False, True], [False, True, True]])
    torch.testing.assert_close(td.masked_max(q, mask), torch.tensor([3.0, 0.0, -2.0, 4.0]))
    assert td.apply_action_mask(q, mask).argmax(1).tolist()[::2] == [2, 0]
    torch.testing.assert_close(td.masked_max(q, None), q.max(1).values)
    assert td.apply_action_mask(q, None) is q


@pytest.mark.parametrize("mode", ["compiled", "python"])
def test_numba_twins_equal_the_torch_definitions(mode):
    """``apply_action_mask``, ``log_sum_exp``, ``categorical_entropy``, ``masked_max`` of the Numba twins equal the
    PyTorch definitions on masked rows; ``categorical_sample`` never picks an invalid action, even for u -> 1."""
    def fn(name):
        f = getattr(nk, name)
        return f if mode == "compiled" else f.py_func

    rng = np.random.default_rng(1)
    for k in (3, 1024):
        logits = (rng.standard_normal((8, k)) * 8).astype(np.float32)
        mask = rng.random((8, k)) < 0.2
        mask[:, 0] |= ~mask.any(1)
        want_lp = td.categorical_log_probs(td.apply_action_mask(torch.from_numpy(logits), torch.from_numpy(mask)))
        want_h = td.categorical_entropy(want_lp)
        for r in range(8):
            row = logits[r].copy()
            fn("apply_action_mask")(row, mask[r])
            np.testing.assert_array_equal(row, td.apply_action_mask(torch.from_numpy(logits[r]),
                                                                    torch.from_numpy(mask[r])).numpy())
            lse = fn("log_sum_exp")(row)
            np.testing.assert_allclose(row[mask[r]] - lse, want_lp[r][mask[r]].numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(fn("categorical_entropy")(row, lse), want_h[r].item(), rtol=1e-5, atol=1e-5)
            for u in (0.0, 0.3, 0.999999, np.nextafter(1.0, 0.0)):
                assert mask[r, fn("categorical_sample")(row, lse, u)]
            best, m = fn("masked_max")(logits[r], mask[r])
            assert best == int(np.flatnonzero(mask[r])[np.argmax(logits[r][mask[r]])])
            assert m == td.masked_max(torch.from_numpy(logits[r]), torch.from_numpy(mask[r])).item()
    assert fn("masked_max")(np.ones(3, np.float32), np.zeros(3, bool)) == (-1, 0.0)
    valid = np.array([False, True, False, True, True])
    picks = [fn("nth_valid")(valid, u) for u in np.linspace(0, 1, 300, endpoint=False)]
    assert set(picks) == {1, 3, 4} and all(picks.count(a) == 100 for a in (1, 3, 4))


def test_masked_epsilon_greedy_picks_valid_actions_and_equals_the_unmasked_choice_when_all_are_valid():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((64, 7)).astype(np.float32)
    keys = derive_keys(3, 64)
    plain = epsilon_greedy(q, 0.5, keys, np.zeros(64, np.uint64))
    full = epsilon_greedy(q, 0.5, keys, np.zeros(64, np.uint64), mask=np.ones((64, 7), bool))
    np.testing.assert_array_equal(plain[0], full[0])
    np.testing.assert_array_equal(plain[1], full[1])
    mask = rng.random((64, 7)) < 0.3
    mask[:, 2] = True
    for eps in (0.0, 0.5, 1.0):
        actions, values = epsilon_greedy(q, eps, keys, np.zeros(64, np.uint64), mask=mask)
        assert mask[np.arange(64), actions].all()
        np.testing.assert_array_equal(values, np.where(mask, q, -np.inf).max(1))
        if eps == 0.0:
            np.testing.assert_array_equal(actions, np.where(mask, q, -np.inf).argmax(1))
    with pytest.raises(ValueError, match="row 0 has no valid action"):
        epsilon_greedy(q[:1], 0.1, keys[:1], np.zeros(1, np.uint64), mask=np.zeros((1, 7), bool))


# -------------------------------------------------------------------------- the env contract


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
@pytest.mark.parametrize("env_id", list(MASKED))
def test_masked_envs_keep_the_contract(env_id, mode):
    # the bounds-checked run (its kernels compile on every run, ~4 s an env) once, for Tic-Tac-Toe's mask
    bounds = env_id == "TicTacToe-v3" and mode == "same_step"
    report = check(make_vec(env_id, 4, seed=1, autoreset_mode=mode, **MASKED[env_id]), steps=250, bounds_check=bounds)
    assert report.action_masks and report.episodes > 0 and report.bounds_checked == bounds


def test_invalid_action_env_is_sb3_contribs():
    envs = make_vec("InvalidActionDiscrete-v0", 16, seed=0, dim=10, n_invalid_actions=6)
    obs, info = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(100):
        target, mask = obs.argmax(1), info["action_mask"].copy()
        assert (obs.sum(1) == 1).all() and mask[np.arange(16), target].all() and (mask.sum(1) == 4).all()
        actions = np.where(rng.random(16) < 0.5, target, rng.integers(10, size=16))
        obs, rewards, terminated, truncated, info = envs.step(actions)
        np.testing.assert_array_equal(rewards, (actions == target).astype(np.float32))
        assert not terminated.any() and truncated.all() == (t == 99)


def test_masked_cue_answer_is_the_first_valid_action_at_or_after_the_cue():
    envs = make_vec("MaskedCue-v0", 64, seed=0, autoreset_mode="next_step")
    obs, info = envs.reset(seed=0)
    cue = obs[:, :6].argmax(1)
    assert (obs[:, :6].sum(1) == 1).all() and info["action_mask"].all()
    obs, *_, info = envs.step(np.zeros(64, np.int64))
    assert not obs.any() and info["action_mask"].all()
    obs, *_, info = envs.step(np.zeros(64, np.int64))
    mask = info["action_mask"].copy()
    assert obs[:, 6].all() and (mask.sum(1) == 3).all()
    answer = np.array([next(a % 6 for a in range(c, c + 6) if mask[i, a % 6]) for i, c in enumerate(cue)])
    actions = np.where(np.arange(64) % 2 == 0, answer, (answer + 1) % 6)
    _, rewards, terminated, _, _ = envs.step(actions)
    np.testing.assert_array_equal(rewards, (np.arange(64) % 2 == 0).astype(np.float32))
    assert terminated.all()


def _lookahead(board, me):
    """The one-step-lookahead player's move (plain Python): its win, else a block, else None (a random move)."""
    for mark in (2 - me, 1 + me):
        for k in range(9):
            if board[k] == 0 and any(k in line and all(board[s] == mark for s in line if s != k) for line in LINES):
                return k
    return None


def test_tictactoe_is_pettingzoos_move_by_move():
    """Every observation, mask, reward and termination equals PettingZoo's ``tictactoe_v3`` given the same moves
    (the agent's random legal moves and the opponent's as our env played them); the lookahead opponent's moves are
    its rule's, the random one's legal."""
    from pettingzoo.classic import tictactoe_v3

    n = 16
    envs = make_vec("TicTacToe-v3", n, seed=3, lookahead=0.5, autoreset_mode="next_step")
    obs, info = envs.reset(seed=3)
    refs = [tictactoe_v3.env() for _ in range(n)]
    rng = np.random.default_rng(0)
    games = {"won": 0, "lost": 0, "draw": 0, "lookahead": 0}

    def start(i):
        refs[i].reset(seed=0)
        state = envs.get_state(i)
        if state[9] == 1:  # the opponent (player_1) has moved
            refs[i].step(int(np.flatnonzero(state[:9])[0]))

    def compare(i, reward, terminated):
        state = envs.get_state(i)
        agent = refs[i].possible_agents[state[9]]
        ref_obs = refs[i].observe(agent)
        np.testing.assert_array_equal(obs[i], ref_obs["observation"].astype(np.float32).reshape(-1))
        np.testing.assert_array_equal(info["action_mask"][i], ref_obs["action_mask"].astype(bool))
        assert reward == refs[i].rewards[agent] and terminated == refs[i].terminations[agent]

    for i in range(n):
        start(i)
        compare(i, 0.0, False)
    ended = np.zeros(n, bool)
    for _ in range(120):
        mask = info["action_mask"].copy()
        actions = np.array([rng.choice(np.flatnonzero(m)) if m.any() else 0 for m in mask])
        before = [envs.get_state(i) for i in range(n)]
        obs, rewards, terminated, _, info = envs.step(actions)
        for i in range(n):
            if ended[i]:  # NEXT_STEP: this step reset env i
                start(i)
                compare(i, 0.0, False)
                continue
            refs[i].step(int(actions[i]))
            state = envs.get_state(i)
            theirs = np.flatnonzero(np.array(refs[i].unwrapped.board.squares) != state[:9])
            if len(theirs):  # the opponent's reply
                assert len(theirs) == 1 and not refs[i].terminations[refs[i].agents[0]]
                board = before[i][:9].copy()
                board[actions[i]] = state[9] + 1
                rule = _lookahead(board, state[9])
                if state[11] == 1 and rule is not None:
                    assert theirs[0] == rule
                refs[i].step(int(theirs[0]))
            compare(i, rewards[i], terminated[i])
            if terminated[i]:
                games["won" if rewards[i] > 0 else "lost" if rewards[i] < 0 else "draw"] += 1
                games["lookahead"] += int(state[11])
        ended = terminated.copy()
    assert min(games.values()) > 3, games  # wins, losses, draws, and games against both opponents were compared


def test_tictactoe_illegal_move_loses_as_pettingzoos_wrapper():
    from pettingzoo.classic import tictactoe_v3

    envs = make_vec("TicTacToe-v3", 1, seed=0, agent_first=0.0)  # the opponent has taken a square
    envs.reset(seed=0)
    taken = int(np.flatnonzero(envs.get_state(0)[:9])[0])
    _, reward, terminated, _, _ = envs.step(np.array([taken]))
    ref = tictactoe_v3.env()
    ref.reset(seed=0)
    ref.step(taken)
    ref.step(taken)  # player_2 plays the same square
    assert reward[0] == ref.rewards["player_2"] == -1.0 and terminated[0] and ref.terminations["player_2"]


# -------------------------------------------------------------------------- the contract's errors


@numba.njit
def _reset(state, i, params, rng_key, rng_counter):
    state[i, 0] = 0


@numba.njit
def _step(state, i, actions, params, elapsed, rng_key, rng_counter):
    state[i, 0] += 1
    return 1.0, state[i, 0] >= 5


@numba.njit
def _observe(state, i, obs):
    obs[i, 0] = state[i, 0]


@numba.njit
def _mask_none_at_3(state, i, mask_out):
    for a in range(mask_out.shape[1]):
        mask_out[i, a] = state[i, 0] != 3


@numba.njit
def _mask_returns(state, i, mask_out):
    mask_out[i, 0] = True
    return 1


@numba.njit
def _mask_past_the_end(state, i, mask_out):
    mask_out[i, 3] = True


def _counter(mask, space=None):
    return NumbaEnv(id="Counter-v0", observation_space=gym.spaces.Box(0, 10, (1,), np.float32),
                    action_space=space or gym.spaces.Discrete(3), state_shape=(None, 1), state_dtype=np.int64,
                    reset=_reset, step=_step, observe=_observe, mask=mask)


def test_mask_function_is_held_to_its_contract():
    with pytest.raises(TypeError, match=r"Counter-v0: mask must return nothing \(it writes .*_mask_returns .*returns"):
        _counter(_mask_returns)
    with pytest.raises(TypeError, match="a mask function needs a Discrete action space"):
        _counter(_mask_none_at_3, gym.spaces.Box(-1, 1, (2,), np.float32))
    envs = _counter(_mask_past_the_end).make_vec(2, seed=0, debug=True)
    with pytest.raises(IndexError, match=r"Counter-v0: mask writes mask_out\[i, 3\] out of bounds"):
        envs.reset(seed=0)


def test_check_catches_a_state_without_valid_actions():
    envs = _counter(_mask_none_at_3).make_vec(2, seed=0)
    with pytest.raises(EnvContractError, match=r"step 2: info\['action_mask'\]: row 0 has no valid action"):
        check(envs, steps=20)


# -------------------------------------------------------------------------- every discrete algorithm acts validly

@numba.njit(cache=True)
def _strict_step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """InvalidActionDiscrete-v0's step, -100 for an invalid action: a run that ever acts invalidly shows it."""
    valid = state[i, 1 + actions[i]] != 0
    reward, terminated = identity.step(state, i, actions, params, elapsed, rng_key, rng_counter)
    return (reward if valid else -100.0), terminated


STRICT = NumbaEnv(id="StrictMasks-v0", observation_space=gym.spaces.Box(0.0, 1.0, (12,), np.float32),
                  action_space=gym.spaces.Discrete(12), state_shape=(None, 13), state_dtype=np.int64,
                  reset=identity.reset, step=_strict_step, observe=identity.observe, mask=identity.mask,
                  params={"n_invalid_actions": 9}, max_episode_steps=20)


rr.envs.register(STRICT)


def _strict_envs(n):
    return STRICT.make_vec(n, seed=0)


def _rewards_seen(model) -> np.ndarray:
    """The rewards of the transitions a model trained on (its rollout or replay)."""
    b = model.buffer
    return np.asarray(b.arrays()["rewards"][:len(b)] if hasattr(b, "arrays") and callable(b.arrays) else b.rewards)


OFF_POLICY = {
    "dqn": lambda env: rr.DQN(env, num_envs=4, learning_starts=100, batch_size=32, train_freq=8, gradient_steps=4,
                              hidden=(32,), exploration_fraction=0.5, seed=0),
    "dqn_torch_double_nstep": lambda env: rr.DQN(env, num_envs=4, learning_starts=100, batch_size=32, train_freq=8,
                                                 gradient_steps=4, hidden=(32,), gradient_backend="torch", n_step=3,
                                                 prioritized=True, seed=0),
    "pqn": lambda env: rr.PQN(env, num_envs=4, num_steps=16, minibatch_size=32, update_epochs=1, hidden=(32,),
                              seed=0),
    "c51": lambda env: rr.C51(env, num_envs=4, learning_starts=100, batch_size=32, train_freq=8, gradient_steps=4,
                              hidden=(32,), n_atoms=11, v_min=0.0, v_max=20.0, exploration_fraction=0.5, seed=0),
    "rainbow": lambda env: rr.Rainbow(env, num_envs=4, learning_starts=100, batch_size=32, train_freq=8,
                                      gradient_steps=4, hidden=(32,), n_atoms=11, v_min=0.0, v_max=20.0, seed=0),
    "qrdqn_double_nstep": lambda env: rr.QRDQN(env, num_envs=4, learning_starts=100, batch_size=32, train_freq=8,
                                               gradient_steps=4, hidden=(32,), n_quantiles=8, double_q=True, n_step=3,
                                               prioritized=True, exploration_fraction=0.5, seed=0),
    "iqn": lambda env: rr.IQN(env, num_envs=4, learning_starts=100, batch_size=32, train_freq=8, gradient_steps=4,
                              hidden=(32,), num_tau_samples=8, num_tau_prime_samples=8, exploration_fraction=0.5,
                              seed=0),
    "sac_discrete": lambda env: rr.SACDiscrete(env, num_envs=4, learning_starts=100, batch_size=32, train_freq=8,
                                               gradient_steps=4, hidden=(32,), tau=0.02, target_update_interval=1,
                                               seed=0),
}


@pytest.mark.parametrize("name", list(OFF_POLICY))
def test_q_learning_acts_on_valid_actions_only(name, tmp_path):
    """Exploration (epsilon 1 -> 0.05), random warm-up, greedy evaluation and sampled predict never take an invalid
    action; the masked target is what the loss saw (the compiled and torch DQN backends agree on it, tested in
    test_dqn_masked_td_kernel_equals_autograd); save/load keeps acting on the masks."""
    model = OFF_POLICY[name]("StrictMasks-v0")
    model.learn(1024, progress_bar=False)
    assert model.action_mask_size == 12 and (_rewards_seen(model) > -100).all()
    assert model.evaluate(4)[0] >= 0 and model.evaluate(4, deterministic=False)[0] >= 0
    env = _strict_envs(8)
    obs, info = env.reset(seed=1)
    for deterministic in (True, False):
        for _ in range(30):
            actions = model.predict(obs, deterministic=deterministic, action_masks=info["action_mask"])
            obs, rewards, *_, info = env.step(actions)
            assert (rewards > -100).all()
    model.save(tmp_path / "m.pt")
    loaded = type(model).load(tmp_path / "m.pt")
    np.testing.assert_array_equal(loaded.predict(obs, True, info["action_mask"]), model.predict(obs, True,
                                                                                                info["action_mask"]))


@pytest.mark.parametrize("double_q", [False, True])
def test_dqn_masked_td_kernel_equals_autograd(double_q):
    """The compiled loss head with the next states' masks equals autograd through ``dqn_loss`` with the masked
    target (Double DQN: the masked argmax of the online network; a state without a valid action worth 0)."""
    rng = np.random.default_rng(0)
    b, a = 16, 5
    q_both = rng.standard_normal((2 * b if double_q else b, a)).astype(np.float32)
    next_target = rng.standard_normal((b, a)).astype(np.float32)
    mask = rng.random((b, a)) < 0.4
    mask[3] = False
    actions, rewards = rng.integers(a, size=b), rng.standard_normal(b).astype(np.float32)
    discounts = np.where(rng.random(b) < 0.3, 0.0, 0.99).astype(np.float32)
    d_out, out = np.empty((b, a), np.float32), np.empty(3 + b, np.float32)
    dqn_td_grads(q_both, next_target, actions, rewards, discounts, None, double_q, d_out, out, next_mask=mask)
    q = torch.from_numpy(q_both[:b]).requires_grad_(True)
    nt, m = torch.from_numpy(next_target), torch.from_numpy(mask)
    if double_q:
        best = td.apply_action_mask(torch.from_numpy(q_both[b:]), m).argmax(1, keepdim=True)
        next_q = torch.where(m.any(1), nt.gather(1, best).squeeze(1), torch.zeros(b))
    else:
        next_q = td.masked_max(nt, m)
    loss, _ = dqn_loss(q.gather(1, torch.from_numpy(actions).unsqueeze(1)).squeeze(1), next_q,
                       torch.from_numpy(rewards), torch.from_numpy(discounts))
    loss.backward()
    np.testing.assert_allclose(out[0], loss.item(), rtol=1e-5)
    np.testing.assert_allclose(d_out, q.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["dqn", "pqn", "qrdqn_double_nstep", "iqn", "rainbow", "sac_discrete"])
def test_export_takes_the_mask_as_an_input(name, tmp_path):
    """ONNX and TorchScript exports of a model trained with masks take ``action_masks`` and act as ``predict`` with
    them (random observations, masks with 1 to 12 valid actions)."""
    import onnxruntime as ort

    from rapidrl.export import export_policy

    model = OFF_POLICY[name]("StrictMasks-v0")
    model.learn(256, progress_bar=False)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((64, 12)).astype(np.float32)
    masks = rng.random((64, 12)) < rng.random((64, 1))
    masks[np.arange(64), rng.integers(12, size=64)] = True
    expect = model.predict(obs, deterministic=True, action_masks=masks)
    assert masks[np.arange(64), expect].all()
    session = ort.InferenceSession(str(export_policy(model, tmp_path / "p.onnx")))
    assert [i.name for i in session.get_inputs()] == ["obs", "action_masks"]
    np.testing.assert_array_equal(session.run(None, {"obs": obs, "action_masks": masks})[0], expect)
    ts = torch.jit.load(str(export_policy(model, tmp_path / "p.ts", "torchscript")))
    np.testing.assert_array_equal(ts(torch.from_numpy(obs), torch.from_numpy(masks)).numpy(), expect)


def test_predict_checks_its_masks():
    model = rr.PQN("StrictMasks-v0", num_envs=2, num_steps=8, minibatch_size=16, seed=0)
    obs = np.zeros((3, 12), np.float32)
    with pytest.raises(ValueError, match=r"action_masks must have shape \(3, 12\)"):
        model.predict(obs, action_masks=np.ones((3, 11), bool))
    # masks as the env adapters take them (issue 57): 0/1 in any int or float dtype; other values or dtypes refused
    assert (model.predict(obs, deterministic=True, action_masks=np.eye(3, 12)) == [0, 1, 2]).all()
    with pytest.raises(ValueError, match="must hold only 0 and 1"):
        model.predict(obs, action_masks=np.full((3, 12), 0.5))
    with pytest.raises(TypeError, match="bool"):
        model.predict(obs, action_masks=np.full((3, 12), "1"))
    with pytest.raises(ValueError, match=r"action_masks\[1\] has no valid action"):
        model.predict(obs, action_masks=np.eye(3, 12, dtype=bool) * np.array([[1], [0], [1]], bool))
    one = np.zeros(12, bool)
    one[7] = True
    assert model.predict(obs[0], deterministic=True, action_masks=one) == 7
