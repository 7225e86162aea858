"""Memory items in the export stream: ``item`` records out of a snapshot, and back in.

An ``item`` record (docs/cli.md, "The export stream") carries everything a
:class:`~deltalog.engine.DeltaLogStore` keeps of one item: namespace, key,
JSON value, creation and update instants (microseconds since the epoch), TTL
in minutes and the absolute expiry (ms since the epoch), and its stored
vectors (field path, text digest, float32 bytes). Vectors travel as stored
rather than being re-embedded on import: ``deltalog import`` has no embedder,
an import must not call a paid or slow embedding service, and search results
after the import then equal the ones before, bit for bit.

:func:`export_items` reads one snapshot; :func:`import_items` writes records
that :func:`~deltalog.engine.import_check.check_import` passed, inside the
import's one write transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from deltalog.engine import memory_core as core
from deltalog.engine.env import Environment
from deltalog.engine.errors import ItemExistsError
from deltalog.engine.memory_io import ItemRecord, MemoryReader, MemoryWriter, VectorRecord
from deltalog.engine.write_txn import WriteTxn

__all__ = ["export_items", "import_items", "item_record"]


def item_record(rec: ItemRecord, vectors: Sequence[VectorRecord]) -> dict[str, Any]:
    """The export record of one stored item and its vectors."""
    return {
        "kind": "item",
        "namespace": list(rec.namespace),
        "key": rec.key,
        "value": rec.value,
        "created_us": rec.created_us,
        "updated_us": rec.updated_us,
        "ttl_minutes": rec.ttl_minutes,
        "expires_ms": rec.expires_ms,
        "vectors": [{"path": v.path, "digest": v.digest, "vector": v.vector} for v in vectors],
    }


def export_items(store: Environment, *, now: float | None = None) -> Iterator[dict[str, Any]]:
    """Every live item of the environment as an ``item`` record, from one read snapshot.

    Items already expired at ``now`` (default: the clock) are left out: no
    read returns them and the next sweep deletes them.
    """
    now_ms = int((time.time() if now is None else now) * 1000)
    out: list[dict[str, Any]] = []
    with store.read() as r:
        reader = MemoryReader(r)
        if not reader.available:
            return
        for ns_id, ns in reader.namespaces_after(0):
            vectors: dict[bytes, list[VectorRecord]] = {}
            for ikey, vec in reader.namespace_vectors(ns_id):
                vectors.setdefault(ikey, []).append(vec)
            for ikey, rec in reader.scan(ns_id, ns):
                if not core.is_expired(rec.expires_ms, now_ms):
                    out.append(item_record(rec, vectors.get(ikey, [])))
    yield from out


def import_items(
    w: WriteTxn, rows: Sequence[dict[str, Any]], lines: Sequence[int], *, now: float | None = None
) -> dict[tuple[str, ...], int]:
    """Write validated ``item`` records; return the namespaces interned (for the directory).

    Checks first that no record names an item that is live here; an expired
    one at the same key is replaced.

    Raises:
        ItemExistsError: An item of the stream already exists here (nothing written).
    """
    now_ms = int((time.time() if now is None else now) * 1000)
    writer = MemoryWriter(w)
    old: list[tuple[int | None, ItemRecord | None]] = []
    for rec, line in zip(rows, lines, strict=True):
        ns = tuple(rec["namespace"])
        ns_id = writer.ns_id(ns)
        found = writer.get(ns_id, ns, rec["key"]) if ns_id is not None else None
        if found is not None and not core.is_expired(found.expires_ms, now_ms):
            raise ItemExistsError(
                f"line {line} of the import stream: item {rec['key']!r:.60} of namespace "
                f"{ns!r:.80} already exists in this store; import into an empty store or "
                "delete the item first"
            )
        old.append((ns_id, found))
    for rec, (_, found) in zip(rows, old, strict=True):
        ns = tuple(rec["namespace"])
        ns_id = writer.intern_ns(ns)
        item = ItemRecord(
            namespace=ns,
            key=rec["key"],
            value=rec["value"],
            created_us=rec["created_us"],
            updated_us=rec["updated_us"],
            ttl_minutes=rec["ttl_minutes"],
            expires_ms=rec["expires_ms"],
        )
        ikey = writer.put_item(ns_id, item, found)
        writer.set_vectors(
            ikey, [VectorRecord(v["path"], v["digest"], v["vector"]) for v in rec["vectors"]]
        )
    return writer.new_namespaces
