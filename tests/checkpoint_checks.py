"""Checks shared by the checkpoint tests (test_resume, test_presets, test_save_load)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
PLAIN = (bool, int, float, str, bytes, type(None), torch.dtype, torch.device, torch.Size)


def assert_plain(obj, where: str = "payload") -> None:
    """Only tensors and plain Python values (what ``torch.load(weights_only=True)`` reads) anywhere in ``obj``."""
    if isinstance(obj, torch.Tensor) or type(obj) in PLAIN:
        return
    assert isinstance(obj, (dict, list, tuple)), f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}"
    for key, value in (obj.items() if isinstance(obj, dict) else enumerate(obj)):
        assert_plain(value, f"{where}.{key}")


def same(a, b) -> bool:
    """Bitwise equality of nested states (tensors, arrays, dicts, lists, plain values)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def subprocess_env() -> dict:
    """The environment of a ``python -m rapidrl`` child that imports this checkout."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def kill_when(argv: list[str], ready: Callable[[], bool], timeout: float = 300.0, poll: float = 0.005,
              sig: int = signal.SIGKILL) -> tuple[int, str]:
    """Run ``argv``, send it ``sig`` as soon as ``ready()`` (polled every ``poll`` s) is true; fail if it ended
    first. Returns its exit code and output."""
    proc = subprocess.Popen(argv, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end and proc.poll() is None and not ready():
            time.sleep(poll)
        assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stdout.read()}"
        proc.send_signal(sig)
        output = proc.communicate(timeout=timeout)[0]
        return proc.returncode, output
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def python_rapidrl(*args: str) -> list[str]:
    return [sys.executable, "-m", "rapidrl", *args]


def resumed_and_uninterrupted(make: Callable, total: int, stop_at: int, tmp_path):
    """(the uninterrupted model, the resumed one) of ``make()`` (a fresh off-policy model) trained for ``total`` steps,
    once straight through and once stopped at ``stop_at``, checkpointed with its training state and replay buffer,
    loaded and resumed to the end: an exact resume makes them equal bit for bit."""
    one = make()
    one.learn(total, progress_bar=False)
    two = make()
    two.learn(total, progress_bar=False, callback=lambda m: m.num_timesteps < stop_at)
    two.save(tmp_path / "half.pt", training_state=True, include_buffer=True)
    resumed = type(two).load(tmp_path / "half.pt", include_buffer=True)
    resumed.learn(total, progress_bar=False, resume=True)
    return one, resumed
