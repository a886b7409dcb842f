"""Uniform experience replay: a preallocated ring buffer of transitions with optional n-step returns.

Storage is one array per field, row-major over transitions (``obs[capacity, *obs_shape]``, ...), in the
dtypes given at construction (uint8 images stay uint8). ``add`` writes a batch of rows (a vector env's
output, one row per env) with one compiled call; ``sample`` draws rows from the buffer's counter-based random
stream and gathers every field into preallocated arrays with one compiled call (``rapidrl.buffers.sampler``:
the one sampling path; the cores are ``rapidrl.kernels.replay``).

Rows and envs. Rows written by one ``add`` are different envs of one time step. With ``n_step > 1``
every ``add`` must carry exactly ``num_envs`` rows, so row ``r`` belongs to env ``r % num_envs`` and
that env's next step is row ``r + num_envs`` (modulo ``capacity``, a multiple of ``num_envs``).

Episode ends and n-step returns. At an episode end the caller passes the *true final observation* as
``next_obs`` (gymnasium's ``info["final_obs"]``), never the reset observation. A sampled row ``t`` of
env ``e`` looks ahead along ``e``'s stream for ``m <= n_step`` steps::

    rewards   = sum_{k<m} gamma^k r[t+k]
    discounts = gamma^m, or 0 if step t+m-1 is terminated (no bootstrap)
    next_obs  = next_obs[t+m-1]   (the observation to bootstrap from)
    terminated, truncated = the flags of step t+m-1

where the look-ahead stops after a terminated or truncated step (a truncated step bootstraps from
its own true final ``next_obs``) and at the write head (the newest stored step). The learner's target
is ``rewards + discounts * V(next_obs)`` for any ``n_step`` (``discounts = gamma * (1 - terminated)``
for ``n_step = 1``). This equals ``rapidrl.kernels.n_step_returns`` on the same data.

Random numbers: one counter-based stream per buffer (``rapidrl.kernels.rng``, keyed by ``seed``); ``draws``
uniforms of it have been used (``batch_size`` per ``sample``), so the rows drawn are a pure function of (seed,
draws, contents), saved and restored with the buffer.

Thread safety. One lock guards the storage and the bookkeeping: a checked ``add`` holds it while it writes rows
and moves the head, a large ``sample`` while it draws and gathers. The fast ``add`` (inputs already in the storage
dtypes, C-contiguous, under 64 KiB) and a small ``sample`` are each one compiled call that holds the GIL and works
only while nobody holds the lock (else they take the locked path; ``rapidrl._unsafe.replay_table`` states the
safety argument of this table of addresses). A
collector thread may therefore ``add`` while a learner thread samples, and every sampled transition
comes from a single ``add``. The other compiled cores release the GIL. The arrays a ``sample``
returns are *reused*: the next ``sample`` with the same batch size overwrites them (use ``sample_into``
for caller-owned storage).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from numba.core.errors import TypingError

from rapidrl._device import resolve_device
from rapidrl._unsafe.replay_table import T_DRAWS, T_LEN, T_POS, T_SIZE, Guard, add_fast_core, describe_storage
from rapidrl.buffers.batch import BOOL, F32, ReplayBatch
from rapidrl.buffers.persist import read_buffer_dir, storage_array, write_buffer_dir
from rapidrl.buffers.sampler import ReplaySampler
from rapidrl.kernels.replay import write_rows
from rapidrl.kernels.rng import derive_keys
from rapidrl.kernels.validation import check_array, check_int, check_scalar

__all__ = ["ReplayBatch", "ReplayBuffer", "ReplaySampler"]

_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


def _shape(name: str, shape) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"{name} must be a tuple of ints, got {shape!r}") from None
    if any(s <= 0 for s in out):
        raise ValueError(f"{name} must have positive sizes, got {out}")
    return out


class _hybridmethod:
    """``load``: called on the class, build a new buffer; called on an instance, load into it."""

    def __init__(self, func):
        self.func = func
        self.__doc__ = func.__doc__

    def __get__(self, obj, cls):
        return self.func.__get__(cls if obj is None else obj, cls)


def _table_slot(index: int) -> property:
    """An int property stored in slot ``index`` of the buffer's table (``self._table``, int64)."""

    def get(self) -> int:
        return int(self._table[index])

    def set_(self, value: int) -> None:
        self._table[index] = value

    return property(get, set_)


