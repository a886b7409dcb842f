"""Side-by-side benchmarks of rapidrl against the installed peers (see benchmarks/README.md)."""
