"""Repository tooling, not shipped in the wheel: the learning-results pipeline (``tools/results``), before/after
speed comparisons and the GPU check (tools/README.md). Run from the repository root: ``python -m tools.NAME``."""
