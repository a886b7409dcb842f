"""MinAtar built in: every frame, reward and termination equal the ``minatar`` package's (1.0.15).

How the randomness is made comparable: rapidrl's env i draws float64 uniforms from its counter-based
stream (key ``env._rng_key[i]``), in a documented order (``rapidrl/envs/minatar/draws.py``). The test
replaces the package's ``numpy.random.RandomState`` (``Environment.random``, used for sticky actions, and
the game's ``env.random``) by ``ReplayRandomState``, which answers ``rand``/``randint`` from the same
stream with the same mapping (``randint(lo, hi) = lo + int(u * (hi - lo))``). Both sides then take the
same decisions; after every step the test also checks that both consumed exactly as many draws, so a
draw made in a different place or order fails at once.

The package is driven as its Gymnasium registration drives it (``MinAtar/<Game>-v1``: minimal action
set; v0: all 6 actions), with sticky actions (0.1) and difficulty ramping on, and ``reset()`` called
after each terminal step, which is what rapidrl's SAME_STEP auto-reset does. Random play covers most
rules; targeted scenarios (state written into both sides) cover the rare ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from minatar import Environment

import rapidrl as rr
from rapidrl.envs import ClosedEnvError
from rapidrl.envs.minatar import MINATAR_IDS, MinAtarVecEnv, list_minatar_envs
from rapidrl.envs.minatar import asterix as ra
from rapidrl.envs.minatar import breakout as rb
from rapidrl.envs.minatar import seaquest as rq
from rapidrl.envs.minatar import space_invaders as rs
from rapidrl.kernels.rng import uniform_reference


class ReplayRandomState:
    """Stands in for ``numpy.random.RandomState``: answers from rapidrl's stream ``key`` (see module doc)."""

    def __init__(self, key: int):
        self.key = int(key)
        self.counter = 0

    def _u(self) -> float:
        u = uniform_reference(self.key, self.counter)
        self.counter += 1
        return u

    def rand(self, *size):
        if not size:
            return self._u()
        return np.array([self._u() for _ in range(int(np.prod(size)))]).reshape(size)

    def randint(self, low, high=None, size=None):
        if high is None:
            low, high = 0, low
        if size is None:
            return low + int(self._u() * (high - low))
        return np.array([low + int(self._u() * (high - low)) for _ in range(size)], dtype=np.int64)


def frame(pkg: Environment) -> np.ndarray:
    """The package's state() as rapidrl's observation: uint8[C, 10, 10]."""
    return pkg.state().transpose(2, 0, 1).astype(np.uint8)


def make_pair(env_id: str, n: int, seed: int, sticky: float = 0.1):
    """rapidrl's env (reset) and n package Environments replaying its streams (reset, frames checked)."""
    env = MinAtarVecEnv(env_id, n, seed=seed, sticky_action_prob=sticky)
    obs, _ = env.reset()
    game = MINATAR_IDS[env_id][0]
    pkgs = []
    for i in range(n):
        pkg = Environment(game, sticky_action_prob=sticky, difficulty_ramping=True)
        pkg.random = pkg.env.random = ReplayRandomState(env._rng_key[i])
        pkg.reset()
        np.testing.assert_array_equal(obs[i], frame(pkg))
        pkgs.append(pkg)
    return env, pkgs


def step_both(env, pkgs, actions, where=""):
    """One step of both sides with ``actions`` [N]; asserts equal frames, rewards, flags and draw counts.

    Returns (rewards [N], terminated [N]) of the step.
    """
    action_set = MINATAR_IDS[env.env_id][2]
    obs, rewards, terminated, truncated, info = env.step(actions)
    assert not truncated.any()
    for i, pkg in enumerate(pkgs):
        r, done = pkg.act(action_set[actions[i]])
        msg = f"{where} env {i}"
        assert rewards[i] == r, msg
        assert terminated[i] == done and info["_final_obs"][i] == done, msg
        if done:
            np.testing.assert_array_equal(info["final_obs"][i], frame(pkg), err_msg=msg)
            pkg.reset()
        np.testing.assert_array_equal(obs[i], frame(pkg), err_msg=msg)
        assert pkg.random.counter == env._rng_counter[i], msg
    return rewards.copy(), terminated.copy()


