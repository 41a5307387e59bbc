"""``sqlite:///path.db``: durable, embedded, the default.

URL options: ``?dtype=float32|float16|int8`` (vector storage in the in-process arrays),
``?timeout=10`` (seconds, > 0, to wait for another process's write lock),
``?synchronous=off|normal|full|extra`` (``full`` also survives power loss, at a write cost).
Any other option is refused.
"""

from memkit_backends.sqlite._backend import SQLiteBackend
from memkit_backends.sqlite._bulk import EncodedRows

__all__ = ["EncodedRows", "SQLiteBackend"]
