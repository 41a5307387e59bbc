"""Helpers shared by the server backends (redis://, postgresql://): candidates, retries, errors."""
