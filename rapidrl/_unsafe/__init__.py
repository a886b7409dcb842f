"""Low-level tricks, in one place, each with its safety argument and a test that fails loudly when a dependency
upgrade breaks it (``tests/test_unsafe.py``).

Every module here reaches below a public API: into a library's private functions or internal state, the C
allocator, or raw memory. Each states at its top what it relies on, who owns the memory it touches, how long that
memory lives and what may alias it, and what happens when the assumption stops holding (an exception or a failing
test, never silently wrong results or a silently slower run). Code elsewhere calls these functions and does not
repeat the tricks. The modules import nothing else of rapidrl, so every layer may use them.

- ``replay_table``: the replay buffer's table of raw addresses (llvmlite ``inttoptr``/``memmove``), its
  GIL-holding fast ``add`` and the table-backed storage views of the bound sampler.
- ``torch_private``: ``torch._fused_adam_``, ``torch._foreach_*``, ``aten.threshold_backward``,
  ``torch._utils._flatten_dense_tensors``, and ``torch.optim.Adam``'s state written through NumPy views (the
  optimizer step, the compiled PPO epoch).
- ``blas``: the thread count of the BLAS Numba calls (SciPy's OpenBLAS, found by its file path).
- ``malloc``: glibc's ``mallopt`` thresholds through ctypes.
- ``numba_cache``: where Numba keeps a function's on-disk cache (``Dispatcher._cache``).

Sites that stay beside the code they serve, for now, each with its own argument and test: the environments'
hand-laid byte arenas and Numba's ``_nrt=False`` (``rapidrl/envs/builtin.py``, ``envs/minatar/kernels.py``), the
GIL-free MuJoCo stepping through ctypes (``envs/mujoco.py``), ale-py's internal handle (``envs/atari.py``), the
``_bits_as_float32`` intrinsic of the LLM kernels (``kernels/llm_ops.py``, ``tests/test_kernels_llm.py``) and the
CUDA-graph generator registration of the device collector (``train/collect/device.py``; needs a GPU to test).
"""