def play(env, pkgs, steps: int, policy, seed: int):
    """``steps`` steps of both sides, actions from ``policy(env, pkgs, gen)``; returns stats of the run."""
    gen = np.random.default_rng(seed)
    total_reward, episodes, max_reward = 0.0, 0, 0.0
    for t in range(steps):
        actions = policy(env, pkgs, gen)
        rewards, terminated = step_both(env, pkgs, actions, where=f"step {t}")
        total_reward += rewards.sum()
        max_reward = max(max_reward, rewards.max())
        episodes += int(terminated.sum())
    return {"reward": total_reward, "episodes": episodes, "max_reward": max_reward}


def uniform_policy(env, pkgs, gen):
    return gen.integers(0, env.single_action_space.n, env.num_envs)


# -- Breakout ------------------------------------------------------------------------------------------

def breakout_landing(g) -> int:
    """x where the ball of package game ``g`` next reaches row 8 moving down (walls and bricks, no strikes)."""
    x, y, d = g.ball_x, g.ball_y, g.ball_dir
    bricks = g.brick_map.copy()
    for _ in range(40):
        if y == 8 and d >= 2:
            return x
        nx, ny = x + (1 if d in (1, 2) else -1), y + (1 if d >= 2 else -1)
        if not 0 <= nx <= 9:
            nx, d = min(max(nx, 0), 9), [1, 0, 3, 2][d]
        if ny < 0:
            ny, d = 0, [3, 2, 1, 0][d]
        elif ny <= 9 and bricks[ny, nx]:
            bricks[ny, nx], ny, d = 0, y, [3, 2, 1, 0][d]
        x, y = nx, min(ny, 8)
    return x


def breakout_tracker(env, pkgs, gen):
    """v1 actions (n, l, r) that mostly move the paddle to where the ball lands: long episodes."""
    out = gen.integers(0, 3, env.num_envs)
    for i, pkg in enumerate(pkgs):
        g = pkg.env
        if gen.random() < 0.97:
            x = breakout_landing(g)
            out[i] = 0 if x == g.pos else (1 if x < g.pos else 2)
    return out


def load_breakout(pkg, state, i):
    """Write the package game's state into rapidrl's row i (layout of rapidrl.envs.minatar.breakout)."""
    g = pkg.env
    state[i, 0] = pkg.last_action
    state[i, rb.BALL_X], state[i, rb.BALL_Y], state[i, rb.BALL_DIR] = g.ball_x, g.ball_y, g.ball_dir
    state[i, rb.POS], state[i, rb.STRIKE] = g.pos, int(g.strike)
    state[i, rb.LAST_X], state[i, rb.LAST_Y] = g.last_x, g.last_y
    state[i, rb.BRICKS:rb.BRICKS + 100] = g.brick_map.reshape(100)
    state[i, rb.BRICK_COUNT] = np.count_nonzero(g.brick_map)


@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "MinAtar/Breakout-v0"])
def test_breakout_random_play_matches_package(env_id):
    env, pkgs = make_pair(env_id, 8, seed=1)
    stats = play(env, pkgs, 1500, uniform_policy, seed=2)
    assert stats["episodes"] >= 100 and stats["reward"] > 0


def test_breakout_long_play_clears_walls():
    """A tracking policy keeps the ball alive: walls are cleared and refilled, strikes chain."""
    env, pkgs = make_pair("MinAtar/Breakout-v1", 4, seed=3)
    refills = 0
    gen = np.random.default_rng(4)
    for t in range(3000):
        before = [np.count_nonzero(p.env.brick_map) for p in pkgs]
        step_both(env, pkgs, breakout_tracker(env, pkgs, gen), where=f"step {t}")
        refills += sum(b == 0 and np.count_nonzero(p.env.brick_map) == 30 for b, p in zip(before, pkgs))
    assert refills >= 1


def test_breakout_scenarios():
    """Rare rules from written states: last brick then refill at the paddle, corner bounces, brick chains.

    Written states keep the game's invariant that bricks exist only on rows 1-3 (rapidrl relies on it).
    """
    env, pkgs = make_pair("MinAtar/Breakout-v1", 3, seed=5)
    g0, g1, g2 = (p.env for p in pkgs)
    g0.brick_map[:] = 0
    g0.brick_map[1, 3] = 1  # one brick left; ball below it moving up-left
    g0.ball_x, g0.ball_y, g0.ball_dir, g0.pos = 4, 3, 0, 4
    g1.ball_x, g1.ball_y, g1.ball_dir = 9, 0, 1  # top-right corner, moving up-right
    g2.brick_map[3, 4] = 0  # in a hole of the wall with the strike flag set: the next bricks are not broken
    g2.ball_x, g2.ball_y, g2.ball_dir, g2.strike = 4, 3, 0, True
    for i, p in enumerate(pkgs):
        load_breakout(p, env._state, i)
    gen = np.random.default_rng(6)
    for t in range(200):
        step_both(env, pkgs, breakout_tracker(env, pkgs, gen), where=f"step {t}")


