"""Copy threads between LangGraph checkpoint savers through their public API.

``deltalog migrate`` moves threads from a deltalog store into another
``BaseCheckpointSaver`` (``SqliteSaver``, ``PostgresSaver``) — or back — by
*replaying* them: each checkpoint goes through the target's own ``put`` and
each write through its ``put_writes``, oldest first, exactly as the LangGraph
runtime would have written them. The target stores them in its native format
and reads them natively, delta channels included (its
``get_delta_channel_history`` walks the same parents and writes).

What is preserved: checkpoint ids, parents (so forks), namespaces, metadata,
channel versions and values (``_DeltaSnapshot`` seeds as seeds), every write
with its ``task_id``, ``task_path`` and ``idx`` (so ``writes_sort_key`` order
and the replay order of delta channels), special writes (errors, interrupts,
resumes) under their channel names so ``WRITES_IDX_MAP`` maps them back.

How:

1. Plan: the checkpoints of every thread (from a deltalog store including
   those a prune hid because later checkpoints replay through them; the
   target has no hidden checkpoints, so they become visible there). A thread
   the target already holds checkpoints of that are *not* in the source is
   refused before anything is written (no merging).
2. Per (thread, namespace), parents before children: skip a checkpoint the
   target has (this makes a migration resumable); else ``put_writes`` its
   writes grouped by ``(task_path, task_id)``, then ``put`` it with
   ``new_versions`` = the channels whose version differs from its parent's
   (all of them at a root or when the parent is missing). Writes go first,
   so a checkpoint present in the target always has its writes.
3. Verify: every source checkpoint id is listed by the target.

Values are deserialized with the source's serde and serialized again by the
target's, so each side keeps its own serializer (e.g. encryption).

Example (doctest-skipped: needs files):

>>> from deltalog.engine import DeltaLogSaver
>>> from deltalog.engine.migrate import migrate, open_saver_uri
>>> with DeltaLogSaver.from_path("chat.lmdb") as src, open_saver_uri("sqlite:chat.db") as dst:  # doctest: +SKIP
...     report = migrate(src, dst)
>>> report.verified  # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import heapq
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from deltalog.engine.env_files import open_owner_only
from deltalog.engine.errors import DeltaLogError, MigrationError
from deltalog.engine.saver import DeltaLogSaver
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol

__all__ = [
    "CheckpointRef",
    "MigrationError",
    "MigrationPlan",
    "MigrationReport",
    "SourceWrite",
    "ThreadPlan",
    "describe_uri",
    "migrate",
    "open_saver_uri",
    "plan_migration",
    "run_migration",
    "write_calls",
]

Saver = BaseCheckpointSaver[Any]


class CheckpointRef(NamedTuple):
    """One source checkpoint, as planned (nothing deserialized)."""

    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    hidden: bool = False


class SourceWrite(NamedTuple):
    """One write of a source checkpoint, its value deserialized."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Any


@dataclass
class ThreadPlan:
    """A thread's checkpoints, parents before children, root namespace first."""

    thread_id: str
    checkpoints: list[CheckpointRef]

    @property
    def hidden(self) -> int:
        """Checkpoints hidden in the source (kept for a delta chain)."""
        return sum(r.hidden for r in self.checkpoints)


@dataclass
class MigrationPlan:
    """What a migration will copy."""

    threads: list[ThreadPlan]

    @property
    def total(self) -> int:
        """Checkpoints in the plan."""
        return sum(len(t.checkpoints) for t in self.threads)


