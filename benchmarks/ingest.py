"""Writing memories through the public API: store_many in batches, store() one at a time, and what recall costs.

    python -m benchmarks.ingest --json out/ingest.json [--plot out/ingest.png] [--sizes 10k,100k]
        [--backends memory,sqlite,redis,postgres]

For each backend and size n, in one run (each pair in a process of its own, on storage of its own):

- ``store_many``: n pre-embedded memories of 100 users (8 words each from a Zipf-distributed vocabulary),
  stored with ``long_term.store_many`` in batches of 1,000 (dedupe on, as users run it); the last 1,000
  are timed (``per_s``), and ``per_s_median_last_batches`` is the median rate of the last 10 batches (one
  batch's rate swings 2-3x on a shared machine).
- ``store``: the same collection, 1,000 more memories stored one at a time with ``long_term.store``.
- ``rss_peak_mb``: the peak resident memory of that pair's process (read after each API's row; ``pid`` names
  the process).
- ``near_check_per_s`` (``store_many`` rows): the rate if a batch's near-duplicate check were all it cost: one
  ``Backend.nearest_many`` for the last 1,000 memories' vectors, each against its user's stored memories.

Vectors come from an ``Embedder`` that looks them up (``LookupEmbedder``), so the model is not measured.
Also, on memory:// at the largest size, the recall p50 through ``long_term.recall`` next to the scoring
kernel's own time on the same rows (``memkit.scoring.top_k`` over the user's rows, which is what the API's
query scores), so the API's overhead shows as a ratio, and beside it the BM25 scoring of the same rows plus the
kernel with those text scores (``kernels_with_text_p50_ms``: all a default, hybrid recall scores); and
``store_many_floor_per_s``: the rate a batch
could reach if reading every stored vector once (which an exact near-duplicate check of a batch spread over
every user must do) were all it cost, timed with ``memkit.scoring.stream_floor`` on the same matrix; and
``backend_upsert_per_s``: the rate memory:// itself writes 1,000 new records at that size (its arrays, scope
pages, field and BM25 indexes), all else left out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol, overload

import anyio
import msgspec
import numpy as np
from tqdm import tqdm

from ._report import Panel, bar_panels, print_table, write_json
from ._servers import backend_urls

DIM = 384
USERS = 100
BATCH = 1_000
TIMED = 1_000
STEADY_BATCHES = 10
_CHUNK = BATCH
ROOT = Path(__file__).resolve().parent.parent
"""A checkout's root, where ``-m benchmarks.ingest`` is found (installed, the package needs no folder)."""
"""Rows of the corpus's vectors drawn at a time: a batch's (drawn before the batch is timed)."""


class VectorSource(Protocol):
    def get(self, text: str) -> np.ndarray | None: ...


