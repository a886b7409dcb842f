"""MuJoCo suite: steps/s of the batched MuJoCo env against Gymnasium's vector envs and the bare engine.

Cases ``mujoco_step/<Task>/<n>`` for HalfCheetah-v5 and Humanoid-v5 at n = 1, 8, 64. One call is one step of
all n envs with a fixed random action array (float32 [n, act_dim]); episodes end and reset inside the timed
steps, as in training. Contenders:

- ``rapidrl``: ``rapidrl.make_vec(id, n)`` (``MujocoVecEnv``: observations, rewards, terminations and info
  terms of Gymnasium v5, its default thread count: one per core from 2 * cores envs up);
- ``rapidrl/1thread``: the same with ``num_threads=1`` (shows what the thread pool buys);
- ``mujoco/bare``: a Python loop over the same n ``MjData`` doing only ``ctrl[:] = a; mj_step(m, d,
  frame_skip); mj_rnePostConstraint(m, d)``, no observation, reward or reset: the limit of a Python-driven
  step on one thread;
- ``gymnasium/sync``: ``gymnasium.vector.SyncVectorEnv`` of ``gymnasium.make(id)``;
- ``gymnasium/async``: ``AsyncVectorEnv`` (one process per env; n <= 8 with ``--quick``, else every n).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 20}
TASKS = ("HalfCheetah-v5", "Humanoid-v5")
SIZES = (1, 8, 64)
ASYNC_MAX_QUICK = 8


def _bare_step(mujoco, env_id: str, n: int, actions: np.ndarray):
    """A zero-argument step of n bare MjData of the task's model (same frame skip as the task)."""
    from rapidrl.envs.mujoco import MUJOCO_TASKS, _assets

    task = MUJOCO_TASKS[env_id]
    model = mujoco.MjModel.from_xml_path(str(_assets() / task.xml))
    datas = [mujoco.MjData(model) for _ in range(n)]
    skip = task.frame_skip

    def step():
        for i, d in enumerate(datas):
            d.ctrl[:] = actions[i]
            mujoco.mj_step(model, d, nstep=skip)
            mujoco.mj_rnePostConstraint(model, d)

    return step


def _case(ctx: Context, env_id: str, n: int) -> Case:
    case = Case(f"mujoco_step/{env_id.split('-')[0]}/{n}", {}, params={"env": env_id, "num_envs": n},
                items_per_call=n, item_unit="steps")
    gym = ctx.peer("gymnasium")
    probe = gym.make(env_id) if gym is not None else None
    act_dim = probe.action_space.shape[0] if probe is not None else {"HalfCheetah-v5": 6, "Humanoid-v5": 17}[env_id]
    if probe is not None:
        probe.close()
    actions = np.random.default_rng(0).uniform(-0.4, 0.4, (n, act_dim)).astype(np.float32)  # [n, act_dim]
    make_vec = ctx.rapidrl("make_vec")
    if make_vec is not None:
        env = make_vec(env_id, n, seed=0)
        env.reset(seed=0)
        case.contenders["rapidrl"] = lambda: env.step(actions)
        case.teardown.append(env.close)
        if getattr(env, "num_threads", 1) > 1:
            one = make_vec(env_id, n, seed=0, num_threads=1)
            one.reset(seed=0)
            case.contenders["rapidrl/1thread"] = lambda: one.step(actions)
            case.teardown.append(one.close)
    mujoco = ctx.peer("mujoco")
    if mujoco is not None:
        case.contenders["mujoco/bare"] = _bare_step(mujoco, env_id, n, actions)
    if gym is not None:
        sync = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n)
        sync.reset(seed=0)
        case.contenders["gymnasium/sync"] = lambda: sync.step(actions)
        case.teardown.append(sync.close)
        if n <= ASYNC_MAX_QUICK or not ctx.quick:
            asy = gym.vector.AsyncVectorEnv([lambda: gym.make(env_id)] * n)
            asy.reset(seed=0)
            case.contenders["gymnasium/async"] = lambda: asy.step(actions)
            case.teardown.append(asy.close)
        else:
            case.notes.append(f"gymnasium/async skipped at {n} envs with --quick ({n} processes)")
    return case


def cases(ctx: Context) -> Iterator[Case]:
    for env_id in TASKS:
        for n in SIZES:
            yield _case(ctx, env_id, n)