class ReplayBuffer:
    """Uniform replay ring buffer (see the module docstring for layout, n-step, random numbers and thread safety).

    Args:
        capacity: rows kept (> 0); the oldest are overwritten. A multiple of num_envs when n_step > 1.
        obs_shape, action_shape: per-row shapes (``()`` for a discrete action).
        obs_dtype, action_dtype: storage dtypes (e.g. uint8 images, int64 discrete actions).
        seed: key of the sampling stream (None: fresh entropy).
        n_step: steps per return (>= 1); gamma: discount in [0, 1].
        num_envs: rows per ``add`` (the per-env stream; enforced when n_step > 1).
        storage: "memory" (NumPy arrays) or "mmap" (``.npy`` files in directory ``path``, for data
            beyond RAM; the files are created/overwritten).
        device: where ``sample(as_torch=True)`` puts tensors; pin_memory: stage through pinned host
            memory for an asynchronous copy to a CUDA device.
    """

    _relabel = None
    """Called as ``f(batch arrays)`` after each gather, before delivery, by every sampler (HER's relabelling)."""

    def __init__(self, capacity: int, obs_shape: tuple, action_shape: tuple = (), *, obs_dtype=np.float32,
                 action_dtype=np.float32, seed: int | None = None, n_step: int = 1, gamma: float = 0.99,
                 num_envs: int = 1, storage: str = "memory", path: str | os.PathLike | None = None,
                 device: str | torch.device = "cpu", pin_memory: bool = False):
        self.capacity = check_int("capacity", capacity, low=1)
        self.obs_shape = _shape("obs_shape", obs_shape)
        self.action_shape = _shape("action_shape", action_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.action_dtype = np.dtype(action_dtype)
        for name, dt in (("obs_dtype", self.obs_dtype), ("action_dtype", self.action_dtype)):
            if dt.kind not in "biuf":
                raise TypeError(f"{name} must be a bool, integer or float dtype, got {dt}")
        self.n_step = check_int("n_step", n_step, low=1)
        self.gamma = check_scalar("gamma", gamma, low=0.0, high=1.0)
        self.num_envs = check_int("num_envs", num_envs, low=1)
        if self.n_step > 1 and self.capacity % self.num_envs:
            raise ValueError(f"capacity={self.capacity} must be a multiple of num_envs={self.num_envs} "
                             "when n_step > 1")
        if storage not in ("memory", "mmap"):
            raise ValueError(f"storage must be 'memory' or 'mmap', got {storage!r}")
        if storage == "mmap" and path is None:
            raise ValueError("storage='mmap' needs path (a directory for the .npy files)")
        self.storage = storage
        self.path = None if path is None else Path(path)
        self.device = resolve_device(device)
        self.pin_memory = bool(pin_memory)
        self.seed = seed
        self._stream_key = int(derive_keys(seed, 1)[0].astype(np.int64))
        self._table = np.zeros(T_LEN, dtype=np.int64)  # head, size, draws and the storage (_unsafe.replay_table)
        self._table_addr = self._table.ctypes.data
        self._lock = Guard(self._table)
        # The per-env stream only matters for n-step look-ahead.
        self._stream_envs = self.num_envs if self.n_step > 1 else 1
        self._rows_per_add = self.num_envs if self.n_step > 1 else 0
        self._samplers: dict[int, ReplaySampler] = {}
        self._dtypes = (self.obs_dtype, self.action_dtype, F32, self.obs_dtype, BOOL, BOOL)  # _FIELDS order
        self._image_obs = len(self.obs_shape) > 1
        self._on_write = None  # called under the lock as f(first_row, n) after each add (see subclasses)
        self._allocate()
        self._set_fast_add(True)

    # -- storage -----------------------------------------------------------------------------------
    @staticmethod
    def storage_bytes(capacity: int, obs_shape: tuple, action_shape: tuple = (), *, obs_dtype=np.float32,
                      action_dtype=np.float32, **_ignored) -> int:
        """Bytes the stored fields of a buffer built with these arguments take (before building it): obs and
        next_obs, actions, rewards (float32) and two flags per row."""
        obs = int(np.prod(obs_shape)) * np.dtype(obs_dtype).itemsize
        action = int(np.prod(action_shape)) * np.dtype(action_dtype).itemsize
        return int(capacity) * (2 * obs + action + 4 + 2)

    def _field_specs(self) -> list[tuple[str, tuple, np.dtype]]:
        C = self.capacity
        return [("obs", (C, *self.obs_shape), self.obs_dtype), ("actions", (C, *self.action_shape), self.action_dtype),
                ("rewards", (C,), F32), ("next_obs", (C, *self.obs_shape), self.obs_dtype),
                ("terminated", (C,), BOOL), ("truncated", (C,), BOOL)]

    def _allocate(self) -> None:
        """Allocate the storage, once: the table holds its addresses (never replaced afterwards)."""
        if self.storage == "mmap":
            self.path.mkdir(parents=True, exist_ok=True)
        arrays = [storage_array(self.storage, self.path, name, shape, dtype)
                  for name, shape, dtype in self._field_specs()]
        self._store = tuple(arrays)  # in _FIELDS order
        C = self.capacity
        obs, act, rew, nobs, term, trunc = arrays
        # Row-flattened views: the gather core's storage, and add's for multi-dim observations.
        self._flat_store = (obs.reshape(C, -1), act.reshape(C, -1), rew, nobs.reshape(C, -1), term, trunc)
        self._flat_obs_store = (obs.reshape(C, -1), act, rew, nobs.reshape(C, -1), term, trunc)

    def _set_fast_add(self, enabled: bool) -> None:
        """Describe the storage in the table (disabled: every add takes the checked path)."""
        describe_storage(self._table, self._store, self.capacity, self._rows_per_add, enabled)

    # head, size and draws live in the table (the compiled fast paths move them)
    _pos = _table_slot(T_POS)
    _size = _table_slot(T_SIZE)

    # -- public state ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._table[T_SIZE])

    @property
    def pos(self) -> int:
        """Row the next ``add`` writes first."""
        return self._pos

    @property
    def full(self) -> bool:
        return self._size == self.capacity

    @property
    def draws(self) -> int:
        """Uniforms of the buffer's random stream used so far by ``sample`` (saved with the buffer)."""
        return int(self._table[T_DRAWS])

    def arrays(self) -> dict[str, np.ndarray]:
        """The storage arrays by field name (rows [0, len) are valid; read-only use)."""
        return dict(zip(_FIELDS, self._store))

    def end_episodes(self) -> None:
        """Cut every episode still open at the newest ``num_envs`` rows (the last add) as truncated there: their
        targets bootstrap from their stored ``next_obs`` and n-step returns stop. For a writer whose envs restart
        without the stored episodes ending (a resumed run whose env state was not saved)."""
        with self._lock:
            n = min(self.num_envs, self._size)
            rows = (self._pos - 1 - np.arange(n)) % self.capacity
            terminated, truncated = self._store[4], self._store[5]
            truncated[rows] |= ~terminated[rows]

    # -- adding ------------------------------------------------------------------------------------
    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Append n transitions, one per row of every argument (n = the leading dimension).

        obs, next_obs: [n, *obs_shape]; actions: [n, *action_shape]; rewards: [n] float;
        terminated, truncated: [n] bool. Where an episode ended, next_obs must be the true final
        observation. Dtypes are stored as given when they match the storage; other dtypes are cast
        if NumPy's "same_kind" rule allows it (e.g. float64 rewards), else TypeError. Any bad argument
        raises before anything is written.
        """
        try:
            code = add_fast_core(self._table_addr, obs, actions, rewards, next_obs, terminated, truncated)
        except Exception:  # types the fast core cannot take (lists, tensors, 0-d arrays...): checked below
            code = -1
        if code:
            self._add_checked(obs, actions, rewards, next_obs, terminated, truncated)

    def _add_checked(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """``add`` with the checks in Python, any dtype NumPy casts same_kind and any layout."""
        try:
            fast = (obs.dtype, actions.dtype, rewards.dtype, next_obs.dtype, terminated.dtype,
                    truncated.dtype) == self._dtypes
        except AttributeError:
            fast = False
        if not fast:
            obs, actions, rewards, next_obs, terminated, truncated = self._check_dtypes(
                (obs, actions, rewards, next_obs, terminated, truncated))
        store, o, no = self._store, obs, next_obs
        if self._image_obs:  # copy multi-dim observations as flat rows (a contiguous copy per row)
            if obs.ndim < 2 or obs.shape[1:] != self.obs_shape or next_obs.shape != obs.shape:
                self._raise_add(obs, actions, rewards, next_obs, terminated, truncated)
            store, o, no = self._flat_obs_store, obs.reshape(obs.shape[0], -1), next_obs.reshape(obs.shape[0], -1)
        with self._lock:
            try:
                code = write_rows(self._pos, self._rows_per_add, *store, o, actions, rewards, no, terminated,
                                  truncated)
            except TypingError:  # e.g. a 0-d array: numba cannot even type the copy
                code = 1
            if code:
                self._raise_add(obs, actions, rewards, next_obs, terminated, truncated)
            n = obs.shape[0]
            pos = self._pos
            if self._on_write is not None:
                self._on_write(pos, n)
            pos += n
            self._pos = pos - self.capacity if pos >= self.capacity else pos
            self._size = min(self._size + n, self.capacity)

    def _check_dtypes(self, args: tuple) -> tuple:
        out = []
        for name, x, dt in zip(_FIELDS, args, self._dtypes):
            if not isinstance(x, np.ndarray):
                raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
            if dt == BOOL:
                if x.dtype == np.uint8:
                    x = x.view(np.bool_)
                elif x.dtype != BOOL:
                    raise TypeError(f"{name} must have dtype bool (or uint8 0/1), got {x.dtype}")
            elif not np.can_cast(x.dtype, dt, casting="same_kind"):
                raise TypeError(f"{name} has dtype {x.dtype}, which cannot be stored as {dt} (same_kind cast)")
            out.append(x)
        return tuple(out)

    def _raise_add(self, *args) -> None:
        """Raise the error for a rejected add (``write_rows``'s checks, in Python, on the originals)."""
        n = args[0].shape[0] if args[0].ndim else -1
        for name, x, s in zip(_FIELDS, args, self._store):
            if x.ndim == 0 or x.shape[0] != n or x.shape[1:] != s.shape[1:]:
                want = "(" + ", ".join(["n", *map(str, s.shape[1:])]) + ")"
                raise ValueError(f"{name} must have shape {want} with n = len(obs) = {n}, got {x.shape}")
        if n == 0 or n > self.capacity:
            raise ValueError(f"add needs 1 to capacity={self.capacity} rows, got {n}")
        if self._rows_per_add and n != self._rows_per_add:
            raise ValueError(f"with n_step > 1 every add must hold exactly num_envs={self.num_envs} rows, got {n}")
        raise TypeError("add: the arguments cannot be stored (unsupported array types)")

    # -- sampling ----------------------------------------------------------------------------------
    def sample(self, batch_size: int, *, as_torch: bool = False) -> ReplayBatch:
        """Draw ``batch_size`` rows uniformly (with replacement) from the stored ones: the next ``batch_size``
        uniforms of the buffer's stream (``rapidrl.buffers.sampler``).

        Returns arrays owned by the buffer and overwritten by the next ``sample`` of the same batch
        size. ``as_torch``: torch tensors on ``device`` instead (CPU: zero-copy views of the arrays;
        CUDA: one copy per field, asynchronous from pinned memory when ``pin_memory``).
        """
        sampler = self._samplers.get(batch_size)
        if sampler is None:
            sampler = self._bound_sampler(batch_size)
        return sampler(as_torch=as_torch)

    def _bound_sampler(self, batch_size: int) -> ReplaySampler:
        """The sampler of ``sample(batch_size)`` on the buffer's own stream (made on first use)."""
        B = check_int("batch_size", batch_size, low=1)
        if B > self.capacity:
            self._check_can_sample(B)  # the same message as a batch larger than what is stored
        sampler = self._samplers[B] = ReplaySampler(self, B, _buffer_stream=True)
        return sampler

    def sampler(self, batch_size: int, *, seed: int | None = None) -> ReplaySampler:
        """A sampler for ``batch_size`` with a random stream of its own (``seed``; default: the buffer's seed, so
        it draws what ``sample`` would from a fresh buffer), neither using nor advancing the buffer's."""
        return ReplaySampler(self, batch_size, seed=self.seed if seed is None else seed)

    def sample_into(self, batch_size: int, out: ReplayBatch) -> ReplayBatch:
        """``sample`` copied into caller-owned NumPy arrays ``out`` (the shapes and dtypes of a ``sample``
        result; one extra copy). Returns ``out``."""
        B = check_int("batch_size", batch_size, low=1)
        if not isinstance(out, ReplayBatch):
            raise TypeError(f"out must be a ReplayBatch, got {type(out).__name__}")
        ref = self._samplers.get(B) or self._bound_sampler(B)
        for name, x, want in zip(ReplayBatch._fields, out, ref._slot.arrays):
            check_array(f"out.{name}", x, shape=want.shape, dtypes=(want.dtype,), contiguous=False)
        for dst, src in zip(out, ref()):
            np.copyto(dst, src)
        return out

    def _check_can_sample(self, batch_size: int) -> int:
        """The number of stored rows, checked to allow a batch of ``batch_size``."""
        size = int(self._table[T_SIZE])
        if size == 0:
            raise ValueError("cannot sample from an empty buffer")
        if batch_size > size:
            raise ValueError(f"batch_size={batch_size} is larger than the {size} stored transitions")
        return size

    def _priority_tree(self):
        """The sum/min tree the samplers draw from (prioritized replay), or None (uniform)."""
        return None

    def _count_sample(self) -> None:
        """Called after each prioritized sample (beta's annealing counts them)."""

    # -- persistence -------------------------------------------------------------------------------
    def _config(self) -> dict:
        return dict(capacity=self.capacity, obs_shape=list(self.obs_shape), action_shape=list(self.action_shape),
                    obs_dtype=self.obs_dtype.str, action_dtype=self.action_dtype.str, n_step=self.n_step,
                    gamma=self.gamma, num_envs=self.num_envs)

    def _state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """JSON-able state and extra arrays to save (under the lock)."""
        return {"pos": self._pos, "size": self._size, "stream_key": self._stream_key, "draws": self.draws}, {}

    def _set_state(self, state: dict, arrays: dict[str, np.ndarray]) -> None:
        self._pos, self._size = int(state["pos"]), int(state["size"])
        # the sampling stream continues where it was (a buffer saved before the counter-based stream has neither
        # key nor draws: its stream restarts from this buffer's seed)
        key = int(state.get("stream_key", self._stream_key))
        if key != self._stream_key:
            self._stream_key = key
            self._samplers.clear()  # they hold the old key; rebuilt on the next sample
        self._table[T_DRAWS] = int(state.get("draws", 0))

    def save(self, path: str | os.PathLike) -> Path:
        """Write the buffer to directory ``path``: one ``.npy`` per field (the stored rows) and
        ``header.json`` (configuration, head, the sampling stream's position). No pickle. The directory is
        replaced atomically (written beside it, then renamed). Returns the path."""
        path = Path(path)
        if self.path is not None and path.resolve() == self.path.resolve():
            raise ValueError(f"cannot save into the buffer's own mmap directory {path}")
        with self._lock:
            state, extra = self._state()
            header = {"class": type(self).__name__, "config": self._config(), "state": state}
            arrays = {name: arr[: self._size] for name, arr in zip(_FIELDS, self._store)}
            return write_buffer_dir(path, header, {**arrays, **extra})

    @_hybridmethod
    def load(self_or_cls, source: str | os.PathLike, /, **kwargs):
        """Read a buffer written by ``save`` from directory ``source``.

        ``ReplayBuffer.load(source, **kwargs)`` builds a new buffer (kwargs: storage, path, device,
        pin_memory as in the constructor, e.g. ``storage="mmap", path=...`` to load into memory-mapped
        files); ``buffer.load(source)`` loads into an existing buffer of the same configuration.
        Returns the buffer.
        """
        source = Path(source)
        # Memory-mapped reads: a buffer larger than RAM streams from the files into its storage.
        header, arrays = read_buffer_dir(source)
        cls = self_or_cls if isinstance(self_or_cls, type) else type(self_or_cls)
        if header.get("class") != cls.__name__:
            raise ValueError(f"{source} holds a {header.get('class')}, not a {cls.__name__}")
        config = header["config"]
        state = header["state"]
        if isinstance(self_or_cls, type):
            buf = self_or_cls(**config, **kwargs)
        else:
            buf = self_or_cls
            if kwargs:
                raise TypeError("buffer.load(source) takes no options; use the class method to choose them")
            if buf._config() != config or type(buf).__name__ != header["class"]:
                raise ValueError(f"{source} holds a {header['class']} with {config}, not this buffer's "
                                 f"{buf._config()}")
        size = int(state["size"])
        with buf._lock:
            for name, dst in zip(_FIELDS, buf._store):
                src = arrays.pop(name)
                if src.shape != (size, *dst.shape[1:]) or src.dtype != dst.dtype:
                    raise ValueError(f"{source}/{name}.npy has shape {src.shape} {src.dtype}, expected "
                                     f"{(size, *dst.shape[1:])} {dst.dtype}")
                dst[:size] = src  # into the existing storage: the table's addresses stay valid
            buf._set_state(state, arrays)
        return buf
