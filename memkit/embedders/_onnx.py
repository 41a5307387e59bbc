"""ONNX Runtime for a local BERT sentence encoder: the graph built once from the safetensors, cached on disk.

The cache file is named by a hash of everything the graph is made from (weights, configs, this module's graph
version, fp32 or int8), so new weights or a new graph never reuse an old file. Files are written to a
temporary name and renamed into place, then a sidecar with the file's SHA-256 is written the same way: a crash
mid-write leaves no sidecar (or an old one that does not match), and a file whose bytes no longer match its
sidecar is rebuilt rather than loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from memkit.embedders._base import Matrix
from memkit.embedders._onnx_graph import GRAPH_VERSION, OUTPUT, build_bert_graph
from memkit.errors import EmbeddingError

__all__ = ["OnnxEncoder", "cache_dir", "model_window", "padded_batches"]

log = logging.getLogger("memkit")

Variant = Literal["fp32", "int8"]
# Padded tokens per ONNX call: long texts go in smaller batches so the attention scores stay a few MB.
_TOKENS_PER_CALL = 16_384
_SPLIT_WINDOW = 128
"""Rows a call may take, whatever the batch size: the split's search is linear in it (0.9 s for 5,000 short
texts at 1,024), and a call's fixed cost is under 2% of 128 rows of the shortest texts."""
_CALL_COST_IN_TOKENS = 16
"""What one ONNX call costs beyond its padded tokens, in tokens: ~2 ms against ~0.14 ms a token (MiniLM-L6,
2 cores; a call's time is close to linear in rows x longest from 8 to 16k tokens)."""


def cache_dir() -> Path:
    """Where built graphs are kept: ``$MEMKIT_CACHE_DIR``, else the platform's per-user cache, ``memkit/onnx``."""
    if os.environ.get("MEMKIT_CACHE_DIR"):
        return Path(os.environ["MEMKIT_CACHE_DIR"]) / "onnx"
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "memkit" / "onnx"


def model_window(model_dir: Path) -> int:
    """Word pieces the model reads, its [CLS] and [SEP] included: what sentence-transformers truncates to."""

    def read(name: str) -> dict[str, Any]:
        try:
            value = json.loads((model_dir / name).read_text())
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    limits = [
        read("sentence_bert_config.json").get("max_seq_length")
        or read("tokenizer_config.json").get("model_max_length"),
        read("config.json").get("max_position_embeddings"),
    ]
    known = [int(n) for n in limits if isinstance(n, int | float) and 0 < n < 1_000_000]
    return min(known) if known else 512


QUANTIZER_VERSION = 2
"""Bumped when ``_quantize`` changes, so cached int8 graphs are rebuilt (2: 7-bit weights, attention output
kept fp32)."""


def _graph_key(model_dir: Path, variant: Variant) -> str:
    quantizer = f"-q{QUANTIZER_VERSION}" if variant == "int8" else ""  # an int8 graph also depends on _quantize
    digest = hashlib.sha256(f"memkit-bert-graph-v{GRAPH_VERSION}-{variant}{quantizer}".encode())
    for name in ("config.json", "modules.json", "1_Pooling/config.json", "model.safetensors"):
        path = model_dir / name
        digest.update(f"\0{name}\0".encode())
        if path.is_file():
            with path.open("rb") as file:
                digest.update(hashlib.file_digest(file, "sha256").digest())
    return digest.hexdigest()[:32]


def _write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same folder, flushed to disk, renamed over ``path``: readers see all of it or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _read_verified(path: Path) -> bytes | None:
    """The cached graph's bytes when its sidecar vouches for them, else None (missing, torn or corrupt)."""
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
        data = path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("sha256") != hashlib.sha256(data).hexdigest():
        log.warning("memkit: the cached ONNX graph %s does not match its checksum; rebuilding it", path)
        return None
    return data


def _store(path: Path, data: bytes) -> None:
    try:
        _write_atomic(path, data)
        _write_atomic(path.with_suffix(".json"), json.dumps({"sha256": hashlib.sha256(data).hexdigest()}).encode())
    except OSError as exc:  # a read-only home still embeds; it just rebuilds the graph in each process
        log.warning("memkit: cannot cache the ONNX graph in %s (%s); set MEMKIT_CACHE_DIR to a writable folder",
                    path.parent, exc)  # fmt: skip


