"""``python -m memkit.cli``: the ``memkit`` command."""

import sys

from memkit.cli import main

sys.exit(main())
