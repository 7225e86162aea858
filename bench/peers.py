"""The savers the benchmark measures, one factory each, and how their bytes are counted.

Every peer is a :class:`PeerSpec` in :data:`REGISTRY`. Its ``open`` factory is
a context manager that creates a fresh, empty store under
``PeerContext.workdir`` (or a fresh schema on the PostgreSQL server) and
yields an :class:`OpenPeer`: the saver, a ``bytes_fn`` that measures the real
bytes the store occupies right now, and, for async savers, the event loop the
saver is bound to.

=============== ===================================== ==============================================
name            saver                                 ``bytes_fn`` measures
=============== ===================================== ==============================================
deltalog        ``deltalog.engine.DeltaLogSaver``     ``saver.store_bytes()`` if the engine has it,
                                                      else the size of the files under its path
memory          ``InMemorySaver``                     payload bytes held in ``.storage``,
                                                      ``.writes`` and ``.blobs`` (serialized
                                                      values only: a lower bound of its RAM)
sqlite          ``SqliteSaver``                       database file + ``-wal`` file
async-sqlite    ``AsyncSqliteSaver``                  database file + ``-wal`` file
lmdb            ``langgraph-checkpoint-lmdb``         LMDB used pages,
                ``LMDBSaver``                         ``(info()['last_pgno'] + 1) * stat()['psize']``
postgres        ``PostgresSaver``                     ``sum(pg_total_relation_size)`` of its tables
                                                      (heap + indexes + TOAST)
deltalog-async  ``DeltaLogSaver`` driven through its  as ``deltalog``
                async methods (not in the default
                set)
deltalog-normal ``DeltaLogSaver`` opened with         as ``deltalog``
                ``durable="normal"`` (one sync a
                commit; not in the default set)
deltalog-nopack ``DeltaLogSaver`` opened with         as ``deltalog``
                ``pack_turns=False`` (no turn packs,
                as before format 14; not in the
                default set)
=============== ===================================== ==============================================

The deltalog peers also give a ``free_fn``: the bytes of their used pages on
LMDB's free list (``Environment.stats()["free_bytes"]``), pages earlier
transactions freed that later writes reuse before the file grows. The
10,000-turn target's 100-turn window takes 8-17 pages of the file depending on
that reuse; the bytes the databases hold (used less free) grow evenly.

A peer whose package is missing (``deltalog`` while the engine is being
written, ``postgres`` without a server) reports why through ``check`` and the
run goes on without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

__all__ = [
    "DEFAULT_PEERS",
    "REGISTRY",
    "OpenPeer",
    "PeerContext",
    "PeerSpec",
    "lmdb_used_bytes",
    "memory_saver_bytes",
    "path_bytes",
    "sqlite_bytes",
]

# LMDB reserves address space, not disk: 64 GiB of map costs nothing on a
# 64-bit system and keeps a 10,000-turn add_messages run (tens of GB in the
# quadratic case) from hitting MapFullError in the peer that cannot grow.
_LMDB_MAP_SIZE = 64 << 30

# A pool wider than this gains nothing on 2 cores and a default server allows
# only 100 connections.
_PG_MAX_POOL = 32


@dataclass(frozen=True)
class PeerContext:
    """Where and how a peer opens its store.

    Attributes:
        workdir: A directory the peer may create files in; it is deleted after the run.
        pg_dsn: DSN of the PostgreSQL server to use, or ``None`` when there is none.
        concurrency: How many threads (or tasks) will use the saver at once;
            PostgreSQL uses a connection pool of that size (capped at 32).
        shared_dir: Open the store in exactly this directory (created if
            missing, reused if there) instead of a fresh one under ``workdir``:
            several processes opening one store path (the multi-process
            scenario). File-based peers only; PostgreSQL ignores it.
    """

    workdir: Path
    pg_dsn: str | None = None
    concurrency: int = 1
    shared_dir: Path | None = None


@dataclass
class OpenPeer:
    """An open, empty store ready to be measured.

    Attributes:
        saver: The checkpoint saver.
        bytes_fn: Returns the bytes the store occupies now (see the module table).
        loop: For async peers, the event loop the saver is bound to: drive the
            graph with ``ainvoke``/``aget_state`` via ``loop.run_until_complete``.
            ``None`` for sync peers.
        free_fn: Returns the bytes of ``bytes_fn``'s that are free for reuse
            (LMDB's free list), for stores that report it; else ``None``.
    """

    saver: BaseCheckpointSaver[Any]
    bytes_fn: Callable[[], int]
    loop: asyncio.AbstractEventLoop | None = None
    free_fn: Callable[[], int] | None = None


def _available() -> str | None:
    return None


@dataclass(frozen=True)
class PeerSpec:
    """One saver the benchmark can measure.

    Attributes:
        name: Registry name used with ``--savers`` and in JSON.
        label: Display name for tables and plots.
        open: Factory: ``open(ctx)`` is a context manager yielding an :class:`OpenPeer`.
        is_async: Drive the graph through ``ainvoke`` on ``OpenPeer.loop``.
        durable: Whether a committed checkpoint survives a crash (``InMemorySaver`` does not).
        needs_postgres: Only runs when a PostgreSQL DSN is available.
        bytes_method: How ``bytes_fn`` counts, recorded in the JSON.
        check: Returns ``None`` when the peer can run here, else the reason it cannot.
    """

    name: str
    label: str
    open: Callable[[PeerContext], contextlib.AbstractContextManager[OpenPeer]]
    is_async: bool = False
    durable: bool = True
    needs_postgres: bool = False
    bytes_method: str = ""
    check: Callable[[], str | None] = field(default=_available)

    def unavailable_reason(self, ctx: PeerContext) -> str | None:
        """Why this peer cannot run in ``ctx``, or ``None`` if it can."""
        if self.needs_postgres and not ctx.pg_dsn:
            return "no PostgreSQL server (pass --pg DSN or install the postgresql package)"
        return self.check()


# --------------------------------------------------------------------------- bytes


def path_bytes(path: Path) -> int:
    """Apparent size of a file, or of every file under a directory (0 if missing)."""
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        total = 0
        for root, _dirs, files in os.walk(path):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += (Path(root) / name).stat().st_size
        return total
    return 0


def sqlite_bytes(db_path: Path) -> int:
    """SQLite database file plus its write-ahead log (``-wal``), in bytes."""
    wal = db_path.with_name(db_path.name + "-wal")
    return path_bytes(db_path) + path_bytes(wal)


def lmdb_used_bytes(env: Any) -> int:
    """Bytes of an LMDB environment's used pages: ``(last_pgno + 1) * psize``.

    This is the high-water mark of pages the B-trees have touched, including
    pages on LMDB's free list (LMDB reuses them but never returns them to the
    file system), which is what the file would hold after ``mdb_copy``
    without compaction.
    """
    return (int(env.info()["last_pgno"]) + 1) * int(env.stat()["psize"])


def memory_saver_bytes(saver: InMemorySaver) -> int:
    """Serialized payload bytes an ``InMemorySaver`` holds.

    Counts the ``bytes`` of every stored checkpoint, metadata, write and blob
    (what a durable saver would have to write); dictionary keys and Python
    object overhead are not counted, so this is a lower bound of its RAM.
    """
    total = 0
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for checkpoint, metadata, _parent in checkpoints.values():
                total += len(checkpoint[1]) + len(metadata[1])
    for writes in saver.writes.values():
        for _task_id, _channel, value, _task_path in writes.values():
            total += len(value[1])
    for _type, blob in saver.blobs.values():
        total += len(blob)
    return total


def _fresh_dir(ctx: PeerContext, name: str) -> Path:
    if ctx.shared_dir is not None:
        ctx.shared_dir.mkdir(parents=True, exist_ok=True)
        return ctx.shared_dir
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=ctx.workdir))


@contextlib.contextmanager
def _async_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


# --------------------------------------------------------------------------- deltalog


def _import_deltalog_saver() -> Any:
    module = importlib.import_module("deltalog.engine")
    saver_cls = getattr(module, "DeltaLogSaver", None)
    if saver_cls is None:
        raise ImportError("deltalog.engine has no DeltaLogSaver yet")
    return saver_cls


def _check_deltalog() -> str | None:
    try:
        _import_deltalog_saver()
    except Exception as exc:
        return f"cannot import deltalog.engine.DeltaLogSaver: {exc}"
    return None


def _deltalog_bytes(saver: Any, path: Path) -> Callable[[], int]:
    store_bytes = getattr(saver, "store_bytes", None)
    if callable(store_bytes):
        return lambda: int(store_bytes())
    return lambda: path_bytes(path)


def _deltalog_free(saver: Any) -> Callable[[], int] | None:
    stats = getattr(getattr(saver, "env", None), "stats", None)
    if not callable(stats) or "free_bytes" not in stats():
        return None
    return lambda: int(stats()["free_bytes"])


@contextlib.contextmanager
def _open_deltalog(ctx: PeerContext, name: str = "deltalog", **options: Any) -> Iterator[OpenPeer]:
    saver_cls = _import_deltalog_saver()
    path = _fresh_dir(ctx, name) / "store.lmdb"
    with saver_cls.from_path(path, **options) as saver:
        yield OpenPeer(saver, _deltalog_bytes(saver, path), free_fn=_deltalog_free(saver))


@contextlib.contextmanager
def _open_deltalog_async(ctx: PeerContext) -> Iterator[OpenPeer]:
    saver_cls = _import_deltalog_saver()
    path = _fresh_dir(ctx, "deltalog-async") / "store.lmdb"
    with _async_loop() as loop, saver_cls.from_path(path) as saver:
        yield OpenPeer(saver, _deltalog_bytes(saver, path), loop, _deltalog_free(saver))


# --------------------------------------------------------------------------- peers


@contextlib.contextmanager
def _open_memory(ctx: PeerContext) -> Iterator[OpenPeer]:
    saver = InMemorySaver()
    yield OpenPeer(saver, lambda: memory_saver_bytes(saver))


@contextlib.contextmanager
def _open_sqlite(ctx: PeerContext) -> Iterator[OpenPeer]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = _fresh_dir(ctx, "sqlite") / "checkpoints.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        saver.setup()
        yield OpenPeer(saver, lambda: sqlite_bytes(path))


@contextlib.contextmanager
def _open_async_sqlite(ctx: PeerContext) -> Iterator[OpenPeer]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = _fresh_dir(ctx, "async-sqlite") / "checkpoints.sqlite"
    with _async_loop() as loop:
        manager = AsyncSqliteSaver.from_conn_string(str(path))
        saver = loop.run_until_complete(manager.__aenter__())
        try:
            loop.run_until_complete(saver.setup())
            yield OpenPeer(saver, lambda: sqlite_bytes(path), loop)
        finally:
            loop.run_until_complete(manager.__aexit__(None, None, None))


def _check_lmdb() -> str | None:
    try:
        importlib.import_module("langgraph_checkpoint_lmdb")
    except Exception as exc:
        return f"langgraph-checkpoint-lmdb is not installed: {exc}"
    return None


@contextlib.contextmanager
def _open_lmdb(ctx: PeerContext) -> Iterator[OpenPeer]:
    import lmdb
    from langgraph_checkpoint_lmdb import LMDBSaver

    path = _fresh_dir(ctx, "lmdb")
    env = lmdb.open(
        str(path),
        map_size=_LMDB_MAP_SIZE,
        max_dbs=8,
        max_readers=max(126, 2 * ctx.concurrency),
    )
    try:
        yield OpenPeer(LMDBSaver(env), lambda: lmdb_used_bytes(env))
    finally:
        env.close()


def _check_postgres() -> str | None:
    try:
        importlib.import_module("langgraph.checkpoint.postgres")
        importlib.import_module("psycopg_pool")
    except Exception as exc:
        return f"langgraph-checkpoint-postgres is not installed: {exc}"
    return None


_PG_BYTES_SQL = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS total
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind = 'r'
"""


