"""The errors of a run that end a ``rapidrl`` command in one line (``rapidrl: error: ...``, exit code 2), and the
line an OS error becomes.

``RunError``: a user's mistake found while preparing, training or collecting a run (``rapidrl.cli`` prints it as one
line; from Python it is an exception whose message is that line). ``os_error_line``: what a full disk, a read-only or
forbidden directory means for a run, with what was kept.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from rapidrl.runs.layout import CHECKPOINT_DIR

__all__ = ["RunError", "os_error_line"]


class RunError(Exception):
    """A user error: printed as one line, exit code 2 (``rapidrl.cli.CLIError`` is this class)."""


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def os_error_line(e: OSError, run_dir: Path | None = None) -> str:
    """One line for an OS error: what could not be done where, the space left on a full disk, and for a run what
    was kept (its newest checkpoint, which ``--resume`` continues from)."""
    where = e.filename if e.filename is not None else (run_dir if run_dir is not None else "")
    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        place = Path(where or ".")
        while not place.exists() and place != place.parent:
            place = place.parent
        try:
            free = f"{_size(shutil.disk_usage(place).free)} free"
        except OSError:
            free = "free space unknown"
        what = "disk quota exceeded" if e.errno != errno.ENOSPC else "no space left on the device"
        line = f"{what} writing {where} ({free} there)"
    elif e.errno == errno.EROFS:
        line = f"read-only file system: cannot write {where}"
    elif e.errno in (errno.EACCES, errno.EPERM):
        line = f"permission denied: {where}"
    else:
        line = f"{e.strerror or type(e).__name__}: {where}" if where != "" else str(e)
    if run_dir is not None:
        from rapidrl.train.checkpoint import latest_checkpoint

        kept = latest_checkpoint(Path(run_dir) / CHECKPOINT_DIR)
        line += (f"; kept the last checkpoint, {kept} (continue once fixed: rapidrl train --resume {run_dir})"
                 if kept is not None else f"; no checkpoint of {run_dir} was written yet")
    return line
