"""The decoupled live monitor: a memory-mapped metrics file written by the trainer (``metrics_file``,
``publisher``) and the terminal view that reads it (``view``); learning-curve plots and policy videos."""
