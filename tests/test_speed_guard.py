"""The speed guard: each hot path against a plain reference doing the same work, timed in the same process.

A ratio of two timings taken in one process, interleaved (rounds alternate between the two, the best round of each
counts), survives a noisy machine where an absolute time would not. Each floor sits well under the ratio the code
reaches today (``MEASURED``, with the CPU), so a miss is a real regression: a kernel that stopped vectorising, a
check that moved into a hot loop, a collector that fell back to Python. GAE's and V-trace's floors fail on 83b1aea's
tree, whose episode-end rule took arrays per element (GAE 64x128 18x slower; the issue-55 note shows the run).

Full timings against the peers live in ``rapidrl bench``; this module only holds the margins. Seconds in all; the
tests share one xdist group so they run in one worker, one at a time. The references are written here, with only
rapidrl's public API on our side, so the module runs unchanged on an older tree (copy it there to bisect).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl import kernels

pytestmark = [pytest.mark.speed, pytest.mark.xdist_group("speed_guard")]

# Ratios measured when the floors were set: 2026-12-06, Intel Xeon (AVX-512, AMX), 2 cores, this module on one core,
# five runs alone and beside a 1-thread matmul loop on the other core (the suite's second xdist worker); medians.
# A floor is about a third of the figure, or what a regression measured here would fail: at 83b1aea (the episode-end
# rule on arrays) GAE gave x1.9 and V-trace x4.7. MuJoCo at one thread is the engine's time plus little: its floor
# guards the overhead rapidrl adds per step, not the threading gain (which needs the second core).
MEASURED = {
    "gae": 20.0, "vtrace": 22.0, "cartpole": 19.0, "minatar": 25.0, "replay": 3.5, "per": 5.3,
    "fused_rollout": 6.6, "compiled_epoch": 2.9, "mujoco": 1.0, "group_advantages": 10.5,
}
FLOORS = {
    "gae": 7.0, "vtrace": 8.0, "cartpole": 6.0, "minatar": 8.0, "replay": 1.5, "per": 1.8,
    "fused_rollout": 2.5, "compiled_epoch": 1.5, "mujoco": 0.75, "group_advantages": 3.5,
}


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every ratio at one torch thread (rapidrl's default inside learn(); the suite's other worker has the other
    core), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def speed_ratio(ours: Callable[[], object], reference: Callable[[], object], *, budget_s: float = 1.0,
                rounds: int = 7) -> float:
    """reference time / our time: the best of ``rounds`` interleaved rounds each, every round about
    ``budget_s / (2 * rounds)`` seconds of calls (the call counts come from one untimed warm call each)."""
    counts = []
    for f in (ours, reference):
        f()  # compilation, first allocations
        t0 = time.perf_counter()
        f()
        counts.append(max(1, int(budget_s / (2 * rounds) / max(time.perf_counter() - t0, 1e-7))))
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, f in enumerate((ours, reference)):
            t0 = time.perf_counter()
            for _ in range(counts[k]):
                f()
            best[k] = min(best[k], (time.perf_counter() - t0) / counts[k])
    return best[1] / best[0]


def assert_margin(name: str, ratio: float, what: str) -> None:
    print(f"speed guard {name}: x{ratio:.1f} (floor x{FLOORS[name]:g}; measured x{MEASURED[name]:g}): {what}")
    assert ratio >= FLOORS[name], (
        f"{name}: {what} is only {ratio:.2f}x the plain reference (floor {FLOORS[name]}x, measured "
        f"{MEASURED[name]}x when the floor was set): a hot path regressed; find the commit (tools/ab_bench.py)")


def gae_loop(rewards, values, last_values, terminated, gamma, lam):
    """GAE as a NumPy loop over time, vectorised over envs (no truncations): advantages [T, N]."""
    adv = np.empty_like(rewards)
    running = np.zeros_like(last_values)  # [N]
    next_v = last_values
    cont = 1.0 - terminated  # [T, N]
    for t in range(rewards.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * next_v * cont[t] - values[t]
        running = delta + gamma * lam * cont[t] * running
        adv[t] = running
        next_v = values[t]
    return adv


def group_adv_torch(rewards, group_size, eps=1e-6):
    """GRPO advantages as TRL's GRPOTrainer computes them, on flat torch rewards [G * K]."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1).repeat_interleave(group_size, dim=0)
    std = grouped.std(dim=1).repeat_interleave(group_size, dim=0)
    return (rewards - mean) / (std + eps)


