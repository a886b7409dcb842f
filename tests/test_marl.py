"""Multi-agent layout, the PettingZoo adapter, masking of agents that leave, MAPPO/IPPO critics, save/load."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from docs_examples import run_examples
from mpe2 import simple_spread_v3
from pettingzoo import ParallelEnv

import rapidrl as rr
from rapidrl.algos.mappo import MultiAgentActorCritic
from rapidrl.envs.adapters.pettingzoo import PettingZooVecEnv
from rapidrl.envs.multiagent.mpe import SimpleSpreadVecEnv


class Leaving(ParallelEnv):
    """Three agents; agent i terminates after i + 2 steps (agent_2 is truncated instead); obs [t, i, last action].

    Asserts that only agents still present are given actions, so the adapter sending an action for a departed
    agent fails the test."""

    metadata = {"name": "leaving"}  # noqa: RUF012 (PettingZoo declares it a plain class attribute)

    def __init__(self, obs_shapes=None):
        self.possible_agents = ["a0", "a1", "a2"]
        self._obs_shapes = obs_shapes or {a: (3,) for a in self.possible_agents}

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, self._obs_shapes[agent], np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def _obs(self, agent, action=0):
        return np.array([self.t, self.possible_agents.index(agent), action], np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        obs = {a: self._obs(a, int(actions[a])) for a in self.agents}
        rewards = {a: float(self.possible_agents.index(a) + 1) for a in self.agents}
        ends = {a: self.t >= self.possible_agents.index(a) + 2 for a in self.agents}
        terms = {a: ends[a] and a != "a2" for a in self.agents}
        truncs = {a: ends[a] and a == "a2" for a in self.agents}
        self.agents = [a for a in self.agents if not ends[a]]
        return obs, rewards, terms, truncs, {a: {} for a in obs}


def test_adapter_matches_the_reference_parallel_env():
    """Rows of the adapter = the reference's observations, state and rewards under the same seeds and actions."""
    env = PettingZooVecEnv(simple_spread_v3.parallel_env, 2, seed=7)
    refs = [simple_spread_v3.parallel_env() for _ in range(2)]
    obs, _ = env.reset()
    ref_obs = [r.reset(seed=7 + e)[0] for e, r in enumerate(refs)]
    o, n = env.local_obs_dim, env.num_agents
    assert (o, n, env.state_dim, env.num_envs) == (18, 3, 54, 6)
    rng = np.random.default_rng(0)
    for t in range(30):
        for e, r in enumerate(refs):
            rows = obs[e * n:(e + 1) * n]
            np.testing.assert_array_equal(rows[:, :o], np.stack([ref_obs[e][a] for a in r.possible_agents]))
            np.testing.assert_array_equal(rows[:, o:o + n], np.eye(n))
            np.testing.assert_array_equal(rows[:, o + n:], np.tile(r.state(), (n, 1)))
        actions = rng.integers(0, 5, 6)
        obs, rewards, _, truncated, info = env.step(actions)
        for e, r in enumerate(refs):
            ref_obs[e], rr_, _, rtr, _ = r.step({a: actions[e * n + i] for i, a in enumerate(r.possible_agents)})
            np.testing.assert_array_equal(rewards[e * n:(e + 1) * n], np.float32([rr_[a] for a in r.possible_agents]))
            assert list(truncated[e * n:(e + 1) * n]) == [rtr[a] for a in r.possible_agents]
            if not r.agents:  # episode over: the final rows, then the adapter's own (unseeded) reset
                np.testing.assert_array_equal(info["final_obs"][e * n:(e + 1) * n, :o],
                                              np.stack([ref_obs[e][a] for a in r.possible_agents]))
                own = env.envs[e]
                np.testing.assert_array_equal(obs[e * n:(e + 1) * n, :o],
                                              np.stack([own.aec_env.observe(a) for a in own.possible_agents]))
                np.testing.assert_array_equal(obs[e * n:(e + 1) * n, o + n:], np.tile(own.state(), (n, 1)))
        if t == 24:
            break
    assert t == 24 and truncated.all() and info["active"].all()
    team, agents = env.pop_finished()
    assert team.shape == (2,) and agents.shape == (2, 3)


