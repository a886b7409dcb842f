"""The arena: one byte buffer that holds every per-env array of a vector env, in one layout for all families.

Why one buffer. A Numba call costs roughly one unboxing per array argument (measured: 1.05 us for a 19-array
call of one env, 0.27 us for a 2-array call), so a step hands the compiled code one arena and the actions, and
the compiled code takes typed views of it (``unpack``). The same arena is what a checkpoint stores to resume a
run exactly (``VecEnvBase.state_dict``), what ``SubprocVecEnv`` shares with its worker processes, and what the
fused rollout collector steps.

Contents (E envs, R = E * agents rows; ``ArenaViews`` lists them in this order):

=============  ==================  ===========================================================================
name           dtype, shape        meaning
=============  ==================  ===========================================================================
state          env's, env's        the env's state (``NumbaEnv.state_shape``, one axis of size E); empty for
                                   envs stepped in Python
params         float64 [P]         ``params[0]`` the time limit (``inf``: none), then the env's parameters
elapsed        int32 [E]           steps since the env's last reset (the time-limit counter)
rng_key        uint64 [E]          per-env counter-based random streams (``rapidrl.kernels.rng``)
rng_counter    uint64 [E]
next_step_mode bool (header)       ``AutoresetMode.NEXT_STEP``
needs_reset    bool [E]            NEXT_STEP: the env's episode ended, the next step resets it
obs            env's [R, *obs]     observations (what ``step``/``reset`` return)
rewards        float32 [R]
terminated     bool [R]
truncated      bool [R]
final_obs      env's [R, *obs]     SAME_STEP: the final observation of rows whose episode ended this step
ep_return      float32 [R]         running return and length of the current episode
ep_length      int32 [R]
done_return    float32 [R]         return and length of the episodes that ended this step (where ``done``)
done_length    int32 [R]
done           bool [R]            rows whose episode ended this step
action_mask    bool [R, M]         the valid actions of each row's current observation (M = 0: the env states
                                   no action masks; ``rapidrl.envs.core.numba_env``'s ``mask`` function)
final_mask     bool [R, M]         SAME_STEP: the valid actions at the final observation of rows whose episode
                                   ended this step (``final_action_mask``; all False where none is valid)
=============  ==================  ===========================================================================

The header (``HEADER_WORDS`` int64 words) records the sizes, the shapes of ``state`` and ``obs``, the action size,
the mask width M (``H_MASK``) and the byte offset of every array (64-byte aligned), so compiled code reads the
layout from the arena itself and a stored arena can be checked against the env it is loaded into. dtypes of ``state``
and ``obs`` are compile-time constants of the env's kernels (``rapidrl.envs.core.kernels``); the others are fixed.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

ArenaViews = namedtuple("ArenaViews", [
    "state", "params", "elapsed", "rng_key", "rng_counter", "next_step_mode", "needs_reset", "obs", "rewards",
    "terminated", "truncated", "final_obs", "ep_return", "ep_length", "done_return", "done_length", "done",
    "action_mask", "final_action_mask"])
"""Views of an arena's arrays (NumPy from ``ArenaLayout.views``, Numba from ``kernels.unpack``)."""

