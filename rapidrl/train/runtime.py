"""What a model changes in the process, and for how long: nothing outside its own calls.

- ``process_settings(model)``: the settings of ``RuntimeConfig`` (torch's intra-op thread count, denormal flushing,
  glibc's heap thresholds) and, for a handwritten gradient backend, SciPy's OpenBLAS at one thread (the BLAS Numba's
  ``np.dot`` calls: ``rapidrl._unsafe.blas``; at the config's thread count, torch at one, where the whole update is
  compiled: ``compiled_thread_split``) apply inside ``learn``, ``evaluate`` and the model's construction, and
  what was there before is set back when they return (or raise). A user's thread count, a second model's settings,
  or code run between two ``learn`` calls see the process as it was.
- ``drawing_from(generator, seed)``: the parameters of a model are initialised from its own generator
  (``Algorithm.torch_rng``): ``nn.Module`` constructors draw from torch's global generator, so for the time of
  ``_build`` that generator is lent the model's stream and gets its own state back afterwards.

torch's global generator is otherwise never drawn from nor reseeded: every sample, noise and permutation an
algorithm draws comes from a generator it owns (``torch_rng``; the on-policy minibatch order from
``torch_generator``; a collector thread's own, reseeded per rollout), so two models in one process train as each
would alone.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from rapidrl._system import usable_cpu_count
from rapidrl._unsafe.malloc import keep_heap_memory, release_heap_memory

__all__ = ["compiled_thread_split", "denormals_flushed", "drawing_from", "process_settings"]


def denormals_flushed() -> bool:
    """Whether this thread's CPU arithmetic flushes denormal floats to zero (``torch.set_flush_denormal``; torch has
    no getter): 1e-39 is a float32 denormal, which a flushing multiply turns into 0."""
    return bool((torch.full((1,), 1e-39) * 1.0)[0] == 0.0)


@functools.cache
def _numba_blas() -> tuple:
    from rapidrl._unsafe.blas import numba_blas_controllers

    return tuple(numba_blas_controllers())


_heap_holders = 0
"""How many ``process_settings`` scopes with ``keep_heap`` are open (the thresholds go back when the last closes)."""


def compiled_thread_split(threads: int) -> tuple[int, int]:
    """(torch threads, Numba BLAS threads) for an update whose arithmetic is all compiled code, given ``threads``:
    every thread to the compiled matrix products, torch (its optimizer step) at one. Measured on DQN CartPole-v1
    (batch 64, 256x256, ``rapidrl bench offpolicy``'s setting), 2-core AMD EPYC Zen 4, alone, 2026-12-07, 10k steps:
    torch 1 / BLAS 2 3,773-4,059 SPS, torch 1 / BLAS 1 2,884-3,146, torch 2 / BLAS 1 2,301, torch 2 / BLAS 2 163-168.
    SAC's and DDPG's handwritten backends gain nothing from it (torch computes part of their update), so they keep
    the plain rule."""
    return 1, max(1, threads)


@contextlib.contextmanager
def process_settings(config, numba_blas: bool = False, compiled_products: tuple | None = None,
                     single_thread: bool = False):
    """Within: ``config``'s torch threads (None: unchanged; 0: every usable core), denormal flushing
    (``flush_denormal``) and heap retention (``keep_heap``) and, when ``numba_blas`` (a handwritten gradient backend),
    Numba's BLAS at one thread; afterwards each is set back to what it was (the heap thresholds to glibc's defaults:
    glibc cannot read them; ``rapidrl._unsafe.malloc``). Nested (``evaluate`` inside ``learn``), the inner scope sets
    back the outer one's settings.

    ``compiled_products`` (with ``numba_blas``: an update whose arithmetic is all compiled, DQN's handwritten
    backend; its MLP's layer shapes and row counts, ``Algorithm._compiled_products``) gives the thread count to Numba's
    BLAS instead and holds torch at one thread (the two libraries' workers must never both be above one: they spin
    against each other; ``compiled_thread_split``), where that BLAS computes those products bit for bit as at one
    thread (``rapidrl.nn.numba_mlp.threads_keep_products_exact``), so a seed's run does not depend on its threads.
    ``single_thread`` holds torch at one thread whatever the config: a model's construction, so that a seed's initial
    parameters do not depend on ``torch_threads`` (orthogonal initialisation's QR gives other low digits at two
    threads: a 256x256 weight differed by up to 2e-6, and DQN CartPole-v1 then learned another run)."""
    threads = torch.get_num_threads()
    flushed = denormals_flushed() if config.flush_denormal else None
    blas = _numba_blas() if numba_blas else ()
    blas_threads = [lib.num_threads for lib in blas]
    global _heap_holders
    kept = False
    try:
        want = threads if config.torch_threads is None else config.torch_threads or usable_cpu_count()
        want = 1 if single_thread else want
        torch_want, blas_want = want, 1
        if compiled_products is not None and blas:
            from rapidrl.nn.numba_mlp import threads_keep_products_exact

            if threads_keep_products_exact(*compiled_products, want):
                torch_want, blas_want = compiled_thread_split(want)
        if torch_want != threads:
            torch.set_num_threads(torch_want)
        if config.flush_denormal and not flushed:
            torch.set_flush_denormal(True)
        if config.keep_heap:
            kept = True
            _heap_holders += 1
            if _heap_holders == 1:
                keep_heap_memory()
        for lib in blas:
            lib.set_num_threads(blas_want)
        yield
    finally:
        for lib, n in zip(blas, blas_threads):
            if lib.num_threads != n:
                lib.set_num_threads(n)
        if kept:
            _heap_holders -= 1
            if _heap_holders == 0:
                release_heap_memory()
        if flushed is False:
            torch.set_flush_denormal(False)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


@contextlib.contextmanager
def drawing_from(generator: torch.Generator, seed: int):
    """Within: torch's global CPU generator draws ``generator``'s stream (a CPU generator; a device generator: a CPU
    stream seeded with ``seed``, as ``torch.manual_seed(seed)`` would seed it, and on CUDA the device's default
    generator seeded with ``seed`` too). Afterwards the global generators hold their own states again, and a CPU
    ``generator`` has advanced by what was drawn."""
    cpu = generator.device.type == "cpu"
    cuda = [generator.device] if generator.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        if cpu:
            torch.default_generator.set_state(generator.get_state())
        else:
            torch.default_generator.manual_seed(seed)
        if cuda:
            with torch.cuda.device(generator.device):
                torch.cuda.manual_seed(seed)
        yield
        if cpu:
            generator.set_state(torch.default_generator.get_state())
