"""MinAtar suite: steps/s of rapidrl's built-in MinAtar kernels against the ``minatar`` package.

Contenders: ``rapidrl`` (``rapidrl.make_vec("MinAtar/<Game>-v1", n)``: one Numba call per batch step,
one thread at these sizes), ``rapidrl/threads`` (the same with ``threads=True``: envs split over
Numba's threads; it wins on a quiet machine and loses badly on a busy one) and ``minatar`` (n
``minatar.Environment`` objects stepped in a Python loop, the way a Python vector env would: ``act``,
``reset`` when done, ``state()`` written into a batch array). Both use sticky actions (0.1) and
difficulty ramping, the package's defaults. Each call is one batch step with a fixed random action
array; env steps = batch steps * n. Episodes end and reset inside the timed steps, as in training.
Breakout at 8, 64 and 512 envs (the issue's targets), the other games at 512.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 15}
BREAKOUT_SIZES = (8, 64, 512)
OTHER_GAMES = ("SpaceInvaders", "Freeway", "Asterix", "Seaquest")
OTHER_SIZE = 512
_MODULE_NAMES = {"Breakout": "breakout", "SpaceInvaders": "space_invaders", "Freeway": "freeway",
                 "Asterix": "asterix", "Seaquest": "seaquest"}


def _package_step(minatar, game: str, n: int, action_set, actions: np.ndarray):
    """A zero-argument batch step of n package envs (Python loop), and its batch observation buffer."""
    envs = []
    for i in range(n):
        e = minatar.Environment(_MODULE_NAMES[game])
        e.seed(i)
        e.reset()
        envs.append(e)
    c = envs[0].state_shape()[2]
    obs = np.zeros((n, 10, 10, c), dtype=bool)  # [N, 10, 10, C], the package's layout
    rewards = np.zeros(n, dtype=np.float32)
    dones = np.zeros(n, dtype=bool)
    full = [action_set[a] for a in actions]

    def step():
        for i, e in enumerate(envs):
            r, d = e.act(full[i])
            if d:
                e.reset()
            rewards[i] = r
            dones[i] = d
            obs[i] = e.state()

    return step


def _case(ctx: Context, game: str, n: int) -> Case:
    env_id = f"MinAtar/{game}-v1"
    case = Case(f"minatar_step/{game}/{n}", {}, params={"env": env_id, "num_envs": n}, items_per_call=n,
                item_unit="steps")
    make_vec = ctx.rapidrl("make_vec")
    env = make_vec(env_id, n, seed=0) if make_vec is not None else None
    k = 3 if env is None else env.single_action_space.n
    actions = np.random.default_rng(0).integers(0, k, n)  # [n] int64
    if env is not None:
        env.reset(seed=0)
        case.contenders["rapidrl"] = lambda: env.step(actions)
        case.teardown.append(env.close)
        if n >= 64:  # the same kernel on Numba's threads (the default only above PARALLEL_MIN envs)
            tenv = make_vec(env_id, n, seed=0, threads=True)
            tenv.reset(seed=0)
            case.contenders["rapidrl/threads"] = lambda: tenv.step(actions)
            case.teardown.append(tenv.close)
    minatar = ctx.peer("minatar")
    if minatar is not None:
        from rapidrl.envs.minatar import MINATAR_IDS

        case.contenders["minatar"] = _package_step(minatar, game, n, MINATAR_IDS[env_id][2], actions)
    return case


def cases(ctx: Context) -> Iterator[Case]:
    """Breakout at each size, then the other four games at 512 envs."""
    for n in BREAKOUT_SIZES:
        yield _case(ctx, "Breakout", n)
    for game in OTHER_GAMES:
        yield _case(ctx, game, OTHER_SIZE)
