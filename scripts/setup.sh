#!/usr/bin/env bash
# One set-up for every entry point: a venv in .venv, CPU torch first, then rapidrl with the given extras.
# Usage: scripts/setup.sh [EXTRAS]   e.g. scripts/setup.sh dev   or   scripts/setup.sh dev,bench
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# torch first: a plain "torch" requirement would otherwise fetch a multi-GB CUDA build.
python -m pip install --quiet "torch==2.13.0"
if [ -n "$extras" ]; then
  python -m pip install --quiet -e ".[${extras}]"
else
  python -m pip install --quiet -e .
fi
# The MinAtar reference package without its GUI/plotting dependencies (see the "minatar" extra).
if [[ ",${extras}," == *",minatar,"* ]]; then
  python -m pip install --quiet --no-deps "minatar==1.0.15"
fi
# Compile the main job's Numba kernels now, so the first run does not wait for them (cached on disk).
python -m rapidrl.precompile
