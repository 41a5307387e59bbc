"""``sqlite:///path.db``: durable, embedded, the default.

URL options: ``?dtype=float32|float16|int8`` (vector storage in the in-process arrays),
``?timeout=10`` (seconds to wait for another process's write lock),
``?synchronous=normal|full`` (``full`` also survives power loss, at a write cost).
"""

from memkit_backends.sqlite._backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
