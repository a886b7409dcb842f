"""The live metrics file: a memory-mapped, fixed-layout, lock-free channel from a trainer to monitors.

Layout (little-endian; offsets in bytes; every 8-byte field is 8-byte aligned)::

    0    magic         8s   b"RRLMON1\\0"
    8    version       u32  1
    12   capacity      u32  number of field slots (names and values)
    16   ring_size     u32  slots of the ring of recent episode returns
    20   pid           u32  trainer process id (for CPU / memory in the monitor)
    24   start_time    f64  unix time the trainer opened the file
    32   total_steps   f64  target of the run (for progress and ETA)
    40   run_name      88s  utf-8, NUL-padded
    128  seq           u64  seqlock counter: odd while the trainer writes, even when consistent
    136  n_fields      u64  field slots in use                          } everything from here on is
    144  ring_count    u64  episode returns ever pushed                  } written only between two
    152  status        u64  0 running, 1 finished, 2 failed, 3 stopped   } increments of seq
    160  heartbeat     f64  unix time of the last update                 }
    192  names         capacity x 48s  field names, utf-8, NUL-padded
    ...  values        capacity x f64
    ...  ring          ring_size x f64  return of episode k at slot k % ring_size

The writer (one per file) never locks and makes no system call per update: it stores into NumPy views
of the mapping. A reader copies the region from ``seq`` to the end and keeps the copy only when ``seq``
was even and unchanged across the copy (a seqlock), so a snapshot is never torn. This relies on stores
becoming visible in program order, which x86-64 guarantees (TSO); readers also re-check the copied
``seq``. The file is created complete under a temporary name and renamed into place, so a reader never
sees a half-initialized file; a restarted trainer replaces it the same way (readers notice the new inode).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = b"RRLMON1\0"
VERSION = 1
NAME_BYTES = 48
HEADER_BYTES = 192
SEQ_OFFSET = 128
_FIXED = struct.Struct("<8sIIII dd 88s")  # magic .. run_name, 128 bytes
STATUS = {0: "running", 1: "finished", 2: "failed", 3: "stopped"}
STATUS_CODE = {v: k for k, v in STATUS.items()}


def file_size(capacity: int, ring_size: int) -> int:
    """Bytes of a metrics file with ``capacity`` field slots and a ring of ``ring_size`` returns."""
    return HEADER_BYTES + capacity * NAME_BYTES + 8 * capacity + 8 * ring_size


class MetricsWriter:
    """Trainer side. ``update(metrics)`` stores values (new names get a slot); ``push_returns`` fills the ring.

    Several updates can be grouped in ``with writer.writing():`` so readers see them together.
    """

    def __init__(self, path: str | os.PathLike, *, run_name: str = "", total_steps: float = math.nan,
                 capacity: int = 128, ring_size: int = 256, pid: int | None = None):
        if capacity <= 0 or ring_size <= 0:
            raise ValueError("capacity and ring_size must be positive")
        self.path = Path(path)
        self.capacity, self.ring_size = int(capacity), int(ring_size)
        size = file_size(self.capacity, self.ring_size)
        image = bytearray(size)
        _FIXED.pack_into(image, 0, MAGIC, VERSION, self.capacity, self.ring_size, pid or os.getpid(), time.time(),
                         float(total_steps), run_name.encode()[:88])
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(image)
        os.replace(tmp, self.path)
        self._file = open(self.path, "r+b")
        self._mm = mmap.mmap(self._file.fileno(), size)
        buf = memoryview(self._mm)
        self._seq = np.frombuffer(buf, np.uint64, 1, SEQ_OFFSET)
        self._counters = np.frombuffer(buf, np.uint64, 3, SEQ_OFFSET + 8)  # n_fields, ring_count, status
        self._heartbeat = np.frombuffer(buf, np.float64, 1, SEQ_OFFSET + 32)
        self._names = np.frombuffer(buf, np.uint8, self.capacity * NAME_BYTES, HEADER_BYTES
                                    ).reshape(self.capacity, NAME_BYTES)
        self._values = np.frombuffer(buf, np.float64, self.capacity, HEADER_BYTES + self.capacity * NAME_BYTES)
        self._ring = np.frombuffer(buf, np.float64, self.ring_size,
                                   HEADER_BYTES + self.capacity * (NAME_BYTES + 8))
        self._values.fill(math.nan)
        self._index: dict[str, int] = {}
        self._plans: dict[tuple, tuple[list[str], np.ndarray]] = {}
        self._depth = 0
        self._counter = 0
        self._ring_count = 0

    # -- seqlock -------------------------------------------------------------------------------------
    def _begin(self) -> None:
        if self._depth == 0:
            self._counter += 1
            self._seq[0] = self._counter  # odd: readers retry
        self._depth += 1

    def _end(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._heartbeat[0] = time.time()
            self._counter += 1
            self._seq[0] = self._counter  # even: consistent

    def writing(self):
        """Context manager grouping several writes into one consistent snapshot."""
        return _Section(self)

    # -- writes ----------------------------------------------------------------------------------------
    def _slot(self, name: str) -> int | None:
        idx = self._index.get(name)
        if idx is None:
            idx = len(self._index)
            if idx >= self.capacity:
                return None  # full: further new names are dropped (the monitor shows the first `capacity`)
            encoded = name.encode()[:NAME_BYTES]
            self._names[idx, : len(encoded)] = np.frombuffer(encoded, np.uint8)
            self._index[name] = idx
            self._counters[0] = idx + 1
        return idx

    def update(self, metrics: dict[str, float]) -> None:
        """Store each value under its name (non-numbers are skipped).

        The slots of a key set are cached, so the usual update (same keys as last time) is one NumPy store.
        """
        keys = tuple(metrics)
        plan = self._plans.get(keys)
        if plan is None:
            names = [k for k, v in metrics.items() if isinstance(v, (int, float))]
            with self.writing():
                slots = [(k, self._slot(k)) for k in names]
            slots = [(k, i) for k, i in slots if i is not None]
            plan = self._plans[keys] = ([k for k, _ in slots], np.array([i for _, i in slots], np.intp))
        names, idx = plan
        with self.writing():
            self._values[idx] = [metrics[k] for k in names]

    def push_returns(self, returns) -> None:
        """Append finished-episode returns to the ring."""
        with self.writing():
            for r in returns:
                self._ring[self._ring_count % self.ring_size] = r
                self._ring_count += 1
            self._counters[1] = self._ring_count

    def set_status(self, status: str) -> None:
        """"running", "finished", "failed" or "stopped"."""
        with self.writing():
            self._counters[2] = STATUS_CODE[status]

    def close(self) -> None:
        """Unmap and close (the file stays for later readers)."""
        self._seq = self._counters = self._heartbeat = self._names = self._values = self._ring = None
        self._mm.close()
        self._file.close()


class _Section:
    def __init__(self, writer: MetricsWriter):
        self.writer = writer

    def __enter__(self):
        self.writer._begin()
        return self.writer

    def __exit__(self, *exc):
        self.writer._end()
        return False


@dataclass
class Snapshot:
    """One consistent view of a metrics file."""

    run_name: str
    pid: int
    start_time: float
    total_steps: float
    status: str
    heartbeat: float
    seq: int
    values: dict[str, float] = field(default_factory=dict)
    returns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Recent episode returns, oldest first (at most ring_size)."""
    episodes_pushed: int = 0


