"""The batched step loop, written once, and how compiled code picks an env's functions: at compile time.

An env written as Numba functions (``rapidrl.envs.NumbaEnv``: ``reset``, ``step``, ``observe`` on one env's state,
and optionally ``mask``) is registered here under a string key (``register``). Compiled code names the env by that key
as a compile-time constant (a ``Literal[str]``): the overloads below (``env_step``, ``env_reset``, ``env_observe``,
``env_mask``, ``unpack``)
look the key up while compiling and return that env's functions alone, so the loops inline one env's code and
no other, with no run-time dispatch. (Measured on MinAtar, against one loop dispatching on an env code at run
time: 30% faster per step.) ``compile_kernels(key)`` builds the Python entry points, closures over the key
string only: Numba hashes the string into its on-disk cache key, so every env's kernels cache separately.

The entry points of one env (``EnvKernels``):

    step(arena, actions) -> int          # check the actions, then step every env (serial)
    step_threads(arena, actions) -> int  # the same, envs split over Numba's threads (identical results)
    reset(arena, mask, redraw)           # envs where mask: new initial state (redraw) or not, observe, counters

``step`` returns -1, or (nothing stepped) -2 when ``actions`` has the wrong rank or kind for the action space, or
the index of the first invalid action; or (stepped) ``-3 - r`` when row r's new action mask has no valid action
(``first_empty_mask_row``: the step that produced it is refused, ``NumbaVecEnv.step``). Actions: int [R] (Discrete)
or float [R, A] (Box), any int/float dtype (Numba compiles one specialization per dtype). They keep the GIL
(releasing it costs ~0.2 us a call, 5-8% of a step of 8 envs) and compile with ``_nrt=False``: they never allocate,
and with reference counting on, each array handed to an inlined helper cost two atomic operations per env (measured
~195-470 ns per CartPole env step instead of ~70 ns).

Compiled callers elsewhere (the fused rollout collector) call ``step_envs(key, *arrays)`` and ``unpack(key,
arena)`` with the key of the env they collect from (``NumbaVecEnv.kernel_key``); envs stepped in Python call
``record_steps`` for their flags and episode statistics (``rapidrl.envs.core.bookkeeping``).

Pass the arrays of ``unpack`` on as arguments of a compiled function (as ``step_envs`` and ``reset_envs`` take
them), not as attributes of the tuple: Numba 0.68 inlines the env's ``inline="always"`` functions wrongly when their
array arguments are attributes of a tuple returned by another function (the writes were lost; found by
``tests/test_envs_builtin.py``), and ``unpack`` itself is not inlined for the same reason.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from numba import prange, types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic, overload
from numba.np.arrayobj import make_array, populate_array
from numba.np.unsafe.ndarray import to_fixed_tuple

from rapidrl.envs.core import actions as _actions
from rapidrl.envs.core import arena as _arena
from rapidrl.envs.core import bookkeeping as _bookkeeping
from rapidrl.envs.core.actions import first_bad_box, first_bad_discrete
from rapidrl.envs.core.arena import (
    H_ACTIONS,
    H_ENVS,
    H_MASK,
    H_NEXT_STEP,
    H_OBS_SHAPE,
    H_OFFSETS,
    H_PARAMS,
    H_ROWS,
    H_STATE_SHAPE,
    HEADER_BYTES,
    HEADER_WORDS,
    ArenaViews,
)
from rapidrl.envs.core.bookkeeping import count_step, cut_row, finish_row, restart_env, skip_row
from rapidrl.kernels import rng
from rapidrl.kernels.cache import check_stale_cache, invalidate_stale_cache


class EnvFunctions(NamedTuple):
    """What the compiled loops need to know about one registered env (``register``)."""

    reset: object  # njit reset(state, i, params, rng_key, rng_counter)
    step: object  # njit step(state, i, actions, params, elapsed, rng_key, rng_counter) -> (reward, terminated)
    observe: object  # njit observe(state, i, obs)
    multiagent: bool  # step(..., rewards) -> terminated writes the rewards of env i's rows itself
    state_dtype: type  # NumPy scalar type of the state
    state_ndim: int
    obs_dtype: type
    obs_ndim: int  # rows axis included
    action_kind: str  # "discrete" or "box" (the size is read from the arena: ``ArenaLayout.action_size``)
    mask: object = None  # njit mask(state, i, mask_out): env i's valid actions; None: the env states no masks


_FUNCTIONS: dict[str, EnvFunctions] = {}


def register(key: str, functions: EnvFunctions) -> None:
    """Make ``functions`` the env compiled code finds under ``key``.

    A key hashes the functions' source, so registering it again (the same env defined twice, e.g. a re-run
    notebook cell) replaces equal code: compiled kernels stay valid.
    """
    _FUNCTIONS[key] = functions


def functions(key: str) -> EnvFunctions:
    """The functions registered under ``key`` (KeyError if none are)."""
    return _FUNCTIONS[key]


def _functions(key) -> EnvFunctions:
    if not isinstance(key, types.StringLiteral):
        raise TypingError(f"an env kernel key must be a compile-time constant string, got {key}")
    try:
        return _FUNCTIONS[key.literal_value]
    except KeyError:
        raise TypingError(f"no env registered under kernel key {key.literal_value!r}") from None


# -- the env's functions, chosen while compiling -------------------------------------------------------------
# The Python bodies below do the same lookup at run time: the loops' ``.py_func`` then run as plain Python (tests
# compare them with the compiled loops; a debugger can step through them).

def env_reset(key, state, i, params, rng_key, rng_counter):
    """Draw env i's initial state (compiled code: the overload picks the env of ``key`` while compiling)."""
    _FUNCTIONS[key].reset(state, i, params, rng_key, rng_counter)


