"""The entry point: storage URLs, one embedder, the memory layers over them.

``Memkit`` holds no task group across ``open()`` and ``aclose()``: frameworks open and close it in
different tasks (pytest-asyncio fixtures, FastAPI lifespans, worker hooks), and an exception raised in
the ``async with`` body must reach the caller as itself, not wrapped in an ``ExceptionGroup``. Its
one background job (writing access statistics) runs as a task of the event loop (``_background``).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self

import anyio

from memkit._background import BackgroundTask
from memkit._config import DEFAULT_URL, ConfigChoice, resolve_config
from memkit._context import Context, ContextConfig, build_context
from memkit._forget import UserForgotten, forget_user
from memkit._observe import ObserveConfig, Observer, check_messages, turn_writer
from memkit._registry import open_backend
from memkit._repr import short_repr
from memkit._split import SplitBackend
from memkit._url import StorageURL
from memkit._validation import check_flag, check_number, check_text
from memkit.backend import Backend
from memkit.embedders import Embedder, resolve_embedder
from memkit.errors import ConfigurationError, NotOpenError, ValidationError
from memkit.layers._base import Layer, describe_missing, missing_capabilities
from memkit.layers.checkpoints import CheckpointConfig, Checkpoints
from memkit.layers.episodic import EpisodicConfig, EpisodicMemory
from memkit.layers.graph import GraphConfig, KnowledgeGraph
from memkit.layers.longterm import LongTermConfig, LongTermMemory
from memkit.layers.longterm._access import AccessTracker
from memkit.layers.shortterm import ShortTermConfig, ShortTermMemory
from memkit.layers.toolcache import ToolCache, ToolCacheConfig
from memkit.layers.working import WorkingMemory
from memkit.llm._protocol import LLM

__all__ = ["DEFAULT_URL", "Memkit"]

log = logging.getLogger("memkit")

EmbedderChoice = Embedder | Literal["auto", "local", "hashing"]
LAYERS = ("long_term", "short_term", "working", "episodic", "graph", "tool_cache", "checkpoints")
_RELEASE_S = 0.25
"""The least time each backend gets to release its connections when close_timeout has run out."""


def _layer_urls(layer_urls: object, default: StorageURL) -> dict[str, StorageURL]:
    """Each layer's URL: its own from ``layer_urls`` (a mapping of layer name -> URL), else ``default``."""
    if layer_urls is None:
        layer_urls = {}
    if not isinstance(layer_urls, Mapping):
        raise ConfigurationError(f"layer_urls must be a mapping of layer name -> URL, got {type(layer_urls).__name__}")
    unknown = sorted(short_repr(name) for name in layer_urls if name not in LAYERS)
    if unknown:
        raise ConfigurationError(f"layer_urls names unknown layers {', '.join(unknown)}; layers: {', '.join(LAYERS)}")
    return {name: default if layer_urls.get(name) is None else StorageURL(layer_urls[name]) for name in LAYERS}


