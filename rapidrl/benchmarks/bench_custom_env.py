"""Custom-env suite: the tutorial's Taxi (docs/custom-envs.md, written on ``rapidrl.envs.NumbaEnv``) against
``gymnasium.vector.SyncVectorEnv`` of Gymnasium's own ``Taxi-v4``, at 8, 64 and 512 envs.

Contenders: ``rapidrl`` (the tutorial's ``TAXI.make_vec(n)``: one compiled call per batch step, one thread at
these sizes) and ``gymnasium/sync`` (``SyncVectorEnv`` of ``gymnasium.make("Taxi-v4")``, its default NEXT_STEP
autoreset). Each call is one batch step with a fixed random action array; env steps = batch steps * n; episodes end
(time limit 200, deliveries) and reset inside the timed steps. The tutorial's code is read from
docs/custom-envs.md (a source checkout; the suite is skipped without it): what is measured is what the tutorial
shows and CI runs (``tests/test_custom_envs_doc.py`` also checks the env equal to Gymnasium's, step by step).

Run: ``python -m rapidrl.benchmarks.run custom`` (``--quick`` for a rough look).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 20}
SIZES = (8, 64, 512)
REFERENCE = "Taxi-v4"
DOC = Path(__file__).resolve().parents[2] / "docs" / "custom-envs.md"
_MODULE = "rapidrl_custom_env_tutorial"


def load_tutorial():
    """The tutorial's code (its Python blocks, run as one module from a temporary file), or None without the doc."""
    if _MODULE in sys.modules:
        return sys.modules[_MODULE]
    if not DOC.is_file():
        return None
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    # the definition only: the blocks that check, align and train are the tutorial's, not the benchmark's
    code = "\n\n".join(b for b in blocks if "rr.envs.check" not in b and "rr.envs.align" not in b
                       and "rr.PPO" not in b)
    path = Path(tempfile.mkdtemp()) / f"{_MODULE}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module
    spec.loader.exec_module(module)
    return module


def _case(ctx: Context, tutorial, n: int) -> Case:
    case = Case(f"custom_env_step/taxi/{n}", {}, params={"env": REFERENCE, "num_envs": n}, items_per_call=n,
                item_unit="steps")
    actions = np.random.default_rng(0).integers(0, 6, n)  # [n] int64
    if tutorial is not None:
        env = tutorial.TAXI.make_vec(n, seed=0)
        env.reset(seed=0)
        case.contenders["rapidrl"] = lambda: env.step(actions)
        case.teardown.append(env.close)
    gym = ctx.peer("gymnasium")
    if gym is not None:
        ref = gym.vector.SyncVectorEnv([lambda: gym.make(REFERENCE)] * n)
        ref.reset(seed=0)
        case.contenders["gymnasium/sync"] = lambda: ref.step(actions)
        case.teardown.append(ref.close)
    return case


def cases(ctx: Context) -> Iterator[Case]:
    tutorial = load_tutorial()
    if tutorial is None:
        ctx.skipped_cases["custom_env_step"] = f"{DOC} not found (run from a source checkout)"
        return
    for n in SIZES:
        yield _case(ctx, tutorial, n)
