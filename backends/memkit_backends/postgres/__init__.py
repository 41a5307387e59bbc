"""``postgresql://`` and ``postgres://``: PostgreSQL with pgvector (``pip install 'memkit[postgres]'``)."""

from memkit_backends.postgres._backend import PostgresBackend

__all__ = ["PostgresBackend"]