def env_step(key, state, i, actions, params, elapsed, rng_key, rng_counter, rewards):
    """Advance env i; writes its rows' rewards, returns terminated."""
    fns = _FUNCTIONS[key]
    if fns.multiagent:
        return bool(fns.step(state, i, actions, params, elapsed, rng_key, rng_counter, rewards))
    reward, term = fns.step(state, i, actions, params, elapsed, rng_key, rng_counter)
    rewards[i] = reward
    return bool(term)


def env_observe(key, state, i, obs):
    """Write env i's observation rows."""
    _FUNCTIONS[key].observe(state, i, obs)


def env_mask(key, state, i, mask):
    """Write env i's rows of the action mask ``mask`` [R, M] bool (nothing for an env without masks)."""
    f = _FUNCTIONS[key].mask
    if f is not None:
        f(state, i, mask)


def unpack(key, arena):
    """``ArenaViews`` of ``arena`` typed for the env of ``key`` (``None``: state and obs as raw bytes).

    Allocation-free in compiled code: shapes and offsets are read from the arena's header.
    """
    hdr = arena[:HEADER_BYTES].view(np.int64)
    off = [int(x) for x in hdr[H_OFFSETS:]]
    e, r, p, m = int(hdr[H_ENVS]), int(hdr[H_ROWS]), int(hdr[H_PARAMS]), int(hdr[H_MASK])
    if key is None:
        state, obs, final_obs = arena[off[0]:off[1]], arena[off[6]:off[7]], arena[off[10]:off[11]]
    else:
        fns = _FUNCTIONS[key]
        sshape = tuple(int(d) for d in hdr[H_STATE_SHAPE:H_STATE_SHAPE + fns.state_ndim])
        oshape = tuple(int(d) for d in hdr[H_OBS_SHAPE:H_OBS_SHAPE + fns.obs_ndim])

        def view(start, shape, dtype):
            return arena[start:start + np.dtype(dtype).itemsize * int(np.prod(shape))].view(dtype).reshape(shape)

        state = view(off[0], sshape, fns.state_dtype)
        obs, final_obs = view(off[6], oshape, fns.obs_dtype), view(off[10], oshape, fns.obs_dtype)
    return ArenaViews(
        state, arena[off[1]:off[1] + 8 * p].view(np.float64), arena[off[2]:off[2] + 4 * e].view(np.int32),
        arena[off[3]:off[3] + 8 * e].view(np.uint64), arena[off[4]:off[4] + 8 * e].view(np.uint64),
        bool(hdr[H_NEXT_STEP]), arena[off[5]:off[5] + e].view(np.bool_), obs,
        arena[off[7]:off[7] + 4 * r].view(np.float32), arena[off[8]:off[8] + r].view(np.bool_),
        arena[off[9]:off[9] + r].view(np.bool_), final_obs, arena[off[11]:off[11] + 4 * r].view(np.float32),
        arena[off[12]:off[12] + 4 * r].view(np.int32), arena[off[13]:off[13] + 4 * r].view(np.float32),
        arena[off[14]:off[14] + 4 * r].view(np.int32), arena[off[15]:off[15] + r].view(np.bool_),
        arena[off[16]:off[16] + r * m].view(np.bool_).reshape(r, m),
        arena[off[17]:off[17] + r * m].view(np.bool_).reshape(r, m))


