"""Fields as the server backends store them (JSON), read back as the contract's types."""

from __future__ import annotations

import json

from memkit_backends._server.fields import decode_fields


def test_tags_come_back_as_tuples_and_scalars_as_they_were() -> None:
    fields = {"out": ["a", "a+"], "rel": "knows", "n": 2**62, "ratio": 0.5, "flag": True, "empty": []}
    assert decode_fields(json.dumps(fields)) == {**fields, "out": ("a", "a+"), "empty": ()}
    assert decode_fields(json.dumps(fields).encode()) == decode_fields(json.dumps(fields))


def test_values_the_contract_does_not_name_still_decode() -> None:
    """An older release stored lists of numbers in fields: they read back as tuples, not an error."""
    assert decode_fields('{"nums": [1, 2], "nested": [[1]], "none": null}') == {
        "nums": (1, 2), "nested": ([1],), "none": None,
    }  # fmt: skip
