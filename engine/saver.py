"""`DeltaLogSaver`: the LangGraph adapter over the deltalog store.

This layer translates ``RunnableConfig`` into store calls and owns
``self.serde``: every channel value, checkpoint body, metadata dict and write
goes through ``serde.dumps_typed`` / ``serde.loads_typed`` here, so
``EncryptedSerializer`` and LangGraph's strict msgpack allowlist keep working.
It makes no LMDB calls; :mod:`deltalog.engine.store` does.

Async methods serialize their arguments in the caller's thread (the runtime
may mutate what it passed as soon as control returns), then queue the write for
the store's next group commit and await a future, so the event loop never
waits on disk and no thread waits per pending write (without group commit, and
for maintenance calls, a small thread pool runs them instead). Reads run in
the loop's default executor (``asyncio.to_thread``): a read is memory-mapped
but decoding a long thread's values is not short (20 checkpoints of a
4,000-message thread held the loop 1.16 s when reads ran inline), and a read
waits for the store's lock while the map grows.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from deltalog.channels.replay import ChannelSource, delta_channels, replay_history
from deltalog.engine import keys
from deltalog.engine.cache import DecodedCache, HistoryCopies, gc_paused
from deltalog.engine.codec import RecordCodec
from deltalog.engine.core import Node, Plan, plan_delete, plan_keep
from deltalog.engine.errors import (
    ConcurrentChangeError,
    ConfigError,
    DeltaChainError,
    DeltaLogError,
    InvalidInputError,
    ReducerMismatchError,
    SerdeMismatchError,
    UndecryptableValueError,
)
from deltalog.engine.import_check import EXPORT_FORMAT, EXPORT_VERSION, check_import
from deltalog.engine.reports import CompactReport, CopyReport, Problem, RemovalReport, VerifyReport
from deltalog.engine.store import INLINE_MAX, ReadTxn, Store, WriteTxn, store_folder
from deltalog.engine.store_rows import (
    BlobRow,
    CheckpointRow,
    DeltaHistory,
    StoredValue,
    ThreadSummary,
    Typed,
    WriteRow,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.store.base import IndexConfig, TTLConfig

if TYPE_CHECKING:
    from deltalog.engine.memory import DeltaLogStore

__all__ = ["MEMORY", "DeltaLogSaver", "SaverContext"]

T = TypeVar("T")
logger = logging.getLogger(__name__)

# Rows read per read transaction while listing: short transactions keep LMDB
# from pinning old pages while the caller consumes the iterator.
_LIST_CHUNK = 32
# Exact types whose small values a checkpoint record holds itself (subclasses
# such as enums go to blobs). The same set LangGraph's PostgresSaver keeps in
# its checkpoint row; lists and dicts (growing values, delta seeds) never.
_SCALARS: Final = frozenset({type(None), bool, int, float, str})
# Stored snapshots a re-seeding prune replays to check the caller's reducer
# against, per re-seeded channel (see DeltaLogSaver._check_reducer).
_REDUCER_WITNESSES: Final = 2
# Tuples alist decodes per worker-thread hop: a hop costs ~50 us; one tuple
# of a long thread can cost milliseconds, and a caller may stop early.
_ALIST_BATCH: Final = 4
# The path that opens a temporary store, as SQLite's ":memory:" database.
MEMORY: Final = ":memory:"


class DeltaLogSaver(
    BaseCheckpointSaver[str],
    AbstractContextManager["DeltaLogSaver"],
    AbstractAsyncContextManager["DeltaLogSaver"],
):
    """A LangGraph checkpoint saver on an embedded LMDB event log.

    Sync and async in one class. Every write is one LMDB transaction (R8);
    ``get_delta_channel_history`` walks ancestors in one read transaction (R6).

    Example:
        >>> from deltalog.engine import DeltaLogSaver
        >>> with DeltaLogSaver.from_path(tmp / "chat.lmdb") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)

    Args:
        store: An open :class:`~deltalog.engine.store.Store`.
        serde: Serializer for values, metadata and writes (LangGraph's
            ``JsonPlusSerializer`` by default, pickle fallback off).
        owns_store: Close the store when the saver closes.
        cache_bytes: Cap on memory for decoded channel values (seeds above
            all); the budget grows to it with the workload (docs/operations.md,
            "Memory"); 0 turns the cache off. Readers always get private copies.

    Raises:
        TypeError: ``store`` is not a Store; for a path, the message names
            :meth:`from_path` and :meth:`from_conn_string`.
    """

    def __init__(
        self,
        store: Store,
        *,
        serde: SerializerProtocol | None = None,
        owns_store: bool = True,
        cache_bytes: int = 64 * 1024**2,
    ) -> None:
        if not isinstance(store, Store):
            hint = (
                f"DeltaLogSaver.from_path({store!r}) opens a store at a path (or use "
                f"`with DeltaLogSaver.from_conn_string({store!r}) as saver:`)"
                if isinstance(store, (str, bytes, os.PathLike))
                else "pass a deltalog.engine.Store, or open a path with DeltaLogSaver.from_path"
            )
            raise TypeError(
                f"DeltaLogSaver() takes an open Store, not {type(store).__name__} {store!r:.80}; "
                + hint
            )
        super().__init__(serde=serde)
        self.store = store
        self.owns_store = owns_store
        self.cache = DecodedCache(cache_bytes)
        self.history_copies = HistoryCopies()
        self._executor: ThreadPoolExecutor | None = None
        self._shared = False
        self._temp_dir: str | None = None  # the folder of a ":memory:" store

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        durable: bool = True,
        map_size: int = 64 * 1024**2,
        max_map_size: int = 1024**4,
        compress_threshold: int | None = 512,
        group_commit: bool = True,
        cache_bytes: int = 64 * 1024**2,
        max_readers: int = 126,
    ) -> DeltaLogSaver:
        """Open (or create) the store at ``path`` and return a saver over it.

        Args:
            path: Folder of the store; created with mode 0700 if missing. A
                leading ``~`` is expanded. ``":memory:"`` opens a new temporary
                store (like SQLite's in-memory database: private to this saver)
                whose folder is deleted when the saver closes.
            serde: Serializer; LangGraph's default when None.
            durable: fsync every commit (default). ``False`` trades the last
                commits before a machine crash for speed (see docs/operations.md).
            map_size: Initial LMDB map size; grows automatically.
            max_map_size: Cap of automatic growth.
            compress_threshold: Records at least this large are zstd-compressed;
                None turns compression off.
            group_commit: Let concurrent writers share a commit.
            cache_bytes: Cap on memory for decoded channel values (grown to
                with the workload); 0 disables it.
            max_readers: LMDB reader slots, shared by every process using the
                store (fixed by the first process to open it). More threads may
                read at once: a read waits for a free slot (docs/operations.md).

        Returns:
            An open saver; use it as a context manager or call :meth:`close`.

        Raises:
            InvalidInputError: An option has a wrong type or value (nothing is created).
            NotAStoreError: ``path`` holds something other than a deltalog store.
        """
        path = store_folder(path)
        _check_open_options(compress_threshold=compress_threshold, cache_bytes=cache_bytes)
        options = {
            "map_size": map_size,
            "max_map_size": max_map_size,
            "durable": durable,
            "compress_threshold": compress_threshold,
            "group_commit": group_commit,
            "max_readers": max_readers,
        }
        temp_dir = None
        if os.fspath(path) == MEMORY:
            temp_dir = tempfile.mkdtemp(prefix="deltalog-memory-")
            path = temp_dir
        else:
            path = os.path.expanduser(os.fspath(path))
        try:
            store = _open_shared(path, options)
        except BaseException:
            if temp_dir is not None:
                shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        saver = cls(store, serde=serde, cache_bytes=cache_bytes)
        saver._shared = True
        saver._temp_dir = temp_dir
        return saver

    @classmethod
    def from_conn_string(cls, conn_string: str | os.PathLike[str], **options: Any) -> SaverContext:
        """Open the store at a path for a ``with`` or ``async with`` block, like ``SqliteSaver``.

        The store opens on entering the block and closes on leaving it.
        ``async with`` opens and closes it in a worker thread, so code written
        for ``AsyncSqliteSaver.from_conn_string`` or
        ``AsyncPostgresSaver.from_conn_string`` works unchanged.

        Example:
            >>> with DeltaLogSaver.from_conn_string("~/chat.lmdb") as saver:  # doctest: +SKIP
            ...     graph = builder.compile(checkpointer=saver)

        Args:
            conn_string: The store's folder, as for :meth:`from_path` (``~``
                expanded; ``":memory:"`` is a temporary store).
            **options: Keyword arguments of :meth:`from_path` (``serde``,
                ``durable``, ...).

        Returns:
            A context manager (sync and async) that yields an open saver.
        """
        return SaverContext(cls, conn_string, options)

    def setup(self) -> Awaitable[None]:
        """Nothing to set up: the store creates its databases when it opens.

        Kept for code written for ``PostgresSaver`` / ``AsyncPostgresSaver``:
        both ``saver.setup()`` and ``await saver.setup()`` work.
        """
        return _DONE

    async def asetup(self) -> None:
        """Nothing to set up (see :meth:`setup`)."""

    # -- life cycle -------------------------------------------------------------------

    def close(self) -> None:
        """Close the saver (and its store when it owns it). Idempotent."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._shared:
            self._shared = False
            _release_shared(self.store)
        elif self.owns_store:
            self.store.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> DeltaLogSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> DeltaLogSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- serialization helpers -----------------------------------------------------------

    def _dumps(self, value: Any, what: str) -> Typed:
        try:
            return self.serde.dumps_typed(value)
        except Exception as exc:
            raise InvalidInputError(
                f"{what} of type {type(value).__name__} cannot be serialized by "
                f"{type(self.serde).__name__} ({type(exc).__name__}: {exc}); store "
                "serializable values or pass a serde that handles this type"
            ) from exc

    def _load(self, value: StoredValue) -> Any:
        """Decode a stored channel value through the cache (a private copy per caller)."""

        def decode(record: bytes) -> Any:
            return self._loads(value.typed)

        return self.cache.load(value.record, decode, len(value.typed[1]))

    def _loads(self, typed: Typed, what: str = "a stored value") -> Any:
        """``serde.loads_typed``, with a value the serde cannot load as :class:`SerdeMismatchError`.

        Raises:
            SerdeMismatchError: The value's type is one this serde does not load
                (e.g. ``msgpack+aes`` without the key), or it does not decrypt.
        """
        try:
            return self.serde.loads_typed(typed)
        except NotImplementedError as exc:
            raise _serde_mismatch(self.serde, typed[0], what, None) from exc
        except ValueError as exc:
            if "+" not in str(typed[0]):
                raise
            raise _serde_mismatch(self.serde, typed[0], what, exc) from exc

    def memory_store(
        self,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> DeltaLogStore:
        """LangGraph long-term memory (a ``BaseStore``) in this saver's LMDB file.

        ``builder.compile(checkpointer=saver, store=saver.memory_store())`` keeps
        checkpoints and memory in one environment (``saver.store`` is that
        environment).

        Args:
            index: Semantic search configuration (``dims``, ``embed``, ``fields``), as
                for :class:`deltalog.engine.memory.DeltaLogStore`.
            ttl: TTL configuration (``default_ttl``, ``refresh_on_read``,
                ``sweep_interval_minutes``).
            clock: Seconds since the epoch, for tests.

        Returns:
            A memory store sharing this saver's environment; closing it leaves the saver open.
        """
        from deltalog.engine.memory import DeltaLogStore

        return DeltaLogStore.from_saver(self, index=index, ttl=ttl, clock=clock)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> DeltaLogSaver:
        """A clone with a stricter msgpack allowlist and its own value cache.

        The clone must not share the cache: values decoded under a looser
        allowlist would otherwise reach it without passing its check.
        """
        clone = cast(DeltaLogSaver, super().with_allowlist(extra_allowlist))
        if clone is not self:
            clone.cache = DecodedCache(self.cache.max_bytes, self.cache.min_record)
            clone.history_copies = HistoryCopies()
        return clone

    def _to_tuple(self, row: CheckpointRow) -> CheckpointTuple:
        loads = self._loads
        checkpoint: Checkpoint = loads(row.checkpoint)
        checkpoint["id"] = row.checkpoint_id
        checkpoint["channel_versions"] = dict(row.channel_versions)
        checkpoint["channel_values"] = {k: self._load(v) for k, v in row.values.items()}
        return CheckpointTuple(
            config=_config(row.thread_id, row.checkpoint_ns, row.checkpoint_id),
            checkpoint=checkpoint,
            metadata=loads(row.metadata),
            parent_config=(
                _config(row.thread_id, row.checkpoint_ns, row.parent_id)
                if row.parent_id is not None
                else None
            ),
            pending_writes=[(w.task_id, w.channel, loads(w.value)) for w in row.writes],
        )

    # -- reads ------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Fetch one checkpoint (the latest of the namespace when no id is given).

        Args:
            config: ``configurable.thread_id`` (required), ``checkpoint_ns``,
                ``checkpoint_id``.

        Returns:
            The tuple, with ``pending_writes`` in ``writes_sort_key`` order, or None.

        Raises:
            ConfigError: The config has no usable ``thread_id``.
        """
        thread_id, checkpoint_ns, checkpoint_id = _parse_config(config)
        with self.store.read() as r:
            ids = r.ids(thread_id, checkpoint_ns)
            row = r.checkpoint(*ids, checkpoint_id) if ids is not None else None
        return None if row is None else self._to_tuple(row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """List checkpoints newest first.

        Args:
            config: Thread (and optionally ``checkpoint_ns`` / ``checkpoint_id``) to
                list; None lists every thread.
            filter: Metadata key/value pairs that must all match.
            before: Only checkpoints with an id lower than this config's id.
            limit: At most this many tuples.

        Yields:
            Matching checkpoint tuples; checkpoints hidden by a delta-safe prune
            are skipped.
        """
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise InvalidInputError(f"limit {limit!r} is not an int; pass an int or None")
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidInputError(f"filter {filter!r} is not a mapping of metadata key to value")
        only_id: str | None = None
        if config is None:
            scope: tuple[str, str | None] | None = None
        else:
            thread_id, _, only_id = _parse_config(config)
            ns = config["configurable"].get("checkpoint_ns")
            scope = (thread_id, ns)
        before_id = _before_id(before)
        before_key = keys.encode_id(before_id) if before_id is not None else None
        remaining = limit
        if remaining is not None and remaining <= 0:
            return
        for t, n in self._groups(scope):
            start: bytes | None = None
            if before_key is not None:
                start = keys.checkpoint_key(t, n, before_key)
            if only_id is not None:
                row = self._read_checkpoint(t, n, only_id)
                rows_iter: Iterator[CheckpointRow] = iter([row] if row is not None else [])
                if before_key is not None and keys.encode_id(only_id) >= before_key:
                    rows_iter = iter([])
            else:
                rows_iter = self._iter_group(t, n, start)
            for row in rows_iter:
                if row.hidden:
                    continue
                if filter:
                    metadata = self._loads(row.metadata)
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                yield self._to_tuple(row)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return

    def _groups(self, scope: tuple[str, str | None] | None) -> builtins.list[tuple[int, int]]:
        with self.store.read() as r:
            if scope is None:
                return [(t, n) for t in r.threads() for n in r.namespaces(t)]
            thread_id, ns = scope
            t = r.name_id(keys.KIND_THREAD, thread_id)
            if t is None:
                return []
            if ns is None:
                return [(t, n) for n in r.namespaces(t)]
            n = r.name_id(keys.KIND_NS, ns)
            return [] if n is None else [(t, n)]

    def _iter_group(self, t: int, n: int, start: bytes | None) -> Iterator[CheckpointRow]:
        prefix = keys.ns_prefix(t, n)
        while True:
            rows, start = self._read_chunk(t, n, prefix, start)
            yield from rows
            if len(rows) < _LIST_CHUNK:
                return

    # The list generators read through these: a generator frame that kept a
    # read transaction object alive would keep its LMDB reader slot taken while
    # suspended, and 126 suspended listings (coroutines in alist) fill the store.

    def _read_checkpoint(self, t: int, n: int, checkpoint_id: str) -> CheckpointRow | None:
        with self.store.read() as r:
            return r.checkpoint(t, n, checkpoint_id)

    def _read_chunk(
        self, t: int, n: int, prefix: bytes, start: bytes | None
    ) -> tuple[builtins.list[CheckpointRow], bytes | None]:
        """Up to _LIST_CHUNK rows newest first below ``start``, and the next start."""
        rows: builtins.list[CheckpointRow] = []
        with self.store.read() as r:
            for key, _ in r.iter_checkpoint_keys(prefix, start=start, reverse=True):
                row = r.checkpoint(t, n, keys.decode_checkpoint_key(key)[2])
                if row is not None:
                    rows.append(row)
                start = key
                if len(rows) >= _LIST_CHUNK:
                    break
        return rows, start

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Seed and writes of each channel back from a checkpoint (R6).

        One read transaction; the cost is the ancestors back to each channel's
        nearest stored value plus their writes to the asked channels,
        independent of thread length and of other channels.

        Args:
            config: The target checkpoint (latest of the namespace without an id).
            channels: Channel names; empty gives an empty mapping.

        Returns:
            Channel → ``{"writes": [...], "seed": value}`` (``seed`` absent when
            the walk reached the root), writes oldest first in
            ``writes_sort_key`` order within each checkpoint.
        """
        if not channels:
            return {}
        thread_id, checkpoint_ns, checkpoint_id = _parse_config(config)
        with self.store.read() as r:
            ids = r.ids(thread_id, checkpoint_ns)
            raw = (
                r.history(*ids, checkpoint_id, channels)
                if ids is not None
                else {c: DeltaHistory(None, ()) for c in channels}
            )
        result: dict[str, DeltaChannelHistory] = {}
        # Hundreds of writes plus a seed make tens of thousands of objects.
        with gc_paused():
            for channel in channels:
                history = raw[channel]
                entry: DeltaChannelHistory = {"writes": self._history_writes(history)}
                if history.seed is not None:
                    entry["seed"] = self._load(history.seed)
                result[channel] = entry
        return result

    def _history_writes(self, history: DeltaHistory) -> builtins.list[Any]:
        """Decoded ``(task_id, channel, value)`` of a history's writes: private objects.

        When the history extends a remembered one whose decoded list this saver
        kept (:class:`~deltalog.engine.cache.HistoryCopies`), only the writes
        read fresh go through the serde; the rest are unpickled copies.
        """
        loads = self._loads
        copies = self.history_copies
        base = history.base
        chunks = copies.get(base) if base is not None else None
        if base is not None and chunks is not None:
            fresh = [
                (w.task_id, w.channel, loads(w.value)) for w in history.writes[len(base.writes) :]
            ]
            decoded, kept = copies.extend(chunks, fresh)
        else:
            decoded = [(w.task_id, w.channel, loads(w.value)) for w in history.writes]
            kept = copies.start(decoded) if history.entry is not None else None
        if history.entry is not None and history.entry is not base and kept is not None:
            copies.put(history.entry, kept)
        return decoded

    # -- writes -----------------------------------------------------------------------------

    def _prepare_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[Callable[[WriteTxn], None], RunnableConfig]:
        if not isinstance(checkpoint, Mapping) or "id" not in checkpoint:
            raise InvalidInputError(
                f"checkpoint {checkpoint!r:.80} is not a Checkpoint dict with an 'id'"
            )
        # Serialize the channel values first: with durability="async" the
        # runtime calls put from a worker thread while its next superstep goes
        # on mutating live values (a join edge's set), so every microsecond
        # before this snapshot is a window for a value from the future.
        values: Mapping[str, Any] = checkpoint.get("channel_values") or {}
        if not isinstance(new_versions, Mapping):
            raise InvalidInputError(f"new_versions {new_versions!r:.80} is not a mapping")
        if not isinstance(metadata, Mapping):
            raise InvalidInputError(
                f"metadata {metadata!r:.80} is not a mapping; pass a CheckpointMetadata dict"
            )
        blobs: builtins.list[BlobRow] = []
        inline: dict[str, Typed] = {}  # small scalars: held by the record (INLINE_MAX)
        for channel, version in new_versions.items():
            if channel not in values:
                continue
            value = values[channel]
            typed = self._dumps(value, f"channel {channel!r}")
            if type(value) in _SCALARS and len(typed[1]) <= INLINE_MAX:
                inline[channel] = typed
            else:
                blobs.append(BlobRow(channel, version, typed))
        thread_id, checkpoint_ns, parent_id = _parse_config(config)
        checkpoint_id = checkpoint["id"]
        keys.encode_id(checkpoint_id)
        if parent_id is not None:
            keys.encode_id(parent_id)
        body: dict[str, Any] = dict(checkpoint)
        body.pop("channel_values", None)
        body.pop("id")  # the key holds it; re-added on read
        versions = dict(body.pop("channel_versions", None) or {})
        for channel, version in {**versions, **new_versions}.items():
            if not isinstance(channel, str):
                raise InvalidInputError(f"channel name {channel!r} is not a string")
            keys.encode_version(version)
        full_metadata = get_checkpoint_metadata(config, metadata)
        run_id = full_metadata.get("run_id")
        ckpt_typed = self._dumps(body, "checkpoint")
        meta_typed = self._dumps(full_metadata, "metadata")
        run = None if run_id is None else str(run_id)
        # Delta channels this checkpoint rebuilds by replay: what prune and
        # delete_for_runs must keep a chain (or write a seed) for (R7).
        delta = _delta_counters(full_metadata.get("counters_since_delta_snapshot"))
        for channel in [c for c in inline if c not in versions]:
            # A value the checkpoint has no version of is no part of it: a blob
            # stores it as before, where no read finds it.
            blobs.append(BlobRow(channel, new_versions[channel], inline.pop(channel)))
        # Unchanged versions: put_checkpoint copies the parent record's inline
        # value of each, whether or not the graph still has the channel (the
        # value of a version is what was stored when it was new). Where the
        # parent does not have the version (a "__copy__" fork's parent is the
        # copied checkpoint's parent; no parent), a small scalar this put passes
        # is held instead, else the value a record holding that version has.
        # Scalars are immutable: keeping references is a snapshot.
        carry = [c for c in versions if c not in new_versions]
        passed = {c: values[c] for c in carry if c in values and type(values[c]) in _SCALARS}

        def fallback(channel: str) -> Typed | None:
            if channel not in passed:
                return None
            typed = self._dumps(passed[channel], f"channel {channel!r}")
            return typed if len(typed[1]) <= INLINE_MAX else None

        def op(w: WriteTxn) -> None:
            w.put_checkpoint(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                parent_id=parent_id,
                channel_versions=versions,
                checkpoint=ckpt_typed,
                metadata=meta_typed,
                run_id=run,
                blobs=blobs,
                delta=delta,
                inline=inline,
                carry=carry,
                fallback=fallback,
            )

        return op, _config(thread_id, checkpoint_ns, checkpoint_id)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: one record, plus a blob per channel version in ``new_versions``.

        Args:
            config: Thread, namespace and (as ``checkpoint_id``) the parent.
            checkpoint: The checkpoint; its ``channel_values`` go to blobs.
            metadata: Metadata; merged with config keys like LangGraph's savers do.
            new_versions: Channel versions new in this checkpoint.

        Returns:
            The config of the stored checkpoint.

        Raises:
            ConfigError: No usable ``thread_id``.
            InvalidInputError: An unserializable value, a bad id or version.
        """
        op, out = self._prepare_put(config, checkpoint, metadata, new_versions)
        self.store.write(op, history_safe=True)
        return out

    def _prepare_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Callable[[WriteTxn], None]:
        thread_id, checkpoint_ns, checkpoint_id = _parse_config(config)
        if checkpoint_id is None:
            raise ConfigError(
                "put_writes needs configurable.checkpoint_id (the checkpoint the writes "
                f"belong to); got {dict(config.get('configurable', {}))!r}"
            )
        if not isinstance(task_id, str):
            raise InvalidInputError(f"task_id {task_id!r} is not a string")
        if not isinstance(task_path, str):
            raise InvalidInputError(f"task_path {task_path!r} is not a string")
        if isinstance(writes, (str, bytes, Mapping)) or not isinstance(writes, Iterable):
            raise InvalidInputError(
                f"writes {writes!r:.80} is not a sequence of (channel, value) pairs"
            )
        rows: builtins.list[tuple[str, int, Typed]] = []
        for idx, item in enumerate(writes):
            if (
                not isinstance(item, (tuple, list))
                or len(item) != 2
                or not isinstance(item[0], str)
            ):
                raise InvalidInputError(
                    f"write #{idx} {item!r:.80} is not a (channel, value) pair with a str channel"
                )
            channel, value = item
            rows.append(
                (
                    channel,
                    WRITES_IDX_MAP.get(channel, idx),
                    self._dumps(value, f"write to {channel!r}"),
                )
            )

        def op(w: WriteTxn) -> None:
            w.put_writes(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, rows)

        return op

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's writes to a checkpoint's log (R1, R2).

        Idempotent per ``(task_id, idx)`` for regular writes; special channels
        (errors, interrupts, resume, scheduled) replace. The checkpoint may be
        stored later.

        Args:
            config: Must carry ``thread_id`` and ``checkpoint_id``.
            writes: ``(channel, value)`` pairs.
            task_id: The writing task.
            task_path: The task's path; orders writes within a checkpoint.

        Raises:
            ConfigError: Missing ``thread_id`` or ``checkpoint_id``.
            InvalidInputError: A malformed write or unserializable value.
        """
        self.store.write(
            self._prepare_writes(config, writes, task_id, task_path), history_safe=True
        )

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and blob of a thread, in one transaction.

        Args:
            thread_id: The thread to delete; unknown threads are a no-op.
        """
        tid = _thread_id(thread_id)
        self.store.write(lambda w: w.delete_thread(tid))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Next channel version: a 32-digit counter, a dot and 32 random bits in hex.

        The random part keeps versions unique across forks of one thread, so
        two branches never share a blob key for different values. The
        zero-padded 32-digit counter is the InMemorySaver/PostgresSaver
        format, so versions compare correctly after a migration either way
        (their ``get_next_version`` reads only the counter); the shorter
        random part (8 hex digits instead of 16 decimal) keeps checkpoint
        records small.
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        # os.urandom, not the `random` module: a program (or a test framework)
        # that seeds `random` would mint the same suffix again, and a second
        # branch's value would silently lose its blob key to the first.
        return f"{current_v + 1:032}.{os.urandom(4).hex()}"

    # -- maintenance (R7, R8) -------------------------------------------------------------

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> CopyReport:  # type: ignore[override]  # returns a report; base returns None
        """Copy a thread's complete chain — every namespace, checkpoint, write and blob.

        One write transaction; ids, parents and metadata preserved; the stored
        bytes are copied, never re-serialized, so the cost is the thread's size.

        !!! warning "DeltaChannel"
            Copying the whole chain is what keeps delta channels rebuildable on
            the target: every seed and every write between seeds comes along.

        Args:
            source_thread_id: Thread to copy.
            target_thread_id: New thread; must not have checkpoints yet.

        Returns:
            Counts copied; ``found`` is False (and nothing is copied) when the
            source does not exist.

        Raises:
            ThreadExistsError: The target already has checkpoints (no merge).
            InvalidInputError: Source and target are the same thread.
        """
        src, dst = _thread_id(source_thread_id), _thread_id(target_thread_id)
        if src == dst:
            raise InvalidInputError(
                f"copy_thread: source and target are both {src!r}; pick a new thread_id"
            )
        counts = self.store.write(lambda w: w.copy_thread(src, dst))
        if counts is None:
            logger.warning("copy_thread: source thread %r has no checkpoints; nothing copied", src)
            return CopyReport(src, dst, found=False)
        return CopyReport(
            src,
            dst,
            found=True,
            checkpoints=counts["checkpoints"],
            writes=counts["writes"],
            blobs=counts["blobs"],
        )

    def prune(  # type: ignore[override]  # returns a report; base returns None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        older_than: timedelta | datetime | None = None,
        reducers: ChannelSource | None = None,
        dry_run: bool = False,
    ) -> RemovalReport:
        """Prune threads without changing any kept checkpoint's state (R7).

        ``"keep_latest"`` keeps the latest checkpoint of every namespace with
        its pending writes. ``keep_last=N`` keeps the newest N per namespace;
        ``older_than`` keeps everything newer than the age or instant given
        (and always the latest). ``"delete"`` removes the threads.

        !!! warning "DeltaChannel"
            A kept checkpoint whose delta channels replay ancestor writes would
            lose its state if those ancestors went. With ``reducers`` (the
            compiled graph or ``{channel: reducer}``), each such channel gets a
            fresh ``_DeltaSnapshot`` seed in the kept checkpoint and the chain
            is dropped; without them the minimal chain back to each channel's
            nearest seed is kept and hidden from ``list``.

        Args:
            thread_ids: Threads to prune (a list; a bare string is refused).
            strategy: ``"keep_latest"`` or ``"delete"``.
            keep_last: Keep this many newest checkpoints per namespace.
            older_than: Remove checkpoints older than this age (timedelta) or
                instant (timezone-aware datetime).
            reducers: Delta channel reducers, to re-seed instead of keeping chains.
            dry_run: Report what would be removed; write nothing.

        Returns:
            Counts and bytes removed (or that would be).

        Raises:
            InvalidInputError: Bad arguments (raised before anything is written).
        """
        tids = _thread_list(thread_ids, "thread_ids")
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"strategy {strategy!r} is unknown; use 'keep_latest' or 'delete'"
            )
        if keep_last is not None and (
            not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1
        ):
            raise InvalidInputError(f"keep_last {keep_last!r} must be an int >= 1")
        cutoff = _cutoff(older_than)
        if strategy == "delete" and (keep_last is not None or cutoff is not None):
            raise InvalidInputError(
                "strategy 'delete' removes whole threads; keep_last/older_than go with 'keep_latest'"
            )
        specs = _specs(reducers)
        report = RemovalReport(threads=len(tids), dry_run=dry_run)
        if strategy == "delete":
            groups = self._groups_of(tids, frozenset())
            if dry_run:
                with self.store.read() as r:
                    for g in groups:
                        report.add(r.measure(g.t, g.n, Plan(delete=set(g.nodes)), g.versions))
                return report
            for g in groups:
                report.add({"checkpoints": len(g.nodes)})
            self.store.write(functools.partial(_delete_threads, thread_ids=tids))
            return report

        def choose(g: _Group) -> Plan:
            visible = [cid for cid in reversed(list(g.nodes)) if not g.nodes[cid].hidden]
            keep = set(visible[: keep_last or 1])
            if cutoff is not None:
                keep |= {cid for cid in visible if g.timestamps.get(cid, cutoff) >= cutoff}
            return plan_keep(g.nodes, keep, reseed=frozenset(specs))

        return self._maintain(tids, specs, choose, report, want_ts=cutoff is not None)

    def delete_for_runs(  # type: ignore[override]  # returns a report; base returns None
        self, run_ids: Sequence[str], *, reducers: ChannelSource | None = None
    ) -> RemovalReport:
        """Delete the checkpoints (and writes) of runs, found through the run-id index.

        !!! warning "DeltaChannel"
            If a checkpoint that stays replays a delta channel through a
            deleted checkpoint, the chain would be cut: with ``reducers`` the
            last surviving checkpoint on that walk gets a fresh seed; without
            them nothing is deleted and :class:`DeltaChainError` names the
            thread and runs. Children of deleted checkpoints are re-linked to
            the nearest surviving ancestor.

        Args:
            run_ids: Runs to delete (a list; a bare string is refused).
            reducers: Delta channel reducers (compiled graph or mapping).

        Returns:
            Counts and bytes removed.

        Raises:
            DeltaChainError: A kept checkpoint's delta chain would be cut.
        """
        runs = _thread_list(run_ids, "run_ids")
        specs = _specs(reducers)
        with self.store.read() as r:
            doomed: dict[tuple[int, int], set[str]] = {}
            for run in runs:
                for t, n, cid in r.run_checkpoints(run):
                    row = r.checkpoint(t, n, cid, with_values=False, with_writes=False)
                    if row is not None and row.run_id == run:
                        doomed.setdefault((t, n), set()).add(cid)
            threads = sorted({r.name_of(keys.KIND_THREAD, t) for t, _ in doomed})

        def choose(g: _Group) -> Plan:
            gone = doomed.get((g.t, g.n), set()) & set(g.nodes)
            plan, unresolved = plan_delete(g.nodes, gone, reseed=frozenset(specs))
            if unresolved:
                (cid, channel), _ = next(iter(sorted(unresolved.items())))
                names = sorted({g.runs[c] or "?" for c in gone})
                raise DeltaChainError(
                    f"deleting run(s) {names} would cut the delta chain of channel "
                    f"{channel!r} of checkpoint {cid} in thread {g.thread_id!r} (namespace "
                    f"{g.checkpoint_ns!r}), which stays. Pass reducers= (the compiled graph "
                    "or {channel: reducer}) to re-seed it, or delete the whole thread; "
                    "nothing was deleted"
                )
            return plan

        report = RemovalReport(threads=len(threads))
        return self._maintain(threads, specs, choose, report, only=set(doomed))

    def _groups_of(
        self,
        thread_ids: Sequence[str],
        extra: frozenset[str],
        *,
        only: set[tuple[int, int]] | None = None,
        want_ts: bool = False,
    ) -> builtins.list[_Group]:
        groups: builtins.list[_Group] = []
        with self.store.read() as r:
            for thread_id in thread_ids:
                for t, n in r.thread_groups(thread_id):
                    if only is not None and (t, n) not in only:
                        continue
                    nodes, versions, runs = r.group(t, n, extra)
                    g = _Group(t, n, thread_id, r.name_of(keys.KIND_NS, n), nodes, versions, runs)
                    if want_ts:
                        for cid in nodes:
                            row = r.checkpoint(t, n, cid, with_values=False, with_writes=False)
                            if row is not None:
                                g.timestamps[cid] = _parse_ts(self._loads(row.checkpoint).get("ts"))
                    groups.append(g)
        return groups

    def _maintain(
        self,
        thread_ids: Sequence[str],
        specs: Mapping[str, Any],
        choose: Callable[[_Group], Plan],
        report: RemovalReport,
        *,
        only: set[tuple[int, int]] | None = None,
        want_ts: bool = False,
    ) -> RemovalReport:
        """Plan per (thread, ns), compute seeds, then apply everything in one transaction.

        Seeds are computed from a read snapshot; the write transaction re-reads
        each group and retries the whole operation if any changed meanwhile,
        so a concurrent writer can never slip a checkpoint past the plan.
        """
        extra = frozenset(specs)
        for _ in range(8):
            groups = self._groups_of(thread_ids, extra, only=only, want_ts=want_ts)
            plans = [(g, choose(g)) for g in groups]
            if report.dry_run:
                with self.store.read() as r:
                    for g, plan in plans:
                        if plan.seeds:
                            self._seed_rows(r, g, plan, specs=specs)  # the same refusal
                        counts = r.measure(g.t, g.n, plan, g.versions)
                        counts["hidden"] = len(plan.hide)
                        counts["seeds"] = sum(len(c) for c in plan.seeds.values())
                        report.add(counts)
                return report
            work = [(g, plan) for g, plan in plans if not plan.empty]
            results = self.store.write(
                functools.partial(
                    _apply_plans,
                    work=work,
                    extra=extra,
                    seeder=functools.partial(self._seed_rows, specs=specs),
                )
            )
            if results is not None:
                for counts in results:
                    report.add(counts)
                return report
        raise ConcurrentChangeError(
            "the threads kept changing while being pruned; retry when writers pause"
        )

    def _seed_rows(
        self, r: ReadTxn, g: _Group, plan: Plan, *, specs: Mapping[str, Any]
    ) -> builtins.list[tuple[str, BlobRow]]:
        """The fresh seeds of ``plan``, read and checked in the prune's write transaction ``r``.

        Each seed is what the kept chain replays to through the caller's
        reducer, read in the same transaction that then writes it, so no
        concurrent write can slip between the two. The reducer itself is
        checked first against values the graph stored (see
        :meth:`_check_reducer`); a mismatch raises, and since the transaction
        is dropped, nothing is deleted or written.

        Raises:
            ReducerMismatchError: The reducer does not rebuild a stored value.
        """
        rows: builtins.list[tuple[str, BlobRow]] = []
        for cid, channels in sorted(plan.seeds.items()):
            histories = r.delta_history(g.t, g.n, cid, sorted(channels))
            for channel in sorted(channels):
                self._check_reducer(r, g, cid, channel, specs[channel])
                value = replay_history(self._decoded(*histories[channel]), specs[channel])
                blob = self._dumps(_DeltaSnapshot(value), f"seed of channel {channel!r}")
                rows.append((cid, BlobRow(channel, g.versions[cid][channel], blob)))
        return rows

    def _decoded(self, seed: StoredValue | None, writes: Sequence[WriteRow]) -> DeltaChannelHistory:
        """A raw history as ``get_delta_channel_history`` returns it."""
        loads = self.serde.loads_typed
        out: DeltaChannelHistory = {
            "writes": [(w.task_id, w.channel, loads(w.value)) for w in writes]
        }
        if seed is not None:
            out["seed"] = self._load(seed)
        return out

    def _check_reducer(self, r: ReadTxn, g: _Group, cid: str, channel: str, spec: Any) -> None:
        """Refuse a reducer that does not rebuild the values the graph stored (R7).

        The graph's own reducer wrote every snapshot (``_DeltaSnapshot``) on
        the way to ``cid``: each is the replay of the writes before it from
        the snapshot before that. So the caller's reducer must turn the
        history of the nearest snapshotted ancestors (up to
        ``_REDUCER_WITNESSES`` whose history has writes) into exactly the
        value stored there. Cost: that many more walks, each back to the
        previous snapshot. A chain with no snapshot that follows writes (a
        thread younger than its snapshot frequency) offers nothing to check
        against; its seed is still exactly the replay of the kept chain.

        Raises:
            ReducerMismatchError: Naming the channel, the checkpoint and the mismatch.
        """
        checked = 0
        node = g.nodes.get(cid)
        seen: set[str] = set()
        while node is not None and node.parent_id is not None and checked < _REDUCER_WITNESSES:
            node = g.nodes.get(node.parent_id)
            if node is None or node.checkpoint_id in seen:
                return
            seen.add(node.checkpoint_id)
            if channel not in node.seeded:
                continue
            row = r.checkpoint(g.t, g.n, node.checkpoint_id, with_writes=False)
            stored = row.values.get(channel) if row is not None else None
            if stored is None:
                continue
            history = r.delta_history(g.t, g.n, node.checkpoint_id, [channel])[channel]
            if not history[1]:
                continue
            checked += 1
            try:
                want = replay_history({"writes": [], "seed": self._load(stored)}, spec)
                got = replay_history(self._decoded(*history), spec)
            except Exception as exc:  # a reducer of another shape may fail on this data
                raise ReducerMismatchError(
                    f"prune: the reducer given for channel {channel!r} ({_reducer_name(spec)}) "
                    f"fails on the history of checkpoint {node.checkpoint_id} of thread "
                    f"{g.thread_id!r} (namespace {g.checkpoint_ns!r}): {type(exc).__name__}: "
                    f"{exc}. Pass the graph that wrote the thread (its reducers), or prune "
                    "without reducers to keep the chain; nothing was deleted"
                ) from exc
            if got != want:
                raise ReducerMismatchError(
                    f"prune: the reducer given for channel {channel!r} ({_reducer_name(spec)}) does not "
                    f"rebuild the value the graph stored at checkpoint {node.checkpoint_id} of "
                    f"thread {g.thread_id!r} (namespace {g.checkpoint_ns!r}): replaying its "
                    f"{len(history[1])} writes gives {_difference(got, want)}. Pass the graph "
                    "that wrote the thread (its reducers), or prune without reducers to keep "
                    "the chain; nothing was deleted"
                )

    def verify(
        self, thread_ids: Sequence[str] | None = None, *, deep: bool = False
    ) -> VerifyReport:
        """Check every chain and record; read-only.

        Finds dangling parents, delta channels that cannot reach a seed or the
        root, undecodable records (with ``deep``, also values the serde cannot
        load), values nobody references and writes without a checkpoint.

        Args:
            thread_ids: Threads to check; all when None.
            deep: Also deserialize every checkpoint, value and write.

        Returns:
            The findings; ``report.ok`` is True when none is an error.
        """
        report = VerifyReport()
        groups: builtins.list[tuple[str, int | None]] = []
        if thread_ids is None:
            # The name tables and every key, as reads use them (issue 15.1/15.2).
            for kind, thread_id, detail in self.store.verify_tables():
                report.problems.append(Problem(kind, "error", thread_id, None, None, detail))
            if any(p.kind == "unreadable" for p in report.problems):
                # The per-thread checks step through pages with next(), where LMDB
                # asserts (aborting the process) on a page a search reports as damaged.
                report.problems.append(
                    Problem(
                        "unreadable",
                        "error",
                        None,
                        None,
                        None,
                        "LMDB reports damaged pages; per-thread checks skipped. Restore the "
                        "store from a backup",
                    )
                )
                return report
            try:
                with self.store.read() as r:
                    for t in r.threads():
                        try:
                            groups.append((r.name_of(keys.KIND_THREAD, t), t))
                        except DeltaLogError:  # reported by verify_tables; check its rows anyway
                            groups.append((f"#{t}", t))
            except DeltaLogError as exc:  # LMDB damage on the way through the threads
                report.problems.append(Problem("unreadable", "error", None, None, None, str(exc)))
            from deltalog.engine.memory import verify_memory  # the memory store's records

            verify_memory(self.store, report)
        else:
            groups = [(tid, None) for tid in _thread_list(thread_ids, "thread_ids")]
        for thread_id, tid in groups:
            report.threads += 1
            try:
                with self.store.read() as r:
                    self._verify_thread(r, report, thread_id, tid, deep)
            except DeltaLogError as exc:  # e.g. LMDB reports a damaged page on this thread's path
                report.problems.append(
                    Problem("unreadable", "error", thread_id, None, None, str(exc))
                )
        return report

    def _verify_thread(
        self, r: ReadTxn, report: VerifyReport, thread_id: str, t: int | None, deep: bool
    ) -> None:
        """Add the findings of one thread (by id ``t`` when its name is damaged) to ``report``."""
        pairs = r.thread_groups(thread_id) if t is None else [(t, n) for n in r.namespaces(t)]
        for t, n in pairs:
            try:
                ns = r.name_of(keys.KIND_NS, n)
            except DeltaLogError:
                ns = f"#{n}"
            found = r.verify_group(t, n)
            report.checkpoints += found.checkpoints
            report.records += found.records
            for kind, severity, cid, detail in found.problems:
                report.problems.append(Problem(kind, severity, thread_id, ns, cid, detail))
            r.latest_key(t, n)  # the search get_tuple makes for the latest checkpoint
            if deep:
                for cid in found.decodable:
                    try:
                        row = r.checkpoint(t, n, cid)
                        if row is not None:
                            self._to_tuple(row)
                    except Exception as exc:
                        report.problems.append(
                            Problem("undecodable", "error", thread_id, ns, cid, f"serde: {exc}")
                        )

    def compact(self, dest: str | os.PathLike[str]) -> CompactReport:
        """Write a compacted copy of the whole store to ``dest`` (a new folder).

        LMDB reuses freed pages but never returns them to the OS; the copy
        holds only live pages. Consistent while writers run (it reads one
        snapshot). To compact in place, stop every process using the store,
        then swap the folders.

        Returns:
            Data file bytes before (this store) and after (the copy).
        """
        return self.backup(dest, compact=True)

    def backup(self, dest: str | os.PathLike[str], *, compact: bool = False) -> CompactReport:
        """Consistent hot copy of the store into a new folder (one read snapshot).

        The copy is owner-only and appears as ``dest/data.mdb`` only once it is
        complete and on disk: an interrupted backup leaves no store behind.

        Raises:
            InvalidInputError: ``dest`` is a file or already holds a store.
        """
        folder = store_folder(dest, what="backup destination")
        before = self.store.file_bytes()
        self.store.copy_to(folder, compact=compact)
        after = os.path.getsize(os.path.join(folder, "data.mdb"))
        return CompactReport(self.store.path, folder, before, after)

    # -- inspection, export and import ------------------------------------------------------

    def threads(self) -> builtins.list[ThreadSummary]:
        """Every thread with checkpoint/write/blob counts, namespaces, newest id and bytes.

        Read from keys and record sizes only (nothing is deserialized).
        """
        with self.store.read() as r:
            return r.thread_summaries()

    def channel_stats(self) -> dict[str, dict[str, int]]:
        """Per channel: stored values and writes, bytes as stored and before compression."""
        with self.store.read() as r:
            return r.channel_sizes()

    def checkpoint_refs(self, thread_id: str) -> builtins.list[tuple[str, str, str | None, bool]]:
        """Every checkpoint of a thread as (checkpoint_ns, checkpoint_id, parent_id, hidden).

        Hidden checkpoints (kept only for a delta chain) are included. Reads
        record envelopes only, so walking a large thread's shape is cheap.
        """
        tid = _thread_id(thread_id)
        with self.store.read() as r:
            t = r.name_id(keys.KIND_THREAD, tid)
            return [] if t is None else r.checkpoint_refs(t)

    def get_writes(self, config: RunnableConfig) -> builtins.list[WriteRow]:
        """A checkpoint's writes with ``task_path`` and ``idx`` (still serialized).

        ``pending_writes`` drops the path; migration to another saver needs it
        to keep ``writes_sort_key`` order there.
        """
        thread_id, checkpoint_ns, checkpoint_id = _parse_config(config)
        with self.store.read() as r:
            ids = r.ids(thread_id, checkpoint_ns)
            row = r.checkpoint(*ids, checkpoint_id, with_values=False) if ids else None
        return [] if row is None else row.writes

    def export_records(
        self, thread_ids: Sequence[str] | None = None, *, items: bool | None = None
    ) -> Iterator[dict[str, Any]]:
        """Portable records of threads (all when None), values as the serde stored them.

        Each thread is read in one snapshot, the memory store's items in one
        more. The stream round-trips exactly through :meth:`import_records`;
        docs/cli.md documents its format.

        Args:
            thread_ids: The threads to export (all when None).
            items: Also export the live items of the memory store on this file
                (:class:`~deltalog.engine.DeltaLogStore`), with their vectors.
                Default: when every thread is exported.

        Yields:
            A header record, then checkpoint, blob and write records per
            thread, then ``item`` records.
        """
        yield {"kind": "header", "format": EXPORT_FORMAT, "version": EXPORT_VERSION}
        with self.store.read() as r:
            if thread_ids is None:
                tids = [r.name_of(keys.KIND_THREAD, t) for t in r.threads()]
            else:
                tids = _thread_list(thread_ids, "thread_ids")
        for thread_id in tids:
            with self.store.read() as r:
                t = r.name_id(keys.KIND_THREAD, thread_id)
                rows = builtins.list(r.export_thread(t)) if t is not None else []
            yield from rows
        if items if items is not None else thread_ids is None:
            from deltalog.engine.memory_export import export_items

            yield from export_items(self.store)

    def import_records(self, records: Iterable[dict[str, Any]]) -> dict[str, int]:
        """Import an export stream in one write transaction (all or nothing, R8).

        Every record is validated first (:func:`~deltalog.engine.import_check.check_import`:
        types, ids, versions, value types this saver's serde loads, duplicates,
        parent cycles); only a stream that passes is written.

        Memory store ``item`` records go into the same transaction, vectors as
        exported (nothing is re-embedded).

        Raises:
            InvalidInputError: ``records`` is not an iterable of records.
            ImportRecordError: A record is malformed; the message names its line.
            ThreadExistsError: A thread in the stream already exists here.
            ItemExistsError: An item of the stream is already live here.
        """
        rows, first_lines = check_import(records, self.serde)
        items = [rec for rec in rows if rec["kind"] == "item"]
        if not items:
            return self.store.write(lambda w: w.import_records(rows, first_lines=first_lines))
        from deltalog.engine.memory_export import import_items
        from deltalog.engine.memory_io import directory

        threads = [rec for rec in rows if rec["kind"] != "item"]

        def op(w: WriteTxn) -> tuple[dict[str, int], dict[tuple[str, ...], int]]:
            interned = import_items(w, items, [rec["line"] for rec in items])
            counts = w.import_records(threads, first_lines=first_lines)
            counts["items"] = len(items)
            return counts, interned

        counts, interned = self.store.write(op)
        directory(self.store).learn(interned)
        return counts

    # -- async twins -------------------------------------------------------------------------

    def _writer_pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            # Async writes without group commit, and async maintenance calls.
            self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="deltalog-writer")
        return self._executor

    async def _in_writer(self, op: Callable[[WriteTxn], T], *, history_safe: bool = False) -> T:
        """Run a write off the event loop and await its durable commit.

        With group commit the op is queued (:meth:`Store.submit`) and the
        coroutine awaits a future the committing thread resolves: no thread
        waits per pending write, so any number of coroutines share commits.
        A cancelled coroutine does not cancel its write, which may still
        commit.
        """
        loop = asyncio.get_running_loop()
        if not self.store.group_commit:
            write = functools.partial(self.store.write, op, history_safe=history_safe)
            return await loop.run_in_executor(self._writer_pool(), write)
        done: asyncio.Future[T] = loop.create_future()

        def notify(error: BaseException | None, value: T | None) -> None:  # committing thread
            loop.call_soon_threadsafe(_settle, done, error, value)

        self.store.submit(op, notify, history_safe=history_safe)
        return await done

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`: the read and decode run in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`: reads and decodes run in a worker thread, a few tuples a hop.

        No read transaction stays open between tuples, so the iterator may move
        between threads and be abandoned early.
        """
        items = self.list(config, filter=filter, before=before, limit=limit)
        while True:
            batch = await asyncio.to_thread(_take, items, _ALIST_BATCH)
            for item in batch:
                yield item
            if len(batch) < _ALIST_BATCH:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`: serializes now, commits (and fsyncs) off the event loop."""
        op, out = self._prepare_put(config, checkpoint, metadata, new_versions)
        await self._in_writer(op, history_safe=True)
        return out

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`: serializes now, commits off the event loop."""
        await self._in_writer(
            self._prepare_writes(config, writes, task_id, task_path), history_safe=True
        )

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        tid = _thread_id(thread_id)
        await self._in_writer(lambda w: w.delete_thread(tid))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> CopyReport:  # type: ignore[override]  # returns a report; base returns None
        """Async :meth:`copy_thread` (the commit runs off the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._writer_pool(), self.copy_thread, source_thread_id, target_thread_id
        )

    async def aprune(  # type: ignore[override]  # returns a report; base returns None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        older_than: timedelta | datetime | None = None,
        reducers: ChannelSource | None = None,
        dry_run: bool = False,
    ) -> RemovalReport:
        """Async :meth:`prune`."""
        call = functools.partial(
            self.prune,
            thread_ids,
            strategy=strategy,
            keep_last=keep_last,
            older_than=older_than,
            reducers=reducers,
            dry_run=dry_run,
        )
        return await asyncio.get_running_loop().run_in_executor(self._writer_pool(), call)

    async def adelete_for_runs(  # type: ignore[override]  # returns a report; base returns None
        self, run_ids: Sequence[str], *, reducers: ChannelSource | None = None
    ) -> RemovalReport:
        """Async :meth:`delete_for_runs`."""
        call = functools.partial(self.delete_for_runs, run_ids, reducers=reducers)
        return await asyncio.get_running_loop().run_in_executor(self._writer_pool(), call)

    async def averify(
        self, thread_ids: Sequence[str] | None = None, *, deep: bool = False
    ) -> VerifyReport:
        """Async :meth:`verify`."""
        call = functools.partial(self.verify, thread_ids, deep=deep)
        return await asyncio.get_running_loop().run_in_executor(self._writer_pool(), call)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async :meth:`get_delta_channel_history`: read and decode run in a worker thread."""
        return await asyncio.to_thread(
            functools.partial(self.get_delta_channel_history, config=config, channels=channels)
        )


class SaverContext(
    AbstractContextManager["DeltaLogSaver"], AbstractAsyncContextManager["DeltaLogSaver"]
):
    """What :meth:`DeltaLogSaver.from_conn_string` returns: opens on enter, closes on exit."""

    def __init__(
        self, cls: type[DeltaLogSaver], path: str | os.PathLike[str], options: dict[str, Any]
    ) -> None:
        self._cls = cls
        self._path = path
        self._options = options
        self._saver: DeltaLogSaver | None = None

    def __enter__(self) -> DeltaLogSaver:
        self._saver = self._cls.from_path(self._path, **self._options)
        return self._saver

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        saver, self._saver = self._saver, None
        if saver is not None:
            saver.close()

    async def __aenter__(self) -> DeltaLogSaver:
        # Opening may create files, run migrations and fsync: not on the loop.
        self._saver = await asyncio.to_thread(self._cls.from_path, self._path, **self._options)
        return self._saver

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        saver, self._saver = self._saver, None
        if saver is not None:
            await asyncio.to_thread(saver.close)


def _take(items: Iterator[T], n: int) -> list[T]:
    """The next ``n`` items of an iterator (fewer at its end)."""
    out: list[T] = []
    for item in items:
        out.append(item)
        if len(out) >= n:
            break
    return out


class _Done:
    """An awaitable that is already done: what the no-op :meth:`DeltaLogSaver.setup` returns."""

    __slots__ = ()

    def __repr__(self) -> str:  # what a REPL echoes after saver.setup()
        return "<deltalog: nothing to set up>"

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that finishes at once


_DONE: Final = _Done()


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _serde_mismatch(
    serde: SerializerProtocol, type_tag: Any, what: str, error: Exception | None
) -> SerdeMismatchError:
    """The error of a value ``serde`` cannot load, naming the likely cause and the fix."""
    tag = str(type_tag)
    serde_name = type(serde).__name__
    if "+" in tag:
        cipher = tag.split("+", 1)[1]
        if error is not None:
            return UndecryptableValueError(
                f"{what} of type {tag!r} cannot be decrypted by {serde_name} "
                f"({type(error).__name__}: {error}): wrong key? It was written with "
                f"EncryptedSerializer ({cipher}); pass the serde= that wrote the store, with "
                "its key (deltalog CLI: LANGGRAPH_AES_KEY or --serde MODULE:ATTR)"
            )
        return SerdeMismatchError(
            f"{what} of type {tag!r} was written with EncryptedSerializer ({cipher}) and "
            f"{serde_name} cannot decrypt it; pass serde=EncryptedSerializer."
            "from_pycryptodome_aes() with the key (LANGGRAPH_AES_KEY); deltalog CLI: set "
            "LANGGRAPH_AES_KEY or pass --serde MODULE:ATTR"
        )
    if tag == "pickle":
        return SerdeMismatchError(
            f"{what} of type 'pickle' is refused by {serde_name} (pickle fallback off: "
            "unpickling runs code); only if you trust whoever wrote the store, pass "
            "serde=JsonPlusSerializer(pickle_fallback=True)"
        )
    return SerdeMismatchError(
        f"{what} of type {tag!r} is not a type {serde_name} loads; pass the serde= that "
        "wrote the store (deltalog CLI: --serde MODULE:ATTR)"
    )


def _thread_id(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise ConfigError(
        f"thread_id {value!r} is a {type(value).__name__}; pass a str (ints and UUIDs are "
        "converted with str())"
    )


def _settle(done: asyncio.Future[T], error: BaseException | None, value: T | None) -> None:
    """Resolve an async write's future on its event loop (unless it was cancelled)."""
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(value)  # type: ignore[arg-type]


def _parse_config(config: Any) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a config, validated (R9)."""
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"config {config!r:.80} is not a mapping; pass {{'configurable': {{'thread_id': ...}}}}"
        )
    conf = config.get("configurable")
    if not isinstance(conf, Mapping) or conf.get("thread_id") is None:
        raise ConfigError(
            "config has no configurable.thread_id; pass "
            "{'configurable': {'thread_id': 'my-thread'}} when invoking the graph"
        )
    thread_id = _thread_id(conf["thread_id"])
    ns = conf.get("checkpoint_ns") or ""
    if not isinstance(ns, str):
        raise ConfigError(f"checkpoint_ns {ns!r} is a {type(ns).__name__}; pass a str")
    return thread_id, ns, _checkpoint_id_of(conf, "checkpoint_id")


def _checkpoint_id_of(conf: Mapping[str, Any], what: str) -> str | None:
    """``conf["checkpoint_id"]`` (None when absent or empty), checked to be a str."""
    checkpoint_id = conf.get("checkpoint_id") or None
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise ConfigError(
            f"{what} {checkpoint_id!r} is a {type(checkpoint_id).__name__}; pass a str"
        )
    return checkpoint_id


def _before_id(before: Any) -> str | None:
    """The checkpoint id of ``list``'s ``before`` config. Only the id counts: LangGraph's
    replay passes ``{"configurable": {"checkpoint_id": ...}}`` with no thread_id."""
    if before is None:
        return None
    if not isinstance(before, Mapping) or not isinstance(before.get("configurable"), Mapping):
        raise ConfigError(
            f"before {before!r:.80} is not a config; pass "
            "{'configurable': {'checkpoint_id': ...}}"
        )
    return _checkpoint_id_of(before["configurable"], "before's checkpoint_id")


def _apply_plans(
    w: WriteTxn,
    *,
    work: list[tuple[_Group, Plan]],
    extra: frozenset[str],
    seeder: Callable[[WriteTxn, _Group, Plan], list[tuple[str, BlobRow]]],
) -> list[dict[str, int]] | None:
    """Apply planned groups in one transaction; None if any group changed since planning.

    Every group is checked and its seeds computed (``seeder``, which may
    raise) before the first one is changed.
    """
    seeded = []
    for g, plan in work:
        if w.group(g.t, g.n, extra)[0] != g.nodes:
            return None
        seeded.append((g, plan, seeder(w, g, plan) if plan.seeds else []))
    return [w.apply_plan(g.t, g.n, plan, seeds, g.versions, g.runs) for g, plan, seeds in seeded]


def _reducer_name(spec: Any) -> str:
    """How an error names a channel's reducer (a DeltaChannel names its own)."""
    reducer = getattr(spec, "reducer", spec)
    name = getattr(reducer, "__name__", None)
    return name if isinstance(name, str) else f"{reducer!r:.60}"


def _difference(got: Any, want: Any) -> str:
    """A short account of how a rebuilt value differs from the stored one."""
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return f"{len(got)} items where the graph stored {len(want)}"
        i = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), 0)
        return f"item {i} {got[i]!r:.80} where the graph stored {want[i]!r:.80}"
    return f"{got!r:.80} where the graph stored {want!r:.80}"