@dataclass
class MigrationReport:
    """What a migration did.

    Attributes:
        threads: Threads planned.
        checkpoints: Checkpoints written to the target.
        skipped: Checkpoints the target already had (a resumed migration).
        writes: Writes written.
        hidden: Checkpoints that were hidden in the source (visible in the target).
        verified: Every source checkpoint is listed by the target.
        missing: ``thread/ns/id`` of source checkpoints the target does not list.
    """

    threads: int = 0
    checkpoints: int = 0
    skipped: int = 0
    writes: int = 0
    hidden: int = 0
    verified: bool = False
    missing: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _cfg(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _id_of(config: RunnableConfig | None) -> str | None:
    if not config:
        return None
    value = config.get("configurable", {}).get("checkpoint_id")
    return None if value is None else str(value)


# -- reading the source ------------------------------------------------------------------------


def _source_threads(
    source: Saver, thread_ids: Sequence[str] | None
) -> dict[str, list[CheckpointRef]]:
    """Thread → its checkpoint refs (unordered)."""
    out: dict[str, list[CheckpointRef]] = {}
    if isinstance(source, DeltaLogSaver):
        names = (
            list(thread_ids) if thread_ids is not None else [t.thread_id for t in source.threads()]
        )
        for thread_id in names:
            refs = [
                CheckpointRef(ns, cid, parent, hidden)
                for ns, cid, parent, hidden in source.checkpoint_refs(thread_id)
            ]
            out[thread_id] = refs
        return out
    configs: list[RunnableConfig | None]
    # Every namespace of a thread: no checkpoint_ns in the filter.
    configs = (
        [None] if thread_ids is None else [{"configurable": {"thread_id": t}} for t in thread_ids]
    )
    for config in configs:
        for tup in source.list(config):
            conf = tup.config["configurable"]
            out.setdefault(str(conf["thread_id"]), []).append(
                CheckpointRef(
                    str(conf.get("checkpoint_ns", "")),
                    str(conf["checkpoint_id"]),
                    _id_of(tup.parent_config),
                )
            )
    for thread_id in thread_ids or ():
        out.setdefault(thread_id, [])
    return out


def _order(refs: Sequence[CheckpointRef]) -> list[CheckpointRef]:
    """Parents before children, ids ascending among the ready ones, root namespace first."""
    out: list[CheckpointRef] = []
    by_ns: dict[str, list[CheckpointRef]] = {}
    for r in refs:
        by_ns.setdefault(r.checkpoint_ns, []).append(r)
    for ns in sorted(by_ns):
        group = {r.checkpoint_id: r for r in by_ns[ns]}
        children: dict[str, list[str]] = {}
        ready: list[str] = []
        for r in group.values():
            if r.parent_id is not None and r.parent_id in group and r.parent_id != r.checkpoint_id:
                children.setdefault(r.parent_id, []).append(r.checkpoint_id)
            else:
                ready.append(r.checkpoint_id)
        heapq.heapify(ready)
        seen: set[str] = set()
        while ready:
            cid = heapq.heappop(ready)
            if cid in seen:
                continue
            seen.add(cid)
            out.append(group[cid])
            for child in children.get(cid, []):
                heapq.heappush(ready, child)
        if len(seen) != len(group):
            cycle = sorted(set(group) - seen)[:3]
            raise MigrationError(
                f"namespace {ns!r}: checkpoints {cycle} are in a parent cycle; run "
                "`deltalog verify` on the source"
            )
    return out


def _source_writes(source: Saver, config: RunnableConfig) -> list[SourceWrite]:
    """A checkpoint's writes with task_path and idx, in ``writes_sort_key`` order.

    ``pending_writes`` drops both, so each supported source is read where it
    keeps them: deltalog's ``get_writes``; SqliteSaver's and PostgresSaver's
    documented ``writes`` / ``checkpoint_writes`` tables (the same rows their
    ``get_tuple`` reads); InMemorySaver's ``writes`` mapping.
    """
    conf = config["configurable"]
    key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), str(conf["checkpoint_id"]))
    loads = source.serde.loads_typed
    if isinstance(source, DeltaLogSaver):
        return [
            SourceWrite(w.task_id, w.task_path, w.idx, w.channel, loads(w.value))
            for w in source.get_writes(config)
        ]
    rows: list[tuple[str, str, int, str, str, bytes]] = []
    kind = type(source).__name__
    if isinstance(source, InMemorySaver):
        for (task_id, idx), (_, channel, typed, task_path) in source.writes.get(key, {}).items():
            rows.append((task_id, task_path, idx, channel, typed[0], typed[1]))
    elif kind in ("SqliteSaver", "PostgresSaver"):
        rows = _sql_writes(source, key)
    else:
        raise MigrationError(
            f"cannot read task paths of {kind}'s writes (pending_writes drops them), so their "
            "order could not be kept; migrate from deltalog, SqliteSaver or PostgresSaver"
        )
    rows.sort(key=lambda r: (r[1], r[0], r[2]))
    return [SourceWrite(t, p, i, c, loads((ty, v))) for t, p, i, c, ty, v in rows]


