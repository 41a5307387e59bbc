"""memkit's error tree; see ``memkit._errors`` for the drawing."""

from memkit._errors import *  # noqa: F403
from memkit._errors import __all__ as __all__  # noqa: PLC0414 - explicit re-export