def test_built_in_and_adapter_agree_from_the_same_state():
    """The built-in kernel and the adapter around the reference give the same rows from the same state."""
    ours = SimpleSpreadVecEnv(1, seed=0)
    ours.reset()
    adapter = PettingZooVecEnv(simple_spread_v3.parallel_env, 1, seed=0)
    adapter.reset()
    world = adapter.envs[0].aec_env.unwrapped.world
    ours.set_state(np.stack([[a.state.p_pos for a in world.agents]]), np.zeros((1, 3, 2)),
                   np.stack([[m.state.p_pos for m in world.landmarks]]))
    for t in range(10):
        a = np.array([t % 5, (t + 2) % 5, 4])
        o1, r1, *_ = ours.step(a)
        o2, r2, *_ = adapter.step(a)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)


def test_agents_that_leave_are_masked_not_made_up():
    env = PettingZooVecEnv(Leaving, 2)
    obs, _ = env.reset()
    assert obs.shape == (6, 3 + 3 + 9)
    seen = []
    for t in range(5):
        obs, rewards, terminated, truncated, info = env.step(np.ones(6, np.int64))
        seen.append((rewards.copy(), terminated.copy(), truncated.copy(), info["active"].copy(),
                     info["_episode"].copy(), info["episode"]["r"].copy(), info["_team_episode"].copy()))
        if t == 1:  # a0 terminated on step 2: its real final reward and observation, then inactive
            assert terminated[0] and info["_episode"][0] and info["episode"]["r"][0] == 2.0
            np.testing.assert_array_equal(info["final_obs"][0, :3], [2, 0, 1])
            np.testing.assert_array_equal(obs[0, :3], 0.0)
        if t == 2:
            assert not info["active"][0] and rewards[0] == 0.0 and terminated[0] and not info["_episode"][0]
            assert info["active"][1] and terminated[1] and info["episode"]["r"][1] == 6.0
        if t == 3:  # a2 truncated on step 4: all agents gone, the copy reset
            assert truncated[2] and not terminated[2] and info["episode"]["r"][2] == 12.0
            assert info["_team_episode"].all() and info["team_episode"]["r"][0] == 2 + 6 + 12
            assert list(info["active"]) == [False, False, True] * 2
            np.testing.assert_array_equal(obs[:3, :3], [[0, 0, 0], [0, 1, 0], [0, 2, 0]])  # the new episode
    assert seen[4][3].all()  # every agent acts again after the reset
    team, agents = env.pop_finished()
    np.testing.assert_array_equal(team, [20.0, 20.0])
    np.testing.assert_array_equal(agents, [[2, 6, 12]] * 2)


def test_unshared_spaces_are_a_clear_error():
    with pytest.raises(ValueError, match=r"observation space.*'a1'"):
        PettingZooVecEnv(lambda: Leaving({"a0": (3,), "a1": (4,), "a2": (3,)}), 1)
    with pytest.raises(TypeError, match="env_fn"):
        PettingZooVecEnv(42, 1)
    with pytest.raises(ValueError, match="num_copies"):
        PettingZooVecEnv(Leaving, 0)


def _values(policy, obs):
    with torch.no_grad():
        return policy.value(torch.from_numpy(obs)), policy._heads(torch.from_numpy(obs))[0]


@pytest.mark.parametrize("algo,centralized", [(rr.MAPPO, True), (rr.IPPO, False)])
def test_critic_inputs(algo, centralized):
    """MAPPO's critic reads [one-hot | global state], IPPO's [local obs | one-hot]; actors never read the state."""
    model = algo("MPE/simple_spread-v3", num_envs=6, num_steps=8, minibatch_size=48, seed=0)
    p, env = model.policy, model.env
    assert isinstance(p, MultiAgentActorCritic)
    o, n = env.local_obs_dim, env.num_agents
    obs, _ = env.reset()
    obs = obs.copy()
    x = torch.from_numpy(obs)
    want = x[:, o:] if centralized else x[:, :o + n]
    torch.testing.assert_close(p.critic_input(x), want, rtol=0, atol=0)
    assert p.critic[0].in_features == (n + env.state_dim if centralized else o + n)
    v0, a0 = _values(p, obs)
    local, state = obs.copy(), obs.copy()
    local[:, :o] += 1.0
    state[:, o + n:] += 1.0
    v_local, a_local = _values(p, local)
    v_state, a_state = _values(p, state)
    torch.testing.assert_close(a_state, a0, rtol=0, atol=0)  # the actor ignores the global state
    assert not torch.allclose(a_local, a0)
    if centralized:
        torch.testing.assert_close(v_local, v0, rtol=0, atol=0)
        assert not torch.allclose(v_state, v0)
    else:
        torch.testing.assert_close(v_state, v0, rtol=0, atol=0)
        assert not torch.allclose(v_local, v0)


