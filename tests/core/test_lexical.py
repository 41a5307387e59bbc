"""The numba BM25 index against a plain-Python BM25, through random adds, replaces and removes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkit.scoring._lexical import K1, B, Bm25Index
from memkit.text import tokenize

WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape"]


def reference_bm25(docs: dict[int, list[str]], query: list[str], n_rows: int) -> np.ndarray:
    out = np.zeros(n_rows, np.float64)
    live = {row: tokens for row, tokens in docs.items() if tokens}
    if not live:
        return out
    avg = sum(map(len, live.values())) / len(live)
    for term, qtf in Counter(query).items():
        df = sum(term in tokens for tokens in live.values())
        if not df:
            continue
        idf = math.log(1 + (len(live) - df + 0.5) / (df + 0.5)) * qtf
        for row, tokens in live.items():
            tf = tokens.count(term)
            if tf:
                out[row] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(tokens) / avg))
    return out


operation = st.tuples(
    st.sampled_from(["add", "remove"]), st.integers(0, 30), st.lists(st.sampled_from(WORDS), max_size=6)
)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(operation, max_size=80), query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_matches_reference(ops: list[tuple[str, int, list[str]]], query: list[str]) -> None:
    index = Bm25Index()
    docs: dict[int, list[str]] = {}
    for op, row, tokens in ops:
        if op == "add":
            index.add(row, tokens)
            docs[row] = tokens
        else:
            index.remove(row)
            docs.pop(row, None)
    got, matched = index.score(query, 31)
    want = reference_bm25(docs, query, 31)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert matched == bool(want.any())


def test_tokenizer_stems_and_drops_stop_words() -> None:
    assert tokenize("The runners were running to the RUNNING track!") == ["runner", "run", "run", "track"]
    assert tokenize("") == [] and tokenize("the and of") == []


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(operation, max_size=60), query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
       keep=st.sets(st.integers(0, 30)))  # fmt: skip
def test_scoring_candidate_rows_keeps_their_scores_and_zeroes_the_rest(
    ops: list[tuple[str, int, list[str]]], query: list[str], keep: set[int]
) -> None:
    """Scoring a scope's rows only: the same scores there (IDF is the whole index's), nothing elsewhere."""
    index = Bm25Index()
    for op, row, tokens in ops:
        index.add(row, tokens) if op == "add" else index.remove(row)
    rows = np.array(sorted(keep), np.int64)
    everything, _ = index.score(query, 31)
    got, matched = index.score(query, 31, rows)
    want = np.zeros(31, np.float32)
    want[rows] = everything[rows]
    np.testing.assert_array_equal(got, want)
    assert matched == bool(want.any())


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(operation, max_size=40), batch=st.dictionaries(st.integers(0, 30), st.lists(st.sampled_from(WORDS),
       max_size=6), max_size=12), query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))  # fmt: skip
def test_adding_a_batch_scores_as_adding_one_by_one(
    ops: list[tuple[str, int, list[str]]], batch: dict[int, list[str]], query: list[str]
) -> None:
    """A cache loads its rows with ``add_many``; a row in the batch replaces what it held, as ``add`` does."""
    one_by_one, batched = Bm25Index(), Bm25Index()
    for op, row, tokens in ops:
        for index in (one_by_one, batched):
            index.add(row, tokens) if op == "add" else index.remove(row)
    for row, tokens in batch.items():
        one_by_one.add(row, tokens)
    batched.add_many(list(batch.items()))
    np.testing.assert_allclose(batched.score(query, 31)[0], one_by_one.score(query, 31)[0], rtol=1e-6)
    assert len(batched) == len(one_by_one)


def test_the_index_leaves_nothing_for_the_cycle_collector_to_walk() -> None:
    """Every full collection walks each object the collector tracks: with a tracked array per posting column
    (three a term), a SQLite load of 100k memories spent ~40% of its time in the collector."""
    import gc

    index = Bm25Index()
    gc.collect()
    before = len(gc.get_objects())
    index.add_many([(row, [f"name{row}", "shared", f"word{row % 7}"]) for row in range(2_000)])
    index.remove(5)  # removes and sweeps build columns again
    index.add_many([(5, ["shared", "again"])])
    gc.collect()
    assert len(index._ids) > 2_000
    assert len(gc.get_objects()) - before < 50
    scores, matched = index.score(["shared"], 2_000)
    assert matched and scores[5] > 0 and scores[6] > 0


@given(st.lists(st.text(alphabet="abcdeéfgnorsty ,.'0123", max_size=60), min_size=1, max_size=20))
@settings(max_examples=60, deadline=None)
def test_remembered_stems_tokenize_as_the_stemmer_does(texts: list[str]) -> None:
    """Stems are remembered across texts (and forgotten when too many): the tokens never change."""
    import memkit.text as text_module

    stemmer = text_module._stemmer()

    def reference(text: str) -> list[str]:
        words = [w for w in text_module._WORD.findall(text.lower()) if w not in text_module.STOP_WORDS]
        return list(stemmer.stemWords(words)) if words else []

    limit = text_module._MAX_STEMS
    try:
        text_module._MAX_STEMS = 5  # type: ignore[misc]  # starts over often
        for text in texts + texts:  # seen, then seen again
            assert tokenize(text) == reference(text)
    finally:
        text_module._MAX_STEMS = limit  # type: ignore[misc]


@pytest.mark.parametrize("by_rows", [True, False])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, max_size=80), query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
       keep=st.sets(st.integers(0, 40)))  # fmt: skip
def test_both_ways_of_scoring_candidate_rows_agree_with_the_reference(
    monkeypatch: pytest.MonkeyPatch, by_rows: bool, ops: list[tuple[str, int, list[str]]], query: list[str],
    keep: set[int],
) -> None:  # fmt: skip
    """A scope's rows are scored from their own terms when that is cheaper than the query terms' postings, else
    from the postings: either way the reference's scores, bit for bit the same, rows past the index included."""
    monkeypatch.setattr(Bm25Index, "_by_rows_cheaper", lambda self, rows, postings: by_rows)
    index = Bm25Index()
    docs: dict[int, list[str]] = {}
    batch: dict[int, list[str]] = {}  # adds go in batches (a term's id freed and taken again within one)
    for op, row, tokens in ops:
        if op == "add":
            batch[row] = docs[row] = tokens
            continue
        index.add_many(list(batch.items()))
        batch.clear()
        index.remove(row)
        docs.pop(row, None)
    index.add_many(list(batch.items()))
    rows = np.array(sorted(keep), np.int64)
    got, matched = index.score(query, 41, rows)
    want = np.zeros(41)
    want[rows] = reference_bm25(docs, query, 41)[rows]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert matched == bool(want.any())
    monkeypatch.setattr(Bm25Index, "_by_rows_cheaper", lambda self, rows, postings: not by_rows)
    np.testing.assert_array_equal(index.score(query, 41, rows)[0], got)


