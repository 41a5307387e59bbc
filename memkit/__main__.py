"""``python -m memkit``: the ``memkit`` command, for when its script is not on PATH."""

import sys

from memkit.cli import main

if __name__ == "__main__":  # imported (by a documentation tool, a test collector) it does nothing
    sys.exit(main())
