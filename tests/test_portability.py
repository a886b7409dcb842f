"""No Linux-only call on a default path: the defaults run with the Linux-only calls removed (as on macOS and
Windows), and the package source asks the OS-specific questions only in ``rapidrl/_system.py``."""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import pytest

import rapidrl as rr
from rapidrl._system import usable_cpu_count

PACKAGE = Path(rr.__file__).resolve().parent
# Calls that exist on Linux only (or behave differently elsewhere): allowed in _system.py, behind a fallback.
LINUX_ONLY = re.compile(r"sched_getaffinity|sched_setaffinity|os\.fork\(|/proc/|\bimport fcntl\b|\bimport resource\b")


@pytest.fixture
def no_linux_calls(monkeypatch):
    """The os module as macOS and Windows (before Python 3.13) have it: no affinity mask."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.delattr(os, "process_cpu_count", raising=False)


def test_usable_cpu_count_falls_back_to_every_cpu(no_linux_calls):
    assert usable_cpu_count() == (os.cpu_count() or 1)


def test_every_core_setting_builds_and_trains_without_an_affinity_mask(no_linux_calls):
    import torch

    threads = torch.get_num_threads()
    try:
        for cls in (rr.SAC, rr.TD3):
            model = cls("Pendulum-v1", learning_starts=8, batch_size=8, hidden=(8,), seed=0, torch_threads=0)
            seen: list[int] = []  # the setting holds inside learn (rapidrl.train.runtime) and is set back after it
            model.learn(16, callback=lambda m, seen=seen: seen.append(torch.get_num_threads()) or True,
                        progress_bar=False)
            assert seen and set(seen) == {os.cpu_count() or 1}
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(threads)


def test_mujoco_default_threads_without_an_affinity_mask(no_linux_calls):
    pytest.importorskip("mujoco")
    env = rr.make_vec("Humanoid-v5", 8, seed=0)
    assert env.num_threads >= 1
    env.reset(seed=0)
    env.close()


def test_keep_heap_memory_is_a_no_op_without_glibc(monkeypatch):
    from rapidrl._unsafe.malloc import keep_heap_memory, release_heap_memory

    def no_libc(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert keep_heap_memory() is False
    assert release_heap_memory() is False


def test_the_package_asks_os_specific_questions_in_one_place():
    found = [f"{path.relative_to(PACKAGE)}:{i}: {line.strip()}"
             for path in PACKAGE.rglob("*.py") if path.name != "_system.py"
             for i, line in enumerate(path.read_text().splitlines(), 1) if LINUX_ONLY.search(line)]
    assert not found, "Linux-only calls outside rapidrl/_system.py:\n" + "\n".join(found)
