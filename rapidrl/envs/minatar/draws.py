"""The random draws of the MinAtar kernels, and how they map onto the ``minatar`` package's calls.

Every random number an env consumes is one float64 uniform ``u`` in [0, 1) from its counter-based stream
(``rapidrl.kernels.rng``: draw ``c`` of env ``i`` is a pure function of ``(key[i], c)``). The package calls
``numpy.random.RandomState`` methods; each call is reproduced from uniforms in the order the package
makes them:

- ``rand()``                    -> ``u``
- ``rand(k)``                   -> ``k`` uniforms, in order
- ``randint(low, high)``        -> ``low + int(u * (high - low))`` (``randint(n)`` means low=0, high=n)
- ``randint(low, high, k)``     -> ``k`` such integers, in order

So a stand-in for the package's ``RandomState`` that answers those calls from the same uniforms (the
exactness test's ``ReplayRandomState``) makes the package and rapidrl take identical decisions. The
integer mapping is not NumPy's (NumPy uses rejection sampling on 32-bit words); the distribution is the
same up to the 2**-53 resolution of ``u``.

Per step, an env draws: first the sticky-action uniform (always, as the package does, even when
``sticky_action_prob`` is 0), then the game's draws in the package's order, then, when the episode ends,
the draws of its reset.
"""

from __future__ import annotations

import numba

from rapidrl.kernels.rng import next_uniform


@numba.njit(cache=True, inline="always")
def rand(rng_key, rng_counter, i):
    """``RandomState.rand()`` of env ``i``: the next uniform of its stream (float64 in [0, 1))."""
    return next_uniform(rng_key, rng_counter, i)


@numba.njit(cache=True, inline="always")
def randint(rng_key, rng_counter, i, low, high):
    """``RandomState.randint(low, high)`` of env ``i``: ``low + int(u * (high - low))``, in [low, high)."""
    return low + int(next_uniform(rng_key, rng_counter, i) * (high - low))
