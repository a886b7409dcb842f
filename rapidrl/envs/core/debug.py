"""The bounds-checked mode of envs written as Numba functions (``NumbaEnv(debug=True)``, ``make_vec(..., debug=True)``,
``rapidrl.envs.check``).

Numba does not check indices: an ``observe`` that writes ``obs[i, 4]`` into a 4-wide observation writes into the
arena's next array, and the symptom shows up far away (wrong episode statistics, lost determinism). In the
bounds-checked mode the env's functions are compiled again with Numba's ``boundscheck`` (``bounds_checked_twin``;
the batched loop around them is rapidrl's own, unchanged), so such an index raises instead. Numba's message is
only "index is out of bounds"; to say where, each call keeps a copy of the arena from before it (``call_checked``),
and on an ``IndexError`` replays the call from that copy in plain Python (the loop's ``py_func`` and the env's
functions' ``py_func``): NumPy raises at the same index, and the frame that raised gives the function, the line,
the array and the index (``describe_index_error``). The env is put back as it was before the call, and the
``IndexError`` names all of it:

    NumbaTaxi-v4: observe writes obs[i, 4] out of bounds: index 4 on axis 1 of obs, whose shape is (8, 4)
    (env 0; taxi.py:95: obs[i, 4] = 1.0)

The normal mode is untouched: its kernels are compiled without checks, under another kernel key.

What is checked: the env's own functions. Jitted helpers they call keep their own options (pass
``boundscheck=True`` to those, or run with ``NUMBA_BOUNDSCHECK=1``, which checks everything).
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from pathlib import Path

import numba
import numpy as np

from rapidrl.envs.core import kernels

__all__ = ["bounds_checked_twin", "call_checked", "describe_index_error"]


@functools.cache
def bounds_checked_twin(fn):
    """``fn`` (a jitted function) compiled with ``boundscheck=True`` and never inlined (an inlined body would take
    the loop's options). Not cached on disk: Numba's cache index does not tell the two compilations apart."""
    options = {k: v for k, v in fn.targetoptions.items() if k != "nopython"}
    return numba.njit(**{**options, "boundscheck": True, "inline": "never"})(fn.py_func)


def _python_key(key: str) -> str:
    """The kernel key under which the env of ``key`` is registered with its functions' plain Python bodies."""
    python_key = key + "@python"
    fns = kernels.functions(key)
    kernels.register(python_key, fns._replace(reset=fns.reset.py_func, step=fns.step.py_func,
                                              observe=fns.observe.py_func,
                                              mask=None if fns.mask is None else fns.mask.py_func))
    return python_key


def _replay(key: str, arena: np.ndarray, args: tuple) -> None:
    """Run a ``step`` (args: (actions,)) or ``reset`` (args: (mask, redraw)) of the env of ``key`` on ``arena`` in
    plain Python: the loops' and the env functions' ``py_func``, NumPy indexing throughout."""
    a = kernels.unpack(key, arena)
    if len(args) == 1:
        agents = kernels.agents_per_env(key, a.rewards.shape[0], a.elapsed.shape[0])
        for i in range(a.elapsed.shape[0]):
            kernels.step_env.py_func(key, i, agents, a.state, args[0], a.params, a.elapsed, a.rng_key, a.rng_counter,
                                     a.next_step_mode, a.needs_reset, a.obs, a.rewards, a.terminated, a.truncated,
                                     a.final_obs, a.ep_return, a.ep_length, a.done_return, a.done_length, a.done,
                                     a.action_mask, a.final_action_mask)
    else:
        kernels.reset_envs.py_func(key, a.state, a.params, a.elapsed, a.rng_key, a.rng_counter, a.needs_reset, a.obs,
                                   a.ep_return, a.ep_length, *args, a.action_mask)


def call_checked(env_id: str, key: str, kernel, arena: np.ndarray, *args):
    """``kernel(arena, *args)`` (a bounds-checked env's step or reset kernel); on an ``IndexError`` the arena is
    restored and the error says which function, array and index (see the module docstring)."""
    before = arena.copy()
    try:
        return kernel(arena, *args)
    except IndexError as e:
        np.copyto(arena, before)
        message = None
        try:
            _replay(_python_key(key), before, args)
        except IndexError as replayed:
            message = describe_index_error(env_id, key, replayed)
        if message is None:
            message = (f"{env_id}: an index out of bounds in its reset, step, observe or mask ({e}); the replay in "
                       "Python did not find it: run the functions' py_func on the state to find it")
        raise IndexError(message) from None


def describe_index_error(env_id: str, key: str, error: IndexError) -> str | None:
    """One line naming the env function, the array and the index of ``error`` (raised by a Python replay), or
    None when its traceback passes through none of the env's functions."""
    fns = kernels.functions(key)
    names = {fns.reset.__code__: "reset", fns.step.__code__: "step", fns.observe.__code__: "observe"}
    if fns.mask is not None:
        names[fns.mask.__code__] = "mask"
    loops = {kernels.step_env.py_func.__code__, kernels.reset_envs.py_func.__code__}
    frame, env = None, None
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in loops:
            env = tb.tb_frame.f_locals.get("i")
        if code in names:
            frame, lineno = tb.tb_frame, tb.tb_lineno  # the innermost env function wins
        tb = tb.tb_next
    if frame is None:
        return None
    name = names[frame.f_code]
    place = f"{Path(frame.f_code.co_filename).name}:{lineno}"
    line = linecache.getline(frame.f_code.co_filename, lineno).strip()
    where = f"env {env}; {place}: {line}" if env is not None else f"{place}: {line}"
    found = _bad_subscript(frame, lineno)
    if found is None:
        return f"{env_id}: {name} indexes out of bounds ({where}): {error}"
    array, index, axis, value, shape, store = found
    return (f"{env_id}: {name} {'writes' if store else 'reads'} {array}[{index}] out of bounds: index {value} on "
            f"axis {axis} of {array}, whose shape is {shape} ({where})")


def _bad_subscript(frame, lineno: int):
    """(array source, index source, axis, index value, shape, is a write) of the subscript on line ``lineno`` of
    ``frame``'s function whose index is out of its array's bounds, evaluated in the frame; None if none is."""
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    line = lineno - first + 1
    for node in ast.walk(tree):  # outer subscripts first: an inner one that fails makes its outer one fail to eval
        if not (isinstance(node, ast.Subscript) and node.lineno <= line <= node.end_lineno):
            continue
        try:
            array = _eval(node.value, frame)
            index = _eval(node.slice, frame)
        except Exception:
            continue
        if not isinstance(array, np.ndarray):
            continue
        index = index if isinstance(index, tuple) else (index,)
        for axis, (value, size) in enumerate(zip(index, array.shape)):
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and not -size <= value < size:
                parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                return (ast.unparse(node.value), ", ".join(ast.unparse(p) for p in parts), axis, int(value),
                        array.shape, isinstance(node.ctx, ast.Store))
    return None


def _eval(node: ast.expr, frame):
    expression = ast.fix_missing_locations(ast.Expression(body=node))
    return eval(compile(expression, "<bounds check>", "eval"), frame.f_globals, dict(frame.f_locals))
