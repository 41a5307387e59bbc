"""Short-term and working memory as an agent loop drives them.

    python -m benchmarks.session --json out/session.json [--plot out/session.png] [--url memory://] [--turns 200]

- A synthetic session of ``--turns`` turns (user message, assistant reply, and a tool exchange every fourth
  turn, some with two parallel calls) goes through ``short_term`` with the extractive summariser and a budget
  of 2,000 tokens; ten facts are planted in it (a decision, preferences, numbers, names, tool results).
  Between messages the loop yields once, as an agent awaiting its model does, so background folds run.
- ``add_p50_us`` / ``add_p99_us``: one ``session.add`` (folds run in the background, so they are not in it).
- ``compaction_ms``: one fold's median time (the summariser's run in its worker thread, then the write).
- ``max_rendered_tokens`` and ``over_budget``: the largest ``to_messages()`` (rendered after every turn,
  counted with the session's tokenizer) and how many renders exceeded the budget (must be 0).
- ``facts_kept``: the share of planted facts still in the rendered messages at the end.
- ``wm_set_us``, ``wm_get_us``, ``wm_context_us``: working memory's median ``set`` and ``get``, and
  ``to_context(max_tokens=500)`` over a task of 50 keys.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
from tqdm import tqdm

from ._report import figures_parser, print_table, write_json

BUDGET = 2_000
FACTS = {
    7: ("user", "Let's go with the Porto office for the offsite, that is decided.", "Porto office"),
    19: ("user", "I prefer vegetarian food, and my colleague Henrik Dahl is allergic to nuts.", "Henrik Dahl"),
    33: ("user", "The venue deposit is 2,400 euros, due on 9 March.", "2,400 euros"),
    58: ("user", "I hate early flights, never book anything before 9 am.", "early flights"),
    81: ("user", "We expect 37 attendees, maybe 40 at most.", "37 attendees"),
    104: ("user", "Our contact at the venue is Marta Oliveira.", "Marta Oliveira"),
    139: ("user", "Budget for dinners is capped at 55 euros per person.", "55 euros per person"),
    172: ("user", "Decision: the offsite runs from 14 to 16 May.", "14 to 16 May"),
}
TOOL_FACTS = {40: "Hotel Infante Sagres has 22 rooms free", 120: "train CP 133 leaves Lisbon at 10:39"}
FILLER = [
    "Okay, thanks for checking that for me, it helps a lot.",
    "Can you look into the options a bit more and come back to me?",
    "That sounds reasonable, let me think about it over lunch.",
    "Sure, no rush on that one, we still have some time.",
    "Good morning! Back at it, where were we yesterday?",
    "Interesting, I did not know that about the region.",
]


def session_turns(turns: int) -> list[list[dict[str, Any]]]:
    """Each turn's messages: the user's (a planted fact or filler), a tool exchange every fourth turn, a reply."""
    out: list[list[dict[str, Any]]] = []
    for i in range(turns):
        text = FACTS[i][1] if i in FACTS else f"{FILLER[i % len(FILLER)]} (turn {i})"
        messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
        if i % 4 == 0 or i in TOOL_FACTS:
            messages += tool_exchange(i, TOOL_FACTS.get(i))
        messages.append({"role": "assistant", "content": f"Understood. Here is what I found for step {i}, in short."})
        out.append(messages)
    return out


def tool_exchange(i: int, fact: str | None) -> list[dict[str, Any]]:
    cities = ["Porto", "Lisbon"] if i % 8 == 0 else ["Porto"]
    calls = [{"id": f"call-{i}-{c}", "type": "function",
              "function": {"name": "search", "arguments": json.dumps({"q": f"venues in {c}", "page": i})}}
             for c in cities]  # fmt: skip
    content = fact or f"{3 + i % 5} results, the first at {40 + i} euros a night"
    results = [{"role": "tool", "tool_call_id": call["id"], "content": content} for call in calls]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


class TimedSummarizer:
    """The extractive summariser, timed (a fold is its run plus one compare-and-set)."""

    def __init__(self) -> None:
        from memkit.layers.shortterm import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer()
        self.seconds: list[float] = []

    async def summarize(self, previous: str, messages: Any, *, max_tokens: int, tokenizer: Any) -> str:
        started = time.perf_counter()
        summary = await self.inner.summarize(previous, messages, max_tokens=max_tokens, tokenizer=tokenizer)
        self.seconds.append(time.perf_counter() - started)
        return summary


async def run_session(url: str, turns: int, progress: tqdm) -> dict[str, Any]:  # type: ignore[type-arg]
    from memkit import Memkit, ShortTermConfig
    from memkit.layers.shortterm import rendered_tokens

    summarizer = TimedSummarizer()
    config = ShortTermConfig(max_tokens=BUDGET, keep_last=6, summarizer=summarizer, tokenizer="estimate")
    adds, renders = [], []
    async with Memkit(url, embedder="hashing", short_term=config, layer_urls={"long_term": "memory://"}) as mem:
        session = mem.short_term.session("bench", user_id="ada")
        await session.clear()
        for messages in session_turns(turns):
            for message in messages:
                started = time.perf_counter()
                await session.add(message)
                adds.append(time.perf_counter() - started)
                await anyio.lowlevel.checkpoint()  # the agent awaits its model here; folds run meanwhile
            renders.append(rendered_tokens(await session.to_messages(), mem.short_term.tokenizer))
            progress.update(1)
        await session.wait_idle()
        final = "\n".join(str(m.get("content") or "") for m in await session.to_messages())
    facts = [f for _, _, f in FACTS.values()] + list(TOOL_FACTS.values())
    return {
        "messages": len(adds),
        "add_p50_us": float(np.percentile(adds, 50)) * 1e6,
        "add_p99_us": float(np.percentile(adds, 99)) * 1e6,
        "folds": len(summarizer.seconds),
        "compaction_ms": float(np.median(summarizer.seconds)) * 1000 if summarizer.seconds else 0.0,
        "budget": BUDGET,
        "max_rendered_tokens": max(renders),
        "over_budget": sum(r > BUDGET for r in renders),
        "facts_kept": sum(f in final for f in facts) / len(facts),
        "lost_facts": [f for f in facts if f not in final],
        "_renders": renders,
        "_adds_us": [a * 1e6 for a in adds],
    }


async def run_working(url: str, progress: tqdm) -> dict[str, Any]:  # type: ignore[type-arg]
    from memkit import Memkit

    sets, gets, contexts = [], [], []
    async with Memkit(url, embedder="hashing", layer_urls={"long_term": "memory://"}) as mem:
        task = mem.working.task("bench-task", user_id="ada")
        await task.clear()
        for i in range(2_000):
            value = {"step": i, "note": f"checked venue {i % 50}", "price": 40 + i % 50}
            started = time.perf_counter()
            await task.set(f"key-{i % 50}", value, importance=(i % 10) / 10)
            sets.append(time.perf_counter() - started)
            started = time.perf_counter()
            await task.get(f"key-{(i * 7) % 50}")
            gets.append(time.perf_counter() - started)
            if i % 10 == 0:
                started = time.perf_counter()
                await task.to_context(max_tokens=500)
                contexts.append(time.perf_counter() - started)
            progress.update(1) if i % 100 == 0 else None
        await task.clear()
    return {"wm_set_us": float(np.median(sets)) * 1e6, "wm_get_us": float(np.median(gets)) * 1e6,
            "wm_context_us": float(np.median(contexts)) * 1e6}  # fmt: skip


def plot(path: str, figures: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=False)
    top.plot(figures["_renders"], label="rendered tokens after each turn")
    top.axhline(figures["budget"], color="red", linestyle="--", label="budget")
    top.set_xlabel("turn")
    top.legend()
    bottom.plot(figures["_adds_us"], linewidth=0.6)
    bottom.set_ylabel("add (us)")
    bottom.set_xlabel("message")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


async def amain(args: argparse.Namespace) -> None:
    with tqdm(total=args.turns + 20, desc="session benchmark", unit="turn") as progress:
        figures = await run_session(args.url, args.turns, progress)
        figures |= await run_working(args.url, progress)
    shown = {k: v for k, v in figures.items() if not k.startswith("_")}
    print_table([shown], ["messages", "add_p50_us", "add_p99_us", "folds", "compaction_ms", "max_rendered_tokens",
                          "over_budget", "facts_kept", "wm_set_us", "wm_get_us", "wm_context_us"])  # fmt: skip
    if shown["lost_facts"]:
        print("lost:", shown["lost_facts"])
    write_json(args.json_path, {"url": args.url, "turns": args.turns, **shown})
    if args.plot:
        plot(args.plot, figures)


def main() -> None:
    parser = figures_parser(__doc__, plot_help="write a PNG of rendered tokens and add latency here")
    parser.add_argument("--url", default="memory://", help="storage URL (default memory://)")
    parser.add_argument("--turns", type=int, default=200)
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
