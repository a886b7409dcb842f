"""One writer per run directory: an OS file lock on ``RUN/.writer.lock`` (standard library only).

``rapidrl train`` (new runs and ``--resume``) and ``rapidrl collect`` hold the lock of the run directory they work on
for as long as they run; a second writer is refused at once, in one line naming the holder's pid and command
(``RunInUseError``). Readers (``rapidrl monitor``, ``eval``, ``plot``) never take it.

The lock is ``flock`` on POSIX (``msvcrt.locking`` on Windows): the kernel drops it when the holding process ends,
however it ends, so a SIGKILL or a power cut never leaves a stale lock behind. The file itself stays (it holds the
last holder's pid for the message); its presence means nothing. The lock is re-entrant within one process
(``RunLock`` counts its holders), so a command that creates a run and then trains it takes it once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rapidrl._system import try_lock_file as _try_lock
from rapidrl._system import unlock_file as _unlock

__all__ = ["LOCK_FILE", "RunInUseError", "RunLock", "lock_holder"]

LOCK_FILE = ".writer.lock"

_HELD: dict[str, list] = {}
"""realpath of a run directory -> [file descriptor, holders] for the locks this process holds."""


class RunInUseError(RuntimeError):
    """Another process is writing the run directory (its message names the holder's pid)."""


def _read_holder(path: Path) -> tuple[int | None, str]:
    """(pid, command) the holder wrote into the lock file; (None, "") while it has not written them yet."""
    for _ in range(20):  # the holder truncates, then writes: a reader may fall between the two
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        pid, _, command = text.partition(" ")
        if pid.isdigit():
            return int(pid), command
        time.sleep(0.01)
    return None, ""


def lock_holder(run_dir: str | os.PathLike) -> int | None:
    """The pid of the process writing ``run_dir`` now, or None when no process holds its lock (this process's own
    lock included: its pid)."""
    path = Path(run_dir) / LOCK_FILE
    if os.path.realpath(run_dir) in _HELD:
        return os.getpid()
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if _try_lock(fd):
            _unlock(fd)
            return None
    finally:
        os.close(fd)
    return _read_holder(path)[0]


class RunLock:
    """The writer lock of ``run_dir`` (an existing directory): ``with RunLock(run_dir, "rapidrl train"): ...``.

    ``acquire`` raises ``RunInUseError`` at once (no waiting) when another process holds it. ``command`` is what
    the refused writer is told is running there.
    """

    def __init__(self, run_dir: str | os.PathLike, command: str = "rapidrl train"):
        self.run_dir, self.command = Path(run_dir), command
        self._key = os.path.realpath(self.run_dir)
        self._held = False

    def acquire(self) -> RunLock:
        if self._held:
            return self
        held = _HELD.get(self._key)
        if held is not None:
            held[1] += 1
            self._held = True
            return self
        path = self.run_dir / LOCK_FILE
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)  # not inherited by the processes it starts
        fd = os.open(path, flags, 0o644)
        if not _try_lock(fd):
            os.close(fd)
            pid, command = _read_holder(path)
            who = f"`{command or 'a rapidrl writer'}` (pid {pid})" if pid is not None else "another process"
            stop = f"; stop it with: kill {pid}" if pid is not None else ""
            raise RunInUseError(f"{self.run_dir} is in use: {who} is writing it. One writer per run: wait for it to "
                                f"end{stop} (reading it is fine: rapidrl monitor {self.run_dir})")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {self.command}\n".encode())
        _HELD[self._key] = [fd, 1]
        self._held = True
        return self

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        held = _HELD[self._key]
        held[1] -= 1
        if held[1] == 0:
            del _HELD[self._key]
            try:
                _unlock(held[0])
            finally:
                os.close(held[0])

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
