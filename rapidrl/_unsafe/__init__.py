"""Low-level tricks, in one place, each with its safety argument and a test that fails loudly when a dependency
upgrade breaks it (``tests/test_unsafe.py``).

Every module here reaches below a public API: into a library's private functions, its internal state, the C
allocator or raw memory. Each states, at its top, what it relies on, who owns the memory it touches, how long
that memory lives and what may alias it, and what happens when the assumption stops holding (an exception
or a loud test failure, never silently wrong results). Code elsewhere calls these functions and does not
repeat the tricks.
"""