# -- SpaceInvaders -------------------------------------------------------------------------------------

def masks(grid) -> np.ndarray:
    """Row bit masks (bit x = column x) of a 10x10 0/1 grid."""
    return (np.asarray(grid) != 0).astype(np.int64) @ (1 << np.arange(10))


def load_space_invaders(pkg, state, i):
    g = pkg.env
    state[i, 0] = pkg.last_action
    state[i, rs.POS], state[i, rs.ALIEN_DIR] = g.pos, g.alien_dir
    state[i, rs.MOVE_INTERVAL], state[i, rs.MOVE_TIMER] = g.enemy_move_interval, g.alien_move_timer
    state[i, rs.ALIEN_SHOT_TIMER], state[i, rs.RAMP_INDEX] = g.alien_shot_timer, g.ramp_index
    state[i, rs.SHOT_TIMER] = g.shot_timer
    state[i, rs.F_BULLETS:rs.F_BULLETS + 10] = masks(g.f_bullet_map)
    state[i, rs.E_BULLETS:rs.E_BULLETS + 10] = masks(g.e_bullet_map)
    state[i, rs.ALIENS:rs.ALIENS + 10] = masks(g.alien_map)


def invaders_shooter(env, pkgs, gen):
    """v1 actions (n, l, r, f): dodge enemy bullets about to land, else go under an alien column and fire."""
    out = gen.integers(0, 4, env.num_envs)
    for i, pkg in enumerate(pkgs):
        g = pkg.env
        if gen.random() >= 0.95:
            continue
        danger = g.e_bullet_map[5:9].any(axis=0)  # [10] columns with a bullet about to land
        if danger[g.pos]:
            safe = [x for x in (g.pos - 1, g.pos + 1) if 0 <= x <= 9 and not danger[x]]
            out[i] = (1 if safe[0] < g.pos else 2) if safe else 0
            continue
        cols = np.flatnonzero(g.alien_map.any(axis=0))
        if len(cols):
            target = cols[np.argmin(np.abs(cols - g.pos))]
            step = 0 if target == g.pos else (-1 if target < g.pos else 1)
            if step and danger[g.pos + step]:
                out[i] = 3
            else:
                out[i] = 3 if step == 0 else (1 if step < 0 else 2)
    return out


@pytest.mark.parametrize("env_id", ["MinAtar/SpaceInvaders-v1", "MinAtar/SpaceInvaders-v0"])
def test_space_invaders_random_play_matches_package(env_id):
    env, pkgs = make_pair(env_id, 6, seed=11)
    stats = play(env, pkgs, 1200, uniform_policy, seed=12)
    assert stats["episodes"] >= 6 and stats["reward"] > 0


def test_space_invaders_shooter_clears_waves():
    """Aimed fire clears whole waves: refills and the ramp of the move interval (12 -> 6) are compared."""
    env, pkgs = make_pair("MinAtar/SpaceInvaders-v1", 4, seed=13)
    gen = np.random.default_rng(14)
    ramps = 0
    for t in range(2500):
        before = [p.env.ramp_index for p in pkgs]
        step_both(env, pkgs, invaders_shooter(env, pkgs, gen), where=f"step {t}")
        ramps += sum(p.env.ramp_index > b for b, p in zip(before, pkgs))
    assert ramps >= 1