@contextlib.contextmanager
def _open_postgres(ctx: PeerContext) -> Iterator[OpenPeer]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import sql
    from psycopg.conninfo import make_conninfo
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    if not ctx.pg_dsn:
        raise RuntimeError("the postgres peer needs a DSN (--pg DSN)")
    # One fresh schema per store: tables of earlier rounds neither slow this
    # one down nor count in its bytes, and a shared server needs no CREATEDB.
    schema = f"deltalog_bench_{uuid.uuid4().hex[:12]}"
    dsn = make_conninfo(ctx.pg_dsn, options=f"-c search_path={schema}")
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with psycopg.connect(ctx.pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            with contextlib.ExitStack() as stack:
                if ctx.concurrency > 1:
                    pool = ConnectionPool(
                        dsn,
                        min_size=1,
                        max_size=min(ctx.concurrency, _PG_MAX_POOL),
                        kwargs=kwargs,
                        open=True,
                    )
                    stack.callback(pool.close)
                    saver = PostgresSaver(cast(Any, pool))
                else:
                    conn = stack.enter_context(psycopg.Connection.connect(dsn, **kwargs))
                    saver = PostgresSaver(conn)
                saver.setup()

                def pg_bytes() -> int:
                    row = admin.execute(_PG_BYTES_SQL, (schema,)).fetchone()
                    return int(row[0]) if row else 0

                yield OpenPeer(saver, pg_bytes)
        finally:
            admin.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )


