"""A model changes nothing in the process outside its own calls (``rapidrl.train.runtime``): torch's global generator
is neither drawn from nor reseeded, and the thread count, denormal flushing and Numba's BLAS threads are the user's
again after building, training and evaluating. So two models in one process train as each would alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.train.runtime import denormals_flushed

PPO_STEP = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=1, hidden=(16,), collection="step")
SAC = dict(learning_starts=16, batch_size=16, hidden=(16,), buffer_size=500)
TRAINED = [("PPO", "CartPole-v1", PPO_STEP, 128), ("PPO", "Pendulum-v1", {**PPO_STEP, "collection": "auto"}, 128),
           ("SAC", "Pendulum-v1", SAC, 48), ("SAC", "Pendulum-v1", {**SAC, "gradient_backend": "torch"}, 48),
           ("TD3", "Pendulum-v1", SAC, 48), ("DQN", "CartPole-v1", dict(learning_starts=16, batch_size=16,
                                                                        hidden=(16,), buffer_size=500), 64)]


@pytest.fixture
def user_process():
    """The user's settings, unlike any model's default: two torch threads, denormals kept."""
    threads, flushed = torch.get_num_threads(), denormals_flushed()
    torch.set_num_threads(2)
    torch.set_flush_denormal(False)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(flushed)


@pytest.mark.parametrize(("algo", "env_id", "kwargs", "steps"), TRAINED,
                         ids=[f"{a}-{e}-{k.get('collection', k.get('gradient_backend', ''))}"
                              for a, e, k, _ in TRAINED])
def test_building_training_and_evaluating_leave_the_users_process_alone(user_process, algo, env_id, kwargs, steps):
    torch.manual_seed(1234)
    rng_before = torch.get_rng_state()
    model = getattr(rr, algo)(env_id, seed=0, **kwargs)
    assert torch.equal(torch.get_rng_state(), rng_before), "building drew from or reseeded torch's generator"
    seen = []
    model.learn(steps, callback=lambda m: seen.append((torch.get_num_threads(), denormals_flushed())) or True,
                progress_bar=False)
    assert seen and set(seen) == {(1, True)}, "the config's settings hold inside learn"
    model.predict(model.env.reset(seed=1)[0], deterministic=False)
    model.evaluate(2, deterministic=False)
    assert torch.equal(torch.get_rng_state(), rng_before), "training or acting drew from torch's global generator"
    assert torch.get_num_threads() == 2 and not denormals_flushed()
    model.env.close()


def test_the_blas_of_a_compiled_backend_has_one_thread_inside_learn_only():
    from rapidrl._unsafe.blas import numba_blas_controllers

    found = numba_blas_controllers()
    if not found:
        pytest.skip("no SciPy OpenBLAS (tests/test_unsafe.py fails for that)")
    before = [lib.num_threads for lib in found]
    for lib in found:
        lib.set_num_threads(2)
    try:
        model = rr.SAC("Pendulum-v1", seed=0, **SAC)
        assert model.paths["gradient_backend"].value == "handwritten"
        seen = []
        model.learn(48, callback=lambda m: seen.append([lib.num_threads for lib in found]) or True,
                    progress_bar=False)
        assert seen and all(threads == [1] * len(found) for threads in seen)
        assert [lib.num_threads for lib in numba_blas_controllers()] == [2] * len(found)
    finally:
        for lib, n in zip(found, before):
            lib.set_num_threads(n)


@pytest.mark.parametrize(("torch_threads", "backend", "inside"),
                         [(2, "handwritten", (1, 2)), (1, "handwritten", (1, 1)), (2, "torch", (2, 3))])
def test_an_all_compiled_update_gives_its_threads_to_the_compiled_products(torch_threads, backend, inside):
    """DQN's handwritten update is compiled code but for the optimizer step: its thread count goes to Numba's BLAS,
    torch runs at one thread (never both above one: they spin against each other), and the user's counts come back
    after ``learn``. Its torch backend keeps the plain rule: torch at the count, the BLAS (unused) left alone."""
    from rapidrl._unsafe.blas import numba_blas_controllers

    found = numba_blas_controllers()
    assert found, "SciPy's bundled OpenBLAS was not found: update rapidrl._unsafe.blas._MARKERS"
    before, threads = [lib.num_threads for lib in found], torch.get_num_threads()
    for lib in found:
        lib.set_num_threads(3)
    torch.set_num_threads(3)
    try:
        model = rr.DQN("CartPole-v1", seed=0, learning_starts=16, batch_size=16, hidden=(16,), buffer_size=500,
                       torch_threads=torch_threads, gradient_backend=backend)
        assert model.paths["gradient_backend"].value == backend
        seen = []
        model.learn(64, callback=lambda m: seen.append((torch.get_num_threads(), *{lib.num_threads for lib in found}))
                    or True, progress_bar=False)
        assert seen and set(seen) == {inside}
        assert torch.get_num_threads() == 3 and [lib.num_threads for lib in found] == [3] * len(found)
    finally:
        for lib, n in zip(found, before):
            lib.set_num_threads(n)
        torch.set_num_threads(threads)


@pytest.mark.parametrize("exact", [True, False])
def test_the_threads_go_to_the_blas_only_where_its_products_stay_bitwise(monkeypatch, exact):
    """Where Numba's BLAS threads DQN's products in another summation order (OpenBLAS's Haswell kernels on an AVX2
    EPYC did), the update keeps the plain rule (torch at the count, the BLAS at one), so the run stays the one-thread
    run; where it does not (Zen 4), the BLAS takes the threads. The probe is asked about the update's own products."""
    from rapidrl.nn import numba_mlp

    asked = []

    def probe(shapes, rows, threads, activation="relu"):
        asked.append((shapes, rows, threads))
        return exact

    monkeypatch.setattr(numba_mlp, "threads_keep_products_exact", probe)
    threads = torch.get_num_threads()
    model = rr.DQN("CartPole-v1", seed=0, learning_starts=16, batch_size=16, hidden=(32,), buffer_size=500,
                   torch_threads=2)
    seen = []
    model.learn(48, callback=lambda m: seen.append(torch.get_num_threads()) or True, progress_bar=False)
    assert asked and set(asked) == {(((32, 4), (2, 32)), (16, 32), 2)}
    assert set(seen) == ({1} if exact else {2}) and torch.get_num_threads() == threads