def test_space_invaders_scenarios():
    """Aliens stepping down off the bottom row (np.roll wraps them to row 0), at the cannon, moving right;
    the last alien shot (refill with and without the ramp, whose floor is interval 6)."""
    env, pkgs = make_pair("MinAtar/SpaceInvaders-v1", 5, seed=15)
    g0, g1, g2, g3, g4 = (p.env for p in pkgs)
    g0.alien_map[:] = 0
    g0.alien_map[9, 0] = g0.alien_map[8, 3] = 1  # at the left wall moving left: steps down from row 9
    g0.alien_move_timer, g0.pos = 0, 7
    g1.alien_map[:] = 0
    g1.alien_map[8, 2:5] = 1
    g1.alien_dir, g1.alien_move_timer, g1.pos = 1, 1, 4
    g2.alien_map[:] = 0
    g2.alien_map[5, 9] = 1  # one alien at the right wall moving right: it steps down
    g2.alien_dir, g2.alien_move_timer = 1, 0
    for g, interval in ((g3, 9), (g4, 6)):  # the last alien, a bullet just below it
        g.alien_map[:] = 0
        g.alien_map[5, 5] = g.f_bullet_map[6, 5] = 1
        g.alien_move_timer, g.enemy_move_interval = 5, interval
    for i, p in enumerate(pkgs):
        load_space_invaders(p, env._state, i)
    step_both(env, pkgs, np.zeros(5, dtype=np.int64))
    assert (g3.ramp_index, g3.enemy_move_interval, g4.ramp_index, g4.enemy_move_interval) == (1, 8, 0, 6)
    assert g3.alien_map.sum() == g4.alien_map.sum() == 24
    play(env, pkgs, 300, invaders_shooter, seed=16)


# -- Freeway -------------------------------------------------------------------------------------------

def freeway_climber(env, pkgs, gen):
    """v1 actions (n, u, d): mostly up, so the chicken scores and the cars are re-drawn."""
    return np.where(gen.random(env.num_envs) < 0.8, 1, gen.integers(0, 3, env.num_envs))


@pytest.mark.parametrize("env_id", ["MinAtar/Freeway-v1", "MinAtar/Freeway-v0"])
def test_freeway_matches_package_through_the_time_limit(env_id):
    """Whole 2501-step episodes (the package's own time limit terminates them)."""
    env, pkgs = make_pair(env_id, 3, seed=21)
    policy = freeway_climber if env_id.endswith("v1") else uniform_policy
    stats = play(env, pkgs, 2600, policy, seed=22)
    assert stats["episodes"] == 3
    if env_id.endswith("v1"):
        assert stats["reward"] >= 30


# -- Asterix -------------------------------------------------------------------------------------------

def load_asterix(pkg, state, i):
    g = pkg.env
    state[i, 0] = pkg.last_action
    state[i, ra.PLAYER_X], state[i, ra.PLAYER_Y] = g.player_x, g.player_y
    state[i, ra.SPAWN_SPEED], state[i, ra.SPAWN_TIMER] = g.spawn_speed, g.spawn_timer
    state[i, ra.MOVE_SPEED], state[i, ra.MOVE_TIMER] = g.move_speed, g.move_timer
    state[i, ra.RAMP_TIMER], state[i, ra.RAMP_INDEX] = g.ramp_timer, g.ramp_index
    for k, e in enumerate(g.entities):
        state[i, ra.ENTITIES + 4 * k:ra.ENTITIES + 4 * k + 4] = (0, 0, 0, 0) if e is None else (1, e[0], e[2], e[3])


def asterix_dodger(env, pkgs, gen):
    """v1 actions (n, l, u, r, d): the first move (in a random order) to a cell no enemy reaches soon."""
    out = gen.integers(0, 5, env.num_envs)
    moves = {0: (0, 0), 1: (-1, 0), 2: (0, -1), 3: (1, 0), 4: (0, 1)}
    for i, pkg in enumerate(pkgs):
        g = pkg.env
        if gen.random() >= 0.95:
            continue
        enemies = [(e[0], e[1], 1 if e[2] else -1) for e in g.entities if e is not None and not e[3]]
        for a in gen.permutation(5):
            x = min(max(g.player_x + moves[a][0], 0), 9)
            y = min(max(g.player_y + moves[a][1], 1), 8)
            if not any(ey == y and x in (ex, ex + d, ex + 2 * d) for ex, ey, d in enemies):
                out[i] = a
                break
    return out


@pytest.mark.parametrize("env_id", ["MinAtar/Asterix-v1", "MinAtar/Asterix-v0"])
def test_asterix_random_play_matches_package(env_id):
    env, pkgs = make_pair(env_id, 6, seed=31)
    stats = play(env, pkgs, 1500, uniform_policy, seed=32)
    assert stats["episodes"] >= 10 and stats["reward"] > 0


