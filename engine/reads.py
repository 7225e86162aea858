"""The saver's read paths over the store: ``list``'s scan and the export, in short transactions.

:func:`list_rows` is what ``DeltaLogSaver.list`` and ``alist`` iterate; the
saver turns each row into a ``CheckpointTuple``. :func:`export_rows` reads
each thread in one snapshot. No read transaction stays open while the caller
holds the iterator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from deltalog.engine import keys
from deltalog.engine.config import before_checkpoint_id, parse_config, thread_list
from deltalog.engine.env import Environment
from deltalog.engine.errors import InvalidInputError
from deltalog.engine.store_rows import CheckpointRow, Typed
from langchain_core.runnables import RunnableConfig

__all__ = [
    "export_rows",
    "groups",
    "iter_group",
    "list_rows",
    "read_checkpoint",
    "read_chunk",
]

# Rows read per read transaction while listing: short transactions keep LMDB
# from pinning old pages while the caller consumes the iterator.
_LIST_CHUNK = 32


def list_rows(
    store: Environment,
    loads: Callable[[Typed], Any],
    config: RunnableConfig | None,
    *,
    filter: dict[str, Any] | None = None,
    before: RunnableConfig | None = None,
    limit: int | None = None,
) -> Iterator[CheckpointRow]:
    """The rows :meth:`DeltaLogSaver.list <deltalog.engine.DeltaLogSaver.list>` yields, newest first.

    ``loads`` decodes metadata for ``filter``. Rows are read in chunks of
    ``_LIST_CHUNK``, each in its own short read transaction.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise InvalidInputError(f"limit {limit!r} is not an int; pass an int or None")
    if filter is not None and not isinstance(filter, Mapping):
        raise InvalidInputError(f"filter {filter!r} is not a mapping of metadata key to value")
    only_id: str | None = None
    if config is None:
        scope: tuple[str, str | None] | None = None
    else:
        thread_id, _, only_id = parse_config(config)
        ns = config["configurable"].get("checkpoint_ns")
        scope = (thread_id, ns)
    before_id = before_checkpoint_id(before)
    if before_id is not None:
        keys.encode_id(before_id)  # a bad id is refused before anything is read
    remaining = limit
    if remaining is not None and remaining <= 0:
        return
    for t, n in groups(store, scope):
        if only_id is not None:
            row = read_checkpoint(store, t, n, only_id)
            rows_iter: Iterator[CheckpointRow] = iter([row] if row is not None else [])
            if before_id is not None and keys.encode_id(only_id) >= keys.encode_id(before_id):
                rows_iter = iter([])
        else:
            # A short listing (get_state_history(limit=20)) reads no more rows than
            # it yields, unless it skips some (hidden, filtered out).
            chunk = _LIST_CHUNK if remaining is None or filter else min(_LIST_CHUNK, remaining)
            rows_iter = iter_group(store, t, n, before_id, chunk)
        for row in rows_iter:
            if row.hidden:
                continue
            if filter:
                metadata = loads(row.metadata)
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            yield row
            if remaining is not None:
                remaining -= 1
                if remaining <= 0:
                    return


def groups(store: Environment, scope: tuple[str, str | None] | None) -> list[tuple[int, int]]:
    """The (thread, ns) ids ``list`` scans: every group, a thread's, or one (``scope``)."""
    with store.read() as r:
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


def iter_group(
    store: Environment, t: int, n: int, before_id: str | None, chunk: int = _LIST_CHUNK
) -> Iterator[CheckpointRow]:
    """A group's rows newest first below ``before_id``, a short read transaction per
    ``chunk`` rows (the first; later ones :data:`_LIST_CHUNK`)."""
    while True:
        rows, last = read_chunk(store, t, n, before_id, chunk)
        yield from rows
        if len(rows) < chunk or last is None:
            return
        before_id = last
        chunk = _LIST_CHUNK


# The list generators read through these: a generator frame that kept a
# read transaction object alive would keep its LMDB reader slot taken while
# suspended, and 126 suspended listings (coroutines in alist) fill the store.


def read_checkpoint(store: Environment, t: int, n: int, checkpoint_id: str) -> CheckpointRow | None:
    """One checkpoint row, in a read transaction of its own."""
    with store.read() as r:
        return r.checkpoint(t, n, checkpoint_id)


def read_chunk(
    store: Environment, t: int, n: int, before_id: str | None, chunk: int = _LIST_CHUNK
) -> tuple[list[CheckpointRow], str | None]:
    """Up to ``chunk`` rows newest first below ``before_id``, and the id to go on from."""
    with store.read() as r:
        return r.checkpoints_below(t, n, before_id, chunk)


def export_rows(
    store: Environment, thread_ids: Sequence[str] | None, *, items: bool | None
) -> Iterator[dict[str, Any]]:
    """The records after the header of :meth:`DeltaLogSaver.export_records
    <deltalog.engine.DeltaLogSaver.export_records>`: each thread from one snapshot, then items.
    """
    with store.read() as r:
        if thread_ids is None:
            tids = [r.name_of(keys.KIND_THREAD, t) for t in r.threads()]
        else:
            tids = thread_list(thread_ids, "thread_ids")
    for thread_id in tids:
        with store.read() as r:
            t = r.name_id(keys.KIND_THREAD, thread_id)
            rows = list(r.export_thread(t)) if t is not None else []
        yield from rows
    if items if items is not None else thread_ids is None:
        from deltalog.engine.memory_export import export_items

        yield from export_items(store)
