"""``redis://`` and ``rediss://``: Redis 8 or Redis Stack (``pip install 'memkit[redis]'``)."""

from memkit_backends.redis._backend import RedisBackend

__all__ = ["RedisBackend"]
