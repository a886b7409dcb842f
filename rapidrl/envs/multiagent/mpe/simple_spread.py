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

State: float64 [E, 4, N, 2], per copy the agents' positions, their velocities, the landmarks' positions and a
scratch of the forces of the step (``state[:, 0]``, ``[:, 1]``, ``[:, 2]``, ``[:, 3]``); the step count is the
core's ``elapsed``. The functions below are the core's protocol for a multi-agent env (``rapidrl.envs.NumbaEnv``
with ``agents=N``): copy e owns rows ``e * N .. e * N + N - 1``.
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
from numba.extending import overload

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


POS, VEL, LANDMARK, FORCE = range(4)  # state[:, k]


@numba.njit(cache=True)
def reset(state, e, params, rng_key, rng_counter):
    """New episode in copy e: positions uniform in [-1, 1) (agents, then landmarks, x then y), zero velocity."""
    for a in range(state.shape[2]):
        for k in range(2):
            state[e, POS, a, k] = -1.0 + 2.0 * next_uniform(rng_key, rng_counter, e)
            state[e, VEL, a, k] = 0.0
    for m in range(state.shape[2]):
        for k in range(2):
            state[e, LANDMARK, m, k] = -1.0 + 2.0 * next_uniform(rng_key, rng_counter, e)


def _action_force(actions, r):
    """(fx, fy) of row r's action before the sensitivity: Discrete (no-op, -x, +x, -y, +y) or Box(0, 1, (5,))
    clipped to [0, 1] (float32, as the reference's ClipOutOfBoundsWrapper) with fx = a2 - a1, fy = a4 - a3."""


@overload(_action_force, inline="always")
def _action_force_typed(actions, r):
    if actions.ndim == 2:
        def continuous(actions, r):
            c1 = np.float32(min(max(actions[r, 1], 0.0), 1.0))
            c2 = np.float32(min(max(actions[r, 2], 0.0), 1.0))
            c3 = np.float32(min(max(actions[r, 3], 0.0), 1.0))
            c4 = np.float32(min(max(actions[r, 4], 0.0), 1.0))
            return 0.0 + (c2 - c1), 0.0 + (c4 - c3)

        return continuous

    def discrete(actions, r):
        u = actions[r]
        fx, fy = 0.0, 0.0
        if u == 1:
            fx = -1.0
        if u == 2:
            fx = 1.0
        if u == 3:
            fy = -1.0
        if u == 4:
            fy = 1.0
        return fx, fy

    return discrete


@numba.njit(cache=True)
def step(state, e, actions, params, elapsed, rng_key, rng_counter, rewards):
    """Copy e one ``World.step`` under its rows' actions; writes the rows' rewards (local_ratio = params[1]).
    Never terminates (the time limit truncates)."""
    n = state.shape[2]
    forces = state[e, FORCE]
    for a in range(n):
        fx, fy = _action_force(actions, e * n + a)
        forces[a, 0] = fx * SENSITIVITY + 0.0
        forces[a, 1] = fy * SENSITIVITY + 0.0
    _world_step(e, state[:, POS], state[:, VEL], forces)
    _rewards(e, state[:, POS], state[:, LANDMARK], params[1], rewards)
    return False


@numba.njit(cache=True)
def observe_rows(state, e, obs):
    """Rows of copy e := [local obs | agent one-hot | state]."""
    observe(e, state[:, POS], state[:, VEL], state[:, LANDMARK], obs)
