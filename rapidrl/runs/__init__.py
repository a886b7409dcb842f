"""Run directories and experiments: what the ``rapidrl`` command line reads and writes, beside ``cli.py``.

- ``layout``: the files of a run directory and their readers (no other rapidrl import: the monitor reads it);
- ``config``: layered TOML run configuration, presets, creating and finding run directories;
- ``experiment``: several seeds of one configuration as parallel runs, and their statistics.

Nothing is imported here, so ``import rapidrl.runs.layout`` stays light.
"""