@overload(env_reset, inline="always", prefer_literal=True)
def _env_reset(key, state, i, params, rng_key, rng_counter):
    f = _functions(key).reset
    return lambda key, state, i, params, rng_key, rng_counter: f(state, i, params, rng_key, rng_counter)


@overload(env_step, inline="always", prefer_literal=True)
def _env_step(key, state, i, actions, params, elapsed, rng_key, rng_counter, rewards):
    fns = _functions(key)
    f = fns.step
    if fns.multiagent:
        def step_rows(key, state, i, actions, params, elapsed, rng_key, rng_counter, rewards):
            return bool(f(state, i, actions, params, elapsed, rng_key, rng_counter, rewards))

        return step_rows

    def step_one(key, state, i, actions, params, elapsed, rng_key, rng_counter, rewards):
        reward, term = f(state, i, actions, params, elapsed, rng_key, rng_counter)
        rewards[i] = reward
        return bool(term)

    return step_one


@overload(env_observe, inline="always", prefer_literal=True)
def _env_observe(key, state, i, obs):
    f = _functions(key).observe
    return lambda key, state, i, obs: f(state, i, obs)


@overload(env_mask, inline="always", prefer_literal=True)
def _env_mask(key, state, i, mask):
    f = _functions(key).mask
    if f is None:
        return lambda key, state, i, mask: None
    return lambda key, state, i, mask: f(state, i, mask)


def agents_per_env(key, rows, envs):
    """Rows per env: 1 for a single-agent env (a compile-time constant), else rows // envs."""
    return rows // envs if key is not None and _FUNCTIONS[key].multiagent else 1


@overload(agents_per_env, inline="always", prefer_literal=True)
def _agents_impl(key, rows, envs):
    if isinstance(key, types.NoneType) or not _functions(key).multiagent:
        return lambda key, rows, envs: 1
    return lambda key, rows, envs: rows // envs


@intrinsic
def _arena_view(typingctx, arena, offset, shape, dtype):
    """The C-contiguous ``dtype`` array of ``shape`` (a tuple of ints) at byte ``offset`` of ``arena`` (uint8 [B]),
    sharing its memory, with no checks: the arena's header gives offsets and sizes that fit (``ArenaLayout``; Python
    checks a loaded arena's header). Numba's slice, ``view`` and ``reshape`` check and normalise on every call (a C
    helper per reshape): ``unpack`` built from them cost ~260 ns a call (~90 ns with this), about a third of a step of
    8 CartPole envs; the two action-mask views (facf6e9) had made that step 14% slower (compiled code only)."""
    if not (isinstance(arena, types.Array) and arena.ndim == 1 and arena.layout == "C" and arena.dtype == types.uint8
            and isinstance(offset, types.Integer) and isinstance(shape, types.UniTuple)
            and isinstance(shape.dtype, types.Integer) and isinstance(dtype, types.DTypeSpec)):
        return None
    ndim = shape.count
    sig = types.Array(dtype.dtype, ndim, "C")(arena, offset, shape, dtype)

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, args[0])
        out = make_array(sig.return_type)(context, builder)
        start = builder.gep(src.data, [context.cast(builder, args[1], offset, types.intp)])
        data = builder.bitcast(start, context.get_data_type(sig.return_type.dtype).as_pointer())
        dims = [context.cast(builder, d, shape.dtype, types.intp) for d in cgutils.unpack_tuple(builder, args[2])]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(dtype.dtype)))
        strides, step = [None] * ndim, itemsize
        for k in range(ndim - 1, -1, -1):
            strides[k], step = step, builder.mul(step, dims[k])
        populate_array(out, data=data, shape=dims, strides=strides, itemsize=itemsize, meminfo=src.meminfo,
                       parent=src.parent)
        return impl_ret_borrowed(context, builder, sig.return_type, out._getvalue())

    return sig, codegen