class CorpusVectors:
    """Each corpus text's vector (clustered, as real notes are), drawn when asked for, ``_CHUNK`` rows at a time
    from a generator of its own per chunk. Unless ``keep_all``, only the last chunk drawn (and ``pin``-ned
    texts) stays: the benchmark reports the process's peak resident memory as the store's, and a table of
    100k precomputed vectors (154 MB, and ~20 MB of index) was a third of it."""

    def __init__(
        self, items: Sequence[tuple[str, str]], rng: np.random.Generator, seed: int, *, keep_all: bool
    ) -> None:
        self._items, self._seed, self._keep_all = items, seed, keep_all
        self._centres = rng.standard_normal((200, DIM)).astype(np.float32)
        self._nearest_centre = rng.integers(0, 200, len(items))
        self._chunks: dict[int, np.ndarray] = {}
        self._pinned: dict[str, np.ndarray] = {}

    def get(self, text: str) -> np.ndarray | None:
        pinned = self._pinned.get(text)
        if pinned is not None:
            return pinned
        row = _row_of(text)
        if row is None or row >= len(self._items) or self._items[row][1] != text:
            return None
        return self._chunk(row // _CHUNK)[row % _CHUNK]

    def __getitem__(self, text: str) -> np.ndarray:
        found = self.get(text)
        if found is None:
            raise KeyError(text)
        return found

    def pin(self, texts: Sequence[str]) -> None:
        """Keep these texts' vectors (queries timed later must not draw a chunk inside the timing)."""
        self._pinned.update((text, self[text].copy()) for text in texts)  # a view would keep its whole chunk

    def draw(self, row: int) -> None:
        """Draw the chunk holding ``row`` now, before a timed call asks for its vectors (drawing 1,000 random
        vectors took ~5 ms: a twentieth of a batch's time, and not memkit's)."""
        self._chunk(row // _CHUNK)

    def _chunk(self, index: int) -> np.ndarray:
        found = self._chunks.get(index)
        if found is None:
            start = index * _CHUNK
            centres = self._nearest_centre[start : start + _CHUNK]
            noise = 0.8 * np.random.default_rng([self._seed, index]).standard_normal((len(centres), DIM))
            found = self._centres[centres] + noise.astype(np.float32)
            found /= np.linalg.norm(found, axis=1, keepdims=True)
            if not self._keep_all:
                self._chunks.clear()
            self._chunks[index] = found
        return found


def _row_of(text: str) -> int | None:
    head, _, _ = text.partition(":")
    return int(head[5:]) if head.startswith("note ") and head[5:].isdigit() else None


class LookupEmbedder:
    """Test double of a model: returns the vector precomputed for each text (the benchmark's own)."""

    def __init__(self, vectors: VectorSource) -> None:
        self._vectors = vectors
        self._rng = np.random.default_rng(3)

    @property
    def dim(self) -> int:
        return DIM

    @property
    def model_id(self) -> str:
        return "lookup-384"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [self._vectors.get(t) for t in texts]
        return np.stack([r if r is not None else self._random() for r in rows])

    def _random(self) -> np.ndarray:
        v = self._rng.standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)


class CorpusItems(Sequence[tuple[str, str]]):
    """The corpus's (user, text) pairs, each made when asked for from its row of word numbers (16 bytes):
    held as strings, 100k pairs took ~30 MB of the process whose peak resident memory is reported as the
    store's (the store keeps the texts it is given, not the benchmark's tuples and user names)."""

    def __init__(self, vocab: list[str], words: np.ndarray) -> None:
        self._vocab, self._words = vocab, words
        self._users = [f"user{u}" for u in range(USERS)]
        self._recent: dict[int, tuple[str, str]] = {}
        """The pairs made last (up to two batches' worth): the embedder's check of a text it is asked for reads
        its pair again inside the timed call, and making it anew there cost ~5 us a memory."""

    def __len__(self) -> int:
        return len(self._words)

    @overload
    def __getitem__(self, index: int) -> tuple[str, str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, str]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, str] | list[tuple[str, str]]:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self._item(index % len(self))

    def _item(self, i: int) -> tuple[str, str]:
        found = self._recent.get(i)
        if found is None:
            if len(self._recent) >= 2 * _CHUNK:
                self._recent.clear()
            vocab = self._vocab
            text = f"note {i}: " + " ".join([vocab[w] for w in self._words[i].tolist()])
            found = self._recent[i] = (self._users[i % USERS], text)
        return found


