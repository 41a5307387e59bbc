"""``python -m memkit.cli``: the ``memkit`` command."""

import sys

from memkit.cli import main

if __name__ == "__main__":  # imported (by a documentation tool, a test collector) it does nothing
    sys.exit(main())