def test_the_probe_of_threaded_products_compares_the_kernels_outputs():
    """One thread is exact by definition; at DQN's benchmark shapes the verdict is what comparing the kernels' outputs
    at one and two threads directly says (on fresh data: the probe's own inputs are its own)."""
    from rapidrl._unsafe.blas import numba_blas_threads
    from rapidrl.kernels.mlp import ACTIVATION_CODES, backward, forward
    from rapidrl.nn.numba_mlp import threads_keep_products_exact

    shapes = ((256, 4), (256, 256), (2, 256))
    assert threads_keep_products_exact(shapes, (64, 128), 1)
    rng = np.random.default_rng(5)
    ws = tuple(rng.standard_normal(s, dtype=np.float32) * np.float32(0.1) for s in shapes)
    bs = tuple(np.zeros(s[0], np.float32) for s in shapes)
    x = rng.standard_normal((128, 4), dtype=np.float32)
    outs = []
    for n in (1, 2):
        with numba_blas_threads(n):
            hs, y = (np.zeros((128, 256), np.float32), np.zeros((128, 256), np.float32)), np.zeros((128, 2), np.float32)
            forward(x, ws, bs, ACTIVATION_CODES["relu"], hs, y)
            gws, gbs = tuple(np.zeros(s, np.float32) for s in shapes), tuple(np.zeros(s[0], np.float32) for s in shapes)
            backward(y.copy(), x, hs, ws, ACTIVATION_CODES["relu"], gws, gbs)
            outs.append((y, *hs, *gws))
    direct = all(np.array_equal(a, b) for a, b in zip(*outs))
    assert threads_keep_products_exact(shapes, (128,), 2) == direct


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_a_seed_builds_the_same_parameters_at_any_thread_count(algo):
    """A model is built at one torch thread whatever its ``torch_threads``: orthogonal initialisation's QR gave other
    low digits at two threads (a 256x256 weight up to 2e-6 apart), so a seed's run depended on the thread count."""
    built = [[p.detach().clone() for m in getattr(rr, algo)("CartPole-v1", seed=3, hidden=(256, 256),
                                                             torch_threads=t).trainable_modules()
              for p in m.parameters()] for t in (1, 2)]
    assert len(built[0]) == len(built[1]) and all(torch.equal(a, b) for a, b in zip(*built))


def test_dqn_trains_the_same_run_at_two_threads_as_at_one():
    """DQN's compiled update at two threads (Numba's BLAS at 2, torch at 1: ``compiled_thread_split``) is the
    one-thread run bit for bit: OpenBLAS splits these products over rows and columns, not over the summed axis."""
    def final(threads: int) -> list[torch.Tensor]:
        model = rr.DQN("CartPole-v1", seed=0, learning_starts=200, batch_size=64, hidden=(256, 256), train_freq=16,
                       gradient_steps=8, torch_threads=threads)
        assert model.paths["gradient_backend"].value == "handwritten"
        model.learn(600, progress_bar=False)
        assert model.num_gradient_steps > 100
        return _final_state(model)

    assert all(torch.equal(a, b) for a, b in zip(final(1), final(2)))


def _final_state(model) -> list[torch.Tensor]:
    return [t.detach().clone() for m in model.trainable_modules() for t in m.state_dict().values()]


def _train(models: list, rounds: int, steps: dict, between=None) -> None:
    for _ in range(rounds):
        for m in models:
            m.learn(steps[m.name], progress_bar=False)
            if between is not None:
                between()


def test_two_models_trained_interleaved_equal_each_trained_alone():
    """PPO (step collection, sampling from its generator) and SAC (noise from its generator), two ``learn`` calls
    each: alone, then interleaved with a user's own torch sampling and reseeding between the calls."""
    steps = {"ppo": 64, "sac": 40}

    def build():
        return rr.PPO("CartPole-v1", seed=3, **PPO_STEP), rr.SAC("Pendulum-v1", seed=5, **SAC)

    alone = []
    for i in range(2):
        model = build()[i]
        _train([model], 2, steps)
        alone.append(_final_state(model))
        model.env.close()

    def user_sampling():
        torch.rand(7)
        torch.manual_seed(99)

    ppo, sac = build()
    _train([ppo, sac], 2, steps, between=user_sampling)
    for model, expected in zip((ppo, sac), alone):
        got = _final_state(model)
        assert len(got) == len(expected)
        assert all(torch.equal(a, b) for a, b in zip(got, expected)), f"{model.name} differs when interleaved"
        model.env.close()
