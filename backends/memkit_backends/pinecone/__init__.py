"""``pinecone://INDEX``: a Pinecone index, on the official SDK's asyncio client.

Install: ``pip install 'memkit-sdk[pinecone]'``.
"""

from memkit_backends.pinecone._backend import PineconeBackend

__all__ = ["PineconeBackend"]