def corpus(n: int, seed: int = 0, *, keep_all: bool = True) -> tuple[CorpusItems, CorpusVectors]:
    """(user, text) pairs with distinct texts, and their vectors (``keep_all``: each drawn once and kept)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, int(rng.integers(4, 9)))) for _ in range(5_000)]
    odds = 1.0 / np.arange(1, len(vocab) + 1)
    words = rng.choice(len(vocab), size=(n, 8), p=odds / odds.sum()).astype(np.uint16)
    items = CorpusItems(vocab, words)
    return items, CorpusVectors(items, rng, seed, keep_all=keep_all)


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Progress(Protocol):
    def update(self, n: int) -> object: ...


async def bench_size(url: str, n: int, progress: Progress) -> tuple[list[dict[str, Any]], Any]:
    from memkit import Memkit, NewMemory

    items, vectors = corpus(n + TIMED, keep_all=False)  # drawn batch by batch: the process holds the store alone
    async with Memkit(url, embedder=LookupEmbedder(vectors)) as mem:
        lt = mem.long_term
        rates = []
        for start in range(0, n, BATCH):
            batch = items[start : start + BATCH]  # made one batch at a time, before it is timed
            vectors.draw(start)
            started = time.perf_counter()
            await lt.store_many([NewMemory(content=text, user_id=user) for user, text in batch])
            rates.append(len(batch) / (time.perf_counter() - started))
            progress.update(len(batch))
        extra = items[n:]
        vectors.draw(n)  # the extra 1,000 are one chunk (n is a multiple of it)
        started = time.perf_counter()
        for user, text in extra:
            await lt.store(text, user_id=user)
        one_rate = len(extra) / (time.perf_counter() - started)
        progress.update(len(extra))
        check_rate = await _near_check_rate(mem, extra, vectors)
        overhead = await recall_overhead(mem, items, vectors, url) if url.startswith("memory://") else None
    # The last batch is the figure asked for; one batch swings 2-3x on a shared machine, so the median of the
    # last ten is printed beside it (store() is timed over its last 1,000 calls, steady already).
    steady = float(np.median(rates[-STEADY_BATCHES:]))
    rows = [
        {
            "api": "store_many",
            "per_s": rates[-1],
            "per_s_median_last_batches": steady,
            "rss_peak_mb": rss_peak_mb(),
            "near_check_per_s": check_rate,
        },
        {"api": "store", "per_s": one_rate, "per_s_median_last_batches": one_rate, "rss_peak_mb": rss_peak_mb()},
    ]
    return rows, overhead


async def _near_check_rate(mem: Any, batch: Sequence[tuple[str, str]], vectors: CorpusVectors) -> float:
    """Memories per second if a batch's near-duplicate check were all ``store_many`` did: one
    ``Backend.nearest_many`` for ``batch``'s vectors, each against its user's stored memories, as the layer asks
    it (the batch is stored already; it costs the same scan as a new one)."""
    from memkit.backend import Scope

    by_user: dict[str, list[np.ndarray]] = {}
    for user, text in batch:
        by_user.setdefault(user, []).append(vectors[text])
    requests = [(Scope(user_id=user), found) for user, found in by_user.items()]
    config = mem.long_term.config
    started = time.perf_counter()
    await mem.backend.nearest_many(config.collection, requests, k=3, min_similarity=config.merge_threshold,
                                   now=time.time())  # fmt: skip
    return len(batch) / (time.perf_counter() - started)


async def recall_overhead(
    mem: Any, items: Sequence[tuple[str, str]], vectors: CorpusVectors, url: str
) -> dict[str, Any]:
    """Public-API recall p50 against the kernel alone, over the same rows with the same query."""
    from memkit.backend import Query, Scope
    from memkit.scoring import stream_floor

    lt = mem.long_term
    rng = np.random.default_rng(11)
    collection = mem.backend._store.collection(lt.config.collection)  # memory://'s columnar arrays
    api, kernel, with_text = [], [], []
    queries = [items[int(rng.integers(0, len(items)))] for _ in range(200)]
    vectors.pin([text for _, text in queries])
    for user, text in queries:
        started = time.perf_counter()
        await lt.recall(text, user_id=user, k=10)
        api.append(time.perf_counter() - started)
        query = Query(scope=Scope(user_id=user), vector=vectors[text], text=text, k=10, now=time.time())
        dense, both = _scoring_s(collection, query)
        kernel.append(dense)
        with_text.append(both)
    api_ms, kernel_ms, text_ms = (float(np.median(times)) * 1000 for times in (api, kernel, with_text))
    columns = collection.columns()
    stream_floor(columns.vectors, columns.n_rows)  # compiled and warm before it is timed
    started = time.perf_counter()
    stream_floor(columns.vectors, columns.n_rows)
    floor_s = time.perf_counter() - started
    label = "memory" + ("-" + url.split("dtype=")[1] if "dtype=" in url else "")  # as --backends names it
    upsert_rate = await _backend_upsert_rate(mem, collection)
    return {"backend": label, "n": len(collection), "recall_api_p50_ms": api_ms, "kernel_p50_ms": kernel_ms,
            "api_over_kernel": api_ms / kernel_ms, "kernels_with_text_p50_ms": text_ms,
            "api_over_kernels_with_text": api_ms / text_ms, "store_many_floor_per_s": BATCH / floor_s,
            "backend_upsert_per_s": upsert_rate}  # fmt: skip


async def _backend_upsert_rate(mem: Any, collection: Any) -> float:
    """Records per second the backend itself writes a batch of 1,000 new ones at this size (copies of stored
    records under new ids, written with ``Backend.upsert`` as ``store_many`` writes, then deleted): a ceiling
    for ``store_many``, which does this and its planning and duplicate checks besides."""
    name = mem.long_term.config.collection
    rows = [row for row, record in enumerate(collection._records) if record is not None][:BATCH]
    copies = [msgspec.structs.replace(collection.record_at(row), id=f"{collection._id(row)}~copy") for row in rows]
    started = time.perf_counter()
    await mem.backend.upsert(name, copies)
    rate = len(copies) / (time.perf_counter() - started)
    await mem.backend.delete(name, [record.id for record in copies])
    return rate


def _scoring_s(collection: Any, query: Any) -> tuple[float, float]:
    """Seconds the scoring alone takes for ``query`` over its user's rows: the fused kernel on similarity (the
    issue's "kernel"), and BM25 over the same rows then the kernel with those text scores (what a default,
    hybrid recall scores; the API's overhead is what it spends beyond this)."""
    from memkit.scoring import ScoreParams, top_k

    want = collection._scope_want(query.scope)
    params = ScoreParams.from_query(query)
    started = time.perf_counter()
    rows = collection.candidate_rows(want, None)
    top_k(collection.columns(), params, 10, scope_want=want, query=query.vector, rows=rows)
    dense = time.perf_counter() - started
    started = time.perf_counter()
    rows = collection.candidate_rows(want, None)
    lexical = collection._lexical_scores(query.text, want, len(collection._records), rows)
    top_k(collection.columns(), params, 10, scope_want=want, query=query.vector, lexical=lexical, rows=rows)
    return dense, time.perf_counter() - started