def _views(state, obs, final_obs, arena, hdr, off):
    """The ``ArenaViews`` of ``arena`` around the given state and observation views (compiled code only)."""
    raise NotImplementedError("compiled code only")


@overload(_views)
def _views_impl(state, obs, final_obs, arena, hdr, off):
    def impl(state, obs, final_obs, arena, hdr, off):
        e, r, p, m = hdr[H_ENVS], hdr[H_ROWS], hdr[H_PARAMS], hdr[H_MASK]
        return ArenaViews(
            state,
            _arena_view(arena, off[1], (p,), np.float64),
            _arena_view(arena, off[2], (e,), np.int32),
            _arena_view(arena, off[3], (e,), np.uint64),
            _arena_view(arena, off[4], (e,), np.uint64),
            hdr[H_NEXT_STEP] != 0,
            _arena_view(arena, off[5], (e,), np.bool_),
            obs,
            _arena_view(arena, off[7], (r,), np.float32),
            _arena_view(arena, off[8], (r,), np.bool_),
            _arena_view(arena, off[9], (r,), np.bool_),
            final_obs,
            _arena_view(arena, off[11], (r,), np.float32),
            _arena_view(arena, off[12], (r,), np.int32),
            _arena_view(arena, off[13], (r,), np.float32),
            _arena_view(arena, off[14], (r,), np.int32),
            _arena_view(arena, off[15], (r,), np.bool_),
            _arena_view(arena, off[16], (r, m), np.bool_),
            _arena_view(arena, off[17], (r, m), np.bool_),
        )

    return impl


@overload(unpack, prefer_literal=True)
def _unpack(key, arena):
    if isinstance(key, types.NoneType):  # state and observations as raw bytes
        def raw(key, arena):
            hdr = _arena_view(arena, 0, (HEADER_WORDS,), np.int64)
            off = hdr[H_OFFSETS:]
            return _views(arena[off[0]:off[1]], arena[off[6]:off[7]], arena[off[10]:off[11]], arena, hdr, off)

        return raw
    fns = _functions(key)
    sdt, snd, odt, ond = fns.state_dtype, fns.state_ndim, fns.obs_dtype, fns.obs_ndim

    def typed(key, arena):
        hdr = _arena_view(arena, 0, (HEADER_WORDS,), np.int64)
        off = hdr[H_OFFSETS:]
        sshape = to_fixed_tuple(hdr[H_STATE_SHAPE:H_STATE_SHAPE + snd], snd)
        oshape = to_fixed_tuple(hdr[H_OBS_SHAPE:H_OBS_SHAPE + ond], ond)
        state = _arena_view(arena, off[0], sshape, sdt)
        obs, final_obs = _arena_view(arena, off[6], oshape, odt), _arena_view(arena, off[10], oshape, odt)
        return _views(state, obs, final_obs, arena, hdr, off)

    return typed


# -- the loops -------------------------------------------------------------------------------------------------

