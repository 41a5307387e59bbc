"""Test helpers for backend authors: the conformance suite as pytest mixins.

A backend reuses it in a few lines::

    import pytest
    from memkit.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        @pytest.fixture
        async def backend(self, tmp_path):
            async with open_backend(f"mine://{tmp_path}") as b:
                yield b

Tests that need a capability the backend does not declare are skipped.
Needs pytest; runs under anyio's pytest plugin (shipped with anyio).
"""

from memkit.testing._episodic import EpisodicConformance
from memkit.testing._graph import GraphConformance
from memkit.testing._helpers import make_record
from memkit.testing._kv import KeyValueConformance
from memkit.testing._kv_layers import KeyValueLayersConformance
from memkit.testing._layers import LongTermConformance
from memkit.testing._records import BackendConformance

__all__ = [
    "BackendConformance",
    "EpisodicConformance",
    "GraphConformance",
    "KeyValueConformance",
    "KeyValueLayersConformance",
    "LongTermConformance",
    "make_record",
]
