"""Build an ONNX graph of a BERT sentence encoder straight from its safetensors weights.

No torch and no exporter: the graph is written op by op (opset 17) from the weights and ``config.json``, so it
does not depend on which torch or transformers version is installed. It computes what sentence-transformers
computes for a BERT model with mean pooling and normalisation (all-MiniLM-L6-v2 and its family): embeddings,
``num_hidden_layers`` post-norm encoder layers with exact (erf) GELU, the mean of the token vectors under the
attention mask, divided by its L2 norm. ONNX Runtime fuses the attention, layer norms and GELU when it loads it.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memkit.errors import ConfigurationError, EmbeddingError

__all__ = ["GRAPH_VERSION", "OUTPUT", "build_bert_graph", "read_safetensors", "supports"]

# Part of the cache key: bump it when the graph this module writes changes, so old caches are rebuilt.
GRAPH_VERSION = 1
OUTPUT = "sentence_embedding"
_OPSET = 17
_DTYPES: Mapping[str, str] = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "BF16": "<u2"}

Array = npt.NDArray[Any]


def read_safetensors(path: Path) -> dict[str, Array]:
    """The tensors of a ``.safetensors`` file (8-byte header length, JSON header, raw little-endian data)."""
    data = path.read_bytes()
    try:
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + length])
    except (struct.error, ValueError) as exc:
        raise EmbeddingError(f"{path} is not a safetensors file: {exc}") from exc
    body = memoryview(data)[8 + length :]
    tensors: dict[str, Array] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise EmbeddingError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=dtype).reshape(info["shape"])
        if info["dtype"] == "BF16":  # bfloat16 is the top half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array
    return tensors


def supports(model_dir: Path) -> str | None:
    """None when this module can build ``model_dir``'s graph, else why not (for a message or a fallback)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return f"{model_dir} has no readable config.json"
    if config.get("model_type") != "bert":
        return f"model type {config.get('model_type')!r} is not BERT"
    if config.get("hidden_act", "gelu") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
        return "only BERT with gelu and absolute positions is supported"
    if not (model_dir / "model.safetensors").is_file() or not (model_dir / "tokenizer.json").is_file():
        return f"{model_dir} lacks model.safetensors or tokenizer.json"
    if _pooling(model_dir) is None:
        return "only mean pooling of the token vectors is supported"
    return None


def _pooling(model_dir: Path) -> str | None:
    modules = _read_json(model_dir / "modules.json", [])
    types = [m.get("type", "") for m in modules]
    if types and not all(t.endswith(("Transformer", "Pooling", "Normalize")) for t in types):
        return None
    pooling = next((m for m in modules if m.get("type", "").endswith("Pooling")), None)
    config = _read_json(model_dir / (pooling or {}).get("path", "1_Pooling") / "config.json", {})
    wanted = {"pooling_mode_mean_tokens": True}
    others = [k for k, v in config.items() if k.startswith("pooling_mode_") and v and k not in wanted]
    if config and (not config.get("pooling_mode_mean_tokens") or others):
        return None
    return "mean"


def normalizes(model_dir: Path) -> bool:
    """Whether sentence-transformers ends this model with a ``Normalize`` module."""
    return any(m.get("type", "").endswith("Normalize") for m in _read_json(model_dir / "modules.json", []))


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


