"""MPE simple_spread (``mpe2.simple_spread_v3``) for E env copies x N agents in Numba kernels, exactly.

The reference's physics, step by step (``mpe2._mpe_utils.core.World.step`` with its defaults): dt 0.1, damping
0.25, mass 1, agent size 0.15, contact force 100 and margin 1e-3 between agents (landmarks do not collide);
per step ``pos += vel * dt; vel = vel * (1 - damping); vel += force * dt`` with force = 5 * the action's
direction plus the pairwise soft contact forces ``100 * delta / dist * logaddexp(0, -(dist - 0.3) / k) * k``,
summed in the reference's order. Rewards: agent i gets ``g * (1 - local_ratio) + c_i * local_ratio`` with
g = -sum over landmarks of the nearest agent's distance (the team part) and c_i = -(number of other agents
within 0.3 of agent i). Truncated after ``max_cycles`` steps (25), never terminated.

Actions: Discrete(5) by default (no-op, -x, +x, -y, +y), or with ``continuous_actions=True`` Box(0, 1, (5,))
(clipped to [0, 1] as the reference's ClipOutOfBoundsWrapper does; force x = a2 - a1, y = a4 - a3).

State float64 arrays: agent_pos / agent_vel [E, N, 2], landmark_pos [E, N, 2], steps int64 [E].
Local observation of agent i (O = 4 + 2N + 4(N - 1) floats, 18 for N = 3), the reference's order:
``[vel, pos, landmark_j - pos (j = 0..N-1), pos_j - pos (j != i), communication zeros (2 per other agent)]``,
computed in float64 then rounded to float32 as the reference's ``observe`` does. The global state is the
concatenation of all agents' local observations (``state()`` of the reference, N * O floats).

Initial positions are uniform in [-1, 1) from rapidrl's counter-based per-copy streams
(``rapidrl.kernels.rng``), not from the reference's NumPy generator: tests copy our state into the reference.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from rapidrl.kernels.rng import next_uniform

DT = 0.1
DAMPING = 0.25
CONTACT_FORCE = 100.0
CONTACT_MARGIN = 1e-3
AGENT_SIZE = 0.15
SENSITIVITY = 5.0
NUM_ACTIONS = 5


def local_obs_dim(n_agents: int) -> int:
    """Width O of one agent's observation: vel 2, pos 2, landmarks 2N, other agents 2(N-1), communication 2(N-1)."""
    return 4 + 2 * n_agents + 4 * (n_agents - 1)


@numba.njit(cache=True, inline="always")
def _logaddexp0(x):
    """NumPy's ``logaddexp(0, x)`` for float64 (same branches, so the same rounding)."""
    if x == 0.0:
        return math.log(2.0)
    if -x > 0.0:
        return math.log1p(math.exp(x))
    return x + math.log1p(math.exp(-x))


@numba.njit(cache=True)
def _world_step(e, agent_pos, agent_vel, forces):
    """One ``World.step`` of copy e; ``forces`` [N, 2] holds the action forces and is overwritten."""
    n = agent_pos.shape[1]
    dist_min = AGENT_SIZE + AGENT_SIZE
    for a in range(n):
        for b in range(a + 1, n):
            d0 = agent_pos[e, a, 0] - agent_pos[e, b, 0]
            d1 = agent_pos[e, a, 1] - agent_pos[e, b, 1]
            dist = math.sqrt(d0 * d0 + d1 * d1)
            pen = _logaddexp0(-(dist - dist_min) / CONTACT_MARGIN) * CONTACT_MARGIN
            f0 = CONTACT_FORCE * d0 / dist * pen
            f1 = CONTACT_FORCE * d1 / dist * pen
            forces[a, 0] = f0 + forces[a, 0]
            forces[a, 1] = f1 + forces[a, 1]
            forces[b, 0] = -f0 + forces[b, 0]
            forces[b, 1] = -f1 + forces[b, 1]
    for a in range(n):
        for k in range(2):
            agent_pos[e, a, k] += agent_vel[e, a, k] * DT
            v = agent_vel[e, a, k] * (1 - DAMPING)
            agent_vel[e, a, k] = v + (forces[a, k] / 1.0) * DT


@numba.njit(cache=True)
def _rewards(e, agent_pos, landmark_pos, local_ratio, rewards):
    """Per-agent rewards of copy e into rewards[e * N + i] (float32); returns the shared part g (float64)."""
    n = agent_pos.shape[1]
    g = 0.0
    for m in range(landmark_pos.shape[1]):
        best = np.inf
        for a in range(n):
            d0 = agent_pos[e, a, 0] - landmark_pos[e, m, 0]
            d1 = agent_pos[e, a, 1] - landmark_pos[e, m, 1]
            d = math.sqrt(d0 * d0 + d1 * d1)
            if d < best:
                best = d
        g -= best
    for i in range(n):
        collisions = 0.0
        for a in range(n):
            if a != i:
                d0 = agent_pos[e, a, 0] - agent_pos[e, i, 0]
                d1 = agent_pos[e, a, 1] - agent_pos[e, i, 1]
                if math.sqrt(d0 * d0 + d1 * d1) < AGENT_SIZE + AGENT_SIZE:
                    collisions -= 1.0
        rewards[e * n + i] = np.float32(g * (1 - local_ratio) + collisions * local_ratio)
    return g


