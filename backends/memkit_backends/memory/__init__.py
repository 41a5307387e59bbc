"""``memory://``: columnar arrays in this process; nothing survives the process.

URL options: ``?dtype=float32|float16|int8`` selects the vector storage.
"""

from memkit_backends.memory._backend import MemoryBackend

__all__ = ["MemoryBackend"]
