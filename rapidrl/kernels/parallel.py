"""Thread thresholds: a kernel uses its ``prange`` variant only above a measured element count.

Below these sizes the thread-pool wake-up costs more than the work (measured on the 2-core
reference machine with ``rapidrl bench``). Results never depend on which variant runs: every
parallel kernel splits work by independent env/row index only, never by a reduction order.
"""

from __future__ import annotations

import numba

# Element counts (T * N for advantage kernels, N for env steps) above which threads pay off.
GAE_PARALLEL_MIN = 1 << 18
ENV_STEP_PARALLEL_MIN = 4096
ROW_PARALLEL_MIN = 1 << 16


def num_threads() -> int:
    """Threads Numba will use for ``prange`` kernels."""
    return numba.get_num_threads()