# One environment per path and process: LMDB (and py-lmdb) refuse a second
# open of the same path in one process, so from_path hands out one Store per
# real path, counted, and closes it with its last saver.
_SHARED_LOCK = threading.Lock()
_SHARED: dict[str, tuple[Store, dict[str, Any], int]] = {}


def _new_shared_lock_in_child() -> None:
    # A fork while another thread held the lock would leave it locked forever
    # in the child; the stores themselves reopen there on first use.
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_shared_lock_in_child)


def _open_shared(path: str | os.PathLike[str], options: dict[str, Any]) -> Store:
    real = os.path.realpath(os.fspath(path))
    with _SHARED_LOCK:
        entry = _SHARED.get(real)
        if entry is not None and not entry[0].closed:
            store, opened_with, refs = entry
            if opened_with != options:
                diff = {k: (opened_with[k], v) for k, v in options.items() if opened_with[k] != v}
                raise InvalidInputError(
                    f"{os.fspath(path)!r} is already open in this process with other options "
                    f"(option: (open, asked) = {diff}); open it with the same options or "
                    "share the first saver"
                )
            _SHARED[real] = (store, opened_with, refs + 1)
            return store
        store = Store(
            path,
            map_size=options["map_size"],
            max_map_size=options["max_map_size"],
            durable=options["durable"],
            codec=RecordCodec(compress_threshold=options["compress_threshold"]),
            group_commit=options["group_commit"],
            max_readers=options["max_readers"],
        )
        _SHARED[real] = (store, options, 1)
        return store