def _sql_writes(
    source: Saver, key: tuple[str, str, str]
) -> list[tuple[str, str, int, str, str, bytes]]:
    saver: Any = source
    if type(source).__name__ == "SqliteSaver":
        path_col = "task_path" if getattr(saver, "_has_task_path", True) else "''"
        with saver.cursor(transaction=False) as cur:
            cur.execute(
                f"SELECT task_id, {path_col}, idx, channel, type, value FROM writes "
                "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                key,
            )
            return [(r[0], r[1], int(r[2]), r[3], r[4], bytes(r[5])) for r in cur.fetchall()]
    sql = (
        "SELECT task_id, task_path, idx, channel, type, blob FROM checkpoint_writes "
        "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
    )
    conn = saver.conn
    with contextlib.ExitStack() as stack:
        if type(conn).__name__.endswith("ConnectionPool"):  # psycopg_pool
            conn = stack.enter_context(conn.connection())
        else:
            stack.enter_context(saver.lock)
        with conn.cursor() as cur:
            cur.execute(sql, key)
            out = []
            for r in cur.fetchall():
                row = list(r.values()) if isinstance(r, dict) else list(r)
                out.append((row[0], row[1], int(row[2]), row[3], row[4], bytes(row[5])))
            return out


# -- writing the target ----------------------------------------------------------------------


def write_calls(writes: Sequence[SourceWrite]) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """``put_writes`` calls ``(task_id, task_path, [(channel, value), ...])`` that recreate ``writes``.

    A saver stores the write at list position ``i`` under ``idx = i`` (special
    channels under their ``WRITES_IDX_MAP`` index, wherever they sit), so
    each task's regular writes are placed at their ``idx``; special writes
    fill any gap (that is where they came from when one call mixed both).
    A gap nothing fills is closed up, which keeps the order.

    >>> w = [SourceWrite("t", "p", -3, "__interrupt__", "i"), SourceWrite("t", "p", 1, "a", 1)]
    >>> write_calls(w)
    [('t', 'p', [('__interrupt__', 'i'), ('a', 1)])]
    """
    groups: dict[tuple[str, str], list[SourceWrite]] = {}
    for w in writes:
        groups.setdefault((w.task_path, w.task_id), []).append(w)
    calls: list[tuple[str, str, list[tuple[str, Any]]]] = []
    for (task_path, task_id), items in groups.items():
        special = [w for w in items if w.idx < 0 or w.channel in WRITES_IDX_MAP]
        regular = sorted(
            (w for w in items if not (w.idx < 0 or w.channel in WRITES_IDX_MAP)),
            key=lambda w: w.idx,
        )
        slots: list[SourceWrite | None] = [None] * (regular[-1].idx + 1 if regular else 0)
        for w in regular:
            slots[w.idx] = w
        spare = list(special)
        for i, slot in enumerate(slots):
            if slot is None and spare:
                slots[i] = spare.pop(0)
        if any(s is None for s in slots):
            slots = [s for s in slots if s is not None]
        ordered = [s for s in slots if s is not None] + spare
        calls.append((task_id, task_path, [(w.channel, w.value) for w in ordered]))
    return calls


def _new_versions(versions: ChannelVersions, parent: ChannelVersions | None) -> ChannelVersions:
    if parent is None:
        return dict(versions)
    return {c: v for c, v in versions.items() if parent.get(c) != v}


# -- the migration -------------------------------------------------------------------------------


