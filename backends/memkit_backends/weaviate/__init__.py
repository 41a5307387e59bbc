"""``weaviate://host:8080`` (``weaviates://`` for TLS): a Weaviate server, on the official ``weaviate-client``
v4 async client.

Install: ``pip install 'memkit-sdk[weaviate]'``.
"""

from memkit_backends.weaviate._backend import WeaviateBackend

__all__ = ["WeaviateBackend"]