def _release_shared(store: Store) -> None:
    with _SHARED_LOCK:
        for real, (shared, options, refs) in list(_SHARED.items()):
            if shared is store:
                if refs > 1:
                    _SHARED[real] = (shared, options, refs - 1)
                    return
                del _SHARED[real]
                break
    store.close()


def _check_open_options(*, compress_threshold: Any, cache_bytes: Any) -> None:
    """The saver's own options of :meth:`DeltaLogSaver.from_path` (R9; the store checks its own)."""
    if compress_threshold is not None and (
        isinstance(compress_threshold, bool)
        or not isinstance(compress_threshold, int)
        or compress_threshold < 0
    ):
        raise InvalidInputError(
            f"compress_threshold={compress_threshold!r}: need a byte count >= 0 (e.g. 512), "
            "or None to turn compression off"
        )
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
        raise InvalidInputError(
            f"cache_bytes={cache_bytes!r}: need a byte count >= 0 (e.g. 64 * 1024**2), or 0 to "
            "turn the cache off"
        )


def _delete_threads(w: WriteTxn, *, thread_ids: list[str]) -> None:
    for thread_id in thread_ids:
        w.delete_thread(thread_id)


@dataclass
class _Group:
    """One (thread, ns) as a maintenance operation planned it."""

    t: int
    n: int
    thread_id: str
    checkpoint_ns: str
    nodes: dict[str, Node]
    versions: dict[str, dict[str, Any]]
    runs: dict[str, str | None]
    timestamps: dict[str, datetime] = field(default_factory=dict)


