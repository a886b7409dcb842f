"""What an env's Numba functions must take and return, checked where a ``NumbaEnv`` is defined.

Each function of a ``NumbaEnv`` has a contract (``FunctionContract``): the arguments the compiled loop calls it with
and what it must return. ``check_functions`` holds every function to its contract when the env is defined: first
its arity (from the Python signature), then its return type, by running Numba's type inference on the function
with the argument types the loop passes (no machine code is generated; ``_TypeInferenceOnly``). A wrong arity or
return type is one line naming the env, the function and what it must take or return, instead of a Numba
``TypingError`` of the batched loop at the first ``step``.

The contracts are a table (``contracts``): an optional function (``FunctionContract.optional``) is checked when the
env defines it, so a new optional function (say, an action mask) adds one entry here.

Type inference uses Numba's compiler-extension API (``CompilerBase`` with a pipeline of our choosing, documented
in "Notes on Numba's compiler pipeline"); ``tests/test_envs_contract_functions.py`` exercises it, so a Numba that
changes it fails the suite.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
from numba import types
from numba.core import compiler, errors
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.registry import cpu_target
from numba.core.typed_passes import NopythonTypeInference

__all__ = ["FunctionContract", "check_functions", "contracts"]


def _is_number(t) -> bool:
    return isinstance(t, (types.Integer, types.Float, types.Boolean))


def _is_bool(t) -> bool:
    """A bool (Python's or NumPy's): what ``terminated`` must be. A float or an int is refused: the loop would read
    any non-zero value (0.5, a reward returned in its place) as an ended episode, so every step could terminate."""
    return isinstance(t, types.Boolean)


def _returns_reward_and_flag(t) -> bool:
    return isinstance(t, types.BaseTuple) and len(t) == 2 and _is_number(t[0]) and _is_bool(t[1])


@dataclass(frozen=True)
class FunctionContract:
    """One env function: its name (the ``NumbaEnv`` field), the arguments it is called with, what it returns.

    returns: what it must return, in words (the error message's); accepts: whether a Numba return type fits.
    optional: the env may leave it out (None).
    """

    name: str
    args: tuple[str, ...]
    returns: str
    accepts: Callable[[types.Type], bool]
    optional: bool = False


_NOTHING = "nothing (it writes into its arrays)"
_RESET = FunctionContract("reset", ("state", "i", "params", "rng_key", "rng_counter"), _NOTHING,
                          lambda t: t == types.none)
_STEP = FunctionContract("step", ("state", "i", "actions", "params", "elapsed", "rng_key", "rng_counter"),
                         "(reward, terminated): a number and a bool (e.g. x > limit; not 0.0/1.0)",
                         _returns_reward_and_flag)
_STEP_ROWS = FunctionContract("step", (*_STEP.args, "rewards"),
                              "terminated (a bool, not 0.0/1.0; it writes its rows' rewards into rewards)", _is_bool)
_OBSERVE = FunctionContract("observe", ("state", "i", "obs"), _NOTHING, lambda t: t == types.none)
_MASK = FunctionContract("mask", ("state", "i", "mask_out"), _NOTHING, lambda t: t == types.none, optional=True)


def contracts(multiagent: bool) -> tuple[FunctionContract, ...]:
    """The contracts of a single-agent or multi-agent env's functions, in the order they are checked."""
    return (_RESET, _STEP_ROWS if multiagent else _STEP, _OBSERVE, _MASK)


def _array(dtype, ndim: int) -> types.Array:
    return types.Array(numba.from_dtype(np.dtype(dtype)), ndim, "C")


def argument_types(env) -> dict[str, types.Type]:
    """Argument name -> the Numba type the compiled loop passes (``env``: a ``NumbaEnv``; actions as the collectors
    pass them: int64 [N] for Discrete, float32 [N, A] for Box)."""
    obs = env.observation_space
    return {"state": _array(env.state_dtype, len(env.state_shape)), "i": types.intp,
            "actions": _array(np.int64, 1) if env.action_kind == "discrete" else _array(np.float32, 2),
            "params": _array(np.float64, 1), "elapsed": _array(np.int32, 1), "rng_key": _array(np.uint64, 1),
            "rng_counter": _array(np.uint64, 1), "obs": _array(obs.dtype, 1 + len(obs.shape)),
            "rewards": _array(np.float32, 1), "mask_out": _array(np.bool_, 2)}


def _where(fn) -> str:
    """'module.qualname (file name:line)' of a jitted function."""
    py = fn.py_func
    try:
        place = f" ({Path(inspect.getsourcefile(py)).name}:{py.__code__.co_firstlineno})"
    except TypeError:
        place = ""
    return f"{py.__module__}.{py.__qualname__}{place}"


def _check_arity(env_id: str, contract: FunctionContract, fn) -> None:
    try:
        signature = inspect.signature(fn.py_func)
        signature.bind(*contract.args)
    except TypeError:
        takes = ", ".join(signature.parameters)
        raise TypeError(f"{env_id}: {contract.name} must take {len(contract.args)} arguments "
                        f"({', '.join(contract.args)}); {_where(fn)} takes ({takes})") from None


@register_pass(mutates_CFG=False, analysis_only=True)
class _KeepReturnType(FunctionPass):
    """The last pass of ``_TypeInferenceOnly``: the inferred return type is the compile result."""

    _name = "rapidrl_keep_return_type"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        state.cr = state.return_type
        return False


class _TypeInferenceOnly(CompilerBase):
    """Numba's untyped passes and type inference, nothing after (no lowering, no machine code)."""

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_untyped_pipeline(self.state)
        pm.add_pass(NopythonTypeInference, "nopython frontend")
        pm.add_pass(_KeepReturnType, "keep the return type")
        pm.finalize()
        return [pm]


@functools.cache
def return_type(fn, arg_types: tuple) -> types.Type:
    """The Numba return type of jitted ``fn`` called with ``arg_types`` (type inference only; raises Numba's
    ``TypingError`` when the body does not type)."""
    cpu_target.typing_context.refresh()  # overloads registered since the last compilation
    flags = compiler.Flags()
    flags.boundscheck = bool(fn.targetoptions.get("boundscheck", False))
    return compiler.compile_extra(cpu_target.typing_context, cpu_target.target_context, fn.py_func, arg_types,
                                  None, flags, {}, pipeline_class=_TypeInferenceOnly)


def _first_lines(message: str, n: int = 6) -> str:
    lines = [line for line in str(message).splitlines() if line.strip()]
    return "\n".join(lines[:n])


def check_functions(env) -> None:
    """Hold each function of ``env`` (a ``NumbaEnv``) to its contract; TypeError naming the function otherwise."""
    arg_types = argument_types(env)
    for contract in contracts(env.agents > 1):
        fn = getattr(env, contract.name, None)
        if fn is None:
            if contract.optional:
                continue
            raise TypeError(f"{env.id}: {contract.name} must be a numba.njit function, got None")
        if not hasattr(fn, "py_func"):
            raise TypeError(f"{env.id}: {contract.name} must be a numba.njit function, got {fn!r}")
        _check_arity(env.id, contract, fn)
        args = tuple(arg_types[a] for a in contract.args)
        try:
            result = return_type(fn, args)
        except errors.NumbaError as e:
            called = ", ".join(f"{a} {t}" for a, t in zip(contract.args, args))
            raise TypeError(f"{env.id}: {contract.name} ({_where(fn)}) does not compile for the arguments it is "
                            f"called with ({called}); Numba says:\n{_first_lines(e)}") from e
        if not contract.accepts(result):
            raise TypeError(f"{env.id}: {contract.name} must return {contract.returns}; {_where(fn)} returns "
                            f"{result}")