def test_asterix_long_play_ramps():
    """A dodging policy survives the ramp intervals: faster spawns and moves are compared too."""
    env, pkgs = make_pair("MinAtar/Asterix-v1", 4, seed=33)
    gen = np.random.default_rng(34)
    ramps = 0
    for t in range(3000):
        before = [p.env.ramp_index for p in pkgs]
        step_both(env, pkgs, asterix_dodger(env, pkgs, gen), where=f"step {t}")
        ramps += sum(p.env.ramp_index > b for b, p in zip(before, pkgs))
    assert ramps >= 3


def test_asterix_scenarios():
    """Every row taken when a spawn is due (no slot: nothing spawns, 2 draws only); top ramp speeds."""
    env, pkgs = make_pair("MinAtar/Asterix-v1", 2, seed=35)
    g0, g1 = (p.env for p in pkgs)
    g0.entities = [[9 - k, k + 1, False, k % 2 == 0] for k in range(8)]
    g0.spawn_timer, g0.player_x, g0.player_y = 0, 0, 1
    g1.spawn_speed, g1.move_speed, g1.ramp_timer, g1.ramp_index = 2, 2, 0, 7
    for i, p in enumerate(pkgs):
        load_asterix(p, env._state, i)
    play(env, pkgs, 400, asterix_dodger, seed=36)


# -- Seaquest ------------------------------------------------------------------------------------------

def load_seaquest(pkg, state, i):
    """Write the package game's state (scalars and the five lists, in order) into rapidrl's row i."""
    g = pkg.env
    state[i, :] = 0
    state[i, 0] = pkg.last_action
    for col, value in ((rq.OXYGEN, g.oxygen), (rq.DIVER_COUNT, g.diver_count), (rq.SUB_X, g.sub_x),
                       (rq.SUB_Y, g.sub_y), (rq.SUB_OR, g.sub_or), (rq.E_SPAWN_SPEED, g.e_spawn_speed),
                       (rq.E_SPAWN_TIMER, g.e_spawn_timer), (rq.D_SPAWN_TIMER, g.d_spawn_timer),
                       (rq.MOVE_SPEED, g.move_speed), (rq.RAMP_INDEX, g.ramp_index),
                       (rq.SHOT_TIMER, g.shot_timer), (rq.SURFACE, g.surface)):
        state[i, col] = value
    for items, base, nf, n_col in ((g.f_bullets, rq.FB, 3, rq.N_FB), (g.e_bullets, rq.EB, 3, rq.N_EB),
                                   (g.e_fish, rq.FISH, 4, rq.N_FISH), (g.e_subs, rq.SUBS, 5, rq.N_SUBS),
                                   (g.divers, rq.DIVERS, 4, rq.N_DIVERS)):
        state[i, n_col] = len(items)
        for k, item in enumerate(items):
            state[i, base + nf * k:base + nf * (k + 1)] = item


def seaquest_diver(env, pkgs, gen):
    """Actions (n, l, u, r, d, f): stay below, shoot, drift, surface when oxygen is low or 6 divers aboard."""
    out = gen.integers(0, 6, env.num_envs)
    for i, pkg in enumerate(pkgs):
        g = pkg.env
        u = gen.random()
        if (g.oxygen < 25 and g.diver_count > 0) or g.diver_count >= 6:
            out[i] = 2 if u < 0.9 else out[i]
        elif g.sub_y == 0:
            out[i] = 4
        elif u < 0.4:
            out[i] = 5
        elif u < 0.9:
            out[i] = gen.choice([1, 3, 2, 4, 0])
    return out


@pytest.mark.parametrize("env_id", ["MinAtar/Seaquest-v1", "MinAtar/Seaquest-v0"])
def test_seaquest_random_play_matches_package(env_id):
    env, pkgs = make_pair(env_id, 6, seed=41)
    stats = play(env, pkgs, 1200, uniform_policy, seed=42)
    assert stats["episodes"] >= 10