@numba.njit(cache=True, inline="always")
def step_env(key, i, agents, state, actions, params, elapsed, rng_key, rng_counter, next_step_mode, needs_reset,
              obs, rewards, terminated, truncated, final_obs, ep_return, ep_length, done_return, done_length, done,
              mask, final_mask):
    """Env i: a NEXT_STEP reset, or its dynamics and bookkeeping (and a SAME_STEP reset); its action mask rows after
    (``env_mask``: nothing for an env without masks)."""
    first = i * agents
    redraw = needs_reset[i]
    if redraw:
        restart_env(i, elapsed, needs_reset)
        for r in range(first, first + agents):
            skip_row(r, rewards, terminated, truncated, ep_return, ep_length, done)
    else:
        term = env_step(key, state, i, actions, params, elapsed, rng_key, rng_counter, rewards)
        trunc = count_step(i, params, elapsed)
        ended = False
        for r in range(first, first + agents):
            ended = finish_row(r, rewards[r], term, trunc, rewards, terminated, truncated, ep_return, ep_length,
                               done_return, done_length, done)
        if ended:
            if next_step_mode:
                needs_reset[i] = True
            else:
                elapsed[i] = 0
                env_observe(key, state, i, final_obs)
                env_mask(key, state, i, final_mask)
                redraw = True
    if redraw:
        env_reset(key, state, i, params, rng_key, rng_counter)
    env_observe(key, state, i, obs)
    env_mask(key, state, i, mask)