_FILE_BYTES = "size of the files under the store path"

#: Every peer the benchmark knows, by name.
REGISTRY: dict[str, PeerSpec] = {
    spec.name: spec
    for spec in (
        PeerSpec(
            "deltalog",
            "DeltaLogSaver",
            _open_deltalog,
            bytes_method=f"saver.store_bytes() when present, else {_FILE_BYTES}",
            check=_check_deltalog,
        ),
        PeerSpec(
            "memory",
            "InMemorySaver",
            _open_memory,
            durable=False,
            bytes_method="serialized payload bytes in .storage/.writes/.blobs",
        ),
        PeerSpec("sqlite", "SqliteSaver", _open_sqlite, bytes_method="database file + -wal"),
        PeerSpec(
            "async-sqlite",
            "AsyncSqliteSaver",
            _open_async_sqlite,
            is_async=True,
            bytes_method="database file + -wal",
        ),
        PeerSpec(
            "lmdb",
            "langgraph-checkpoint-lmdb",
            _open_lmdb,
            bytes_method="LMDB used pages (last_pgno + 1) * psize",
            check=_check_lmdb,
        ),
        PeerSpec(
            "postgres",
            "PostgresSaver",
            _open_postgres,
            needs_postgres=True,
            bytes_method="sum of pg_total_relation_size of its tables",
            check=_check_postgres,
        ),
        PeerSpec(
            "deltalog-async",
            "DeltaLogSaver (async)",
            _open_deltalog_async,
            is_async=True,
            bytes_method=f"saver.store_bytes() when present, else {_FILE_BYTES}",
            check=_check_deltalog,
        ),
        PeerSpec(
            "deltalog-normal",
            'DeltaLogSaver (durable="normal")',
            functools.partial(_open_deltalog, name="deltalog-normal", durable="normal"),
            bytes_method=f"saver.store_bytes() when present, else {_FILE_BYTES}",
            check=_check_deltalog,
        ),
        PeerSpec(
            "deltalog-nopack",
            "DeltaLogSaver (pack_turns=False)",
            functools.partial(_open_deltalog, name="deltalog-nopack", pack_turns=False),
            bytes_method=f"saver.store_bytes() when present, else {_FILE_BYTES}",
            check=_check_deltalog,
        ),
    )
}

#: The peers a run measures when ``--savers`` is not given.
DEFAULT_PEERS: tuple[str, ...] = (
    "deltalog",
    "memory",
    "sqlite",
    "async-sqlite",
    "lmdb",
    "postgres",
)