def test_training_logs_team_and_agent_returns_and_save_load(tmp_path):
    model = rr.MAPPO("MPE/simple_spread-v3", num_envs=12, num_steps=25, minibatch_size=100, update_epochs=1,
                     seed=3)
    model.learn(12 * 25 * 2, progress_bar=False)
    assert model.buffer.obs.shape == (25, 12, 18 + 3 + 54)
    last = model.history[-1]
    assert {"charts/team_return", "charts/agent_0_return", "charts/agent_2_return"} <= set(last)
    agent_sum = sum(last[f"charts/agent_{i}_return"] for i in range(3))  # the same episodes: team = sum of agents'
    assert last["charts/team_return"] == pytest.approx(agent_sum, rel=1e-5)
    path = model.save(tmp_path / "mappo")
    loaded = rr.MAPPO.load(path)
    assert loaded.config.centralized_critic and loaded.env.num_envs == 12
    obs, _ = loaded.env.reset(seed=1)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), loaded.predict(obs, deterministic=True))
    for a, b in zip(model.policy.state_dict().values(), loaded.policy.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    mean, std = model.evaluate(4)  # team returns of 4 episodes of 4 eval copies
    team = team_returns_with_predict(model, 4)  # each copy's summed agents' rewards, acting with predict()
    assert (mean, std) == pytest.approx((team.mean(), team.std())) and model.evaluate(4) == (mean, std)
    assert loaded.evaluate(4) == (mean, std)


def team_returns_with_predict(model, copies: int) -> np.ndarray:
    """The first-episode team return (the sum of its agents' rewards) of each of ``copies`` env copies reset as
    ``evaluate`` resets them, acting with ``predict(obs, deterministic=True)``: ``evaluate``'s reference."""
    env = rr.make_vec(model.env_id, copies, **model.env_kwargs)
    obs, _ = model._reset_for_evaluation(env)
    returns, finished = np.zeros(copies), np.zeros(copies, dtype=bool)
    while not finished.all():
        obs, rewards, term, trunc, _ = env.step(model.predict(obs, deterministic=True))
        returns += np.where(finished, 0.0, rewards.reshape(copies, -1).sum(axis=1))  # agents copy by copy
        finished |= (term | trunc).reshape(copies, -1).all(axis=1)
    return returns


def test_mappo_on_the_adapter_drops_departed_agents_from_the_loss():
    env = PettingZooVecEnv(Leaving, 4)
    model = rr.IPPO(env, num_steps=8, minibatch_size=16, update_epochs=1, seed=0)
    model.learn(8 * 12, progress_bar=False)
    active = model.buffer.active
    assert model.buffer.masked and active.shape == (8, 12) and 0 < active.sum() < active.size
    batches = list(model.buffer.minibatches(16, generator=torch.Generator().manual_seed(0)))
    assert sum(len(mb.obs) for mb in batches) == active.sum()
    assert all(mb.obs[:, 0].max() > 0 or mb.obs[:, 3:6].sum() == len(mb.obs) for mb in batches)
    assert "charts/team_return" in model.history[-1]


@pytest.mark.parametrize("algo,kwargs", [(rr.PPO, dict(minibatch_size=16)), (rr.A2C, {})])
def test_single_agent_algorithms_get_the_loss_masks_too(algo, kwargs):
    """The masks travel in the rollout storage (no env side channel): PPO and A2C on a multi-agent env whose
    agents leave train on the active rows only."""
    env = PettingZooVecEnv(Leaving, 4)
    model = algo(env, num_envs=12, num_steps=8, seed=0, **kwargs)
    model.learn(8 * 12 * 2, progress_bar=False)
    b = model.buffer
    assert b.masked and 0 < b.active.sum() < b.active.size
    batches = list(b.minibatches(8 * 12, generator=torch.Generator().manual_seed(0)))
    assert len(batches) == 1 and len(batches[0].obs) == b.active.sum()
    np.testing.assert_array_equal(np.sort(b.active_indices().numpy()), np.flatnonzero(b.active.reshape(-1)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_envs=10"):
        rr.MAPPO("MPE/simple_spread-v3", num_envs=10)
    with pytest.raises(TypeError, match="multi-agent env"):
        rr.MAPPO(rr.make_vec("CartPole-v1", 2), num_envs=2)
    with pytest.raises(Exception, match="shared=True"):
        rr.MAPPO("MPE/simple_spread-v3", shared=True)


@pytest.mark.parametrize("algo", [rr.MAPPO, rr.IPPO])
def test_the_compiled_backend_reads_the_policys_column_slices(algo):
    """Multi-agent PPO trains on PPO's handwritten backend, which gathers each network's columns of the rows
    (``input_columns``); tests/test_ppo_compiled_update.py compares it with the torch backend."""
    model = algo("MPE/simple_spread-v3", num_envs=12, num_steps=10, minibatch_size=60, seed=0)
    env, p = model.env, model.policy
    assert model.gradient_backend == "handwritten" and model._compiled is not None
    actor, critic = p.input_columns()
    assert actor == (0, env.local_obs_dim + env.num_agents)
    width = env.single_observation_space.shape[0]
    assert critic == ((env.local_obs_dim, width) if model.config.centralized_critic else actor)
    assert model._compiled.kernel().obs_dim == max(actor[1], critic[1])


def test_docs_examples_run():
    """Every python block of docs/multiagent.md runs, in order, in one namespace."""
    ns = run_examples("multiagent.md", 4)
    assert ns["obs"].shape == (12, 75) and ns["actions"].shape == (12,)
    assert "charts/team_return" in ns["model"].history[-1]


def _eval_team_return(act, seed: int) -> float:
    """Mean team return of 128 episodes (64 copies x 2 episodes of 25 steps) under ``act(obs) -> actions``."""
    env = SimpleSpreadVecEnv(64, seed=seed)
    obs, _ = env.reset()
    for _ in range(50):
        obs, *_ = env.step(act(obs))
    team, _ = env.pop_finished()
    assert team.shape == (128,)
    return float(team.mean())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])
def test_mappo_learns_simple_spread(seed):
    """MAPPO on the built-in simple_spread (3 agents), 1M agent-steps (96 rows x 25 steps per rollout, 5 epochs).

    Team return (sum of the 3 agents' returns per 25-step episode), evaluated with the stochastic policy on 128
    fresh episodes. Uniform random policy: -78.75 on this evaluation (-79.5 over 320 other episodes; std of one
    episode 24).
    Calibration (2026-11-24, loaded shared machine, 28-35 s per run, closed-form gradients): seed 0 -50.58,
    seed 1 -47.51, seed 2 -50.52 (last training returns -51.6, -46.0, -49.3). Threshold -60: well over a third of
    the way from the trained policies back towards random, 9 standard errors of the 128-episode mean above the
    random policy. CI runs seed 0.
    Hyperparameters: gamma 0.95 and no value clipping learned faster than PPO's defaults in a 500k-step sweep
    (-52.8 vs -58.4 for gamma 0.99, -61.2 with clipped values at lr 2e-3).
    """
    model = rr.MAPPO("MPE/simple_spread-v3", num_envs=96, num_steps=25, minibatch_size=600, update_epochs=5,
                     learning_rate=2e-3, gamma=0.95, anneal_lr=False, clip_vloss=False, seed=seed)
    model.learn(1_000_000, progress_bar=False)
    team = _eval_team_return(lambda obs: model.predict(obs, deterministic=False), seed=1000 + seed)
    assert team > -60.0, team


def test_random_policy_baseline_of_the_learning_test():
    """The random policy's return on the learning test's evaluation (-78.75 with these seeds) lies far below the
    learning threshold (-60), so passing that threshold means learning."""
    rng = np.random.default_rng(0)
    team = _eval_team_return(lambda obs: rng.integers(0, 5, len(obs)), seed=1000)
    assert team < -70.0, team


def test_cli_trains_and_logs_team_returns(tmp_path):
    """``rapidrl train mappo MPE/simple_spread-v3``: runs, evaluates, saves; team/agent returns reach metrics.csv."""
    import csv

    from rapidrl import cli

    run = tmp_path / "run"
    assert cli.main(["train", "mappo", "MPE/simple_spread-v3", "--timesteps", "600", "--run-dir", str(run),
                     "--eval-episodes", "2", "--headless", "--set", "algo.num_envs=12", "--set",
                     "algo.minibatch_size=100"]) == 0
    with open(run / "metrics.csv") as f:
        header = next(csv.reader(f))
    assert {"charts/team_return", "charts/agent_0_return", "charts/agent_1_return"} <= set(header)
    assert rr.MAPPO.load(run / "model.pt").env.num_envs == 12