def test_seaquest_long_play():
    """Longer dives: divers collected, surfacing refills oxygen and ramps the enemies, many shots."""
    env, pkgs = make_pair("MinAtar/Seaquest-v1", 6, seed=43)
    gen = np.random.default_rng(44)
    surfaced, rewards = 0, 0.0
    caps = np.array([(rq.N_FB, rq.CAP_FB), (rq.N_EB, rq.CAP_EB), (rq.N_FISH, rq.CAP_FISH),
                     (rq.N_SUBS, rq.CAP_SUBS), (rq.N_DIVERS, rq.CAP_DIVERS)])
    counts = np.zeros(len(caps), dtype=np.int64)  # the longest lists seen
    for t in range(3000):
        before = [p.env.ramp_index for p in pkgs]
        r, _ = step_both(env, pkgs, seaquest_diver(env, pkgs, gen), where=f"step {t}")
        rewards += r.sum()
        surfaced += sum(p.env.ramp_index > b for b, p in zip(before, pkgs))
        counts = np.maximum(counts, env._state[:, caps[:, 0]].max(axis=0))
    assert surfaced >= 3 and rewards >= 50
    assert (counts <= caps[:, 1] // 2).all(), counts  # the fixed capacities keep a wide margin


def test_seaquest_scenarios():
    """Rare rules from written states (no sticky actions, so the first steps do what they say), then play on."""
    env, pkgs = make_pair("MinAtar/Seaquest-v1", 7, seed=45, sticky=0.0)
    g = [p.env for p in pkgs]
    g[0].diver_count, g[0].sub_y, g[0].surface, g[0].oxygen = 6, 1, False, 150  # surfacing with 6 divers
    g[1].sub_y, g[1].surface, g[1].oxygen = 4, False, 1  # oxygen runs out
    g[2].sub_y, g[2].surface = 1, False  # surfacing without a diver
    g[3].e_subs = [[9, 5, True, 0, 0], [0, 6, False, 0, 0]]  # subs leave the screen with their shot due
    g[4].e_subs = [[3, 4, True, 0, 5], [3, 4, True, 0, 5]]  # equal twins: list.remove takes the first
    g[4].f_bullets = [[2, 4, True]]
    g[4].e_fish = [[6, 3, False, 0], [6, 3, False, 0], [7, 3, False, 2]]
    g[4].f_bullets += [[5, 3, True], [8, 3, False]]
    g[5].e_spawn_speed, g[5].move_speed, g[5].ramp_index = 1, 2, 31  # fastest ramp level, surfacing
    g[5].diver_count, g[5].sub_y, g[5].surface, g[5].e_spawn_timer = 2, 1, False, 0
    g[6].divers = [[4, 3, True, 0], [6, 3, False, 0]]  # divers swimming into the sub; a full diver count
    g[6].sub_x, g[6].sub_y, g[6].surface, g[6].diver_count = 5, 3, False, 5
    for i, p in enumerate(pkgs):
        load_seaquest(p, env._state, i)
    actions = np.array([2, 0, 2, 0, 0, 2, 0])
    r, term = step_both(env, pkgs, actions)
    assert r[0] == 150 * 10 // 200 and not term[0] and pkgs[0].env.diver_count == -1
    assert not term[1] and term[2] and r[4] >= 2
    r, term = step_both(env, pkgs, actions)
    assert term[1]
    play(env, pkgs, 400, seaquest_diver, seed=46)


# -- the vector env's contract ---------------------------------------------------------------------------

@pytest.mark.parametrize("env_id", list_minatar_envs())
def test_ids_spaces_and_action_sets_are_the_packages(env_id):
    """Each id's action set and frame shape are those of the package's Gymnasium registration."""
    from minatar.gym import BaseEnv

    game, _, action_set = MINATAR_IDS[env_id]
    ref = BaseEnv(game, use_minimal_action_set=env_id.endswith("-v1"))
    env = MinAtarVecEnv(env_id, 1)
    assert list(action_set) == list(ref.action_set)
    assert env.single_action_space == ref.action_space
    c = ref.observation_space.shape[2]
    assert env.single_observation_space.shape == (c, 10, 10) and ref.observation_space.shape == (10, 10, c)
    assert env.max_episode_steps is None


def test_make_vec_and_spaces():
    env = rr.make_vec("MinAtar/Breakout-v1", 5, seed=0)
    assert isinstance(env, MinAtarVecEnv)
    assert env.single_action_space == rr.make_vec("MinAtar/Breakout-v0", 1).single_action_space.__class__(3)
    assert env.single_observation_space.shape == (4, 10, 10) and env.single_observation_space.dtype == np.uint8
    obs, _ = env.reset()
    assert obs.shape == (5, 4, 10, 10) and obs.dtype == np.uint8 and obs.max() == 1
    assert set(list_minatar_envs()) <= set(rr.envs.list_builtin_envs())
    with pytest.raises(ValueError, match="actions"):
        env.step(np.array([0, 1, 2, 3, 0]))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(TypeError, match="integer"):
        env.step(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((5, 1), dtype=np.int64))
    import torch

    obs_t = env.step(torch.zeros(5, dtype=torch.int64))[0]  # CPU torch tensors are used without a copy
    assert obs_t.shape == (5, 4, 10, 10)
    env.close()
    with pytest.raises(ClosedEnvError):
        env.step(np.zeros(5, dtype=np.int64))
    with pytest.raises(ValueError, match="sticky_action_prob"):
        MinAtarVecEnv("MinAtar/Breakout-v1", 2, sticky_action_prob=1.5)
    with pytest.raises(ValueError, match="vectorization"):
        rr.make_vec("MinAtar/Breakout-v1", 2, vectorization="torch")
    ref = rr.make_vec("MinAtar/Breakout-v1", 2, seed=0, vectorization="sync")  # the package's own gym envs
    assert ref.reset(seed=0)[0].shape == (2, 10, 10, 4) and ref.single_action_space.n == 3
    shown = MinAtarVecEnv("MinAtar/Seaquest-v1", 3, render_mode="rgb_array")
    shown.reset(seed=0)
    frames = shown.render()
    assert frames.shape == (3, 10, 10, 3) and frames.dtype == np.uint8
    assert ((frames.sum(-1) > 0) == (shown._obs.max(1) > 0)).all()  # colored exactly where a channel is set


def test_determinism_threads_and_episode_stats():
    """Same seed -> same run, serial or threaded kernel; episode stats add up; max_episode_steps truncates."""
    outs = []
    for threads in (False, True):
        env = MinAtarVecEnv("MinAtar/Breakout-v1", 37, seed=9, max_episode_steps=30, threads=threads)
        assert env.threads is threads
        env.reset()
        gen = np.random.default_rng(0)
        running, length = np.zeros(37), np.zeros(37, dtype=int)
        frames, ended, truncations = [], 0, 0
        for _ in range(300):
            obs, r, term, trunc, info = env.step(gen.integers(0, 3, 37))
            running += r
            length += 1
            done = term | trunc
            assert np.array_equal(info["_episode"], done)
            np.testing.assert_allclose(info["episode"]["r"][done], running[done])
            np.testing.assert_array_equal(info["episode"]["l"][done], length[done])
            assert (length[trunc] == 30).all() and (length[term & ~trunc] < 30).all()
            running[done], length[done] = 0, 0
            ended += done.sum()
            truncations += trunc.sum()
            frames.append(obs.copy())
        outs.append(np.stack(frames))
        assert ended > 37 and truncations > 0
    np.testing.assert_array_equal(outs[0], outs[1])
    other = MinAtarVecEnv("MinAtar/Breakout-v1", 37, seed=10)
    assert not np.array_equal(other.reset()[0], outs[0][0]) or not np.array_equal(
        other.step(np.zeros(37, dtype=np.int64))[0], outs[0][1])


def test_next_step_autoreset():
    """NEXT_STEP shows the final frame, then resets on the next call (action ignored, reward 0): the same
    episodes as SAME_STEP with the same seed and actions."""
    nxt = MinAtarVecEnv("MinAtar/Breakout-v1", 1, seed=1, autoreset_mode="next_step")
    same = MinAtarVecEnv("MinAtar/Breakout-v1", 1, seed=1)
    np.testing.assert_array_equal(nxt.reset()[0], same.reset()[0])
    gen = np.random.default_rng(0)
    episodes = 0
    for _ in range(300):
        a = gen.integers(0, 3, 1)
        obs_s, r_s, term_s, _, info_s = same.step(a)
        obs_n, r_n, term_n, _, _ = nxt.step(a)
        assert r_s[0] == r_n[0] and term_s[0] == term_n[0]
        if term_s[0]:
            episodes += 1
            np.testing.assert_array_equal(obs_n, info_s["final_obs"])
            obs_n, r_n, term_n, trunc_n, info_n = nxt.step(np.array([2]))
            assert r_n[0] == 0 and not term_n[0] and not trunc_n[0] and not info_n["_episode"][0]
        np.testing.assert_array_equal(obs_n, obs_s)
    assert episodes >= 5
