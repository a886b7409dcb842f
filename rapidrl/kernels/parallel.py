"""Thread thresholds: a kernel uses its ``prange`` variant only above a measured element count.

Below these sizes the thread-pool wake-up costs more than the work (measured on the 2-core
reference machine with ``rapidrl bench``). Results never depend on which variant runs: every
parallel kernel splits work by independent env/row index only, never by a reduction order.
"""

from __future__ import annotations

import numba

# Element counts (T * N for advantage kernels, N for env steps) above which threads pay off.
# GAE: on the shared 2-core machine (2026-11-22, load average ~8) the prange variant was 2-4x
# slower than the serial core at every size tried, [T, N] = 1024x256 up to 2048x2048 (min of 30
# calls: 2048x256 serial 2.2 ms, parallel 9.5 ms; 2048x2048 serial 45 ms, parallel 96 ms). GAE is
# memory-bound and the cores are shared with the env/learner threads, so threads start only above
# 8M elements (32 MB per float32 array); re-measure on an idle machine before lowering this.
GAE_PARALLEL_MIN = 1 << 23
ENV_STEP_PARALLEL_MIN = 32768


def num_threads() -> int:
    """Threads Numba will use for ``prange`` kernels."""
    return numba.get_num_threads()