def _rollout(T: int, N: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    r = rng.standard_normal((T, N)).astype(np.float32)  # [T, N]
    v = rng.standard_normal((T, N)).astype(np.float32)
    last = rng.standard_normal(N).astype(np.float32)  # [N]
    term = rng.random((T, N)) < 0.02
    return r, v, last, term, np.zeros_like(term)


def test_gae_against_a_numpy_loop():
    r, v, last, term, trunc = _rollout(128, 64)
    adv, ret = np.empty_like(r), np.empty_like(r)
    tf = term.astype(np.float32)
    ours = lambda: kernels.gae_into(r, v, last, term, trunc, gamma=0.99, lam=0.95,  # noqa: E731
                                    out_advantages=adv, out_returns=ret)
    ref = lambda: gae_loop(r, v, last, tf, np.float32(0.99), np.float32(0.95))  # noqa: E731
    np.testing.assert_allclose(ours()[0], ref(), rtol=1e-4, atol=1e-4)  # the same work
    assert_margin("gae", speed_ratio(ours, ref), "GAE 64 envs x 128 steps, float32, against a NumPy loop over time")


def vtrace_loop(log_rhos, rewards, values, bootstrap, terminated, gamma, rho_bar=1.0, c_bar=1.0):
    """V-trace as a NumPy loop over time, vectorised over envs (no truncations): (vs, pg advantages)."""
    rhos = np.exp(log_rhos)
    rho, c = np.minimum(rho_bar, rhos), np.minimum(c_bar, rhos)  # [T, N]
    cont = 1.0 - terminated
    T = rewards.shape[0]
    vs = np.empty_like(values)
    pg = np.empty_like(values)
    next_vs, next_v = bootstrap, bootstrap
    for t in range(T - 1, -1, -1):
        nv = next_v * cont[t]
        delta = rho[t] * (rewards[t] + gamma * nv - values[t])
        carry = cont[t] if t < T - 1 else 0.0
        vs[t] = values[t] + delta + gamma * c[t] * carry * (next_vs - next_v)
        q = np.where(carry > 0, next_vs, nv)
        pg[t] = rho[t] * (rewards[t] + gamma * q - values[t])
        next_vs, next_v = vs[t], values[t]
    return vs, pg


def test_vtrace_against_a_numpy_loop():
    r, v, last, term, _ = _rollout(128, 64, seed=1)
    log_rhos = np.random.default_rng(2).normal(0, 0.3, r.shape).astype(np.float32)
    tf = term.astype(np.float32)
    ours = lambda: kernels.vtrace(log_rhos, r, v, last, term, gamma=0.99)  # noqa: E731
    ref = lambda: vtrace_loop(log_rhos, r, v, last, tf, np.float32(0.99))  # noqa: E731
    for got, want in zip(ours(), ref(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert_margin("vtrace", speed_ratio(ours, ref), "V-trace 64 envs x 128 steps, float32, against a NumPy loop")


def _stepper(env, actions: np.ndarray) -> Callable[[], None]:
    def run():
        for a in actions:
            env.step(a)
    return run


def test_cartpole_stepping_against_gymnasium_vector_cartpole():
    import gymnasium as gym

    n = 64
    actions = np.random.default_rng(0).integers(0, 2, size=(50, n))  # [steps, n]
    ours = rr.make_vec("CartPole-v1", num_envs=n, seed=0)
    ours.reset(seed=0)
    theirs = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    theirs.reset(seed=0)
    assert_margin("cartpole", speed_ratio(_stepper(ours, actions), _stepper(theirs, actions)),
                  "CartPole, 64 envs, against Gymnasium's NumPy vector CartPole")


def test_minatar_stepping_against_the_reference_package_in_a_python_loop():
    minatar = pytest.importorskip("minatar", reason="the reference MinAtar package (the minatar extra)")
    n = 8
    actions = np.random.default_rng(0).integers(0, 3, size=(20, n))  # the minimal action set, as rapidrl's
    ours = rr.make_vec("MinAtar/Breakout-v1", num_envs=n, seed=0)
    ours.reset(seed=0)
    games = [minatar.Environment("breakout") for _ in range(n)]
    for g in games:
        g.reset()
    minimal = games[0].minimal_action_set()

    def reference():
        for a in actions:
            for g, ai in zip(games, a, strict=True):
                _, done = g.act(minimal[ai])
                if done:
                    g.reset()
                g.state()

    assert_margin("minatar", speed_ratio(_stepper(ours, actions), reference),
                  "MinAtar Breakout, 8 envs, against the minatar package stepped in a Python loop")


def _filled_replay(per: bool):
    n = 100_000
    rng = np.random.default_rng(0)
    o = rng.standard_normal((n, 17)).astype(np.float32)
    a = rng.standard_normal((n, 6)).astype(np.float32)
    rew = rng.standard_normal(n).astype(np.float32)
    d = np.zeros(n, bool)
    buf = (rr.PrioritizedReplayBuffer(n, (17,), (6,), alpha=0.6, beta=0.4, seed=0) if per
           else rr.ReplayBuffer(n, (17,), (6,), seed=0))
    for i in range(0, n, 1000):
        s = slice(i, i + 1000)
        buf.add(o[s], a[s], rew[s], o[s], d[s], d[s])
    return buf, (o, a, rew, d), rng


def test_replay_sample_against_numpy_fancy_indexing():
    buf, (o, a, rew, d), rng = _filled_replay(per=False)
    n = len(rew)

    def reference():
        idx = rng.integers(0, n, 256)
        return o[idx], a[idx], rew[idx], o[(idx + 1) % n], d[idx], d[idx]

    assert_margin("replay", speed_ratio(lambda: buf.sample(256), reference),
                  "replay sample(256) of 1e5 transitions, against NumPy fancy indexing")


def test_prioritized_sample_against_numpy():
    buf, (o, a, rew, d), rng = _filled_replay(per=True)
    n = len(rew)
    cumsum = np.cumsum(rng.random(n) ** 0.6)  # priorities^alpha, prefix sums kept up to date for free (generous)

    def reference():
        u = (np.arange(256) + rng.random(256)) * (cumsum[-1] / 256)  # stratified draws
        idx = np.minimum(np.searchsorted(cumsum, u), n - 1)
        p = np.diff(cumsum, prepend=0.0)[idx] / cumsum[-1]
        w = (n * p) ** -0.4
        return o[idx], a[idx], rew[idx], o[(idx + 1) % n], d[idx], d[idx], w / w.max()

    assert_margin("per", speed_ratio(lambda: buf.sample(256), reference),
                  "prioritized sample(256) of 1e5, against NumPy searchsorted on prefix sums and fancy indexing")


def _ppo(**kw) -> rr.PPO:
    return rr.PPO("CartPole-v1", num_envs=16, num_steps=128, seed=0, **kw)


def _as_in_learn(model, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` (a rollout or an update of ``model``) under the process settings ``learn`` holds for it (threads,
    denormal flushing: ``rapidrl.train.runtime``; a tree older than that has none to apply)."""
    settings = getattr(model, "_process_settings", None)
    if settings is None:
        return fn

    def call():
        with settings():
            return fn()

    return call


def test_fused_rollout_against_the_step_collector():
    fused, step = _ppo(collection="fused"), _ppo(collection="step")
    assert fused.paths["collection"].value == "fused" and step.paths["collection"].value == "step"
    assert_margin("fused_rollout", speed_ratio(_as_in_learn(fused, fused._collect), _as_in_learn(step, step._collect),
                                               budget_s=1.5),
                  "PPO CartPole rollout 16 envs x 128 steps: the fused collector against the step collector")


def test_compiled_ppo_epoch_against_the_torch_epoch():
    models = [_ppo(gradient_backend=b, minibatch_size=512, update_epochs=1) for b in ("handwritten", "torch")]
    for m in models:
        _as_in_learn(m, m._collect)()
        _as_in_learn(m, m._advantages)()
    assert models[0].paths["gradient_backend"].value == "handwritten"
    assert_margin("compiled_epoch", speed_ratio(*(_as_in_learn(m, m._update) for m in models), budget_s=1.5),
                  "PPO CartPole update on 16 x 128 steps (minibatch 512, 1 epoch): the handwritten backend's compiled "
                  "epoch against torch")


def test_mujoco_stepping_against_a_bare_mj_step_loop():
    mujoco = pytest.importorskip("mujoco", reason="MuJoCo (the mujoco extra)")
    import gymnasium as gym

    n = 16
    actions = np.random.default_rng(0).uniform(-0.4, 0.4, (n, 6)).astype(np.float32)
    env = rr.make_vec("HalfCheetah-v5", num_envs=n, seed=0, num_threads=1)
    env.reset(seed=0)
    task = gym.make("HalfCheetah-v5").unwrapped  # the same model file and frame skip
    model, skip = task.model, task.frame_skip
    datas = [mujoco.MjData(model) for _ in range(n)]

    def bare():
        for d, a in zip(datas, actions, strict=True):
            d.ctrl[:] = a
            mujoco.mj_step(model, d, nstep=skip)
            mujoco.mj_rnePostConstraint(model, d)

    assert_margin("mujoco", speed_ratio(lambda: env.step(actions), bare),
                  "HalfCheetah-v5, 16 envs, 1 thread: rapidrl's step against bare mj_step calls in a Python loop")


def test_grpo_group_advantages_against_torch():
    rew = np.random.default_rng(0).standard_normal(256 * 16).astype(np.float32)  # 256 groups of 16
    t = torch.from_numpy(rew.copy())
    np.testing.assert_allclose(kernels.group_advantages(rew, 16), group_adv_torch(t, 16).numpy(), rtol=1e-4,
                               atol=1e-5)
    assert_margin("group_advantages", speed_ratio(lambda: kernels.group_advantages(rew, 16),
                                                  lambda: group_adv_torch(t, 16)),
                  "GRPO group advantages, 256 groups of 16, against TRL's torch code")
