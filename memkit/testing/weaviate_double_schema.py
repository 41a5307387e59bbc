"""A collection definition as Weaviate answers it: what was posted, with Weaviate's defaults filled in."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["full_schema"]


def _defaults(prop: dict[str, Any]) -> dict[str, Any]:
    kind = (prop.get("dataType") or ["text"])[0]
    text = kind in ("text", "text[]")
    filled = {"indexFilterable": True, "indexSearchable": text, "indexRangeFilters": False, **prop}
    if text:
        filled.setdefault("tokenization", "word")
    return filled


def full_schema(posted: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(posted)
    schema.setdefault("vectorizer", "none")
    schema.setdefault("vectorIndexType", "hnsw")
    index = schema.setdefault("vectorIndexConfig", {})
    index.setdefault("distance", "cosine")
    index.setdefault("vectorCacheMaxObjects", 1_000_000_000_000)
    if schema["vectorIndexType"] == "hnsw":
        for key, value in (("cleanupIntervalSeconds", 300), ("dynamicEfMin", 100), ("dynamicEfMax", 500),
                           ("dynamicEfFactor", 8), ("ef", -1), ("efConstruction", 128), ("filterStrategy", "sweeping"),
                           ("flatSearchCutoff", 40_000), ("maxConnections", 32), ("skip", False)):  # fmt: skip
            index.setdefault(key, value)
    inverted = schema.setdefault("invertedIndexConfig", {})
    bm25 = inverted.setdefault("bm25", {})
    bm25.setdefault("k1", 1.2)
    bm25.setdefault("b", 0.75)
    stopwords = inverted.setdefault("stopwords", {})
    stopwords.setdefault("preset", "en")
    stopwords.setdefault("additions", None)
    stopwords.setdefault("removals", None)
    inverted.setdefault("cleanupIntervalSeconds", 60)
    tenancy = schema.setdefault("multiTenancyConfig", {})
    tenancy.setdefault("enabled", False)
    tenancy.setdefault("autoTenantCreation", False)
    tenancy.setdefault("autoTenantActivation", False)
    schema.setdefault("replicationConfig", {"factor": 1, "asyncEnabled": False,
                                            "deletionStrategy": "NoAutomatedResolution"})  # fmt: skip
    schema.setdefault("shardingConfig", {"virtualPerPhysical": 128, "desiredCount": 1, "actualCount": 1,
                                         "desiredVirtualCount": 128, "actualVirtualCount": 128, "key": "_id",
                                         "strategy": "hash", "function": "murmur3"})  # fmt: skip
    schema.setdefault("moduleConfig", {})
    schema["properties"] = [_defaults(p) for p in schema.get("properties") or []]
    return schema
