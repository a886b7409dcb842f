"""The built-in simple_spread against ``mpe2.simple_spread_v3`` step by step.

How both are driven from the same state: our copies draw their initial positions from rapidrl's per-copy streams;
after each of our resets the reference's parallel env is reset and its world state (agent positions and
velocities, landmark positions) is set to ours (``_copy_state_into``), so the reference starts from the same
state. Both then get the same random actions every step, and every observation (the local observation of each
agent and the global state), reward and truncation flag is compared, over several episodes.

Tolerance: none. Our kernel performs the reference's float64 operations in the same order (including NumPy's
``logaddexp`` branches and the order in which contact forces are summed), so observations (float32 roundings of
the same float64 values) are required to be bitwise equal, and rewards equal to the reference's float64 reward
rounded to float32 (our reward dtype). The team reward (a float32 sum) is compared with rtol 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpe2 import simple_spread_v3

import rapidrl
from rapidrl.envs.multiagent.mpe import SimpleSpreadVecEnv


def _copy_state_into(ref, env: SimpleSpreadVecEnv, e: int) -> None:
    world = ref.unwrapped.world
    for i, agent in enumerate(world.agents):
        agent.state.p_pos = env.agent_pos[e, i].copy()
        agent.state.p_vel = env.agent_vel[e, i].copy()
    for m, lm in enumerate(world.landmarks):
        lm.state.p_pos = env.landmark_pos[e, m].copy()


def _ref_obs(ref) -> np.ndarray:
    aec = ref.aec_env
    return np.stack([aec.observe(a) for a in ref.possible_agents])


def _run(n_agents: int, continuous: bool, num_copies: int = 3, steps: int = 80, seed: int = 0,
         local_ratio: float = 0.5, max_cycles: int = 25):
    env = SimpleSpreadVecEnv(num_copies, N=n_agents, continuous_actions=continuous, seed=seed,
                             local_ratio=local_ratio, max_cycles=max_cycles)
    refs = [simple_spread_v3.parallel_env(N=n_agents, continuous_actions=continuous, local_ratio=local_ratio,
                                          max_cycles=max_cycles) for _ in range(num_copies)]
    obs, _ = env.reset()
    n, o = n_agents, env.local_obs_dim
    for e, ref in enumerate(refs):
        ref.reset(seed=e)
        _copy_state_into(ref, env, e)
        np.testing.assert_array_equal(obs[e * n:(e + 1) * n, :o], _ref_obs(ref))
    rng = np.random.default_rng(seed)
    compared = 0
    for _t in range(steps):
        if continuous:
            actions = rng.uniform(-0.2, 1.2, (num_copies * n, 5)).astype(np.float32)
        else:
            actions = rng.integers(0, 5, num_copies * n)
        obs, rewards, terminated, truncated, info = env.step(actions)
        for e, ref in enumerate(refs):
            rows = slice(e * n, (e + 1) * n)
            act = {name: actions[e * n + i] for i, name in enumerate(ref.possible_agents)}
            r_obs, r_rew, r_term, r_trunc, _ = ref.step(act)
            mine = info["final_obs"][rows] if truncated[e * n] else obs[rows]
            want = np.stack([r_obs[a] for a in ref.possible_agents])
            np.testing.assert_allclose(mine[:, :o], want, rtol=0, atol=0)
            np.testing.assert_allclose(mine[:, o + n:], np.tile(ref.state(), (n, 1)), rtol=0, atol=0)
            np.testing.assert_array_equal(mine[:, o:o + n], np.eye(n, dtype=np.float32))
            want_r = np.array([r_rew[a] for a in ref.possible_agents])
            np.testing.assert_array_equal(rewards[rows], want_r.astype(np.float32))
            assert info["team_reward"][e] == pytest.approx(want_r.sum(), rel=1e-6, abs=1e-6)
            assert list(truncated[rows]) == [r_trunc[a] for a in ref.possible_agents]
            assert not terminated[rows].any() and not any(r_term.values())
            if truncated[e * n]:  # our copy reset itself: restart the reference from our new state
                ref.reset(seed=1000 + e)
                _copy_state_into(ref, env, e)
                np.testing.assert_array_equal(obs[rows, :o], _ref_obs(ref))
            compared += 1
    return compared, env


@pytest.mark.parametrize("n_agents", [3, 4])
def test_discrete_matches_reference_step_by_step(n_agents):
    compared, env = _run(n_agents, continuous=False)
    assert compared == 3 * 80
    team, agents = env.pop_finished()
    assert team.shape == (9,) and agents.shape == (9, n_agents)  # 3 copies x 3 episodes of 25 steps ended
    np.testing.assert_allclose(agents.sum(1), team, rtol=1e-5)


def test_continuous_matches_reference_step_by_step():
    _run(3, continuous=True, steps=60, local_ratio=0.3, max_cycles=20)


def test_collisions_happen_and_match():
    """Agents started on top of each other: the contact forces and collision penalties are exercised."""
    env = SimpleSpreadVecEnv(1, seed=3)
    env.reset()
    pos = np.array([[[0.0, 0.0], [0.05, 0.02], [-0.1, 0.04]]])
    env.set_state(pos, np.zeros((1, 3, 2)), env.landmark_pos.copy())
    ref = simple_spread_v3.parallel_env()
    ref.reset(seed=0)
    _copy_state_into(ref, env, 0)
    for t in range(5):
        actions = np.array([t % 5, (t + 1) % 5, 0])
        obs, rewards, *_ = env.step(actions)
        r_obs, r_rew, *_ = ref.step({a: actions[i] for i, a in enumerate(ref.possible_agents)})
        np.testing.assert_allclose(obs[:, :18], np.stack([r_obs[a] for a in ref.possible_agents]), atol=0, rtol=0)
        np.testing.assert_array_equal(rewards, np.float32([r_rew[a] for a in ref.possible_agents]))
        if t == 0:  # the reference counts collisions for every agent: the penalty path is exercised
            raw = ref.aec_env.unwrapped
            assert all(raw.scenario.reward(a, raw.world) <= -1.0 for a in raw.world.agents)


def test_make_vec_and_bad_input():
    env = rapidrl.make_vec("MPE/simple_spread-v3", 4, seed=1)
    assert isinstance(env, SimpleSpreadVecEnv) and env.num_envs == 12 and env.num_agents == 3
    assert env.single_observation_space.shape == (18 + 3 + 54,)
    env.reset()
    with pytest.raises(ValueError, match="actions"):
        env.step(np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="N"):
        SimpleSpreadVecEnv(2, N=1)
    with pytest.raises(ValueError, match="local_ratio"):
        SimpleSpreadVecEnv(2, local_ratio=2.0)
    with pytest.raises(ValueError, match="agent_pos"):
        env.set_state(np.zeros((1, 3, 2)), np.zeros((4, 3, 2)), np.zeros((4, 3, 2)))


def test_seeded_resets_are_deterministic():
    a, b = SimpleSpreadVecEnv(3, seed=5), SimpleSpreadVecEnv(3, seed=5)
    oa, _ = a.reset()
    ob, _ = b.reset()
    np.testing.assert_array_equal(oa, ob)
    assert np.abs(a.agent_pos).max() <= 1.0 and np.unique(a.agent_pos).size == a.agent_pos.size