def parse_sizes(text: str) -> list[int]:
    return [int(float(s[:-1]) * 1000) if s.lower().endswith("k") else int(s) for s in text.split(",")]


QUANTIZED = {"memory-int8": "memory://?dtype=int8", "memory-float16": "memory://?dtype=float16"}
"""Backends beyond the default four, by name: memory:// keeping its vectors rounded (``?dtype=``)."""


def _url(name: str, urls: dict[str, str], sqlite_file: Path) -> str:
    if name == "sqlite":
        return f"sqlite:///{sqlite_file}"
    if name in QUANTIZED:
        return QUANTIZED[name]
    if name not in urls:
        raise SystemExit(f"unknown backend {name!r}: use memory, sqlite, redis, postgres, {', '.join(QUANTIZED)}")
    return urls[name]


def run(args: argparse.Namespace) -> None:
    sizes = parse_sizes(args.sizes)
    wanted = args.backends.split(",")
    rows: list[dict[str, Any]] = []
    overheads: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        total = sum(n + TIMED for n in sizes) * len(wanted)
        with tqdm(total=total, desc="ingest benchmark", unit="memory") as progress:
            for name in wanted:
                for n in sizes:
                    found, overhead = run_worker(name, n, Path(tmp) / f"{name}-{n}", progress)
                    rows += [{"backend": name, "n": n, **row} for row in found]
                    overheads += [overhead] if overhead and n == max(sizes) else []
    print_table(rows, ["backend", "n", "api", "per_s", "per_s_median_last_batches", "rss_peak_mb", "near_check_per_s"])
    if overheads:
        print_table(overheads, ["backend", "n", "recall_api_p50_ms", "kernel_p50_ms", "api_over_kernel",
                                "kernels_with_text_p50_ms", "api_over_kernels_with_text",
                                "store_many_floor_per_s", "backend_upsert_per_s"])  # fmt: skip
    write_json(args.json_path, {"rows": rows, "recall_overhead": overheads})
    if args.plot:
        plot(args.plot, rows)