def plan_migration(
    source: Saver, target: Saver, thread_ids: Sequence[str] | None = None
) -> MigrationPlan:
    """Plan a migration and check the target can take it (nothing is written).

    Raises:
        MigrationError: A named thread does not exist in the source, or the
            target holds checkpoints of a thread that the source does not have.
    """
    found = _source_threads(source, thread_ids)
    missing = [t for t, refs in found.items() if not refs]
    if missing:
        raise MigrationError(f"no such thread(s) in the source: {', '.join(map(repr, missing))}")
    threads: list[ThreadPlan] = []
    for thread_id, refs in found.items():
        ids = {r.checkpoint_id for r in refs}
        foreign = [
            _id_of(t.config)
            for t in target.list({"configurable": {"thread_id": thread_id}})
            if _id_of(t.config) not in ids
        ]
        if foreign:
            raise MigrationError(
                f"thread {thread_id!r} exists in the target with {len(foreign)} checkpoint(s) "
                f"not in the source (e.g. {foreign[0]}); delete it there or leave it out — "
                "nothing was migrated"
            )
        threads.append(ThreadPlan(thread_id, _order(refs)))
    return MigrationPlan(threads)


def run_migration(
    plan: MigrationPlan,
    source: Saver,
    target: Saver,
    *,
    on_checkpoint: Callable[[], None] | None = None,
    verify: bool = True,
) -> MigrationReport:
    """Carry out ``plan`` (see the module docstring); safe to run again after an interruption.

    Args:
        plan: From :func:`plan_migration`.
        source: The saver read from.
        target: The saver written to.
        on_checkpoint: Called after each checkpoint (written or skipped), for progress.
        verify: List the target afterwards and check every source checkpoint is there.

    Returns:
        Counts; ``verified`` and ``missing`` when ``verify``.
    """
    report = MigrationReport(threads=len(plan.threads), hidden=sum(t.hidden for t in plan.threads))
    for thread in plan.threads:
        present = {
            (str(t.config["configurable"].get("checkpoint_ns", "")), _id_of(t.config))
            for t in target.list({"configurable": {"thread_id": thread.thread_id}})
        }
        versions: dict[str, ChannelVersions] = {}
        for ref in thread.checkpoints:
            config = _cfg(thread.thread_id, ref.checkpoint_ns, ref.checkpoint_id)
            tup = source.get_tuple(config)
            if tup is None:
                raise MigrationError(
                    f"checkpoint {ref.checkpoint_id} of thread {thread.thread_id!r} vanished from "
                    "the source during the migration; stop writers and run it again"
                )
            versions[ref.checkpoint_id] = dict(tup.checkpoint["channel_versions"])
            if (ref.checkpoint_ns, ref.checkpoint_id) in present:
                report.skipped += 1
            else:
                for task_id, task_path, items in write_calls(_source_writes(source, config)):
                    target.put_writes(config, items, task_id, task_path)
                    report.writes += len(items)
                parent = versions.get(ref.parent_id) if ref.parent_id is not None else None
                if parent is None and ref.parent_id is not None:
                    parent_tup = source.get_tuple(
                        _cfg(thread.thread_id, ref.checkpoint_ns, ref.parent_id)
                    )
                    parent = dict(parent_tup.checkpoint["channel_versions"]) if parent_tup else None
                target.put(
                    _cfg(thread.thread_id, ref.checkpoint_ns, ref.parent_id),
                    tup.checkpoint,
                    tup.metadata or {},
                    _new_versions(versions[ref.checkpoint_id], parent),
                )
                report.checkpoints += 1
            if on_checkpoint is not None:
                on_checkpoint()
    if verify:
        for thread in plan.threads:
            listed = {
                (str(t.config["configurable"].get("checkpoint_ns", "")), _id_of(t.config))
                for t in target.list({"configurable": {"thread_id": thread.thread_id}})
            }
            report.missing += [
                f"{thread.thread_id}/{r.checkpoint_ns}/{r.checkpoint_id}"
                for r in thread.checkpoints
                if (r.checkpoint_ns, r.checkpoint_id) not in listed
            ]
        report.verified = not report.missing
    return report


def migrate(
    source: Saver,
    target: Saver,
    thread_ids: Sequence[str] | None = None,
    *,
    on_checkpoint: Callable[[], None] | None = None,
    verify: bool = True,
) -> MigrationReport:
    """Copy threads (all by default) from ``source`` into ``target``; see the module docstring.

    Raises:
        MigrationError: As :func:`plan_migration`, or the source changed meanwhile.
    """
    plan = plan_migration(source, target, thread_ids)
    return run_migration(plan, source, target, on_checkpoint=on_checkpoint, verify=verify)


