"""`DeltaLogSaver`: the LangGraph adapter over the deltalog store.

This layer translates ``RunnableConfig`` into store calls and owns
``self.serde``: every channel value, checkpoint body, metadata dict and write
goes through ``serde.dumps_typed`` / ``serde.loads_typed`` here, so
``EncryptedSerializer`` and LangGraph's strict msgpack allowlist keep working.
It makes no LMDB calls; the storage modules (:mod:`deltalog.engine.env` and the
transactions) do. Each method is a
short delegation: arguments are parsed in :mod:`~deltalog.engine.config`,
values cross the serde in :mod:`~deltalog.engine.values`, puts are serialized
in :mod:`~deltalog.engine.prepare`, ``list`` scans in :mod:`~deltalog.engine.reads`,
R7 maintenance runs in :mod:`~deltalog.engine.maintenance`.

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
import os
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from deltalog.channels.replay import ChannelSource
from deltalog.engine import keys
from deltalog.engine.aio import DONE, run_write, take
from deltalog.engine.cache import (
    SPARE_HISTORY,
    SPARE_STATE,
    DecodedCache,
    HistoryCopies,
    spare_sized,
)
from deltalog.engine.config import (
    MEMORY,
    check_open_options,
    parse_config,
    thread_id_of,
)
from deltalog.engine.env import Environment
from deltalog.engine.env_files import Durable, store_folder
from deltalog.engine.export import end, header
from deltalog.engine.import_check import check_import
from deltalog.engine.maintenance import Maintenance, train_on_import
from deltalog.engine.prepare import prepare_put, prepare_writes
from deltalog.engine.reads import export_rows, list_rows
from deltalog.engine.reports import CompactReport, CopyReport, RemovalReport, VerifyReport
from deltalog.engine.shared import ClosingContext, OpenContext, open_path
from deltalog.engine.store_rows import (
    CheckpointRow,
    DeltaHistory,
    StoredValue,
    ThreadSummary,
    Typed,
    WriteRow,
)
from deltalog.engine.summaries import channel_sizes, thread_summaries
from deltalog.engine.values import (
    decode_histories,
    dumps,
    load,
    loads,
    prefill,
    seed_like,
    to_tuple,
)
from deltalog.engine.write_txn import WriteTxn
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import IndexConfig, TTLConfig

if TYPE_CHECKING:
    from deltalog.engine.memory import DeltaLogStore

__all__ = ["MEMORY", "DeltaLogSaver", "SaverContext"]

#: What :meth:`DeltaLogSaver.from_conn_string` returns (the name before the
#: memory store had one too).
SaverContext = OpenContext

T = TypeVar("T")

# Tuples alist decodes per worker-thread hop: a hop costs ~50 us; one tuple
# of a long thread can cost milliseconds, and a caller may stop early.
_ALIST_BATCH: Final = 4


def _may_spare(values: Iterable[StoredValue | None]) -> bool:
    """Whether one of ``values`` may be large enough for a spare copy
    (:func:`~deltalog.engine.cache.spare_sized`): only then does a read look up
    whether it came from the namespace's newest checkpoint (a cursor seek,
    which hands the GIL to other threads)."""
    return any(v is not None and spare_sized(len(v.typed[1])) for v in values)


class DeltaLogSaver(BaseCheckpointSaver[str], ClosingContext):
    """A LangGraph checkpoint saver on an embedded LMDB event log.

    Sync and async in one class. Every write is one LMDB transaction (R8);
    ``get_delta_channel_history`` walks ancestors in one read transaction (R6).

    Example:
        >>> from deltalog.engine import DeltaLogSaver
        >>> with DeltaLogSaver.from_path(tmp / "chat.lmdb") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)

    Args:
        env: An open :class:`~deltalog.engine.env.Environment`.
        serde: Serializer for values, metadata and writes (LangGraph's
            ``JsonPlusSerializer`` by default, pickle fallback off).
        owns_env: Close the environment when the saver closes.
        cache_bytes: Cap on memory for decoded channel values (seeds above
            all); the budget grows to it with the workload (docs/operations.md,
            "Memory"); 0 turns the cache off. Readers always get private copies.
            None takes the environment's ``CachePolicy.decoded_bytes``.

    Raises:
        TypeError: ``env`` is not an Environment; for a path, the message names
            :meth:`from_path` and :meth:`from_conn_string`.
    """

    def __init__(
        self,
        env: Environment,
        *,
        serde: SerializerProtocol | None = None,
        owns_env: bool = True,
        cache_bytes: int | None = None,
    ) -> None:
        if not isinstance(env, Environment):
            hint = (
                f"DeltaLogSaver.from_path({env!r}) opens a store at a path (or use "
                f"`with DeltaLogSaver.from_conn_string({env!r}) as saver:`)"
                if isinstance(env, (str, bytes, os.PathLike))
                else "pass a deltalog.engine.Environment, or open a path with "
                "DeltaLogSaver.from_path"
            )
            raise TypeError(
                f"DeltaLogSaver() takes an open Environment, not {type(env).__name__} "
                f"{env!r:.80}; " + hint
            )
        super().__init__(serde=serde)
        self.env = env
        self.owns_env = owns_env
        self.cache = DecodedCache(
            env.caches.decoded_bytes if cache_bytes is None else cache_bytes,
            spare_bytes=env.caches.spare_bytes,
        )
        self.history_copies = HistoryCopies()
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        durable: Durable = True,
        map_size: int = 64 * 1024**2,
        max_map_size: int = 1024**4,
        compress_threshold: int | None = 512,
        group_commit: bool = True,
        pack_turns: bool = True,
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
            durable: fsync every commit (default). ``"normal"`` syncs a commit's
                data but not the page that points to it (one sync instead of
                two, like SQLite's ``synchronous=NORMAL``): a machine crash may
                undo the last commit, and never corrupts the store. ``False``
                syncs nothing and trades the last commits before a machine
                crash for speed (see docs/operations.md).
            map_size: Initial LMDB map size; grows automatically.
            max_map_size: Cap of automatic growth.
            compress_threshold: Records at least this large are zstd-compressed;
                None turns compression off.
            group_commit: Let concurrent writers share a commit.
            pack_turns: Pack a thread's older checkpoint and write records into
                compressed records of up to 15 checkpoints, sized to fill LMDB
                pages (format 14; ~40 % fewer bytes a chat turn, docs/design.md
                "Turn packs"). False writes none (packs already stored still
                read).
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
        check_open_options(compress_threshold=compress_threshold, cache_bytes=cache_bytes)
        options = {
            "map_size": map_size,
            "max_map_size": max_map_size,
            "durable": durable,
            "compress_threshold": compress_threshold,
            "group_commit": group_commit,
            "pack_turns": pack_turns,
            "max_readers": max_readers,
        }
        store, temp_dir = open_path(path, options)
        saver = cls(store, serde=serde, cache_bytes=cache_bytes)
        saver._opened_at(temp_dir)
        return saver

    @classmethod
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], **options: Any
    ) -> OpenContext[DeltaLogSaver]:
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
        return OpenContext(functools.partial(cls.from_path, conn_string, **options))

    def setup(self) -> Awaitable[None]:
        """Nothing to set up: the store creates its databases when it opens.

        Kept for code written for ``PostgresSaver`` / ``AsyncPostgresSaver``:
        both ``saver.setup()`` and ``await saver.setup()`` work.
        """
        return DONE

    async def asetup(self) -> None:
        """Nothing to set up (see :meth:`setup`)."""

    # -- life cycle -------------------------------------------------------------------

    def close(self) -> None:
        """Close the saver (and its store when it owns it). Idempotent."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._let_go()

    # -- serialization helpers -----------------------------------------------------------

    def _dumps(self, value: Any, what: str) -> Typed:
        return dumps(self.serde, value, what)

    def _load(self, value: StoredValue) -> Any:
        """Decode a stored channel value through the cache (a private copy per caller)."""
        return load(self.serde, self.cache, value)

    def _loads(self, typed: Typed, what: str = "a stored value") -> Any:
        """``serde.loads_typed``; a value this serde cannot load is :class:`SerdeMismatchError`."""
        return loads(self.serde, typed, what)

    def memory_store(
        self,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> DeltaLogStore:
        """LangGraph long-term memory (a ``BaseStore``) in this saver's LMDB file.

        ``builder.compile(checkpointer=saver, store=saver.memory_store())`` keeps
        checkpoints and memory in one environment (``saver.env`` is that
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
            clone.cache = DecodedCache(
                self.cache.max_bytes, self.cache.min_record, spare_bytes=self.cache.spare_bytes
            )
            clone.history_copies = HistoryCopies()
        return clone

    def _to_tuple(self, row: CheckpointRow, *, spare: int = 0) -> CheckpointTuple:
        return to_tuple(self.serde, self.cache, row, spare=spare)

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
        thread_id, checkpoint_ns, checkpoint_id = parse_config(config)
        with self.env.read() as r:
            ids = r.ids(thread_id, checkpoint_ns)
            row = r.checkpoint(*ids, checkpoint_id) if ids is not None else None
            head = (
                row is not None
                and ids is not None
                and _may_spare(v for v in row.values.values() if seed_like(v.typed))
                and r.is_latest(*ids, checkpoint_id)
            )
        return None if row is None else self._to_tuple(row, spare=SPARE_STATE if head else 0)

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
        for row in list_rows(
            self.env, self._loads, config, filter=filter, before=before, limit=limit
        ):
            yield self._to_tuple(row)

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
        thread_id, checkpoint_ns, checkpoint_id = parse_config(config)
        head = False
        with self.env.read() as r:
            ids = r.ids(thread_id, checkpoint_ns)
            if ids is None:
                raw = {c: DeltaHistory(None, ()) for c in channels}
            else:
                raw = r.history(*ids, checkpoint_id, channels)
                head = _may_spare(h.seed for h in raw.values()) and r.is_latest(*ids, checkpoint_id)
        return decode_histories(
            self.serde,
            self.cache,
            self.history_copies,
            raw,
            channels,
            spare=SPARE_HISTORY if head else 0,
        )

    # -- writes -----------------------------------------------------------------------------

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
        op, out = prepare_put(self.serde, config, checkpoint, metadata, new_versions)
        prefill(self.serde, self.cache, self.env.write(op, history_safe=True))
        return out

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
        op = prepare_writes(self.serde, config, writes, task_id, task_path)
        op.compress_ahead(self.env.codec)
        self.env.write(op, history_safe=True)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and blob of a thread, in one transaction.

        Args:
            thread_id: The thread to delete; unknown threads are a no-op.
        """
        tid = thread_id_of(thread_id)
        self.env.write(lambda w: w.delete_thread(tid))

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

    def _maintenance(self) -> Maintenance:
        """The maintenance service over this saver's store, serde and cache (R7)."""
        return Maintenance(self.env, self.serde, self.cache)

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
        return self._maintenance().copy_thread(source_thread_id, target_thread_id)

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
        return self._maintenance().prune(
            thread_ids,
            strategy=strategy,
            keep_last=keep_last,
            older_than=older_than,
            reducers=reducers,
            dry_run=dry_run,
        )

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
        return self._maintenance().delete_for_runs(run_ids, reducers=reducers)

    def verify(
        self, thread_ids: Sequence[str] | None = None, *, deep: bool = False
    ) -> VerifyReport:
        """Check every chain and record; read-only.

        Finds dangling parents, delta channels that cannot reach a seed or the
        root, undecodable records (with ``deep``, also values the serde cannot
        load), values nobody references and writes without a checkpoint.

        Args:
            thread_ids: Threads to check (their records only); all when None, which
                also checks every key and the name tables of the whole store.
            deep: Also deserialize every checkpoint, value and write.

        Returns:
            The findings; ``report.ok`` is True when none is an error.
        """
        return self._maintenance().verify(thread_ids, deep=deep)

    def compact(self, dest: str | os.PathLike[str]) -> CompactReport:
        """Write a compacted copy of the whole store to ``dest`` (a new folder).

        LMDB reuses freed pages but never returns them to the OS, and leaves
        pages half full where keys went into the middle of a database (every
        thread's range in a store of many threads). The copy holds only live
        pages, rebuilt in key order so they are full: a store of three chat
        threads came out at 0.67x its used bytes. Consistent while writers run
        (it reads one snapshot). To compact in place, stop every process using
        the store, then swap the folders.

        Returns:
            Data file bytes before (this store) and after (the copy).
        """
        return self._maintenance().compact(dest)

    def backup(self, dest: str | os.PathLike[str], *, compact: bool = False) -> CompactReport:
        """Consistent hot copy of the store into a new folder (one read snapshot).

        The copy is owner-only and appears as ``dest/data.mdb`` only once it is
        complete and on disk: an interrupted backup leaves no store behind.

        Raises:
            InvalidInputError: ``dest`` is a file or already holds a store.
        """
        return self._maintenance().backup(dest, compact=compact)

    # -- inspection, export and import ------------------------------------------------------

    def threads(self) -> builtins.list[ThreadSummary]:
        """Every thread with checkpoint/write/blob counts, namespaces, newest id and bytes.

        Read from keys and record sizes only (nothing is deserialized).
        """
        return thread_summaries(self.env)

    def channel_stats(self) -> dict[str, dict[str, int]]:
        """Per channel: stored values and writes, bytes as stored and before compression."""
        return channel_sizes(self.env)

    def checkpoint_refs(self, thread_id: str) -> builtins.list[tuple[str, str, str | None, bool]]:
        """Every checkpoint of a thread as (checkpoint_ns, checkpoint_id, parent_id, hidden).

        Hidden checkpoints (kept only for a delta chain) are included. Reads
        record envelopes only, so walking a large thread's shape is cheap.
        """
        tid = thread_id_of(thread_id)
        with self.env.read() as r:
            t = r.name_id(keys.KIND_THREAD, tid)
            return [] if t is None else r.checkpoint_refs(t)

    def get_writes(self, config: RunnableConfig) -> builtins.list[WriteRow]:
        """A checkpoint's writes with ``task_path`` and ``idx`` (still serialized).

        ``pending_writes`` drops the path; migration to another saver needs it
        to keep ``writes_sort_key`` order there.
        """
        thread_id, checkpoint_ns, checkpoint_id = parse_config(config)
        with self.env.read() as r:
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
            thread, then ``item`` records, then an ``end`` record counting them
            (an import refuses a stream without it: cut short).
        """
        yield header()
        count = 0
        for record in export_rows(self.env, thread_ids, items=items):
            count += 1
            yield record
        yield end(count)

    def import_records(self, records: Iterable[dict[str, Any]]) -> dict[str, int]:
        """Import an export stream in one write transaction (all or nothing, R8).

        Every record is validated first (:func:`~deltalog.engine.import_check.check_import`:
        types, ids, versions, value types this saver's serde loads, duplicates,
        parent cycles); only a stream that passes is written.

        Memory store ``item`` records go into the same transaction, vectors as
        exported (nothing is re-embedded). Threads are stored as :meth:`put`
        stores them; a store without its final record dictionary first trains
        one on a dry run of the import (a transaction it drops), stored in a
        commit of its own (:func:`~deltalog.engine.maintenance.train_on_import`).

        Raises:
            InvalidInputError: ``records`` is not an iterable of records.
            ImportRecordError: A record is malformed; the message names its line.
            ThreadExistsError: A thread in the stream already exists here.
            ItemExistsError: An item of the stream is already live here.
        """
        rows, first_lines = check_import(records, self.serde)
        items = [rec for rec in rows if rec["kind"] == "item"]
        threads = [rec for rec in rows if rec["kind"] != "item"]
        train_on_import(self.env, threads, first_lines)
        if not items:
            return self.env.write(lambda w: w.import_records(rows, first_lines=first_lines))
        from deltalog.engine.memory_export import import_items
        from deltalog.engine.memory_io import directory

        def op(w: WriteTxn) -> tuple[dict[str, int], dict[tuple[str, ...], int]]:
            interned = import_items(w, items, [rec["line"] for rec in items])
            counts = w.import_records(threads, first_lines=first_lines)
            counts["items"] = len(items)
            return counts, interned

        counts, interned = self.env.write(op)
        directory(self.env).learn(interned)
        return counts

    # -- async twins -------------------------------------------------------------------------

    def _writer_pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            # Async writes without group commit, and async maintenance calls.
            self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="deltalog-writer")
        return self._executor

    async def _in_writer(self, op: Callable[[WriteTxn], T], *, history_safe: bool = False) -> T:
        """Run a write off the event loop and await its durable commit.

        With group commit the op is queued (:meth:`Environment.submit`) and the
        coroutine awaits a future the committing thread resolves: no thread
        waits per pending write, so any number of coroutines share commits.
        A cancelled coroutine does not cancel its write, which may still
        commit.
        """
        return await run_write(self.env, self._writer_pool, op, history_safe=history_safe)

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
            batch = await asyncio.to_thread(take, items, _ALIST_BATCH)
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
        op, out = prepare_put(self.serde, config, checkpoint, metadata, new_versions)
        prefill(self.serde, self.cache, await self._in_writer(op, history_safe=True))
        return out

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`: serializes now, compresses large values and
        commits off the event loop."""
        op = prepare_writes(self.serde, config, writes, task_id, task_path)
        if op.wants_ahead:
            await asyncio.to_thread(op.compress_ahead, self.env.codec)
        await self._in_writer(op, history_safe=True)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        tid = thread_id_of(thread_id)
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
