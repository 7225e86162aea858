"""LangGraph long-term memory (``BaseStore``) on the saver's LMDB environment.

>>> from deltalog.engine import DeltaLogSaver  # doctest: +SKIP
>>> with DeltaLogSaver.from_path("app.lmdb") as saver:  # doctest: +SKIP
...     graph = builder.compile(checkpointer=saver, store=saver.memory_store())

The adapter: it validates a batch, embeds what must be embedded, then hands
plain data to :mod:`deltalog.engine.memory_io` inside one read or one write
transaction. Decisions over plain data live in :mod:`deltalog.engine.memory_core`.
No LMDB call is made here. See docs/memory.md.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from deltalog.engine import keys
from deltalog.engine import memory_core as core
from deltalog.engine.cache import gc_paused
from deltalog.engine.env import Environment
from deltalog.engine.errors import DeltaLogError, EmbeddingError, ItemValueError
from deltalog.engine.memory_gets import MISSING
from deltalog.engine.memory_io import (
    Changes,
    ItemRecord,
    MemoryReader,
    MemoryWriter,
    VectorRecord,
    apply_changes,
    directory,
    text_digest,
)
from deltalog.engine.memory_search import MemorySearch, _item
from deltalog.engine.memory_ttl import Stopped, SweepCount, SweeperFuture
from deltalog.engine.shared import ClosingContext, OpenContext, open_path, release_shared
from deltalog.engine.write_txn import WriteTxn
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

if TYPE_CHECKING:
    from deltalog.engine.env_files import Durable
    from deltalog.engine.reports import VerifyReport

__all__ = ["DeltaLogStore", "Stopped", "SweepCount", "SweeperFuture", "verify_memory"]

logger = logging.getLogger(__name__)

_Key = tuple[tuple[str, ...], str]


class _SaverLike(Protocol):
    """What :meth:`DeltaLogStore.from_saver` needs of a saver: its environment."""

    @property
    def env(self) -> Environment: ...


class _PutPlan:
    """One checked put of a batch (plain slots: every put makes one)."""

    __slots__ = ("namespace", "paths", "ttl", "value", "vectors")

    def __init__(
        self,
        namespace: tuple[str, ...],
        value: dict[str, Any] | None,
        ttl: float | None,
        paths: list[tuple[str, list[str] | str]] | None,  # None: index off for this put
    ) -> None:
        self.namespace = namespace
        self.value = value
        self.ttl = ttl
        self.paths = paths
        self.vectors: list[VectorRecord] = []


class _Plan:
    """A checked batch: its ops, its puts by (namespace, key), the query vectors."""

    __slots__ = ("ops", "puts", "puts_only", "queries")

    def __init__(self, ops: list[Op], puts: dict[_Key, _PutPlan], puts_only: bool) -> None:
        self.ops = ops
        self.puts = puts
        #: Every op is a put: the batch reads nothing (every result is None).
        self.puts_only = puts_only
        self.queries: dict[str, list[float]] = {}


@dataclass
class _Refresh:
    namespace: tuple[str, ...]
    key: str


class DeltaLogStore(MemorySearch, ClosingContext, BaseStore):
    """LangGraph's ``BaseStore`` on a deltalog LMDB environment (sync and async).

    Items live in the same file as the checkpoints: one backup, one copy.
    Every batch runs in one transaction: its reads see the state before its
    writes, and all of its puts commit together, durably (R8).

    Args:
        env: The open environment (e.g. ``saver.env``).
        index: Semantic search: ``{"dims": int, "embed": ..., "fields": [...]}``
            as LangGraph's ``IndexConfig`` (``embed`` is anything
            ``ensure_embeddings`` takes; ``fields`` defaults to ``["$"]``).
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool,
            "sweep_interval_minutes": int}``.
        clock: Seconds since the epoch (``time.time`` by default); tests pass
            their own to move time without sleeping.
        owns_env: Close the environment with this store.
    """

    supports_ttl = True

    def __init__(
        self,
        env: Environment,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], float] | None = None,
        owns_env: bool = False,
    ) -> None:
        self.env = env
        self.owns_env = owns_env
        self._clock = clock or time.time
        self.ttl_config = _check_ttl_config(ttl)
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Embeddings | None = None
        self._fields: list[tuple[str, list[str] | str]] = []
        if index is not None:
            self.index_config, self.embeddings, self._fields = _check_index(index)
        self._directory = directory(env)
        #: Namespaces (tuples) that passed validate_labels, so a get skips it.
        self._valid: set[tuple[str, ...]] = set()
        #: Namespaces that passed BaseStore.put's checks (see :meth:`put`).
        self._put_namespaces: set[tuple[str, ...]] = set()
        self._sweeper: threading.Thread | None = None
        self._sweep_stop = threading.Event()
        self._sweep_task: asyncio.Task[None] | None = None

    # -- construction and life cycle ----------------------------------------------------

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], float] | None = None,
        durable: Durable = True,
        map_size: int = 64 * 1024**2,
        max_map_size: int = 1024**4,
        compress_threshold: int | None = 512,
        group_commit: bool = True,
        pack_turns: bool = True,
        max_readers: int = 126,
    ) -> DeltaLogStore:
        """Open (or create) the store at ``path``.

        Opening a path this process already has open (as a saver or a store,
        with the same options) shares that one environment.

        Args:
            path: Folder of the store; created with mode 0700 if missing. A
                leading ``~`` is expanded. ``":memory:"`` opens a new temporary
                store, private to this object, whose folder is deleted when it
                closes (as for ``DeltaLogSaver.from_path``).
            index: Semantic search configuration (see the class).
            ttl: TTL configuration (see the class).
            clock: Seconds since the epoch, for tests.
            durable: fsync every commit (default); ``"normal"`` or False as for
                ``DeltaLogSaver.from_path``.
            map_size: Initial LMDB map size; grows automatically.
            max_map_size: Cap of automatic growth.
            compress_threshold: Records at least this large are zstd-compressed.
            group_commit: Let concurrent writers share a commit.
            pack_turns: Pack a thread's older checkpoint and write records into
                compressed records of up to 15 checkpoints, sized to fill LMDB
                pages (format 14; ~40 % fewer bytes a chat turn, docs/design.md
                "Turn packs"). False writes none (packs already stored still
                read).
            max_readers: LMDB reader slots (see ``DeltaLogSaver.from_path``).

        Returns:
            An open store; use it as a context manager or call :meth:`close`.

        Raises:
            InvalidInputError: A bad path, option, index or TTL config, before anything is created.
        """
        from deltalog.engine.config import check_open_options
        from deltalog.engine.env_files import store_folder

        path = store_folder(path)
        check_open_options(compress_threshold=compress_threshold, cache_bytes=0)
        # The configs are checked before the environment (and its folder) is created.
        _check_ttl_config(ttl)
        checked = None if index is None else _check_index(index)
        options = {
            "map_size": map_size,
            "max_map_size": max_map_size,
            "durable": durable,
            "compress_threshold": compress_threshold,
            "group_commit": group_commit,
            "pack_turns": pack_turns,
            "max_readers": max_readers,
        }
        env, temp_dir = open_path(path, options)
        try:
            out = cls(env, ttl=ttl, clock=clock)
        except BaseException:
            release_shared(env)
            if temp_dir is not None:
                shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        out._opened_at(temp_dir)
        if checked is not None:
            out.index_config, out.embeddings, out._fields = checked
        return out

    @classmethod
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], **options: Any
    ) -> OpenContext[DeltaLogStore]:
        """Open the store at a path for a ``with`` or ``async with`` block, like ``SqliteStore``.

        The store opens on entering the block and closes on leaving it.
        ``async with`` opens and closes it in a worker thread, so code written
        for ``AsyncSqliteStore.from_conn_string`` or
        ``AsyncPostgresStore.from_conn_string`` works unchanged.

        Example:
            >>> with DeltaLogStore.from_conn_string("~/memory.lmdb") as store:  # doctest: +SKIP
            ...     graph = builder.compile(store=store)

        Args:
            conn_string: The store's folder, as for :meth:`from_path` (``~``
                expanded; ``":memory:"`` is a temporary store).
            **options: Keyword arguments of :meth:`from_path` (``index``,
                ``ttl``, ``durable``, ...).

        Returns:
            A context manager (sync and async) that yields an open store.
        """
        return OpenContext(functools.partial(cls.from_path, conn_string, **options))

    @classmethod
    def from_saver(
        cls,
        saver: _SaverLike,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> DeltaLogStore:
        """A store on the environment an open saver uses (one file for both).

        The store borrows the environment: it is usable while the saver is
        open, and closing it leaves the saver's environment open.
        """
        return cls(saver.env, index=index, ttl=ttl, clock=clock)

    def close(self) -> None:
        """Stop the sweeper and release the environment (closed with its last user)."""
        self.stop_ttl_sweeper(timeout=5)
        self._let_go()

    async def _astop(self) -> None:
        """``async with`` exit: the sweeper task stops on the loop before the store closes."""
        await self.astop_ttl_sweeper()

    # -- batches ------------------------------------------------------------------------

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Store or update an item: ``BaseStore.put`` (the same checks, one put in one batch).

        A put into a namespace this store put into before, without an index,
        is planned and run as ``batch`` would run it, without the checks of
        the namespace that passed then nor the batch's loop over ops (~12 %
        of a put's CPU). Every other put is ``BaseStore.put``, and so is every
        put of a subclass that overrides ``batch``.

        Args:
            namespace: Hierarchical path for the item, e.g. ``("documents", "user123")``.
            key: Unique identifier within the namespace.
            value: The item's data: a dict of JSON values (string keys).
            index: The fields to embed for semantic search: None uses the
                index's ``fields``, False none, or a list of field paths
                (``"metadata.title"``, ``"chapters[*].content"``). Ignored
                without an index.
            ttl: Minutes until the item expires (None: never); by default the
                store's ``default_ttl``. Reads refresh it (``refresh_on_read``).

        Raises:
            InvalidNamespaceError: The namespace is empty, its root label is
                ``"langgraph"``, or a label is empty, not a string, or holds a
                period or NUL.
            ItemValueError: The key or value is not what JSON can hold, or the
                TTL is not a positive number of minutes.
        """
        try:
            fast = (
                type(namespace) is tuple
                and namespace in self._put_namespaces
                and self.embeddings is None
                and type(self).batch is DeltaLogStore.batch
            )
        except TypeError:  # a label that cannot be hashed: BaseStore.put refuses it
            fast = False
        if not fast:
            super().put(namespace, key, value, index, ttl=ttl)
            if type(namespace) is tuple and len(self._put_namespaces) < 10_000:
                self._put_namespaces.add(namespace)  # it passed BaseStore.put's checks
            return
        if isinstance(ttl, NotProvided):  # as BaseStore.put: the store's default TTL
            config = self.ttl_config
            minutes = config.get("default_ttl") if config else None
        else:
            minutes = ttl
        op = PutOp(namespace, str(key), value, index, minutes)
        self._execute(_Plan([op], dict((self._put_plan(0, op),)), True))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ops as one batch; results in op order (see the class)."""
        plan = self._plan(ops)
        embeddings = self.embeddings
        if embeddings is not None:  # set with index_config: else no put has paths
            texts = self._texts_to_embed(plan)
            for query in sorted({o.query for o in plan.ops if isinstance(o, SearchOp) and o.query}):
                try:
                    vec = embeddings.embed_query(query)
                except Exception as exc:
                    raise _embed_error(exc, "a query") from exc
                plan.queries[query] = self._check_vector(vec, f"query {query!r:.60}")
            if texts:
                try:
                    got = embeddings.embed_documents([t for _, t in texts])
                except Exception as exc:
                    raise _embed_error(exc, f"{len(texts)} texts") from exc
                self._attach(plan, texts, got)
        return self._execute(plan)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch`: embeds with the embedder's async API, LMDB work on a thread."""
        plan = self._plan(ops)
        embeddings = self.embeddings
        texts = (
            await asyncio.to_thread(self._texts_to_embed, plan)
            if embeddings is not None and plan.puts
            else []
        )
        if embeddings is not None:
            queries = sorted({op.query for op in plan.ops if isinstance(op, SearchOp) and op.query})
            for query in queries:
                try:
                    vec = await embeddings.aembed_query(query)
                except Exception as exc:
                    raise _embed_error(exc, "a query") from exc
                plan.queries[query] = self._check_vector(vec, f"query {query!r:.60}")
            if texts:
                try:
                    got = await embeddings.aembed_documents([t for _, t in texts])
                except Exception as exc:
                    raise _embed_error(exc, f"{len(texts)} texts") from exc
                self._attach(plan, texts, got)
        return await asyncio.to_thread(self._execute, plan)

    def get(
        self,
        namespace: tuple[str, ...],
        key: str,
        *,
        refresh_ttl: bool | None = None,
    ) -> Item | None:
        """Retrieve a single item (as ``BaseStore.get``, without building a batch).

        The same validation, read and TTL refresh as a one-op :meth:`batch`.

        Args:
            namespace: Hierarchical path for the item.
            key: Unique identifier within the namespace.
            refresh_ttl: Whether to refresh the TTL of the returned item; None
                uses the store's ``refresh_on_read`` (default True). Ignored
                for items without a TTL.

        Returns:
            The item, or None if absent or expired.

        Raises:
            NamespaceError: A namespace label is empty, is not a string, or
                holds a period or NUL (LangGraph's ``InvalidNamespaceError``).
        """
        ns = self._labels(namespace)
        key = str(key)
        _check_key(key, "get")
        if refresh_ttl is None:
            refresh_ttl = self.ttl_config.get("refresh_on_read", True) if self.ttl_config else True
        now_ms = int(self._clock() * 1000)
        rec = self._get_cached(ns, key)
        if rec is None or core.is_expired(rec.expires_ms, now_ms):
            return None
        if refresh_ttl and rec.ttl_minutes is not None and not self.env.readonly:
            refresh = [_Refresh(ns, key)]

            def refresh_op(w: WriteTxn) -> Changes | None:
                writer = MemoryWriter(w)
                self._refresh(writer, refresh, now_ms)
                return writer.changes

            apply_changes(self._directory, self.env.write(refresh_op, history_safe=True))
        return _item(rec, copy=True)

    def _get_cached(self, ns: tuple[str, ...], key: str) -> ItemRecord | None:
        """The item at (ns, key) as stored (expired or not; shared: copy its value),
        from the get cache when nothing was committed since it was filled."""
        gets = self._directory.gets
        ns_id = self._directory.by_labels.get(ns)
        ikey = keys.item_key(ns_id, key) if ns_id is not None else b""
        found = gets.hit(self.env.last_txnid(), ikey) if ns_id is not None else MISSING
        if found is MISSING:
            with self.env.read() as r:
                reader = MemoryReader(r)
                state = reader.change_state()
                gets.seen(state, int(r.txn.id()))
                if ns_id is None:
                    ns_id = reader.ns_id(ns)
                    if ns_id is None:
                        return None
                    ikey = keys.item_key(ns_id, key)
                found = reader.item_at(ikey, ns)
            gets.remember(state, ikey, found)
        # A long key is hashed into its LMDB key: the record names the key it holds.
        return found if found is not None and found.key == key else None

    # -- planning (pure) ----------------------------------------------------------------

    def _plan(self, ops: Iterable[Op]) -> _Plan:
        """Validate every op of the batch before anything is read or written."""
        listed = list(ops)
        puts: dict[_Key, _PutPlan] = {}
        puts_only = True
        for i, op in enumerate(listed):
            if isinstance(op, PutOp):  # first: the common op
                k, put = self._put_plan(i, op)
                puts[k] = put
                continue
            puts_only = False
            what = _what(i, op)
            if isinstance(op, GetOp):
                self._labels(op.namespace)
                _check_key(op.key, what)
            elif isinstance(op, SearchOp):
                core.validate_labels(op.namespace_prefix, "namespace_prefix")
                core.check_filter(op.filter)
                _check_page(op.limit, op.offset, what)
                if op.query is not None and not isinstance(op.query, str):
                    raise ItemValueError(f"{what}: query {op.query!r:.60} is not a string")
            elif isinstance(op, ListNamespacesOp):
                for cond in op.match_conditions or ():
                    core.validate_labels(cond.path, f"{cond.match_type} pattern")
                    if cond.match_type not in ("prefix", "suffix"):
                        raise ItemValueError(
                            f"{what}: match_type {cond.match_type!r} is not supported; use "
                            "'prefix' or 'suffix'"
                        )
                _check_page(op.limit, op.offset, what)
                if op.max_depth is not None and (
                    isinstance(op.max_depth, bool)
                    or not isinstance(op.max_depth, int)
                    or op.max_depth < 1
                ):
                    raise ItemValueError(f"{what}: max_depth {op.max_depth!r} is not an int >= 1")
            else:
                raise ItemValueError(
                    f"op {i} is a {type(op).__name__}; pass GetOp, SearchOp, PutOp or "
                    "ListNamespacesOp"
                )
        return _Plan(listed, puts, puts_only)

    def _put_plan(self, i: int, op: PutOp) -> tuple[_Key, _PutPlan]:
        """Check put ``i`` of a batch; its (namespace, key) and plan."""
        # The checks of every put, without building the error message's op
        # name unless one fails (~15 % of a put's planning).
        key = op.key
        if type(key) is not str or not key.isascii():
            _check_key(key, _what(i, op))
        # Labels only, as the contract's validate_op_namespace: put() also
        # refuses () and the root "langgraph", but a batch may use them
        # (LangGraph's own code does, as InMemoryStore allows).
        ns = self._labels(op.namespace)
        if op.value is None:
            return (ns, key), _PutPlan(ns, None, None, None)
        value = core.check_value(op.value, lambda: f"{_what(i, op)} {ns!r}/{op.key!r:.60}")
        ttl = op.ttl
        if ttl is not None:
            ttl = core.check_ttl(ttl, _what(i, op))
        paths = (
            None
            if self.index_config is None or op.index is False
            else self._paths(op.index, _what(i, op))
        )
        return (ns, key), _PutPlan(ns, value, ttl, paths)

    def _labels(self, namespace: Any) -> tuple[str, ...]:
        """``namespace`` as a tuple once its labels passed
        :func:`memory_core.validate_labels` (a namespace checked before is
        taken from ``_valid``: ~5 % of a put's CPU)."""
        try:
            if type(namespace) is tuple and namespace in self._valid:
                return namespace
        except TypeError:  # unhashable: a label that is not a string
            pass
        ns = core.validate_labels(namespace)
        if len(self._valid) < 10_000:
            self._valid.add(ns)
        return ns

    def _paths(self, index: Any, what: str) -> list[tuple[str, list[str] | str]] | None:
        if self.index_config is None or index is False:
            return None
        if index is None:
            return self._fields
        if not isinstance(index, list) or not all(isinstance(p, str) and p for p in index):
            raise ItemValueError(
                f"{what}: index {index!r:.80} must be False, None or a list of field paths"
            )
        return [_tokenize(p) for p in index]

    # -- embedding ----------------------------------------------------------------------

    def _texts_to_embed(self, plan: _Plan) -> list[tuple[tuple[_Key, int], str]]:
        """Texts of the batch's puts that have no stored vector for the same text.

        Vectors of unchanged texts are copied from the stored records instead,
        if they have the configured ``dims`` (a re-put after a change of
        ``dims`` embeds the text again).
        One short read transaction, before any embedding call.
        """
        wanted: list[tuple[_Key, str, str]] = []
        for k, put in plan.puts.items():
            if put.value is None or put.paths is None:
                continue
            for path, tokens in put.paths:
                found = get_text_at_path(put.value, tokens)
                if len(found) > 1:
                    wanted.extend((k, f"{path}.{i}", t) for i, t in enumerate(found))
                elif found:
                    wanted.append((k, path, found[0]))
        if not wanted:
            return []
        stored: dict[_Key, dict[tuple[str, bytes], VectorRecord]] = {}
        known = self._directory.by_labels
        with self.env.read() as r:
            reader = MemoryReader(r)
            for k in {k for k, _, _ in wanted}:
                ns_id = known.get(k[0])
                if ns_id is None:
                    ns_id = reader.ns_id(k[0])
                if ns_id is not None:
                    stored[k] = {(v.path, v.digest): v for v in reader.item_vectors(ns_id, k[1])}
        todo: list[tuple[tuple[_Key, int], str]] = []
        width = 4 * self.index_config["dims"] if self.index_config else 0
        for k, path, text in wanted:
            put = plan.puts[k]
            digest = text_digest(text)
            old = stored.get(k, {}).get((path, digest))
            if old is not None and len(old.vector) != width:
                old = None  # made under another ``dims`` setting: embedded again
            put.vectors.append(old if old is not None else VectorRecord(path, digest, b""))
            if old is None:
                todo.append(((k, len(put.vectors) - 1), text))
        return todo

    def _check_vector(self, vec: Any, what: str) -> list[float]:
        dims = self.index_config["dims"] if self.index_config else 0
        try:
            out = [float(x) for x in vec]
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"the embedder returned {type(vec).__name__} for {what}, not a list of floats "
                f"({exc}); nothing was written"
            ) from None
        if len(out) != dims:
            raise EmbeddingError(
                f"the embedder returned {len(out)} dimensions for {what}; the index is "
                f"configured with dims={dims}. Fix index['dims'] or the embedder; nothing "
                "was written"
            )
        if not all(math.isfinite(x) for x in out):
            raise EmbeddingError(
                f"the embedder returned a non-finite value (NaN or infinity) for {what}; "
                "nothing was written"
            )
        return out

    def _attach(
        self, plan: _Plan, texts: list[tuple[tuple[_Key, int], str]], got: Sequence[Any]
    ) -> None:
        import numpy as np

        if len(got) != len(texts):
            raise EmbeddingError(
                f"the embedder returned {len(got)} vectors for {len(texts)} texts; nothing "
                "was written"
            )
        dims = self.index_config["dims"] if self.index_config else 0
        try:  # the whole batch at once; anything odd takes the checks one by one
            rows = np.asarray(got, dtype=np.float64)
            fast = rows.shape == (len(texts), dims) and bool(np.isfinite(rows).all())
        except (TypeError, ValueError):
            fast = False
        if fast:
            blobs = [row.tobytes() for row in rows.astype(np.float32)]
        else:
            blobs = [
                np.asarray(
                    self._check_vector(vec, f"text {text!r:.60}"), dtype=np.float32
                ).tobytes()
                for (_, text), vec in zip(texts, got, strict=False)
            ]
        for ((k, slot), _), blob in zip(texts, blobs, strict=True):
            old = plan.puts[k].vectors[slot]
            plan.puts[k].vectors[slot] = VectorRecord(old.path, old.digest, blob)

    # -- execution ----------------------------------------------------------------------

    def _now(self) -> tuple[int, int]:
        now = self._clock()
        return int(now * 1000), int(now * 1_000_000)

    def _execute(self, plan: _Plan) -> list[Result]:
        now_ms, now_us = self._now()
        if not plan.puts:
            with self.env.read() as r:
                reader = MemoryReader(r)
                results, refresh = self._reads(reader, plan, now_ms)
            if refresh and not self.env.readonly:  # a read-only open never writes

                def refresh_op(w: WriteTxn) -> Changes | None:
                    writer = MemoryWriter(w)
                    self._refresh(writer, refresh, now_ms)
                    return writer.changes

                apply_changes(self._directory, self.env.write(refresh_op, history_safe=True))
            return results

        puts_only = plan.puts_only

        def op(
            w: WriteTxn,
        ) -> tuple[list[Result], dict[tuple[str, ...], int], Changes | None]:
            writer = MemoryWriter(w)
            if puts_only:  # every result is None; nothing to read or refresh
                results: list[Result] = [None] * len(plan.ops)
            else:
                results, refresh = self._reads(writer, plan, now_ms)
                self._refresh(writer, refresh, now_ms)
            self._apply_puts(writer, plan, now_ms, now_us)
            return results, writer.new_namespaces, writer.changes

        results, new, changes = self.env.write(op, history_safe=True)
        if new:
            self._directory.learn(new)
        apply_changes(self._directory, changes)
        return results

    def _reads(
        self, reader: MemoryReader, plan: _Plan, now_ms: int
    ) -> tuple[list[Result], list[_Refresh]]:
        # A search decodes every candidate (10k items: ~40k objects, no cycles);
        # collections set off meanwhile cost more than the decoding (~0.2 s of
        # 0.5 s at 10k items measured here).
        with gc_paused():
            return self._reads_unpaused(reader, plan, now_ms)

    def _reads_unpaused(
        self, reader: MemoryReader, plan: _Plan, now_ms: int
    ) -> tuple[list[Result], list[_Refresh]]:
        results: list[Result] = []
        refresh: list[_Refresh] = []
        for op in plan.ops:
            if isinstance(op, GetOp):
                ns = tuple(op.namespace)
                rec = self._get(reader, ns, op.key, now_ms)
                results.append(None if rec is None else _item(rec))
                if rec is not None and op.refresh_ttl and rec.ttl_minutes is not None:
                    refresh.append(_Refresh(ns, op.key))
            elif isinstance(op, SearchOp):
                found = self._search(reader, op, plan.queries.get(op.query or ""), now_ms)
                results.append([item for item, _ in found])
                if op.refresh_ttl:
                    refresh.extend(
                        _Refresh(item.namespace, item.key) for item, ttl in found if ttl is not None
                    )
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(reader, op, now_ms))
            else:
                results.append(None)
        return results, refresh

    def _get(
        self, reader: MemoryReader, ns: tuple[str, ...], key: str, now_ms: int
    ) -> ItemRecord | None:
        # Namespace ids are never reused: one the directory knows is current.
        ns_id = self._directory.by_labels.get(ns)
        if ns_id is None:
            ns_id = reader.ns_id(ns)
            if ns_id is None:
                return None
        rec = reader.get(ns_id, ns, key)
        if rec is None or core.is_expired(rec.expires_ms, now_ms):
            return None
        return rec

    def _refresh(self, writer: MemoryWriter, refresh: list[_Refresh], now_ms: int) -> None:
        for r in refresh:
            ns_id = writer.ns_id(r.namespace)
            if ns_id is None:
                continue
            rec = writer.get(ns_id, r.namespace, r.key)
            if rec is None or rec.ttl_minutes is None or core.is_expired(rec.expires_ms, now_ms):
                continue
            writer.put_item(
                ns_id, replace(rec, expires_ms=core.expires_at(now_ms, rec.ttl_minutes)), rec
            )

    def _apply_puts(self, writer: MemoryWriter, plan: _Plan, now_ms: int, now_us: int) -> None:
        # Namespace ids are never reused or deleted: one the directory knows is
        # in the file (a lookup there reads and checks two records).
        known = self._directory.by_labels
        for (ns, key), put in plan.puts.items():
            ns_id = known.get(ns)
            if put.value is None:
                if ns_id is None:
                    ns_id = writer.ns_id(ns)
                old = writer.get(ns_id, ns, key) if ns_id is not None else None
                if ns_id is not None and old is not None:
                    writer.delete_item(ns_id, old)
                continue
            if ns_id is None:
                ns_id = writer.intern_ns(ns)
            ikey = keys.item_key(ns_id, key)  # once, for the read and the write
            old = writer.get_at(ikey, ns, key)
            # created_us is kept from an old item that has not expired.
            created = (
                now_us if old is None or core.is_expired(old.expires_ms, now_ms) else old.created_us
            )
            ttl = put.ttl
            rec = ItemRecord(  # positional: namespace, key, value, created, updated, ttl, expiry
                ns,
                key,
                put.value,
                created,
                now_us,
                ttl,
                None if ttl is None else core.expires_at(now_ms, ttl),
            )
            writer.put_item(ns_id, rec, old, ikey)
            if put.paths is not None or old is not None:  # a new item without vectors has none
                writer.set_vectors(ikey, put.vectors if put.paths is not None else [])

    # -- verify -------------------------------------------------------------------------

    def verify(self, limit: int = 100) -> list[str]:
        """The problems of the stored memory records (empty: all sound).

        Checks record checksums and shapes, namespaces, the TTL index and that
        every vector belongs to an item, in one read transaction.
        """
        with self.env.read() as r:
            return MemoryReader(r).problems(limit)

    # -- TTL ----------------------------------------------------------------------------

    def sweep_ttl(self) -> SweepCount:
        """Delete every expired item; return how many.

        Runs in transactions of at most ``memory_io.SWEEP_CHUNK`` items, so
        writers queued meanwhile wait one short commit. The count is an
        ``int`` that code written for AsyncSqliteStore may also ``await``.
        """
        total = 0
        while True:
            now_ms, _ = self._now()
            deleted, more, changes = self.env.write(_sweeper(now_ms), history_safe=True)
            apply_changes(self._directory, changes)
            total += deleted
            if not more:
                return SweepCount(total)

    def setup(self) -> Stopped:
        """Nothing to set up (the databases exist once the file is open); for
        code written for SqliteStore/PostgresStore, which call ``setup()``
        (or ``await setup()``) first."""
        return Stopped(True)

    async def asweep_ttl(self) -> int:
        """Async :meth:`sweep_ttl`."""
        return int(await asyncio.to_thread(self.sweep_ttl))

    def _interval(self, minutes: float | None) -> float:
        cfg = self.ttl_config or {}
        chosen = minutes or cfg.get("sweep_interval_minutes") or 5
        return float(chosen) * 60.0

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> SweeperFuture:
        """Sweep expired items every interval on a daemon thread (as SqliteStore does).

        Code written for the async upstream stores may ``await`` the result
        (it is the same future); :meth:`astart_ttl_sweeper` runs a task instead.

        Returns:
            A future that completes when the sweeper stops.
        """
        done = SweeperFuture()
        if self._sweeper is not None and self._sweeper.is_alive():
            logger.info("TTL sweeper thread is already running")
            done.set_result(None)
            return done
        interval = self._interval(sweep_interval_minutes)
        self._sweep_stop.clear()
        stop = self._sweep_stop

        def loop() -> None:
            try:
                while not stop.wait(interval):
                    try:
                        deleted = self.sweep_ttl()
                        if deleted:
                            logger.info("store TTL sweep deleted %d items", deleted)
                    except Exception:
                        logger.exception("store TTL sweep iteration failed")
            finally:
                done.set_result(None)

        self._sweeper = threading.Thread(target=loop, daemon=True, name="deltalog-ttl-sweeper")
        self._sweeper.start()
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Stopped:
        """Stop the sweeper thread; true once it stopped (or none ran).

        The result is truthy like a bool, and awaitable (giving the bool) for
        code written against the async upstream stores.
        """
        thread = self._sweeper
        if thread is None or not thread.is_alive():
            self._sweeper = None
            return Stopped(True)
        self._sweep_stop.set()
        thread.join(timeout)
        if thread.is_alive():
            return Stopped(False)
        self._sweeper = None
        return Stopped(True)

    async def astart_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep expired items every interval in a task of the running loop."""
        if self._sweep_task is not None and not self._sweep_task.done():
            return self._sweep_task
        interval = self._interval(sweep_interval_minutes)

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.asweep_ttl()
                except Exception:
                    logger.exception("store TTL sweep iteration failed")

        self._sweep_task = asyncio.get_running_loop().create_task(loop())
        return self._sweep_task

    async def astop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; True once it stopped (or none ran)."""
        task = self._sweep_task
        if task is None or task.done():
            self._sweep_task = None
            return True
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.CancelledError:
            pass
        except asyncio.TimeoutError:
            return False
        self._sweep_task = None
        return True