def run_worker(name: str, n: int, where: Path, progress: tqdm) -> tuple[list[dict[str, Any]], Any]:  # type: ignore[type-arg]
    """One backend at one size in a process of its own, on storage of its own (a new SQLite file, Redis server or
    Postgres schema), so its peak RSS is its own: in one process, each row's peak held every earlier row's (a
    sqlite:// row read memory://'s 100k peak) and the store found the previous size's memories. The worker
    prints the memories it has written, one count a line (``_Ticks``), for the bar; its figures come back as
    JSON."""
    where.mkdir()
    out = where / "figures.json"
    with ExitStack() as stack:
        urls = backend_urls([name], stack, where, name="ingest", redis_modules=True)
        command = [sys.executable, "-m", f"{__package__}.ingest", "--worker", name, str(n),
                   _url(name, urls, where / "ingest.db"), str(out)]  # fmt: skip
        root = ROOT if __package__ == "benchmarks" else None
        with subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True) as worker:
            assert worker.stdout is not None
            for line in worker.stdout:
                if line.startswith(_TICK):
                    progress.update(int(line[len(_TICK) :]))
                else:  # anything else on its stdout (a library's print) is passed on, not taken for a count
                    sys.stderr.write(line)
        if worker.returncode:
            raise SystemExit(f"the {name} worker at n={n} failed (exit {worker.returncode}; its output is above)")
    found = json.loads(out.read_text())
    return found["rows"], found["overhead"]


_TICK = "memkit-ingest-progress "


class _Ticks:
    """The worker's progress: each count written to stdout on a line of its own, after ``_TICK`` (for the
    parent's bar)."""

    def update(self, n: int) -> None:
        print(f"{_TICK}{n}", flush=True)


def worker(n: int, url: str, out: str) -> None:
    rows, overhead = anyio.run(bench_size, url, n, _Ticks())
    Path(out).write_text(json.dumps({"rows": [{**row, "pid": os.getpid()} for row in rows], "overhead": overhead}))


def plot(path: str, rows: list[dict[str, Any]]) -> None:
    labels = list(dict.fromkeys(f"{r['backend']} {r['n']:,}" for r in rows))
    rate = {(f"{r['backend']} {r['n']:,}", r["api"]): r["per_s_median_last_batches"] for r in rows}
    series = {api: [rate.get((label, api), 0.0) for label in labels] for api in ("store_many", "store")}
    rss = {"peak RSS": [max(r["rss_peak_mb"] for r in rows if f"{r['backend']} {r['n']:,}" == label)
                        for label in labels]}  # fmt: skip
    bar_panels(path, "writing memories through the public API (pre-computed vectors)", [
        Panel("median of the last 10 batches (store(): the last 1,000)", "memories / s", labels, series, log=True),
        Panel("the process's peak resident memory", "MB", labels, rss),
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the figures as JSON here")
    parser.add_argument("--sizes", default="10k,100k", help="comma-separated sizes, e.g. 10k,100k")
    parser.add_argument(
        "--backends",
        default="memory,sqlite,redis,postgres",
        help=f"comma-separated; also {', '.join(QUANTIZED)} (memory:// with rounded vectors)",
    )
    parser.add_argument("--plot", help="draw the figures as a PNG here (needs matplotlib)")
    parser.add_argument("--worker", nargs=4, metavar=("BACKEND", "N", "URL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _, n, url, out = args.worker
        worker(int(n), url, out)
    else:
        run(args)


if __name__ == "__main__":
    main()
