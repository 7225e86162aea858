"""Copy memory store items between LangGraph stores (``deltalog migrate``, issue 17).

The store half of :mod:`deltalog.engine.migrate`: items go from one
``BaseStore`` to another through the public API — ``list_namespaces`` and
``search`` (``refresh_ttl=False``, so reading extends no TTL) on the source,
``batch`` of ``PutOp`` on the target, 100 puts a batch. What carries over:
namespace, key and value; a TTL as the *remaining* minutes (the target's
clock restarts it; an item already expired is not copied). What does not:
``created_at``/``updated_at`` (a ``put`` stamps its own time) and vectors —
the target embeds the values with its own ``index`` configuration, if it has
one (the CLI opens targets without one: their items are not searchable by
query until re-put through a store with an index).

The public API does not show an item's expiry, so the remaining TTL is read
from the source's own records: deltalog's item records, or the ``expires_at``
column of SqliteStore's and PostgresStore's ``store`` table (through their
``_cursor()``; the one private call here).

Safe to run again: an item the target already holds with the same value is
skipped; one it holds with another value stops the migration before any item
is written (no merging).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from deltalog.engine.errors import MigrationError
from langgraph.store.base import BaseStore, GetOp, Item, PutOp

__all__ = ["ItemsReport", "StoreItem", "copy_items", "open_store_uri", "source_items"]

#: Items per list/search page and per target batch.
PAGE = 100


class StoreItem(NamedTuple):
    """One source item as copied: its TTL is the minutes it has left (None: none)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    ttl_minutes: float | None


@dataclass
class ItemsReport:
    """What an item copy did: ``items`` written, ``skipped`` (already equal in the target)."""

    items: int = 0
    skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _deltalog_items(store: Any, now: float) -> list[StoreItem]:
    from deltalog.engine.memory_export import export_items

    out = []
    for rec in export_items(store.env, now=now):
        expires = rec["expires_ms"]
        left = None if expires is None else (expires - now * 1000) / 60_000
        out.append(StoreItem(tuple(rec["namespace"]), rec["key"], rec["value"], left))
    return out


def _expiries(store: BaseStore) -> dict[tuple[str, str], datetime.datetime]:
    """``expires_at`` of every item with a TTL of a SqliteStore or PostgresStore."""
    cursor = getattr(store, "_cursor", None)
    if cursor is None or type(store).__name__ not in ("SqliteStore", "PostgresStore"):
        return {}
    out: dict[tuple[str, str], datetime.datetime] = {}
    with cursor() as cur:
        cur.execute("SELECT prefix, key, expires_at FROM store WHERE expires_at IS NOT NULL")
        for row in cur.fetchall():
            prefix, key, at = (
                (row["prefix"], row["key"], row["expires_at"]) if isinstance(row, dict) else row
            )
            if isinstance(at, str):  # SQLite: ISO text, naive when SQLite's clock wrote it
                at = datetime.datetime.fromisoformat(at)
            if at.tzinfo is None:
                at = at.replace(tzinfo=datetime.timezone.utc)
            out[(str(prefix), str(key))] = at
    return out


def source_items(store: BaseStore, *, now: float | None = None) -> list[StoreItem]:
    """Every live item of ``store``, namespace by namespace, with its remaining TTL.

    Raises:
        MigrationError: The source changed while it was read (an item vanished).
    """
    at = time.time() if now is None else now
    from deltalog.engine.memory import DeltaLogStore

    if isinstance(store, DeltaLogStore):
        return _deltalog_items(store, at)
    expiries = _expiries(store)
    namespaces: list[tuple[str, ...]] = []
    while True:
        page = store.list_namespaces(limit=PAGE, offset=len(namespaces))
        namespaces.extend(page)
        if len(page) < PAGE:
            break
    out: list[StoreItem] = []
    when = datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
    for ns in namespaces:
        offset = 0
        while True:
            found: list[Item] = list(store.search(ns, limit=PAGE, offset=offset, refresh_ttl=False))
            offset += len(found)
            for item in found:
                if tuple(item.namespace) != ns:
                    continue  # a deeper namespace: copied with its own
                expires = expiries.get((".".join(ns), item.key))
                left = None if expires is None else (expires - when).total_seconds() / 60
                if left is not None and left <= 0:
                    continue
                out.append(StoreItem(ns, item.key, dict(item.value), left))
            if len(found) < PAGE:
                break
    return out