def _delta_counters(counters: Any) -> list[str]:
    """The channels of ``counters_since_delta_snapshot`` (``{channel: (updates, supersteps)}``).

    Raises:
        InvalidInputError: The field is not such a mapping (checked before any write).
    """
    if not counters:
        return []
    if not isinstance(counters, Mapping):
        raise InvalidInputError(
            f"metadata counters_since_delta_snapshot {counters!r:.80} is not a mapping; pass "
            "{channel: (updates, supersteps)} as LangGraph writes it, or leave it out"
        )
    for channel, pair in counters.items():
        ints = (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in pair)
        ) or (isinstance(pair, int) and not isinstance(pair, bool))
        if not isinstance(channel, str) or not ints:
            raise InvalidInputError(
                f"metadata counters_since_delta_snapshot entry {channel!r}: {pair!r:.80} is not "
                "a channel name with (updates, supersteps) ints; pass "
                "{channel: (updates, supersteps)} as LangGraph writes it, or leave it out"
            )
    return sorted(counters)


def _thread_list(value: Any, what: str) -> list[str]:
    if isinstance(value, (str, bytes)):
        raise InvalidInputError(
            f"{what} {value!r} is a single string; pass a list, e.g. [{value!r}]"
        )
    try:
        items = list(value)
    except TypeError:
        raise InvalidInputError(f"{what} {value!r} is not a list of strings") from None
    return [_thread_id(v) for v in items]


def _specs(reducers: ChannelSource | None) -> dict[str, Any]:
    if reducers is None:
        return {}
    try:
        return dict(delta_channels(reducers))
    except TypeError as exc:
        raise InvalidInputError(
            f"reducers {reducers!r:.80}: {exc}; pass the compiled graph or {{channel: reducer}}"
        ) from None


def _cutoff(older_than: timedelta | datetime | None) -> datetime | None:
    if older_than is None:
        return None
    if isinstance(older_than, timedelta):
        if older_than < timedelta(0):
            raise InvalidInputError(f"older_than {older_than!r} is negative; pass a positive age")
        return datetime.now(timezone.utc) - older_than
    if isinstance(older_than, datetime):
        if older_than.tzinfo is None:
            raise InvalidInputError(
                f"older_than {older_than!r} has no time zone; pass an aware datetime "
                "(e.g. datetime.now(timezone.utc) - timedelta(days=7))"
            )
        return older_than
    raise InvalidInputError(f"older_than {older_than!r} is neither a timedelta nor a datetime")


def _parse_ts(ts: Any) -> datetime:
    try:
        value = datetime.fromisoformat(str(ts))
    except ValueError:
        return datetime.max.replace(tzinfo=timezone.utc)  # unknown age: never "old"
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
