"""Every node and edge checked before anything is written: one bad item in a batch writes nothing."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import msgspec

from memkit._validation import check_metadata, check_moment, check_text
from memkit.errors import ValidationError
from memkit.layers.graph._codec import normal_name, normal_relation, representable
from memkit.layers.graph._records import Direction, Edge, GraphConfig, Node

__all__ = ["check_direction", "check_edge", "check_name", "check_node", "check_relations"]

_MAX_TYPE_CHARS: Final = 100
_MAX_PROVENANCE_CHARS: Final = 512
DIRECTIONS: Final = ("out", "in", "both")


def check_name(name: object, config: GraphConfig, what: str = "name") -> str:
    """A name that normalises to something: whitespace or punctuation alone names nothing."""
    text = check_text(name, what, config.max_name_chars)
    if not any(char.isalnum() for char in normal_name(text)):  # "★", a zero-width space: no identity
        raise ValidationError(f"{what} {text!r} has no letters or digits to identify an entity by")
    return text


def _check_type(kind: object, what: str) -> str | None:
    if kind is None:
        return None
    return check_text(kind, what, _MAX_TYPE_CHARS).strip() or None


def check_node(node: object, config: GraphConfig, what: str = "node") -> Node:
    if not isinstance(node, Node):
        raise ValidationError(f"{what} must be a memkit Node, got {type(node).__name__}")
    check_name(node.name, config, f"{what}.name")
    if not isinstance(node.aliases, list) or len(node.aliases) > config.max_aliases:
        raise ValidationError(f"{what}.aliases must be a list of at most {config.max_aliases} names")
    for at, alias in enumerate(node.aliases):
        check_name(alias, config, f"{what}.aliases[{at}]")
    return msgspec.structs.replace(node, type=_check_type(node.type, f"{what}.type"),
                                   attributes=_attributes(node.attributes, f"{what}.attributes"))  # fmt: skip


def _attributes(attributes: object, what: str) -> dict[str, Any]:
    """Checked as metadata; an empty dict (most edges) skips the check's JSON encoding."""
    return {} if isinstance(attributes, dict) and not attributes else check_metadata(attributes, what)


def _check_time(value: datetime | None, what: str) -> datetime | None:
    if value is None:
        return None
    moment = check_moment(value, what)
    if not representable(moment):
        raise ValidationError(f"{what} {moment.isoformat()} is after the last moment a datetime holds in UTC")
    return moment


def check_edge(edge: object, config: GraphConfig, what: str = "edge") -> Edge:
    if not isinstance(edge, Edge):
        raise ValidationError(f"{what} must be a memkit Edge, got {type(edge).__name__}")
    check_name(edge.source, config, f"{what}.source")
    check_name(edge.target, config, f"{what}.target")
    relation = check_relation(edge.relation, f"{what}.relation")
    start = _check_time(edge.valid_from, f"{what}.valid_from")
    end = _check_time(edge.valid_to, f"{what}.valid_to")
    if start is not None and end is not None and end <= start:
        raise ValidationError(f"{what}.valid_to ({end.isoformat()}) must be after valid_from ({start.isoformat()})")
    if not isinstance(edge.provenance, list):
        raise ValidationError(f"{what}.provenance must be a list of memory or turn ids")
    for at, source in enumerate(edge.provenance):
        check_text(source, f"{what}.provenance[{at}]", _MAX_PROVENANCE_CHARS)
    if edge.functional is not None and not isinstance(edge.functional, bool):
        raise ValidationError(f"{what}.functional must be True, False or None")
    return msgspec.structs.replace(
        edge, relation=relation, valid_from=start, valid_to=end,
        attributes=_attributes(edge.attributes, f"{what}.attributes"),
        source_type=_check_type(edge.source_type, f"{what}.source_type"),
        target_type=_check_type(edge.target_type, f"{what}.target_type"),
    )  # fmt: skip


def check_relation(relation: object, what: str = "relation") -> str:
    text = check_text(relation, what, _MAX_TYPE_CHARS)
    normal = normal_relation(text)
    if not normal:
        raise ValidationError(f"{what} {text!r} has no letters or digits")
    return normal


def check_relations(relations: object) -> tuple[str, ...] | None:
    if relations is None:
        return None
    if isinstance(relations, str):
        relations = [relations]
    if not isinstance(relations, list | tuple | set | frozenset) or not relations:
        raise ValidationError("relations must be a relation name or a non-empty list of them")
    return tuple(sorted({check_relation(r, "relations[...]") for r in relations}))


def check_direction(direction: object) -> Direction:
    if direction not in DIRECTIONS:
        raise ValidationError(f"direction must be one of {', '.join(map(repr, DIRECTIONS))}, got {direction!r}")
    return direction
