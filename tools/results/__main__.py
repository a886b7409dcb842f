"""``python -m tools.results ...`` from the repository root (tools/results/README.md)."""

import sys

from tools.results import main

sys.exit(main(sys.argv[1:]))
