"""``python -m memkit``: the ``memkit`` command, for when its script is not on PATH."""

import sys

from memkit.cli import main

sys.exit(main())
