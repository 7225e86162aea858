"""The ordered on-disk format migrations (R10).

``MIGRATIONS`` lists every step ``(from_version, to_version, step)``; the steps
chain from format 1 to :data:`~deltalog.engine.keys.FORMAT_VERSION` with no gap.
A writable open of an older store runs the steps it needs, in order, inside
one write transaction that also records the new ``format_version``: a crash
leaves the store at the old format, never between two. A read-only open runs
none (R12): it reads the old format as it is.

==========  =================================================================
step        what changes on disk
==========  =================================================================
1 → 2       nothing is rewritten: format 2 only adds delta blobs over writes
2 → 3       nothing is rewritten: format 3 only adds values held inside
            checkpoint records
3 → 4       every ``names`` and ``names_rev`` record is rewritten with a
            CRC-32 over its key and value (:mod:`deltalog.engine.names`)
4 → 5       the memory store's item counts: one ``item_ns`` count record per
            namespace (its items, those with a TTL), counted from the
            ``items`` and ``item_ttl`` keys (nothing is decoded or rewritten);
            the change counter record appears with the first memory write;
            item records are written in a shorter layout from then on (the
            format 4 layout still reads, so none is rewritten)
==========  =================================================================

Steps are fed the raw transaction and database handles: only
:mod:`deltalog.engine.store` opens transactions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

from deltalog.engine import keys
from deltalog.engine.memory_core import encode_counts, ns_of
from deltalog.engine.names import (
    decode_name_id,
    decode_name_rev,
    encode_name_id,
    encode_name_rev,
)

__all__ = ["MIGRATIONS", "Migration", "NameDbs", "count_items", "pending"]


class NameDbs(Protocol):
    """The database handles a migration step uses (the store's ``_Dbs``)."""

    names: Any
    names_rev: Any
    items: Any
    item_ns: Any
    item_ttl: Any


Migration = Callable[[Any, NameDbs], None]
"""A step: given an open write transaction and the database handles, rewrite in place."""


def _records_only_added(txn: Any, dbs: NameDbs) -> None:
    """Formats 2 and 3 only add record shapes that older stores lack: nothing to rewrite."""


def checksum_names(txn: Any, dbs: NameDbs) -> None:
    """Format 4: rewrite every name record with a CRC over its key and value.

    Each record is decoded in the old layout first, so one that format 3 could
    not read either (a malformed length) stops the upgrade with
    CorruptRecordError, and the store stays as it was.
    """
    for db in (dbs.names, dbs.names_rev):
        rows = list(txn.cursor(db=db).iternext(keys=True, values=True))
        for key, raw in rows:
            key = bytes(key)
            if db is dbs.names:
                name_id, name = decode_name_id(key, raw, crc=False)
                value = encode_name_id(key, name_id, name)
            else:
                value = encode_name_rev(key, decode_name_rev(key, raw, crc=False))
            txn.put(key, value, db=db)


def count_items(txn: Any, dbs: NameDbs) -> None:
    """Format 5: write every namespace's item counts (``list_namespaces`` reads them).

    A store without memory databases (created before them, first opened
    writable now: they were just created empty) has nothing to count.
    """
    if dbs.item_ns is None:
        return
    items: dict[int, int] = {}
    with_ttl: dict[int, int] = {}
    for key in txn.cursor(db=dbs.items).iternext(values=False):
        ns_id = ns_of(bytes(key))
        items[ns_id] = items.get(ns_id, 0) + 1
    for key in txn.cursor(db=dbs.item_ttl).iternext(values=False):
        ns_id = ns_of(bytes(key)[8:])
        with_ttl[ns_id] = with_ttl.get(ns_id, 0) + 1
    cur = txn.cursor(db=dbs.item_ns)
    ok = cur.set_range(keys.ITEM_NS_REV)
    found: list[int] = []
    while ok and cur.key()[:1] == keys.ITEM_NS_REV:
        found.append(keys.decode_item_ns_rev_key(bytes(cur.key())))
        ok = cur.next()
    for ns_id in found:
        value = encode_counts(ns_id, items.get(ns_id, 0), with_ttl.get(ns_id, 0))
        txn.put(keys.item_count_key(ns_id), value, db=dbs.item_ns)


MIGRATIONS: Final[tuple[tuple[int, int, Migration], ...]] = (
    (1, 2, _records_only_added),
    (2, 3, _records_only_added),
    (3, 4, checksum_names),
    (4, 5, count_items),  # the memory store's counts; renumber freely if a step lands before
)


def pending(version: int) -> list[tuple[int, int, Migration]]:
    """The steps that take a store of ``version`` to the current format, in order."""
    steps = [m for m in MIGRATIONS if m[0] >= version]
    at = version
    for old, new, _ in steps:
        if old != at:
            break
        at = new
    if at != keys.FORMAT_VERSION:
        raise ValueError(f"no migration path from format {version} to {keys.FORMAT_VERSION}")
    return steps
