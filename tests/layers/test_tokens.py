"""The token estimate against tiktoken (real encodings, offline), and choosing a tokenizer."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from memkit.errors import ConfigurationError
from memkit.tokens import EstimateTokenizer, TiktokenTokenizer, Tokenizer, load_tokenizer, resolve_tokenizer

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 1_500
DIALOGUE = """\
Priya: Morning! Did the pottery class go well? You said you'd try the wheel this time.
Tomas: It did, thanks. I made two bowls; one cracked in the kiln, the other is drying on my shelf.
Priya: Nice. I'm still training for the half marathon on 14 September, running 32 km a week now.
Assistant: I booked the 7:45 flight to Lisbon (TP1351) for 2 adults; total EUR 1,284.50, card ending 4421.
User: Actually, let's go with the aisle seats instead, and I'd prefer a vegetarian meal. Check the hotel too?
"""


def tool_row(rng: random.Random) -> dict[str, object]:
    city = rng.choice(["Paris", "Berlin", "Tokyo"])
    return {"id": str(uuid.UUID(int=rng.getrandbits(128))), "price": round(rng.random() * 1000, 2), "city": city}


def sample_chunks() -> list[str]:
    """English (the README, a dialogue), Python (memkit's own source) and JSON tool output."""
    texts = [(ROOT / "README.md").read_text(), DIALOGUE * 4]
    texts += [path.read_text() for path in sorted((ROOT / "memkit").rglob("*.py"))]
    rng = random.Random(1)
    for _ in range(20):
        rows = [tool_row(rng) for _ in range(8)]
        texts.append(json.dumps(rows))
    chunks = [text[at : at + CHUNK] for text in texts for at in range(0, len(text), CHUNK)]
    return [chunk for chunk in chunks if len(chunk.strip()) > 200]


@pytest.mark.usefixtures("tiktoken_offline")
@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_the_estimate_is_never_more_than_ten_percent_under_tiktoken(encoding: str) -> None:
    exact, estimate = TiktokenTokenizer(encoding), EstimateTokenizer()
    ratios = [estimate.count(chunk) / exact.count(chunk) for chunk in sample_chunks()]
    assert len(ratios) > 100
    assert min(ratios) >= 0.9, f"under-counted a chunk by {1 - min(ratios):.0%}"
    mean = sum(ratios) / len(ratios)
    assert 1.0 < mean < 1.3, f"on average {mean:.2f}x the exact count: too generous wastes the budget"


@pytest.mark.usefixtures("tiktoken_offline")
def test_tiktoken_counts_exactly() -> None:
    import tiktoken

    text = "I booked the 7:45 flight to Lisbon for EUR 1,284.50. <|endoftext|> stays text"
    assert TiktokenTokenizer("cl100k_base").count(text) == len(
        tiktoken.get_encoding("cl100k_base").encode(text, disallowed_special=())
    )


def test_the_estimate_counts_nothing_as_nothing_and_grows_with_text() -> None:
    tokenizer = EstimateTokenizer()
    assert tokenizer.count("") == 0
    assert 0 < tokenizer.count("hello") < tokenizer.count("hello there, how are you?")
    assert tokenizer.count("数据库连接失败") >= 7  # one a character at least, outside ASCII


def test_auto_uses_tiktoken_only_when_its_encoding_is_on_disk(
    tiktoken_offline: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert isinstance(resolve_tokenizer("auto"), TiktokenTokenizer)  # installed, and its files cached
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: "auto" must not download
    assert isinstance(resolve_tokenizer("auto"), EstimateTokenizer)
    assert isinstance(resolve_tokenizer("tiktoken"), TiktokenTokenizer)  # asked for: it may download


def test_choosing_a_tokenizer() -> None:
    assert isinstance(resolve_tokenizer("estimate"), EstimateTokenizer)

    class Words:
        name = "words"

        def count(self, text: str) -> int:
            return len(text.split())

    words = Words()
    assert isinstance(words, Tokenizer)
    assert resolve_tokenizer(words) is words
    with pytest.raises(ConfigurationError, match="tokenizer must be"):
        resolve_tokenizer("gpt2")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_an_encoding_that_cannot_load_is_an_error_or_the_estimate() -> None:
    with pytest.raises(ConfigurationError, match="TIKTOKEN_CACHE_DIR"):
        await load_tokenizer(TiktokenTokenizer("no_such_encoding"), fallback=False)
    assert isinstance(await load_tokenizer(TiktokenTokenizer("no_such_encoding"), fallback=True), EstimateTokenizer)


def awkward_texts() -> dict[str, str]:
    """What agents get back from tools and scrapers, where a naive estimate falls far short."""
    import base64

    rng = random.Random(0)
    return {
        "newlines": "\n" * 10_000,
        "indented": "\n        " * 2_000,
        "spaces": " " * 10_000,
        "tabs": "\t" * 5_000,
        "base64": base64.b64encode(rng.randbytes(3_000)).decode(),
        "hex": rng.randbytes(2_000).hex(),
        "mixed case": "".join(rng.choice("AbCdEfGhIjKlMnOp") for _ in range(3_000)),
        "emoji": "😀🎉🚀👍🏽❤️🔥✨🙈" * 200,
        "cjk": "数据库连接失败，请稍后重试。我们已经记录了这个问题。" * 100,  # noqa: RUF001
        "html": '<div class="row">\n  <span id="x12">Price: 45 EUR</span>\n</div>\n' * 100,
        "log": "2026-12-01T14:35:22.123Z INFO  [worker-3] request_id=7f3a9c1e latency_ms=123 status=200\n" * 100,
    }


@pytest.mark.usefixtures("tiktoken_offline")
@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_the_estimate_is_not_fooled_by_whitespace_blobs_emoji_or_cjk(encoding: str) -> None:
    exact, estimate = TiktokenTokenizer(encoding), EstimateTokenizer()
    short = {name: estimate.count(text) / exact.count(text) for name, text in awkward_texts().items()}
    assert min(short.values()) >= 0.9, {name: round(r, 2) for name, r in short.items() if r < 0.9}
