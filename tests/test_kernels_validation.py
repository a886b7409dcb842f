"""The shared argument checks in ``rapidrl.kernels.validation``, and contracts common to every kernel
module: lazy compilation, GIL release, and the runnable examples of ``docs/kernels.md``."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import numba
import numpy as np
import pytest
from docs_examples import run_examples
from hypothesis import given, settings
from hypothesis import strategies as st

from rapidrl.kernels import advantages, llm_ops, sumtree
from rapidrl.kernels.validation import (
    check_array,
    check_bool_array,
    check_float_array,
    check_float_fast,
    check_int,
    check_like,
    check_same_dtype,
    check_scalar,
    check_unit_scalar,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------- check_array


def test_check_array_returns_the_same_object_without_copy():
    x = np.zeros((3, 4), np.float32)
    assert check_array("x", x, ndim=2, dtypes=(np.float32,), shape=(3, None)) is x
    assert check_array("x", x, ndim=(1, 2)) is x


@pytest.mark.parametrize(("x", "kwargs", "exc", "msg"), [
    ([1.0, 2.0], {}, TypeError, "x must be a numpy.ndarray, got list"),
    (np.float64(1.0), {}, TypeError, "numpy.ndarray, got float64"),
    (np.zeros((2, 2)), {"ndim": 1}, ValueError, r"x must have 1 dimension\(s\), got shape \(2, 2\)"),
    (np.zeros(2), {"ndim": (2, 3)}, ValueError, r"2 or 3 dimension"),
    (np.zeros(2, np.int32), {"dtypes": (np.float32, np.float64)}, TypeError, "float32, float64; got int32"),
    (np.zeros((2, 3)), {"shape": (2, 4)}, ValueError, r"shape \(2, 4\), got \(2, 3\)"),
    (np.zeros((2, 3)), {"shape": (None, 4)}, ValueError, r"shape \(\*, 4\)"),
    (np.zeros((2, 3)), {"shape": (2,)}, ValueError, "shape"),
    (np.zeros((4, 4))[:, ::2], {}, ValueError, "C-contiguous"),
    (np.zeros((4, 4)).T, {}, ValueError, "C-contiguous"),
    (np.zeros((0, 3)), {}, ValueError, "must not be empty"),
])
def test_check_array_rejects(x, kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        check_array("x", x, **kwargs)


def test_check_array_options_relax():
    assert check_array("x", np.zeros((0, 3)), allow_empty=True).shape == (0, 3)
    y = np.zeros((4, 4))[:, ::2]
    assert check_array("y", y, contiguous=False) is y


def test_check_float_array_and_same_dtype():
    for dt in (np.float32, np.float64):
        x = np.ones(3, dt)
        assert check_float_array("x", x) is x
    for dt in (np.float16, np.int64, np.bool_, np.complex64):
        with pytest.raises(TypeError, match="x must have dtype float32, float64"):
            check_float_array("x", np.ones(3, dt))
    a, b = np.ones(2, np.float32), np.ones(2, np.float32)
    assert check_same_dtype(["a", "b"], [a, b]) == np.float32
    with pytest.raises(TypeError, match="c has dtype float64 but a has float32"):
        check_same_dtype(["a", "b", "c"], [a, b, np.ones(2)])


def test_check_bool_array():
    flags = np.array([[1, 0], [0, 1]], np.uint8)
    view = check_bool_array("done", flags, shape=(2, 2))
    assert view.dtype == np.bool_ and np.shares_memory(view, flags)  # a view, not a copy
    assert view.tolist() == [[True, False], [False, True]]
    b = np.zeros((2, 2), bool)
    assert check_bool_array("done", b, shape=(2, 2)) is b
    with pytest.raises(TypeError, match="done must have dtype bool"):
        check_bool_array("done", np.zeros((2, 2), np.float32), shape=(2, 2))
    with pytest.raises(TypeError, match=re.escape("done must be a numpy.ndarray")):
        check_bool_array("done", [[True]], shape=(1, 1))
    with pytest.raises(ValueError, match="done must have shape"):
        check_bool_array("done", b, shape=(2, 3))


# ------------------------------------------------------------------------------------------ scalars


def test_check_scalar():
    assert check_scalar("g", 1) == 1.0 and isinstance(check_scalar("g", 1), float)
    assert check_scalar("g", np.float32(0.5)) == 0.5
    assert check_scalar("g", np.int64(3), low=3) == 3.0
    assert check_scalar("g", 0.0, low=0.0) == 0.0
    for bad, exc, msg in [
        (True, TypeError, "g must be a real number, got bool"),
        ("0.5", TypeError, "got str"),
        (None, TypeError, "got NoneType"),
        (np.array([0.5]), TypeError, "got ndarray"),
        (float("nan"), ValueError, "must be finite"),
        (float("inf"), ValueError, "must be finite"),
    ]:
        with pytest.raises(exc, match=msg):
            check_scalar("g", bad)
    with pytest.raises(ValueError, match=re.escape("g must be >= 0.0, got -0.1")):
        check_scalar("g", -0.1, low=0.0)
    with pytest.raises(ValueError, match=re.escape("g must be > 0.0, got 0.0")):
        check_scalar("g", 0.0, low=0.0, low_open=True)
    with pytest.raises(ValueError, match=re.escape("g must be <= 1.0")):
        check_scalar("g", 1.5, high=1.0)
    with pytest.raises(ValueError, match=re.escape("g must be < 1.0")):
        check_scalar("g", 1.0, high=1.0, high_open=True)


def test_check_int():
    assert check_int("n", np.int32(4), low=1) == 4 and type(check_int("n", np.int32(4))) is int
    for bad in (True, 2.0, "3", np.float64(2.0)):
        with pytest.raises(TypeError, match="n must be an int"):
            check_int("n", bad)
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        check_int("n", 0, low=1)
    with pytest.raises(ValueError, match="n must be <= 5, got 6"):
        check_int("n", 6, high=5)


@pytest.mark.parametrize("value", [0.0, 0.5, 1.0, 1, 0, np.float32(0.25), np.float64(0.99), np.int64(1)])
def test_check_unit_scalar_accepts(value):
    out = check_unit_scalar("gamma", value)
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize(("value", "exc", "msg"), [
    (1.0000001, ValueError, "gamma must be <= 1.0"),
    (-0.0001, ValueError, "gamma must be >= 0.0"),
    (2, ValueError, "gamma must be <= 1.0"),
    (float("nan"), ValueError, "gamma must be finite"),
    (float("-inf"), ValueError, "gamma must be finite"),
    (True, TypeError, "gamma must be a real number"),
    ("0.9", TypeError, "gamma must be a real number"),
    (None, TypeError, "gamma must be a real number"),
])
def test_check_unit_scalar_rejects(value, exc, msg):
    with pytest.raises(exc, match=msg):
        check_unit_scalar("gamma", value)


# ------------------------------------------------------------------------------- fast-path checks


def _outcome(fn, *args, **kwargs):
    """("ok", returned object) or (exception type, message)."""
    try:
        return "ok", fn(*args, **kwargs)
    except (TypeError, ValueError) as e:
        return type(e), str(e)


arrays = st.builds(
    lambda shape, dt, step, kind: (
        [0.0] if kind == "list" else
        np.zeros(shape, dt) if step == 1 or len(shape) == 0 else
        np.zeros((*shape[:-1], shape[-1] * step), dt)[..., ::step]
    ),
    st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple),
    st.sampled_from([np.float32, np.float64, np.int64, np.bool_, np.float16]),
    st.sampled_from([1, 1, 2]),
    st.sampled_from(["array"] * 9 + ["list"]),
)


@settings(max_examples=150, deadline=None)
@given(x=arrays, ndim=st.integers(1, 3))
def test_check_float_fast_agrees_with_check_float_array(x, ndim):
    # The fast path must accept exactly what the detailed check accepts and raise the same errors.
    fast = _outcome(check_float_fast, "x", x, ndim=ndim)
    slow = _outcome(check_float_array, "x", x, ndim=ndim)
    assert fast[0] == slow[0]
    if fast[0] == "ok":
        assert fast[1] is x and slow[1] is x
    else:
        assert fast[1] == slow[1]


def test_check_float_fast_rejects_subclass_through_the_detailed_path():
    m = np.ma.masked_array(np.zeros((2, 2)))
    # a masked array is an ndarray subclass: not taken by the fast path, accepted by the detailed one
    assert check_float_fast("x", m, ndim=2) is m


def test_check_like():
    ref = np.zeros((3, 2), np.float32)
    x = np.ones((3, 2), np.float32)
    assert check_like("v", x, like="r", dtype=ref.dtype, shape=ref.shape) is x
    # an empty shape is fine when it is the requested one (e.g. last_values of 0 envs is caught by r)
    e = np.zeros((0,), np.float32)
    assert check_like("v", e, like="r", dtype=ref.dtype, shape=(0,)) is e
    with pytest.raises(TypeError, match="v has dtype float64 but r has float32"):
        check_like("v", x.astype(np.float64), like="r", dtype=ref.dtype, shape=ref.shape)
    with pytest.raises(ValueError, match=r"v must have shape \(3, 2\), got \(2, 3\)"):
        check_like("v", np.ones((2, 3), np.float32), like="r", dtype=ref.dtype, shape=ref.shape)
    with pytest.raises(ValueError, match="v must be C-contiguous"):
        check_like("v", np.ones((3, 4), np.float32)[:, ::2], like="r", dtype=ref.dtype, shape=ref.shape)
    with pytest.raises(TypeError, match=re.escape("v must be a numpy.ndarray")):
        check_like("v", x.tolist(), like="r", dtype=ref.dtype, shape=ref.shape)
    # bool flags: uint8 accepted as a bool view, anything else named
    u8 = np.array([[1, 0], [0, 0], [1, 1]], np.uint8)
    flags = check_like("done", u8, like="r", dtype=np.dtype(np.bool_), shape=(3, 2))
    assert flags.dtype == np.bool_ and np.shares_memory(flags, u8)
    with pytest.raises(TypeError, match="done must have dtype bool"):
        check_like("done", u8.astype(np.int64), like="r", dtype=np.dtype(np.bool_), shape=(3, 2))
    with pytest.raises(ValueError, match="done must have shape"):
        check_like("done", u8[:2].copy(), like="r", dtype=np.dtype(np.bool_), shape=(3, 2))


# ------------------------------------------------------------------------- module-wide contracts


def _cores(module):
    return {n: o for n, o in vars(module).items() if isinstance(o, numba.core.dispatcher.Dispatcher)}


def test_array_cores_release_the_gil():
    # Collection overlaps learning (DESIGN.md "Overlap"): the array kernels run without the GIL.
    # (Helpers compiled with inline="always" become part of their caller; SumMinTree keeps the GIL
    # because the class is not thread-safe, so holding it serializes concurrent set/sample calls.)
    cores = {**_cores(advantages), **_cores(llm_ops)}
    entry = {n: d for n, d in cores.items() if d.targetoptions.get("inline") != "always"}
    assert {"_gae_core", "_gae_core_parallel", "_vtrace_core", "_group_core", "_token_kl_core"} <= set(entry)
    for name, d in entry.items():
        assert d.targetoptions.get("nogil") is True, name


def test_import_compiles_nothing():
    # Lazy kernels: importing the package compiles (and loads from cache) nothing.
    code = (
        "import numba, rapidrl.kernels as k\n"
        "from rapidrl.kernels import advantages, llm_ops, sumtree\n"
        "n = sum(len(o.signatures) for m in (advantages, llm_ops, sumtree) for o in vars(m).values()"
        " if isinstance(o, numba.core.dispatcher.Dispatcher))\n"
        "print(n)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "0"
    assert len(_cores(sumtree)) == 3  # the check above saw the modules' dispatchers


def test_docs_examples_run():
    # Every ```python block of docs/kernels.md runs, in order, in one namespace (they build on each
    # other); the asserts inside the blocks are part of the documentation.
    run_examples("kernels.md", 12)