def test_row_terms_are_packed_when_rewrites_leave_them_mostly_garbage() -> None:
    """Each rewrite of a row leaves its old terms behind until the arrays are packed; packing keeps every
    row's scores."""
    index = Bm25Index()
    index.add_many([(row, [f"w{row}", "shared"]) for row in range(100)])
    before, _ = index.score(["shared", "w7"], 100, np.arange(100))
    for _ in range(40):
        index.add_many([(row, [f"w{row}", "shared"]) for row in range(100)])
    assert index._rows.used <= 4 * index._rows.live
    after, _ = index.score(["shared", "w7"], 100, np.arange(100))
    np.testing.assert_array_equal(after, before)
    assert len(index._terms) == 101 and len(index) == 100


def test_a_term_of_one_row_keeps_no_postings_of_its_own_and_scores_as_the_reference() -> None:
    """A term held by one row (a name, a number) keeps its posting in the index's columns, not in a struct of
    three buffers (~400 bytes a term; most distinct terms of a collection are such); a second row moves it
    into postings of its own, and removing rows frees it. Scores stay the reference's throughout."""
    index = Bm25Index()
    docs = {row: [f"id{row}", "shared", f"pair{row // 2}"] for row in range(40)}
    index.add_many(list(docs.items()))
    single = [index._ids[f"id{row}"] for row in range(40)]
    assert all(index._postings[term_id] is None for term_id in single)
    assert all(index._postings[index._ids[f"pair{row}"]] is not None for row in range(20))
    index.add_many([(40, ["id3", "new"])])  # id3's second row: promoted, its first posting kept
    docs[40] = ["id3", "new"]
    index.remove(7)  # id7 freed with its row
    del docs[7]
    index.add_many([(41, ["fresh"])])  # may take id7's freed id
    docs[41] = ["fresh"]
    assert index._postings[index._ids["id3"]] is not None and "id7" not in index._ids
    rows = np.arange(42, dtype=np.int64)
    for query in (["id3"], ["id5", "shared"], ["fresh", "pair3"], ["id7"]):
        want = reference_bm25(docs, query, 42)
        np.testing.assert_allclose(index.score(query, 42)[0], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(index.score(query, 42, rows)[0], want, rtol=1e-4, atol=1e-5)


def test_numbers_are_their_own_stems_and_not_remembered() -> None:
    """Ids and numbers are mostly unique: remembered, 100k numbered notes held 16 MB of stems."""
    import memkit.text as text_module

    assert tokenize("order 918273645 shipped 3pm") == ["order", "918273645", "ship", "3pm"]
    assert "918273645" not in text_module._STEMS and "shipped" in text_module._STEMS


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80) | st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_words_of_ascii_text_are_the_regexs_without_it(text: str) -> None:
    """ASCII text is split by a byte table instead of the regex: every word, and every dedupe key, is the same."""
    import unicodedata

    import memkit.text as text_module

    assert text_module._lower_words(text) == text_module._WORD.findall(text.lower())
    folded = unicodedata.normalize("NFKC", text).casefold()
    assert text_module.normalize_for_dedupe(text) == " ".join(text_module._WORD.findall(folded))


def test_ascii_punctuation_underscores_and_controls_split_words() -> None:
    from memkit.text import normalize_for_dedupe

    assert tokenize("Tea_time!\tAT 5pm;\x00café's") == ["tea", "time", "5pm", "café"]
    assert normalize_for_dedupe("Hello,\nWORLD__42 ") == "hello world 42"


def test_a_row_version_wraps_past_32_bits_and_stale_postings_stay_stale() -> None:
    """Row versions are uint32 (8 MB less at 100k notes than int64): a rewrite at the last version wraps to
    0, without an overflow warning, and the row's old postings still count for nothing."""
    index = Bm25Index()
    index.add_many([(row, ["alpha", f"id{row}"]) for row in (0, 2)])
    index._doc_version[1] = 2**32 - 1  # as if row 1 had been rewritten that often (its postings swept meanwhile)
    index.add_many([(1, ["alpha", "beta"])])
    index.add_many([(1, ["beta", "gamma"])])  # removes version 2**32 - 1's postings: the version wraps to 0
    assert int(index._doc_version[1]) == 0
    docs = {0: ["alpha", "id0"], 1: ["beta", "gamma"], 2: ["alpha", "id2"]}
    for query in (["alpha"], ["beta"], ["gamma", "id2"]):
        want = reference_bm25(docs, query, 3)
        np.testing.assert_allclose(index.score(query, 3)[0], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(index.score(query, 3, np.arange(3))[0], want, rtol=1e-4, atol=1e-5)