class Memkit:
    """``async with Memkit("sqlite:///memories.db") as mem: await mem.long_term.store(...)``.

    Or, where start-up and shut-down are separate hooks: ``mem = Memkit(...)``, ``await mem.open()``,
    later ``await mem.aclose()``. What is not given comes from the configuration (``config=PATH``,
    ``$MEMKIT_CONFIG``, ``./memkit.toml`` or ``[tool.memkit]``, and ``MEMKIT_*`` variables: ``memkit._config``);
    the URL defaults to ``$MEMKIT_URL`` or ``sqlite:///memkit.db``;
    ``layer_urls={"long_term": ...}`` gives a layer storage of its own (a records-only store such as Weaviate
    holds the layer's records, the main URL its keys: ``memkit._split``). ``short_term=ShortTermConfig(...)``
    sets the sessions' token budget, summariser and tokenizer. ``llm=`` (any ``memkit.llm.LLM``, which the
    caller opens and closes) lets the layers that can use a model do so (episodic lessons, graph extraction);
    without one everything runs offline. A layer given a config of its own (``graph=GraphConfig()``) is
    wanted: a backend that cannot serve it fails ``open()``; any other layer fails only when used. Leaving
    waits at most
    ``close_timeout`` seconds for pending access statistics, then drops them with a warning.
    """

    def __init__(
        self,
        url: str | StorageURL | None = None,
        *,
        config: ConfigChoice = None,
        embedder: EmbedderChoice | None = None,
        long_term: LongTermConfig | None = None,
        short_term: ShortTermConfig | None = None,
        tool_cache: ToolCacheConfig | None = None,
        checkpoints: CheckpointConfig | None = None,
        episodic: EpisodicConfig | None = None,
        graph: GraphConfig | None = None,
        observe: ObserveConfig | None = None,
        llm: LLM | None = None,
        layer_urls: Mapping[str, str | StorageURL] | None = None,
        close_timeout: float = 5.0,
    ) -> None:
        # Arguments > environment > file > defaults, key by key (memkit/_config.py).
        cfg = resolve_config(config, url=url, embedder=embedder, llm=llm, layer_urls=layer_urls, long_term=long_term,
                             short_term=short_term, tool_cache=tool_cache, checkpoints=checkpoints, episodic=episodic,
                             graph=graph)  # fmt: skip
        url, embedder, llm, layer_urls, self._owned = cfg.url, cfg.embedder, cfg.llm, cfg.layer_urls, cfg.owned
        long_term, short_term, tool_cache = cfg.long_term, cfg.short_term, cfg.tool_cache
        checkpoints, episodic, graph = cfg.checkpoints, cfg.episodic, cfg.graph
        # Only None means "the default": Memkit("") or Memkit(False) once opened ./memkit.db silently.
        self.url = StorageURL(url)
        urls = _layer_urls(layer_urls, self.url)
        self._close_timeout = check_number(close_timeout, "close_timeout", minimum=0, allow_inf=True)
        if long_term is not None and not isinstance(long_term, LongTermConfig):
            raise ValidationError(f"long_term must be a LongTermConfig or None, got {type(long_term).__name__}")
        self.embedder = resolve_embedder(embedder)
        self._backends: dict[StorageURL, Backend] = {u: open_backend(u) for u in dict.fromkeys(urls.values())}
        for backend in self._backends.values():
            backend.owner = f"Memkit({str(self.url)!r})"
        layer_backend = self._layer_backends(urls)
        self._access = AccessTracker()
        self._long_term = LongTermMemory(layer_backend["long_term"], self.embedder, long_term, self._access)
        self._short_term = ShortTermMemory(layer_backend["short_term"], short_term)
        self._working = WorkingMemory(layer_backend["working"], lambda: self._short_term.tokenizer)
        self._tool_cache = ToolCache(layer_backend["tool_cache"], tool_cache)
        self._checkpoints = Checkpoints(layer_backend["checkpoints"], checkpoints)
        if llm is not None and not isinstance(llm, LLM):
            raise ValidationError(f"llm must be a memkit.llm.LLM (e.g. OpenAIChat) or None, got {type(llm).__name__}")
        self.llm = llm
        self._episodic = EpisodicMemory(layer_backend["episodic"], self.embedder, episodic, llm=llm)
        self._graph = KnowledgeGraph(layer_backend["graph"], graph, llm=llm, embedder=self.embedder)
        self._layers: list[Layer] = [
            self._long_term, self._short_term, self._working, self._episodic, self._graph, self._tool_cache,
            self._checkpoints,
        ]  # fmt: skip
        given = {"long_term": long_term, "short_term": short_term, "tool_cache": tool_cache,
                 "checkpoints": checkpoints, "episodic": episodic, "graph": graph}  # fmt: skip
        self._wanted = frozenset(name for name, config in given.items() if config is not None)
        self._context_config = ContextConfig()
        if observe is not None and not isinstance(observe, ObserveConfig):
            raise ValidationError(f"observe must be a memkit.ObserveConfig or None, got {type(observe).__name__}")
        self._observe_config = observe or ObserveConfig()
        self._observer: Observer | None = None
        self._flusher: BackgroundTask | None = None
        self._unserved: dict[str, ConfigurationError] = {}
        """Layers whose backend lacks what they need: using one raises its error."""
        self._open = False

    def _layer_backends(self, urls: Mapping[str, StorageURL]) -> dict[str, Backend]:
        """Each layer's backend. A layer given a records-only URL (Pinecone, Weaviate) keeps its records
        there and its few keys (the collection's embedder, conversation threads) under the main URL."""
        main = self._backends[self.url]
        chosen: dict[str, Backend] = {}
        for name, url in urls.items():
            backend = self._backends[url]
            if url != self.url and not backend.capabilities.kv and main.capabilities.kv:
                backend = SplitBackend(records=backend, keys=main)
            chosen[name] = backend
        return chosen

    @property
    def backend(self) -> Backend:
        """The backend of the main URL."""
        return self._backends.get(self.url, self._long_term.backend)

    @property
    def long_term(self) -> LongTermMemory:
        self._require_open("long_term")
        return self._long_term

    @property
    def short_term(self) -> ShortTermMemory:
        self._require_open("short_term")
        return self._short_term

    @property
    def working(self) -> WorkingMemory:
        self._require_open("working")
        return self._working

    @property
    def tool_cache(self) -> ToolCache:
        self._require_open("tool_cache")
        return self._tool_cache

    @property
    def episodic(self) -> EpisodicMemory:
        self._require_open("episodic")
        return self._episodic

    @property
    def graph(self) -> KnowledgeGraph:
        self._require_open("graph")
        return self._graph

    @property
    def checkpoints(self) -> Checkpoints:
        self._require_open("checkpoints")
        return self._checkpoints

    async def forget_user(self, user_id: str) -> UserForgotten:
        """Erase one user from every layer: memories, episodes, graph, working memory, checkpoints and short-term
        sessions (whatever their agent or session), each on its layer's store; the shared tool cache is kept.
        Returns what was deleted per layer. Run it again after a failure: what is left is deleted then."""
        self._require_open("forget_user")
        return await forget_user(self, user_id)

    async def context(
        self,
        *,
        user_id: str,
        query: str,
        session_id: str | None = None,
        task_id: str | None = None,
        budget_tokens: int = 1_000,
        config: ContextConfig | None = None,
        wait_for_writes: bool = False,
    ) -> Context:
        """What memkit knows that bears on ``query``, for the next model call: the user's most relevant
        long-term memories (at most 5, only those close to the best), the working state of ``task_id`` (or
        of the session), lessons from similar past episodes and the user's graph neighbourhood, read at once
        and rendered as one block within ``budget_tokens`` (``Context.text``). A layer that fails or is slow
        is left out and named in ``Context.errors``. See ``memkit.ContextConfig`` for the budget rule.
        ``wait_for_writes=True`` first waits for this user's observed turns to be written."""
        self._require_open("context")
        user_id = check_text(user_id, "user_id")  # before the flush: a list there raised TypeError (unhashable)
        if config is not None and not isinstance(config, ContextConfig):
            raise ValidationError(f"config must be a memkit.ContextConfig or None, got {type(config).__name__}")
        if check_flag(wait_for_writes, "wait_for_writes") and self._observer is not None:
            await self._observer.flush(user_id)  # read after write: what this user said is in
        return await build_context(self, user_id=user_id, query=query, session_id=session_id, task_id=task_id,
                                   budget_tokens=budget_tokens, config=config or self._context_config,
                                   tokenizer=self._short_term.tokenizer)  # fmt: skip

    async def observe(
        self,
        *,
        user_id: str,
        messages: Sequence[Mapping[str, Any]],
        session_id: str | None = None,
        wait: bool = True,
    ) -> None:
        """Feed a finished turn (user and assistant messages, tool calls and results): to the session's
        short-term memory now (when ``session_id`` is given), and to the background writer, which decides
        later what is worth remembering (``ObserveConfig.on_event`` hears each decision). Returns once the
        turn is queued; a full queue waits for room, or raises ``WriterBusyError`` with ``wait=False``."""
        self._require_open("observe")
        # Every argument is checked before the session is written: a refusal after it left the turn half-taken.
        user_id = check_text(user_id, "user_id")
        waits = check_flag(wait, "wait")
        checked = check_messages(messages)
        from memkit.extract import ObservedTurn

        turn = ObservedTurn(messages=checked, user_id=user_id, session_id=session_id)
        observer = self._observer  # kept: closing drops the client's reference while this call waits
        assert observer is not None  # set by open()
        # Its place in the queue first: a full queue refuses (wait=False) before the session is written, and
        # once it is written the turn is queued without a wait (nor a cancellation) in between.
        await observer.reserve(wait=waits)
        try:
            if session_id is not None:  # session() checks session_id; add_many checks every message, then writes
                await self.short_term.session(session_id, user_id=user_id).add_many(checked)
            observer.put(turn)
        except BaseException:
            observer.release()
            raise

    async def flush(self, user_id: str | None = None) -> None:
        """Wait until the observed turns queued so far (of ``user_id``, when given) are written."""
        self._require_open("flush")
        if user_id is not None:
            user_id = check_text(user_id, "user_id")  # a list raised TypeError (unhashable); 5 waited for nobody
        if self._observer is not None:
            await self._observer.flush(user_id)

    def _require_open(self, what: str) -> None:
        if not self._open:
            raise NotOpenError(
                f"Memkit({str(self.url)!r}) is not open (never opened, or closed since), so mem.{what} cannot be used: "
                "use 'async with Memkit(...) as mem:' or 'await mem.open()' first"
            )
        if what in self._unserved:
            raise self._unserved[what]

    # -- lifecycle ------------------------------------------------------------------------------------
    async def open(self) -> Self:
        """Connect every backend, check each layer can work on its backend, set the layers up."""
        if self._open:
            return self
        opened: list[Backend] = []
        try:
            for backend in self._backends.values():
                await backend.open()
                opened.append(backend)
            self._unserved = {}
            for layer in self._layers:
                missing = missing_capabilities(layer.needs, layer.backend.capabilities)
                if missing:  # the other layers still work (plain Redis serves the key-value layers)
                    error = ConfigurationError(
                        f"the {layer.name} layer needs {describe_missing(missing)}, which {layer.backend.url} does "
                        f"not provide; give the layer a URL that does: Memkit(..., layer_urls={{{layer.name!r}: URL}})"
                    )
                    if layer.name in self._wanted:
                        raise error
                    self._unserved[layer.name] = error
                    continue
                await layer.setup()
        except BaseException:
            with anyio.CancelScope(shield=True):
                for backend in opened:
                    await backend.aclose()
            raise
        self._flusher = BackgroundTask.start(self._access.run)
        write = turn_writer(self._long_term, self._graph, self.llm, self._observe_config)
        self._observer = Observer(write, self._observe_config)
        self._observer.start()
        self._open = True
        return self

    async def aclose(self) -> None:
        """Write pending access statistics (within ``close_timeout``), close the layers and backends."""
        if not self._open:
            return
        self._open = False
        # Shielded: a cancelled caller must still release connections; bounded: a server that is gone
        # must not hold the caller for longer than close_timeout.
        deadline = anyio.current_time() + self._close_timeout  # one budget for all of it, not one per step
        with anyio.CancelScope(shield=True):
            await self._drain_observer(deadline)
            if self._flusher is not None:
                await self._flusher.stop()
                self._flusher = None
            with anyio.CancelScope(deadline=deadline) as scope:
                await self._access.flush()
            if scope.cancelled_caught:
                dropped = self._access.drop()
                warnings.warn(
                    f"memkit: gave up writing access statistics after {self._close_timeout} s (close_timeout); "
                    f"{dropped} dropped", RuntimeWarning, stacklevel=2,
                )  # fmt: skip
            for layer in self._layers:
                if layer.name not in self._unserved:
                    await layer.aclose()
            for backend in self._backends.values():
                # What is left of the budget; a moment at least, so a backend always starts releasing.
                with anyio.CancelScope(deadline=max(deadline, anyio.current_time() + _RELEASE_S)):
                    await backend.aclose()
            for client in self._owned:  # the embedder and model made from the configuration belong to Memkit
                await client.aclose()

    async def _drain_observer(self, deadline: float) -> None:
        """Write the observed turns still queued, within the close budget; say how many were not."""
        if self._observer is None:
            return
        observer, self._observer = self._observer, None
        with anyio.CancelScope(deadline=deadline):
            await observer.aclose()
        if observer.pending:
            warnings.warn(f"memkit: gave up writing {observer.pending} observed turns after {self._close_timeout} s "
                          "(close_timeout); call await mem.flush() before closing to wait for them",
                          RuntimeWarning, stacklevel=3)  # fmt: skip

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Memkit({str(self.url)!r})"
