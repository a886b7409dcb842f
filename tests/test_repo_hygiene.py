"""The repository stays small to clone: no tracked file over MAX_TRACKED_BYTES (checkpoints, data sets and run
directories stay out of git: .gitignore, tools/results/README.md). Checkpoints of a past Pong run (~89 MB of
blobs, commits de7e4c9 to 73abd3a) remain in the history; this keeps new ones out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_TRACKED_BYTES = 2 * 1024 * 1024
"""The largest file the repository may track (the largest tracked today, tests/golden/runs.json, is ~0.5 MB)."""


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks in ``root``'s checkout; skips the test when ``root`` is not a git checkout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {root}")
    return [root / name for name in done.stdout.decode().split("\0") if name]


def oversized(root: Path, limit: int) -> list[str]:
    """``path (size)`` of each tracked file of ``root`` larger than ``limit`` bytes (files deleted in the work tree
    but still tracked are not read)."""
    return [f"{path.relative_to(root).as_posix()} ({path.stat().st_size / 2**20:.1f} MiB)"
            for path in tracked_files(root) if path.is_file() and path.stat().st_size > limit]


def test_no_tracked_file_is_over_the_limit():
    big = oversized(ROOT, MAX_TRACKED_BYTES)
    assert not big, (f"tracked files over {MAX_TRACKED_BYTES / 2**20:.0f} MiB (keep checkpoints, data sets and run "
                     f"directories out of git; .gitignore): {', '.join(big)}")


def test_the_check_sees_a_large_tracked_file_and_ignores_untracked_ones(tmp_path):
    """The check itself can fail: in a scratch repository, a tracked file over the limit is named, an untracked one
    is not."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "small.txt").write_bytes(b"x" * 10)
    (tmp_path / "checkpoint.pt").write_bytes(b"x" * 3000)
    (tmp_path / "untracked.pt").write_bytes(b"x" * 3000)
    subprocess.run(["git", "-C", str(tmp_path), "add", "small.txt", "checkpoint.pt"], check=True)
    assert oversized(tmp_path, 1000) == ["checkpoint.pt (0.0 MiB)"]
    assert oversized(tmp_path, 5000) == []


def test_run_artefacts_are_ignored_by_git():
    """Run directories and checkpoints where the results tooling writes them, and data sets, are ignored."""
    tracked_files(ROOT)  # skips outside a git checkout
    paths = ["runs/results/full/ppo-pong/seed-0/checkpoints/step_250000.pt",
             "runs-in-progress/full/ppo-pong/seed-0/checkpoints/step_250000.pt",
             "runs-in-progress/full/ppo-pong/seed-0/model.pt", "datasets/hopper-medium.hdf5",
             "bench_results/results-quick/RESULTS.md"]
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths], capture_output=True,
                          text=True, timeout=60)
    assert sorted(done.stdout.split()) == sorted(paths)
