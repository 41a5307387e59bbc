"""An entity's neighbourhood as prompt text: what is known about it, nearest relations first.

One line per relation in reading order ("Ada works at Acme"), indented by distance from the entity, each
whole or not at all, with the endpoints' attributes the first time a node appears. A walk as of a past
moment says so in the header. The text never exceeds ``max_tokens`` as the given tokenizer counts it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from memkit.layers.graph._records import DEFAULT_TYPE, Edge, Node, Subgraph
from memkit.tokens import Tokenizer

__all__ = ["render_subgraph"]

_ATTRIBUTES_SHOWN: Final = 6
_VALUE_CHARS: Final = 80


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(value: Any) -> str:
    return _clip(value if isinstance(value, str) else repr(value), _VALUE_CHARS)


def _describe(node: Node) -> str:
    """``Acme (company; industry: retail, size: 40)``: the type unless it is the default, a few attributes."""
    parts = [] if node.type in (None, DEFAULT_TYPE) else [node.type or ""]
    shown = list(node.attributes.items())[:_ATTRIBUTES_SHOWN]
    if shown:
        parts.append(", ".join(f"{key}: {_value(value)}" for key, value in shown))
    return f"{node.name} ({'; '.join(parts)})" if parts else node.name


def _edge_line(edge: Edge, indent: int, named: dict[str, str], as_of: datetime | None) -> str:
    relation = edge.relation.replace("_", " ")
    details = [f"{k}: {_value(v)}" for k, v in list(edge.attributes.items())[:_ATTRIBUTES_SHOWN]]
    if as_of is None and edge.valid_from is not None and len(edge.history) > 1:
        details.append(f"since {edge.valid_from.date().isoformat()}")
    extra = f" [{'; '.join(details)}]" if details else ""
    source = named.get(edge.source_id or "", edge.source)
    target = named.get(edge.target_id or "", edge.target)
    return f"{'  ' * indent}- {source} {relation} {target}{extra}"


def render_subgraph(graph: Subgraph, max_tokens: int, tokenizer: Tokenizer, as_of: datetime | None = None) -> str:
    """The block for ``graph`` within ``max_tokens``; "" when nothing about the entity fits."""
    when = f" as of {as_of.isoformat()}" if as_of is not None else ""
    header = f"Known about {_describe(graph.root)}{when}:"
    lines: list[str] = []
    used = tokenizer.count(header)
    if used > max_tokens:
        return ""
    named: dict[str, str] = {graph.root.id or "": graph.root.name}
    by_id = {node.id: node for node in graph.nodes}
    for edge in graph.edges:
        nearer = min(graph.depth.get(edge.source_id or "", 0), graph.depth.get(edge.target_id or "", 0))
        first_seen = {}
        for node_id in (edge.source_id, edge.target_id):
            if node_id and node_id not in named and (node := by_id.get(node_id)) is not None:
                first_seen[node_id] = _describe(node)
        line = _edge_line(edge, nearer, {**named, **first_seen}, as_of)
        cost = tokenizer.count("\n" + line)
        if used + cost > max_tokens:
            continue  # a shorter line further down may still fit
        lines.append(line)
        used += cost
        for node_id in first_seen:
            named[node_id] = by_id[node_id].name
    while lines and tokenizer.count("\n".join([header, *lines])) > max_tokens:
        lines.pop()  # counted piece by piece above; a tokenizer need not be additive
    if not lines and _describe(graph.root) == graph.root.name:
        return ""  # "Known about Ada:" and nothing else tells the model nothing
    return "\n".join([header, *lines])