# -- opening savers by URI -------------------------------------------------------------------------

_SQLITE = re.compile(r"^sqlite:(?://)?(?P<path>.+)$")


def describe_uri(uri: str) -> str:
    """The URI with any password replaced by ``***`` (for output and errors).

    >>> describe_uri("postgresql://app:secret@db:5432/chat")
    'postgresql://app:***@db:5432/chat'
    """
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def connect_sqlite(uri: str, file: str, **options: Any) -> sqlite3.Connection:
    """A connection to the SQLite file of ``uri`` (saver or store side of a migration).

    A new file is created owner-only first, like the store it receives (SQLite
    gives its journal and WAL files the database file's mode; issue 15.10).

    Raises:
        MigrationError: The file cannot be opened (e.g. its folder does not exist).
    """
    if file != ":memory:" and not os.path.exists(file):
        with contextlib.suppress(OSError):
            os.close(open_owner_only(file))
    try:
        conn: sqlite3.Connection = sqlite3.connect(file, check_same_thread=False, **options)
    except sqlite3.Error as exc:
        raise MigrationError(f"{uri}: cannot open SQLite file {file!r} ({exc})") from None
    return conn


def setup_sqlite(uri: str, file: str, target: Any) -> None:
    """Run ``target.setup()`` (a SqliteSaver or SqliteStore), naming the file if it fails."""
    try:
        target.setup()
    except sqlite3.Error as exc:
        raise MigrationError(
            f"{uri}: {file!r} is not a usable SQLite database ({exc}); check the path "
            "and that it is a file you may write"
        ) from None


@contextlib.contextmanager
def postgres_errors(uri: str) -> Iterator[None]:
    """Re-raise psycopg's errors as :class:`MigrationError` naming the server (no password)."""
    try:
        yield
    except DeltaLogError:
        raise
    except Exception as exc:
        if type(exc).__module__.startswith("psycopg"):
            raise MigrationError(
                f"PostgreSQL at {describe_uri(uri)}: {' '.join(str(exc).split())}"
            ) from exc
        raise


@contextlib.contextmanager
def open_saver_uri(uri: str, *, serde: SerializerProtocol | None = None) -> Iterator[Saver]:
    """Open the saver a URI names (with ``serde``, else its default) and close it afterwards.

    * ``sqlite:FILE`` (or ``sqlite:///abs/path``): a ``SqliteSaver`` on that file
      (created if missing; needs ``langgraph-checkpoint-sqlite``).
    * ``postgresql://…`` / ``postgres://…``: a ``PostgresSaver`` (its tables are
      created if missing; needs ``langgraph-checkpoint-postgres`` and ``psycopg``).
    * ``deltalog:PATH``: a deltalog store.

    Raises:
        MigrationError: Unknown scheme, the saver's package is not installed, or the
            SQLite file cannot be opened.
    """
    if m := _SQLITE.match(uri):
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError as exc:
            raise MigrationError(
                "sqlite: targets need langgraph-checkpoint-sqlite; "
                "pip install langgraph-checkpoint-sqlite"
            ) from exc
        file = os.path.expanduser(m.group("path"))
        conn = connect_sqlite(uri, file)
        try:
            sqlite_saver = SqliteSaver(conn, serde=serde)
            setup_sqlite(uri, file, sqlite_saver)
            yield sqlite_saver
        finally:
            conn.close()
    elif uri.startswith(("postgresql://", "postgres://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            raise MigrationError(
                "postgresql:// targets need langgraph-checkpoint-postgres; "
                "pip install 'deltalog[postgres]'"
            ) from exc
        with postgres_errors(uri), PostgresSaver.from_conn_string(uri) as pg_saver:
            if serde is not None:
                pg_saver.serde = serde
            pg_saver.setup()
            yield pg_saver
    elif uri.startswith("deltalog:"):
        with DeltaLogSaver.from_path(uri[len("deltalog:") :], serde=serde) as dl_saver:
            yield dl_saver
    else:
        raise MigrationError(
            f"{describe_uri(uri)!r} is not a saver URI; use sqlite:FILE, "
            "postgresql://user@host/db or deltalog:PATH"
        )
