"""``python -m mbctl``: the same entry point as the ``mbctl`` console script."""

import sys

from mbctl.cli import main

sys.exit(main())