def _quantize(fp32: bytes) -> bytes:
    """Dynamic int8: weights per output channel, activations per call. The FFN's second projection and the
    attention's output projection stay fp32: their inputs have the widest ranges, and quantising them cost the
    most parity. Weights keep 7 bits (``reduce_range``): without VNNI, x86's u8 x s8 multiply-add saturates its
    int16 sums at 8 bits. Parity on the test's texts, onnxruntime 1.26: mean cosine 0.9884 -> 0.9906."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    model = onnx.load_from_string(fp32)
    weights = {init.name for init in model.graph.initializer}
    matmuls = [node for node in model.graph.node if node.op_type == "MatMul"]
    projections = [n.name for n in matmuls if n.input[1].endswith(".output.dense.weight_t")]  # FFN and attention
    keep = projections + [n.name for n in matmuls if n.input[1] not in weights]  # scores x values: no weights
    with tempfile.TemporaryDirectory(prefix="memkit-quantize-") as folder, _quiet_root_warnings():
        source, target = Path(folder) / "fp32.onnx", Path(folder) / "int8.onnx"
        source.write_bytes(fp32)
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         reduce_range=True, op_types_to_quantize=["MatMul"], nodes_to_exclude=keep)  # fmt: skip
        return target.read_bytes()


@contextlib.contextmanager
def _quiet_root_warnings() -> Iterator[None]:
    # The quantiser logs advice ("consider pre-processing") on the root logger; it is not for memkit's users.
    root = logging.getLogger()
    quiet = logging.Filter("memkit-never-matches")
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


def load_graph(model_dir: Path, variant: Variant) -> bytes:
    """The graph's bytes from the cache, building (and caching) it first when it is missing or corrupt."""
    path = cache_dir() / f"bert-{variant}-{_graph_key(model_dir, variant)}.onnx"
    data = _read_verified(path)
    if data is None:
        data = build_bert_graph(model_dir) if variant == "fp32" else _quantize(load_graph(model_dir, "fp32"))
        _store(path, data)
    return data


class OnnxEncoder:
    """Tokenizes with ``tokenizers`` and runs the graph with ONNX Runtime; no torch. Not thread-safe: the
    embedder calls it from one worker thread at a time."""

    def __init__(self, model_dir: Path, *, variant: Variant = "fp32", batch_size: int = 64,
                 threads: int | None = None) -> None:  # fmt: skip
        import onnxruntime as ort  # type: ignore[import-untyped]
        from tokenizers import Tokenizer

        self.window = model_window(model_dir)
        self._batch_size = batch_size
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # tokenizer.json carries its own settings (here: pad and cut to 128); sentence-transformers overrides
        # them with the model's window and pads per batch, so this does the same.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self.window, strategy="longest_first")
        self._counter = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._counter.no_padding()
        self._counter.no_truncation()
        self._pad_id = int(self._tokenizer.token_to_id("[PAD]") or 0)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # intra-op threads: one per usable core (ORT's default counts physical cores, too few under a quota);
        # one call at a time (the embedder's CapacityLimiter), so no inter-op threads.
        self.threads = threads or _usable_cores()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        try:
            graph = load_graph(model_dir, variant)
            self._session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"cannot build or load the ONNX graph for {model_dir}: {exc}") from exc
        self.dim = int(self._session.get_outputs()[0].shape[1])

    def count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text).ids)

    def encode(self, texts: Sequence[str]) -> Matrix:
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")  # similar lengths together: little padding
        out = np.empty((len(texts), self.dim), np.float32)
        for start, stop in padded_batches(lengths[order].tolist(), self._batch_size, _CALL_COST_IN_TOKENS):
            batch = order[start:stop]
            longest = int(lengths[batch[0]])
            ids = np.full((len(batch), longest), self._pad_id, np.int64)
            mask = np.zeros((len(batch), longest), np.int64)
            for row, index in enumerate(batch):
                piece = encodings[index].ids
                ids[row, : len(piece)] = piece
                mask[row, : len(piece)] = 1
            out[batch] = self._session.run([OUTPUT], {"input_ids": ids, "attention_mask": mask})[0]
        return out


def padded_batches(lengths: list[int], max_rows: int, call_cost: int) -> list[tuple[int, int]]:
    """(start, stop) of each ONNX call over texts of ``lengths`` (in word pieces, longest first), chosen to cost
    the least: a call pads its rows to its first (longest) text and costs ``call_cost`` tokens more. At most
    ``max_rows`` rows (and ``_SPLIT_WINDOW``) and ``_TOKENS_PER_CALL`` padded tokens a call (one text alone may
    pass that).

    The compute is linear in padded tokens, so one call per ``max_rows`` texts (what sentence-transformers
    does) padded LongMemEval's user turns, a few long ones among short ones in each session, to 2.3x their
    word pieces. Cheapest split of a sorted list, by dynamic programming: ``cost[j]`` is the least cost of the
    first j texts, the last call taking texts i..j-1."""
    n = len(lengths)
    cost = [0] * (n + 1)
    cut = [0] * (n + 1)
    window = min(max_rows, _SPLIT_WINDOW)
    for j in range(1, n + 1):
        best, best_i = None, j - 1
        for i in range(j - 1, max(-1, j - 1 - window), -1):
            rows, longest = j - i, max(lengths[i], 1)
            if rows > 1 and rows * longest > _TOKENS_PER_CALL:
                break  # a longer first text only makes it bigger
            total = cost[i] + call_cost + rows * longest
            if best is None or total < best:
                best, best_i = total, i
        cost[j], cut[j] = best if best is not None else 0, best_i
    calls = []
    stop = n
    while stop > 0:
        calls.append((cut[stop], stop))
        stop = cut[stop]
    return calls[::-1]


def _usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on every platform
        return max(1, os.cpu_count() or 1)
