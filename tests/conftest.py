"""Process settings for the test suite (imported by pytest, and by each xdist worker, before any test module).

The suite runs on two xdist workers on a two-core machine. OpenMP threads (torch's intra-op pool, Numba's
``parallel=True`` kernels on the omp layer) spin after each parallel region by default, so a worker using two
threads burns the core the other worker needs: SAC's Pendulum learning test took 48-57 s beside a second copy of
itself and 14-21 s with passive waiting (17 s alone). Passive waiting changes no result, only who waits how.
This must be set before torch or numba loads libgomp, hence here.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_collection_modifyitems(config, items):
    """The learning and install tests (marked ``slow``: 20-145 s each) first, the rest in collection order after
    them. xdist hands tests to the two workers in this order, so the long ones start while short ones remain to
    balance the workers; in collection order a 145 s test starting near the end left one worker idle meanwhile."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: each group keeps its order
