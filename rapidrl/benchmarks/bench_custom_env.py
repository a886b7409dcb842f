"""Custom-env suite: the tutorial's Taxi (docs/custom-envs.md, written on ``rapidrl.envs.NumbaEnv``) against
``gymnasium.vector.SyncVectorEnv`` of Gymnasium's own ``Taxi-v4``, at 8, 64 and 512 envs.

Contenders: ``rapidrl`` (the tutorial's ``TAXI.make_vec(n)``: one compiled call per batch step, one thread at
these sizes) and ``gymnasium/sync`` (``SyncVectorEnv`` of ``gymnasium.make("Taxi-v4")``, its default NEXT_STEP
autoreset). Each call is one batch step with a fixed random action array; env steps = batch steps * n; episodes end
(time limit 200, deliveries) and reset inside the timed steps. The tutorial's code is
``rapidrl.benchmarks.taxi_tutorial``, a verbatim copy of docs/custom-envs.md's definition (tested equal, so the suite
runs from an installed package): what is measured is what the tutorial shows and CI runs
(``tests/test_custom_envs_doc.py`` also checks the env equal to Gymnasium's, step by step).

Run: ``python -m rapidrl.benchmarks.run custom`` (``--quick`` for a rough look).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 20}
SIZES = (8, 64, 512)
REFERENCE = "Taxi-v4"
def _case(ctx: Context, tutorial, n: int) -> Case:
    case = Case(f"custom_env_step/taxi/{n}", {}, params={"env": REFERENCE, "num_envs": n}, items_per_call=n,
                item_unit="steps")
    actions = np.random.default_rng(0).integers(0, 6, n)  # [n] int64
    case.add_env("rapidrl", tutorial.TAXI.make_vec(n, seed=0), actions)
    gym = ctx.peer("gymnasium")
    if gym is not None:
        case.add_env("gymnasium/sync", gym.vector.SyncVectorEnv([lambda: gym.make(REFERENCE)] * n), actions)
    return case


def cases(ctx: Context) -> Iterator[Case]:
    from rapidrl.benchmarks import taxi_tutorial as tutorial  # compiles the env's kernels (cached after)

    for n in SIZES:
        yield _case(ctx, tutorial, n)
