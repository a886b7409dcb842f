import sys

from tools.dataset_sources import main

sys.exit(main())