class _Graph:
    """Collects nodes and initializers; names are generated so the builder reads like the maths."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def const(self, name: str, value: Array) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, *inputs: str, **attrs: Any) -> str:
        self._count += 1
        out = f"{kind.lower()}_{self._count}"
        self.nodes.append(self.helper.make_node(kind, list(inputs), [out], name=f"n{self._count}", **attrs))
        return out


def build_bert_graph(model_dir: Path) -> bytes:
    """The serialised ONNX model: inputs ``input_ids`` and ``attention_mask`` (int64, [batch, seq])."""
    from onnx import TensorProto, helper

    reason = supports(model_dir)
    if reason:
        raise ConfigurationError(f"the ONNX runtime cannot run {model_dir}: {reason}; use runtime='torch'")
    config = json.loads((model_dir / "config.json").read_text())
    raw = read_safetensors(model_dir / "model.safetensors")
    # Some checkpoints prefix every name with "bert." (saved from BertForX); the encoder is the same.
    weights = {name.removeprefix("bert."): value for name, value in raw.items()}

    def w(name: str) -> Array:
        try:
            return np.asarray(weights[name], dtype=np.float32)
        except KeyError:
            raise EmbeddingError(f"{model_dir}: weight {name!r} is missing from model.safetensors") from None

    g = _Graph()
    eps = float(config.get("layer_norm_eps", 1e-12))
    hidden = _embeddings(g, w, eps)
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    # Added to the attention scores: 0 where a token is real, the most negative float where it is padding.
    blocked = g.op("Mul", g.op("Sub", g.const("one", np.array(1.0, np.float32)), mask),
                   g.const("min_float", np.array(np.finfo(np.float32).min, np.float32)))  # fmt: skip
    score_mask = g.op("Unsqueeze", blocked, g.const("axes_1_2", np.array([1, 2], np.int64)))
    heads = int(config["num_attention_heads"])
    for layer in range(int(config["num_hidden_layers"])):
        hidden = _encoder_layer(g, w, f"encoder.layer.{layer}.", hidden, score_mask=score_mask, heads=heads, eps=eps)
    pooled = _mean_pool(g, hidden, mask)
    if normalizes(model_dir):
        norm = g.op("ReduceL2", pooled, axes=[-1], keepdims=1)  # axes is an attribute until opset 18
        pooled = g.op("Div", pooled, g.op("Max", norm, g.const("norm_eps", np.array(1e-12, np.float32))))
    g.nodes.append(helper.make_node("Identity", [pooled], [OUTPUT], name="output"))
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask")
    ]
    output = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", int(config["hidden_size"])])
    graph = helper.make_graph(g.nodes, "memkit_bert_mean_pool", inputs, [output], g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="memkit")
    model.ir_version = 8  # readable by every ONNX Runtime since 1.10
    data: bytes = model.SerializeToString()
    return data


def _embeddings(g: _Graph, w: Callable[[str], Array], eps: float) -> str:
    words = g.op("Gather", g.const("word_embeddings", w("embeddings.word_embeddings.weight")), "input_ids", axis=0)
    # Every text is one segment (token type 0), so its type vector is folded into the position table.
    positions = w("embeddings.position_embeddings.weight") + w("embeddings.token_type_embeddings.weight")[0]
    seq_len = g.op("Slice", g.op("Shape", "input_ids"), g.const("i1", np.array([1], np.int64)),
                   g.const("i2", np.array([2], np.int64)))  # fmt: skip
    zero = g.const("i0", np.array([0], np.int64))
    position_rows = g.op("Slice", g.const("position_embeddings", positions), zero, seq_len, zero)
    return _layer_norm(g, w, "embeddings.LayerNorm", g.op("Add", words, position_rows), eps)


def _layer_norm(g: _Graph, w: Callable[[str], Array], prefix: str, x: str, eps: float) -> str:
    scale, bias = g.const(f"{prefix}.weight", w(f"{prefix}.weight")), g.const(f"{prefix}.bias", w(f"{prefix}.bias"))
    return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=eps)


def _dense(g: _Graph, w: Callable[[str], Array], prefix: str, x: str, scale: float = 1.0) -> str:
    # torch's Linear stores [out, in]; MatMul wants [in, out].
    weight = g.const(f"{prefix}.weight_t", (w(f"{prefix}.weight") * scale).T)
    return g.op("Add", g.op("MatMul", x, weight), g.const(f"{prefix}.bias", w(f"{prefix}.bias") * scale))


def _encoder_layer(
    g: _Graph, w: Callable[[str], Array], prefix: str, x: str, *, score_mask: str, heads: int, eps: float
) -> str:
    hidden = w(f"{prefix}attention.self.query.weight").shape[0]
    head_dim = hidden // heads
    split = g.const(f"{prefix}split_shape", np.array([0, 0, heads, head_dim], np.int64))

    def project(name: str, perm: list[int], scale: float = 1.0) -> str:
        return g.op("Transpose", g.op("Reshape", _dense(g, w, f"{prefix}attention.self.{name}", x, scale), split),
                    perm=perm)  # fmt: skip

    # 1/sqrt(head_dim) is folded into the query projection instead of scaling every score matrix.
    query = project("query", [0, 2, 1, 3], 1.0 / math.sqrt(head_dim))
    key_t = project("key", [0, 2, 3, 1])
    value = project("value", [0, 2, 1, 3])
    scores = g.op("Add", g.op("MatMul", query, key_t), score_mask)
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), value)
    merged = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]),
                  g.const(f"{prefix}merge_shape", np.array([0, 0, hidden], np.int64)))  # fmt: skip
    attended = _dense(g, w, f"{prefix}attention.output.dense", merged)
    x = _layer_norm(g, w, f"{prefix}attention.output.LayerNorm", g.op("Add", attended, x), eps)
    inner = _dense(g, w, f"{prefix}intermediate.dense", x)
    # Exact GELU, written the way ONNX Runtime's GeluFusion recognises: x * 0.5 * (1 + erf(x / sqrt 2)).
    erf = g.op("Erf", g.op("Div", inner, g.const(f"{prefix}sqrt2", np.array(math.sqrt(2.0), np.float32))))
    gelu = g.op("Mul", g.op("Mul", inner, g.op("Add", erf, g.const(f"{prefix}one", np.array(1.0, np.float32)))),
                g.const(f"{prefix}half", np.array(0.5, np.float32)))  # fmt: skip
    out = _dense(g, w, f"{prefix}output.dense", gelu)
    return _layer_norm(g, w, f"{prefix}output.LayerNorm", g.op("Add", out, x), eps)


def _mean_pool(g: _Graph, hidden: str, mask: str) -> str:
    weights = g.op("Unsqueeze", mask, g.const("axes_2", np.array([2], np.int64)))
    axis_1 = g.const("axes_seq", np.array([1], np.int64))
    summed = g.op("ReduceSum", g.op("Mul", hidden, weights), axis_1, keepdims=0)
    counts = g.op("ReduceSum", weights, axis_1, keepdims=0)
    return g.op("Div", summed, g.op("Max", counts, g.const("count_eps", np.array(1e-9, np.float32))))