class TornReadError(RuntimeError):
    """The writer kept the file busy for every attempt of a read."""


class MetricsReader:
    """Monitor side: ``snapshot()`` returns a consistent ``Snapshot``; reopens when the trainer replaced the file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._mm = None
        self._inode = None
        self._names: list[str] = []
        self._open()

    def _open(self) -> None:
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())
            head = f.read(_FIXED.size)
            if len(head) < _FIXED.size or head[:8] != MAGIC:
                raise ValueError(f"{self.path} is not a rapidrl metrics file")
            _magic, version, capacity, ring_size, pid, start, total, name = _FIXED.unpack(head)
            if version != VERSION:
                raise ValueError(f"{self.path} has metrics format version {version}, this rapidrl reads {VERSION}")
            if st.st_size != file_size(capacity, ring_size):
                raise ValueError(f"{self.path} is truncated or corrupt")
            mm = mmap.mmap(f.fileno(), st.st_size, access=mmap.ACCESS_READ)
        if self._mm is not None:
            self._mm.close()
        self._mm, self._inode = mm, st.st_ino
        self.capacity, self.ring_size, self.pid = capacity, ring_size, pid
        self.start_time, self.total_steps = start, total
        self.run_name = name.rstrip(b"\0").decode(errors="replace")
        self._names = []

    def _reopen_if_replaced(self) -> None:
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            return
        if inode != self._inode:
            self._open()

    def snapshot(self, timeout: float = 2.0) -> Snapshot:
        """Copy the file under the seqlock; raises TornReadError if no attempt within ``timeout`` seconds saw a
        quiet writer (a time budget, not a count: on a loaded machine the writer may hold the lock for long)."""
        self._reopen_if_replaced()
        mm = self._mm
        deadline = None
        attempts = 0
        while True:
            s1 = int.from_bytes(mm[SEQ_OFFSET:SEQ_OFFSET + 8], "little")
            if s1 % 2 == 0:
                data = mm[SEQ_OFFSET:]
                s2 = int.from_bytes(mm[SEQ_OFFSET:SEQ_OFFSET + 8], "little")
                if s1 == s2 and int.from_bytes(data[:8], "little") == s1:
                    return self._parse(data, s1)
            attempts += 1
            if attempts % 64 == 0:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + timeout
                elif now > deadline:
                    raise TornReadError(f"{self.path}: the writer was busy for {timeout} s ({attempts} read attempts)")
                time.sleep(0.0005)

    def _parse(self, data: bytes, seq: int) -> Snapshot:
        n_fields, ring_count, status = struct.unpack_from("<QQQ", data, 8)
        (heartbeat,) = struct.unpack_from("<d", data, 32)
        names_at = HEADER_BYTES - SEQ_OFFSET
        n_fields = min(n_fields, self.capacity)
        if len(self._names) != n_fields:
            self._names = [data[names_at + i * NAME_BYTES: names_at + (i + 1) * NAME_BYTES].rstrip(b"\0").decode(
                errors="replace") for i in range(n_fields)]
        values_at = names_at + self.capacity * NAME_BYTES
        values = np.frombuffer(data, np.float64, n_fields, values_at)
        ring = np.frombuffer(data, np.float64, self.ring_size, values_at + 8 * self.capacity)
        count = min(ring_count, self.ring_size)
        order = (np.arange(ring_count - count, ring_count) % self.ring_size).astype(np.int64)
        return Snapshot(run_name=self.run_name, pid=self.pid, start_time=self.start_time,
                        total_steps=self.total_steps, status=STATUS.get(status, "unknown"), heartbeat=heartbeat,
                        seq=seq, values=dict(zip(self._names, values.tolist())), returns=ring[order].copy(),
                        episodes_pushed=int(ring_count))

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