def verify_memory(store: Environment, report: VerifyReport, limit: int = 100) -> None:
    """Add the memory store's problems to a saver's verify report (``deltalog verify``).

    Each is a ``memory_record`` error with no thread: a record failing its
    checksum or shape, an item of an unknown namespace, a TTL index entry
    missing or stray, a vector of no item, a count record that disagrees
    with the items (see :meth:`DeltaLogStore.verify`).
    """
    from deltalog.engine.reports import Problem

    try:
        with store.read() as r:
            found = MemoryReader(r).problems(limit)
    except DeltaLogError as exc:  # e.g. LMDB reports a damaged page under the memory records
        found = [str(exc)]
    for detail in found:
        report.problems.append(Problem("memory_record", "error", None, None, None, detail))


# -- helpers ----------------------------------------------------------------------------


def _tokenize(path: str) -> tuple[str, list[str] | str]:
    return (path, path) if path == "$" else (path, tokenize_path(path))


def _what(i: int, op: Op) -> str:
    """How error messages name op ``i`` of a batch."""
    return f"op {i} ({type(op).__name__})"


def _check_key(key: Any, what: str) -> None:
    if not isinstance(key, str):
        raise ItemValueError(f"{what}: key {key!r:.60} is a {type(key).__name__}; pass a str")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ItemValueError(f"{what}: key {key!r:.60} is not valid Unicode") from None