def copy_items(source: BaseStore, target: BaseStore, *, now: float | None = None) -> ItemsReport:
    """Copy every live item of ``source`` into ``target`` (see the module docstring).

    Raises:
        MigrationError: The target holds one of the items with another value
            (nothing was written).
    """
    items = source_items(source, now=now)
    report = ItemsReport()
    todo: list[StoreItem] = []
    for start in range(0, len(items), PAGE):
        chunk = items[start : start + PAGE]
        got = target.batch([GetOp(i.namespace, i.key, refresh_ttl=False) for i in chunk])
        for item, have in zip(chunk, got, strict=True):
            if have is None:
                todo.append(item)
            elif isinstance(have, Item) and have.value == item.value:
                report.skipped += 1
            else:
                raise MigrationError(
                    f"the target already holds item {item.key!r:.60} of namespace "
                    f"{item.namespace!r:.80} with another value; delete it there (or migrate "
                    "into an empty store) and run again; no item was written"
                )
    for start in range(0, len(todo), PAGE):
        target.batch(
            [
                PutOp(i.namespace, i.key, i.value, ttl=_ttl(i.ttl_minutes))
                for i in todo[start : start + PAGE]
            ]
        )
        report.items += len(todo[start : start + PAGE])
    return report


def _ttl(left: float | None) -> float | None:
    # At least one millisecond: a TTL that rounds to zero would mean "no TTL" to some stores.
    return None if left is None else max(left, 1 / 60_000)


@contextlib.contextmanager
def open_store_uri(uri: str) -> Iterator[BaseStore]:
    """Open the store a saver URI names (no index, no TTL config) and close it afterwards.

    ``sqlite:FILE``: a ``SqliteStore`` on the file (tables created if missing);
    ``postgresql://…``: a ``PostgresStore`` (tables created if missing);
    ``deltalog:PATH``: a ``DeltaLogStore``.

    Raises:
        MigrationError: Unknown scheme, the store's package is missing, or the
            database cannot be opened.
    """
    from deltalog.engine.migrate import (
        _SQLITE,
        connect_sqlite,
        describe_uri,
        postgres_errors,
        setup_sqlite,
    )

    if m := _SQLITE.match(uri):
        try:
            from langgraph.store.sqlite import SqliteStore
        except ImportError as exc:
            raise MigrationError(
                "sqlite: stores need langgraph-checkpoint-sqlite; "
                "pip install langgraph-checkpoint-sqlite"
            ) from exc
        file = os.path.expanduser(m.group("path"))
        conn = connect_sqlite(uri, file, isolation_level=None)
        try:
            store = SqliteStore(conn)
            setup_sqlite(uri, file, store)
            yield store
        finally:
            conn.close()
    elif uri.startswith(("postgresql://", "postgres://")):
        try:
            from langgraph.store.postgres import PostgresStore
        except ImportError as exc:
            raise MigrationError(
                "postgresql:// stores need langgraph-checkpoint-postgres; "
                "pip install 'deltalog[postgres]'"
            ) from exc
        with postgres_errors(uri), PostgresStore.from_conn_string(uri) as pg_store:
            pg_store.setup()
            yield pg_store
    elif uri.startswith("deltalog:"):
        from deltalog.engine.memory import DeltaLogStore

        with DeltaLogStore.from_path(uri[len("deltalog:") :]) as dl_store:
            yield dl_store
    else:
        raise MigrationError(
            f"{describe_uri(uri)!r} is not a store URI; use sqlite:FILE, "
            "postgresql://user@host/db or deltalog:PATH"
        )