@numba.njit(cache=True, inline="always")
def first_empty_mask_row(mask, needs_reset, agents, lo, hi):
    """The first row of envs lo..hi-1's action masks (``mask`` [R, M]) with no valid action that acts next (a
    NEXT_STEP env whose episode just ended shows its final state, which may have none), or -1; at once -1 for an env
    without masks."""
    if mask.shape[1] == 0:
        return -1
    for r in range(lo * agents, hi * agents):
        if needs_reset[r // agents]:
            continue
        empty = True
        for a in range(mask.shape[1]):
            if mask[r, a]:
                empty = False
                break
        if empty:
            return r
    return -1


@numba.njit(cache=True, nogil=True, _nrt=False)
def step_envs(key, state, actions, params, elapsed, rng_key, rng_counter, next_step_mode, needs_reset, obs, rewards,
              terminated, truncated, final_obs, ep_return, ep_length, done_return, done_length, done, mask,
              final_mask):
    """Step every env of ``key`` once (serial); ``actions`` must be valid (checked by the caller). Returns the first
    row whose new action mask has no valid action (``first_empty_mask_row``), or -1: the caller refuses it.

    Arguments: the arrays of ``unpack(key, arena)`` in order, ``actions`` after ``state``.
    """
    return step_env_rows(key, 0, elapsed.shape[0], state, actions, params, elapsed, rng_key, rng_counter,
                         next_step_mode, needs_reset, obs, rewards, terminated, truncated, final_obs, ep_return,
                         ep_length, done_return, done_length, done, mask, final_mask)


@numba.njit(cache=True, nogil=True, _nrt=False)
def step_env_rows(key, lo, hi, state, actions, params, elapsed, rng_key, rng_counter, next_step_mode, needs_reset,
                  obs, rewards, terminated, truncated, final_obs, ep_return, ep_length, done_return, done_length, done,
                  mask, final_mask):
    """``step_envs`` on envs lo..hi-1 only (serial; the same env index ``i`` as ``step_envs``): threads that step
    disjoint ranges of one arena's envs at once change nothing that a single ``step_envs`` would not (envs are
    independent). Returns the first such row whose new action mask has no valid action, or -1."""
    agents = agents_per_env(key, rewards.shape[0], elapsed.shape[0])
    for i in range(lo, hi):
        step_env(key, i, agents, state, actions, params, elapsed, rng_key, rng_counter, next_step_mode, needs_reset,
                  obs, rewards, terminated, truncated, final_obs, ep_return, ep_length, done_return, done_length, done,
                  mask, final_mask)
    return first_empty_mask_row(mask, needs_reset, agents, lo, hi)


@numba.njit(cache=True, nogil=True, parallel=True, _nrt=False)
def step_envs_parallel(key, state, actions, params, elapsed, rng_key, rng_counter, next_step_mode, needs_reset, obs,
                       rewards, terminated, truncated, final_obs, ep_return, ep_length, done_return, done_length, done,
                       mask, final_mask):
    """``step_envs`` with the envs split over threads (identical results: envs are independent)."""
    agents = agents_per_env(key, rewards.shape[0], elapsed.shape[0])
    for i in prange(elapsed.shape[0]):
        step_env(key, i, agents, state, actions, params, elapsed, rng_key, rng_counter, next_step_mode, needs_reset,
                  obs, rewards, terminated, truncated, final_obs, ep_return, ep_length, done_return, done_length, done,
                  mask, final_mask)
    return first_empty_mask_row(mask, needs_reset, agents, 0, elapsed.shape[0])


def _checked_step(key, arena, actions, threads):
    """Validate ``actions`` for the env of ``key``, then step (see the module docstring for the result)."""
    raise NotImplementedError


@overload(_checked_step, prefer_literal=True)
def _checked_step_impl(key, arena, actions, threads):
    fns = _functions(key)
    discrete = fns.action_kind == "discrete"
    kind = types.Integer if discrete else types.Float
    if not (isinstance(actions, types.Array) and actions.ndim == (1 if discrete else 2)
            and isinstance(actions.dtype, kind)):
        return lambda key, arena, actions, threads: -2  # wrong kind or rank: nothing is typed, nothing steps
    first_bad = first_bad_discrete if discrete else first_bad_box
    loop = step_envs_parallel if getattr(threads, "literal_value", False) else step_envs

    def impl(key, arena, actions, threads):
        a = unpack(key, arena)
        bad = first_bad(actions, a.rewards.shape[0], _arena_view(arena, 0, (HEADER_WORDS,), np.int64)[H_ACTIONS])
        if bad == -1:
            empty = loop(key, a.state, actions, a.params, a.elapsed, a.rng_key, a.rng_counter, a.next_step_mode,
                         a.needs_reset, a.obs, a.rewards, a.terminated, a.truncated, a.final_obs, a.ep_return,
                         a.ep_length, a.done_return, a.done_length, a.done, a.action_mask, a.final_action_mask)
            if empty >= 0:
                return -3 - empty  # stepped, but row `empty` has no valid action now (NumbaVecEnv.step refuses it)
        return bad

    return impl


@numba.njit(cache=True, nogil=True, _nrt=False)
def reset_envs(key, state, params, elapsed, rng_key, rng_counter, needs_reset, obs, ep_return, ep_length, mask,
               redraw, action_mask):
    """Envs where ``mask`` (bool [E]): a new initial state if ``redraw``, their observation and action mask, fresh
    counters."""
    agents = agents_per_env(key, ep_return.shape[0], elapsed.shape[0])
    for i in range(elapsed.shape[0]):
        if mask[i]:
            if redraw:
                env_reset(key, state, i, params, rng_key, rng_counter)
            env_observe(key, state, i, obs)
            env_mask(key, state, i, action_mask)
            restart_env(i, elapsed, needs_reset)
            for r in range(i * agents, (i + 1) * agents):
                ep_return[r] = 0.0
                ep_length[r] = 0


@numba.njit(cache=True, _nrt=False)
def _record_rows(rows, params, elapsed, next_step_mode, needs_reset, rewards, terminated, truncated, ep_return,
                 ep_length, done_return, done_length, done):
    ended = 0
    for k in range(rows.shape[0]):
        i = rows[k]
        if needs_reset[i]:
            restart_env(i, elapsed, needs_reset)
            skip_row(i, rewards, terminated, truncated, ep_return, ep_length, done)
            continue
        trunc = count_step(i, params, elapsed) or truncated[i]
        if finish_row(i, rewards[i], terminated[i], trunc, rewards, terminated, truncated, ep_return, ep_length,
                      done_return, done_length, done):
            ended += 1
            if next_step_mode:
                needs_reset[i] = True
            else:
                elapsed[i] = 0
    return ended


@numba.njit(cache=True, _nrt=False)
def record_steps(arena, rows):
    """Flags and episode statistics of envs stepped in Python (one row per env), after their step.

    The engine's rewards, terminated and truncated flags of rows ``rows`` (int64 [K]) are in the arena; this adds
    the time limit ``params[0]``, the episode statistics and the autoreset bookkeeping, exactly as the compiled
    loop does: a row with ``needs_reset`` (NEXT_STEP) was reset by this step instead of stepped. SAME_STEP: the
    caller resets the rows whose ``done`` is set (if the engine did not). Returns the number of ended episodes.
    """
    a = unpack(None, arena)
    return _record_rows(rows, a.params, a.elapsed, a.next_step_mode, a.needs_reset, a.rewards, a.terminated,
                        a.truncated, a.ep_return, a.ep_length, a.done_return, a.done_length, a.done)


@numba.njit(cache=True, _nrt=False)
def _clear_rows(rows, elapsed, needs_reset, rewards, terminated, truncated, ep_return, ep_length, done):
    for k in range(rows.shape[0]):
        i = rows[k]
        restart_env(i, elapsed, needs_reset)
        skip_row(i, rewards, terminated, truncated, ep_return, ep_length, done)


@numba.njit(cache=True, _nrt=False)
def clear_rows(arena, rows):
    """Rows ``rows`` (one per env) start an episode: counters, flags and statistics cleared (after a reset)."""
    a = unpack(None, arena)
    _clear_rows(rows, a.elapsed, a.needs_reset, a.rewards, a.terminated, a.truncated, a.ep_return, a.ep_length,
                a.done)


@numba.njit(cache=True, _nrt=False)
def _cut_rows(rows, elapsed, next_step_mode, needs_reset, rewards, terminated, truncated, ep_return, ep_length,
              done_return, done_length, done):
    for k in range(rows.shape[0]):
        i = rows[k]
        cut_row(i, rewards, terminated, truncated, ep_return, ep_length, done_return, done_length, done)
        needs_reset[i] = next_step_mode
        elapsed[i] = 0


@numba.njit(cache=True, _nrt=False)
def cut_steps(arena, rows):
    """Rows ``rows`` (one per env) end their episodes without a step, as truncated (``bookkeeping.cut_row``): an
    engine that failed and was replaced. NEXT_STEP: their next step resets them."""
    a = unpack(None, arena)
    _cut_rows(rows, a.elapsed, a.next_step_mode, a.needs_reset, a.rewards, a.terminated, a.truncated, a.ep_return,
              a.ep_length, a.done_return, a.done_length, a.done)


class EnvKernels(NamedTuple):
    """The Python entry points of one env's compiled loops (see the module docstring)."""

    key: str
    step: object
    step_threads: object
    reset: object


def compile_kernels(key: str, cache: bool = True) -> EnvKernels:
    """The entry points of the env registered under ``key`` (compiled on first call; cached on disk if ``cache``)."""
    check_stale_cache(step_envs)  # before these closures' own cache files are first read

    @numba.njit(cache=cache, _nrt=False)
    def step(arena, actions):
        return _checked_step(key, arena, actions, False)

    @numba.njit(cache=cache, _nrt=False)
    def step_threads(arena, actions):
        return _checked_step(key, arena, actions, True)

    @numba.njit(cache=cache, nogil=True, _nrt=False)
    def reset(arena, mask, redraw):
        a = unpack(key, arena)
        reset_envs(key, a.state, a.params, a.elapsed, a.rng_key, a.rng_counter, a.needs_reset, a.obs, a.ep_return,
                   a.ep_length, mask, redraw, a.action_mask)

    return EnvKernels(key, step, step_threads, reset)


# The loops above inline the core's helpers from other modules: recompile them when those sources change. (An
# env's own functions are covered by its key, which hashes their sources: ``rapidrl.envs.core.numba_env``.)
invalidate_stale_cache(step_envs, [m.__file__ for m in (_actions, _arena, _bookkeeping, rng)])