def _check_page(limit: Any, offset: Any, what: str) -> None:
    for name, v in (("limit", limit), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ItemValueError(f"{what}: {name} {v!r} is not an int >= 0")


def _check_ttl_config(ttl: TTLConfig | None) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, dict):
        raise ItemValueError(f"ttl {ttl!r:.60} is not a dict; pass e.g. {{'default_ttl': 60}}")
    unknown = set(ttl) - {
        "default_ttl",
        "refresh_on_read",
        "sweep_interval_minutes",
        "omit_expired",
    }
    if unknown:
        raise ItemValueError(
            f"ttl config keys {sorted(unknown)} are unknown; use default_ttl, refresh_on_read, "
            "sweep_interval_minutes"
        )
    core.check_ttl(ttl.get("default_ttl"), "ttl config default_ttl")
    interval = ttl.get("sweep_interval_minutes")
    if interval is not None and (
        isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0
    ):
        raise ItemValueError(f"ttl config sweep_interval_minutes {interval!r} is not > 0")
    return copy.copy(ttl)


def _check_index(
    index: IndexConfig,
) -> tuple[dict[str, Any], Embeddings, list[tuple[str, list[str] | str]]]:
    if not isinstance(index, dict):
        raise ItemValueError(
            f"index {index!r:.60} is not a dict; pass {{'dims': ..., 'embed': ...}}"
        )
    cfg: dict[str, Any] = dict(index)
    dims = cfg.get("dims")
    if isinstance(dims, bool) or not isinstance(dims, int) or dims <= 0:
        raise ItemValueError(f"index dims {dims!r} is not a positive int (the embedding size)")
    if cfg.get("embed") is None:
        raise ItemValueError("index has no 'embed'; pass an Embeddings, a function or a provider")
    try:
        embeddings = ensure_embeddings(cfg["embed"])
    except Exception as exc:
        raise EmbeddingError(f"index embed {cfg['embed']!r:.60} is not usable ({exc})") from exc
    fields = cfg.get("fields")
    legacy = cfg.get("text_fields")
    if legacy is not None:
        # SqliteStore reads its fields from "text_fields" (a list or one path) and
        # ignores "fields": a config written for it embeds the same paths here.
        legacy = [legacy] if isinstance(legacy, str) else legacy
        if fields is not None and fields != legacy:
            raise ItemValueError(
                f"index has both fields {fields!r:.60} and text_fields {legacy!r:.60}; "
                "pass only 'fields'"
            )
        fields = legacy
    fields = fields or ["$"]
    if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        raise ItemValueError(f"index fields {fields!r:.80} must be a list of field paths")
    cfg["fields"] = list(fields)
    return cfg, embeddings, [_tokenize(f) for f in fields]


def _sweeper(now_ms: int) -> Callable[[WriteTxn], tuple[int, bool, Changes | None]]:
    def op(w: WriteTxn) -> tuple[int, bool, Changes | None]:
        writer = MemoryWriter(w)
        deleted, more = writer.sweep(now_ms)
        return deleted, more, writer.changes

    return op


def _embed_error(exc: Exception, what: str) -> EmbeddingError:
    return EmbeddingError(
        f"the embedder raised {type(exc).__name__} ({exc}) while embedding {what}; "
        "nothing was written"
    )