ARRAYS = tuple(f for f in ArenaViews._fields if f != "next_step_mode")  # stored arrays, header offset order
MAGIC = 0x31415252  # "RRA1": an arena of this layout
MAX_STATE_NDIM = 4
MAX_OBS_NDIM = 5  # the row axis and up to four observation axes
# header word indices
H_MAGIC, H_ENVS, H_ROWS, H_NEXT_STEP, H_PARAMS, H_ACTIONS, H_STATE_NDIM, H_OBS_NDIM = range(8)
H_STATE_SHAPE = 8
H_OBS_SHAPE = H_STATE_SHAPE + MAX_STATE_NDIM
H_OFFSETS = H_OBS_SHAPE + MAX_OBS_NDIM  # then one offset per array in ARRAYS order and the total size
H_MASK = H_OFFSETS + len(ARRAYS) + 1  # the mask width M (after the offsets and the total size)
HEADER_WORDS = -(-(H_MASK + 1) // 8) * 8  # 64-byte multiple
HEADER_BYTES = 8 * HEADER_WORDS


@dataclass(frozen=True)
class ArenaLayout:
    """Sizes and dtypes of an arena; ``new`` allocates one, ``views`` gives NumPy views of its arrays.

    state_shape: the whole state's shape (one axis of size ``num_envs``); ``()`` for envs without one.
    obs_shape: one row's observation shape.
    """

    num_envs: int
    rows: int
    state_shape: tuple[int, ...]
    state_dtype: np.dtype
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_params: int = 1
    action_size: int = 0  # Discrete: number of actions; Box: number of components (the compiled checks read it)
    mask_size: int = 0  # M: the width of a row's action mask (Discrete: the number of actions); 0: no action masks

    def __post_init__(self):
        object.__setattr__(self, "state_dtype", np.dtype(self.state_dtype))
        object.__setattr__(self, "obs_dtype", np.dtype(self.obs_dtype))
        object.__setattr__(self, "state_shape", tuple(int(d) for d in self.state_shape) or (0,))
        object.__setattr__(self, "obs_shape", tuple(int(d) for d in self.obs_shape))
        if len(self.state_shape) > MAX_STATE_NDIM or len(self.obs_shape) + 1 > MAX_OBS_NDIM:
            raise ValueError(f"state rank <= {MAX_STATE_NDIM} and observation rank <= {MAX_OBS_NDIM - 1} are "
                             f"supported, got state {self.state_shape} and observation {self.obs_shape}")
        if self.rows % self.num_envs:
            raise ValueError(f"rows ({self.rows}) must be a multiple of num_envs ({self.num_envs})")

    def shapes(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """name -> (shape, dtype) of every stored array, in ``ARRAYS`` order."""
        e, r, obs = self.num_envs, self.rows, (self.rows, *self.obs_shape)
        f32, i32, u64, b = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint64), np.dtype(np.bool_)
        return {"state": (self.state_shape, self.state_dtype), "params": ((self.num_params,), np.dtype(np.float64)),
                "elapsed": ((e,), i32), "rng_key": ((e,), u64), "rng_counter": ((e,), u64), "needs_reset": ((e,), b),
                "obs": (obs, self.obs_dtype), "rewards": ((r,), f32), "terminated": ((r,), b),
                "truncated": ((r,), b), "final_obs": (obs, self.obs_dtype), "ep_return": ((r,), f32),
                "ep_length": ((r,), i32), "done_return": ((r,), f32), "done_length": ((r,), i32), "done": ((r,), b),
                "action_mask": ((r, self.mask_size), b), "final_action_mask": ((r, self.mask_size), b)}

    def offsets(self) -> list[int]:
        """Byte offset of every array (``ARRAYS`` order, 64-byte aligned), then the total size."""
        out, off = [], HEADER_BYTES
        for shape, dtype in self.shapes().values():
            out.append(off)
            off += -(-int(np.prod(shape, dtype=np.int64)) * dtype.itemsize // 64) * 64
        return [*out, off]

    @property
    def nbytes(self) -> int:
        return self.offsets()[-1]

    def header(self, next_step_mode: bool) -> np.ndarray:
        hdr = np.zeros(HEADER_WORDS, np.int64)
        hdr[[H_MAGIC, H_ENVS, H_ROWS, H_NEXT_STEP, H_PARAMS, H_ACTIONS]] = (
            MAGIC, self.num_envs, self.rows, int(next_step_mode), self.num_params, self.action_size)
        hdr[H_STATE_NDIM], hdr[H_OBS_NDIM] = len(self.state_shape), 1 + len(self.obs_shape)
        hdr[H_MASK] = self.mask_size
        hdr[H_STATE_SHAPE:H_STATE_SHAPE + len(self.state_shape)] = self.state_shape
        hdr[H_OBS_SHAPE:H_OBS_SHAPE + 1 + len(self.obs_shape)] = (self.rows, *self.obs_shape)
        offsets = self.offsets()
        hdr[H_OFFSETS:H_OFFSETS + len(offsets)] = offsets
        return hdr

    def new(self, next_step_mode: bool, buffer=None) -> np.ndarray:
        """A zeroed arena (uint8 [nbytes], 64-byte aligned start) with its header written.

        buffer: memory to lay it out in (e.g. a ``multiprocessing.RawArray`` shared with worker processes) of
        at least ``nbytes + 64`` bytes; default a new NumPy array.
        """
        size = self.nbytes
        raw = np.zeros(size + 64, np.uint8) if buffer is None else np.frombuffer(buffer, np.uint8)
        if raw.size < size + 64:
            raise ValueError(f"buffer holds {raw.size} bytes, the arena needs {size + 64}")
        start = (-raw.ctypes.data) % 64
        arena = raw[start:start + size]
        arena[:HEADER_BYTES].view(np.int64)[:] = self.header(next_step_mode)
        return arena

    def views(self, arena: np.ndarray) -> ArenaViews:
        """NumPy views of ``arena``'s arrays (the arena must have this layout: ``check``)."""
        self.check(arena)
        hdr = arena[:HEADER_BYTES].view(np.int64)
        out = {}
        for k, (name, (shape, dtype)) in enumerate(self.shapes().items()):
            off = int(hdr[H_OFFSETS + k])
            out[name] = arena[off:off + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize].view(dtype).reshape(shape)
        return ArenaViews(next_step_mode=bool(hdr[H_NEXT_STEP]), **out)

    def check(self, arena, what: str = "arena") -> None:
        """ValueError unless ``arena`` is a uint8 array laid out as this layout says (header included)."""
        if not isinstance(arena, np.ndarray) or arena.dtype != np.uint8 or arena.ndim != 1:
            raise ValueError(f"{what} must be a 1-D uint8 array, got {type(arena).__name__}")
        if arena.size != self.nbytes or arena.size < HEADER_BYTES:
            raise ValueError(f"{what} has {arena.size} bytes, this env's arena has {self.nbytes}: it was made for "
                             "another env, number of envs or version")
        hdr = arena[:HEADER_BYTES].view(np.int64)
        want = self.header(bool(hdr[H_NEXT_STEP]))
        if not np.array_equal(hdr, want):
            raise ValueError(f"{what}'s header does not match this env's layout (another env, number of envs, "
                             "observation or state shape, or version)")