@numba.njit(cache=True)
def observe(e, agent_pos, agent_vel, landmark_pos, obs):
    """Rows e * N .. e * N + N - 1 of ``obs`` [E * N, O + N + N * O] := [local obs | agent one-hot | state]."""
    n = agent_pos.shape[1]
    width = 4 + 2 * n + 4 * (n - 1)
    base = e * n
    for i in range(n):
        r = base + i
        px = agent_pos[e, i, 0]
        py = agent_pos[e, i, 1]
        obs[r, 0] = np.float32(agent_vel[e, i, 0])
        obs[r, 1] = np.float32(agent_vel[e, i, 1])
        obs[r, 2] = np.float32(px)
        obs[r, 3] = np.float32(py)
        k = 4
        for m in range(landmark_pos.shape[1]):
            obs[r, k] = np.float32(landmark_pos[e, m, 0] - px)
            obs[r, k + 1] = np.float32(landmark_pos[e, m, 1] - py)
            k += 2
        for j in range(n):
            if j != i:
                obs[r, k] = np.float32(agent_pos[e, j, 0] - px)
                obs[r, k + 1] = np.float32(agent_pos[e, j, 1] - py)
                k += 2
        for j in range(2 * (n - 1)):
            obs[r, k + j] = 0.0
        for j in range(n):
            obs[r, width + j] = 1.0 if j == i else 0.0
    for i in range(n):  # the global state: every agent's local observation, in agent order
        for r in range(base, base + n):
            for j in range(width):
                obs[r, width + n + i * width + j] = obs[base + i, j]


@numba.njit(cache=True)
def draw_initial(e, agent_pos, agent_vel, landmark_pos, steps, rng_key, rng_counter):
    """New episode in copy e: positions uniform in [-1, 1) (agents, then landmarks, x then y), zero velocity."""
    for a in range(agent_pos.shape[1]):
        for k in range(2):
            agent_pos[e, a, k] = -1.0 + 2.0 * next_uniform(rng_key, rng_counter, e)
            agent_vel[e, a, k] = 0.0
    for m in range(landmark_pos.shape[1]):
        for k in range(2):
            landmark_pos[e, m, k] = -1.0 + 2.0 * next_uniform(rng_key, rng_counter, e)
    steps[e] = 0


@numba.njit(cache=True)
def reset_all(agent_pos, agent_vel, landmark_pos, steps, rng_key, rng_counter, obs):
    for e in range(agent_pos.shape[0]):
        draw_initial(e, agent_pos, agent_vel, landmark_pos, steps, rng_key, rng_counter)
        observe(e, agent_pos, agent_vel, landmark_pos, obs)


@numba.njit(cache=True)
def step(agent_pos, agent_vel, landmark_pos, steps, actions, continuous, local_ratio, max_cycles, rng_key,
         rng_counter, obs, rewards, terminated, truncated, final_obs, ep_return, ep_length, done, team_reward,
         team_return, team_done):
    """Step every copy with ``actions`` (int64 [E * N] or float32 [E * N, 5]), autoreset in the same step.

    Writes obs/final_obs [E * N, W] float32, rewards float32 [E * N], terminated/truncated/done bool [E * N],
    per-agent episode return/length [E * N], team_reward float32 [E] (sum of the agents' rewards), team_return
    float32 [E] and team_done bool [E]; ended episodes leave their return in ep_return / team_return.
    """
    n_copies, n = agent_pos.shape[0], agent_pos.shape[1]
    forces = np.zeros((n, 2))
    for e in range(n_copies):
        for a in range(n):
            r = e * n + a
            forces[a, 0] = 0.0
            forces[a, 1] = 0.0
            if continuous:
                c = np.empty(5, np.float32)
                for k in range(5):
                    c[k] = min(max(actions[r, k], np.float32(0.0)), np.float32(1.0))
                forces[a, 0] += c[2] - c[1]
                forces[a, 1] += c[4] - c[3]
            else:
                u = actions[r, 0]
                if u == 1:
                    forces[a, 0] = -1.0
                if u == 2:
                    forces[a, 0] = 1.0
                if u == 3:
                    forces[a, 1] = -1.0
                if u == 4:
                    forces[a, 1] = 1.0
            forces[a, 0] = forces[a, 0] * SENSITIVITY + 0.0
            forces[a, 1] = forces[a, 1] * SENSITIVITY + 0.0
        _world_step(e, agent_pos, agent_vel, forces)
        _rewards(e, agent_pos, landmark_pos, local_ratio, rewards)
        steps[e] += 1
        ended = steps[e] >= max_cycles
        if team_done[e]:
            team_return[e] = 0.0
        team_sum = np.float32(0.0)
        for a in range(n):
            r = e * n + a
            if done[r]:
                ep_return[r] = 0.0
                ep_length[r] = 0
            ep_return[r] += rewards[r]
            ep_length[r] += 1
            team_sum += rewards[r]
            terminated[r] = False
            truncated[r] = ended
            done[r] = ended
        team_reward[e] = team_sum
        team_return[e] += team_sum
        team_done[e] = ended
        observe(e, agent_pos, agent_vel, landmark_pos, obs)
        if ended:
            for a in range(n):
                r = e * n + a
                for j in range(obs.shape[1]):
                    final_obs[r, j] = obs[r, j]
            draw_initial(e, agent_pos, agent_vel, landmark_pos, steps, rng_key, rng_counter)
            observe(e, agent_pos, agent_vel, landmark_pos, obs)
