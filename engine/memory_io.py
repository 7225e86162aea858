"""Storage I/O of the long-term memory store: typed reads and writes of its records.

The only memory module that touches LMDB transactions. It works inside the
environment facade :class:`deltalog.engine.env.Environment`: reads run in
``Environment.read()``, writes in ops given to ``Environment.write()`` (so group commit,
map growth and error translation apply). Key bytes come from
:mod:`deltalog.engine.keys`; every record is framed by the store's
:class:`~deltalog.engine.codec.RecordCodec` (CRC-checked).

Records (ormsgpack lists inside the codec frame):

=============  ============================================================
database       record
=============  ============================================================
item_ns        ``[labels]`` (the id → namespace direction)
items          ``[key, value, created_us, updated_us, ttl_min, expires_ms]``
item_vectors   ``[field_path, text_sha256[:16], float32 bytes]``
item_ttl       empty (the key is the index)
=============  ============================================================

A store opened read-only before any writable open of this version has no
``item*`` databases: every read here then answers "empty".
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from deltalog.engine import keys
from deltalog.engine.env import Environment
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.read_txn import ReadTxn
from deltalog.engine.write_txn import WriteTxn

__all__ = [
    "ItemRecord",
    "MemoryReader",
    "MemoryWriter",
    "NamespaceDirectory",
    "VectorRecord",
    "directory",
    "text_digest",
]

# A sweep deletes at most this many expired items per write transaction, so
# checkpoint writers queued behind it wait one short commit, not the whole sweep.
SWEEP_CHUNK: Final = 500


@dataclass(frozen=True)
class ItemRecord:
    """One stored item as decoded from ``items``."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_us: int
    updated_us: int
    ttl_minutes: float | None
    expires_ms: int | None


@dataclass(frozen=True)
class VectorRecord:
    """One embedded field path of an item (``item_vectors``)."""

    path: str
    digest: bytes
    vector: bytes  # float32, native little-endian as numpy writes it


def text_digest(text: str) -> bytes:
    """What a vector record remembers of its text, to re-embed only what changed."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16]


class NamespaceDirectory:
    """The namespaces of one environment (id ↔ labels), shared by its memory stores.

    Namespace ids are never reused and their records never deleted, so the
    directory only grows; it catches up with other processes when the entry
    count of ``item_ns`` changed. Ids interned by a write enter it only after
    the commit (:meth:`learn`), so an aborted transaction leaves none behind.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_id: dict[int, tuple[str, ...]] = {}
        self.by_labels: dict[tuple[str, ...], int] = {}
        self._entries = -1
        # Ids up to this one were read from disk. Ids learned from this
        # process's commits do not move it: older ids may be unread yet.
        self._loaded = 0

    def refresh(self, reader: MemoryReader) -> None:
        """Load the namespaces committed since the last refresh."""
        entries = reader.ns_entries()
        if entries == self._entries:
            return
        found = reader.namespaces_after(self._loaded)
        with self._lock:
            for ns_id, labels in found:
                self._add(ns_id, labels)
            if found:
                self._loaded = max(self._loaded, found[-1][0])
            self._entries = entries

    def learn(self, new: dict[tuple[str, ...], int]) -> None:
        """Add the namespaces a committed write interned."""
        with self._lock:
            for labels, ns_id in new.items():
                self._add(ns_id, labels)

    def _add(self, ns_id: int, labels: tuple[str, ...]) -> None:
        self.by_id[ns_id] = labels
        self.by_labels[labels] = ns_id

    def items(self) -> list[tuple[int, tuple[str, ...]]]:
        """Every (id, namespace) in id (first-put) order."""
        with self._lock:
            return sorted(self.by_id.items())


_DIRECTORIES: weakref.WeakKeyDictionary[Environment, NamespaceDirectory] = (
    weakref.WeakKeyDictionary()
)
_DIRECTORIES_LOCK = threading.Lock()


def directory(store: Environment) -> NamespaceDirectory:
    """The namespace directory of an open environment (one per :class:`Environment`)."""
    with _DIRECTORIES_LOCK:
        found = _DIRECTORIES.get(store)
        if found is None:
            found = _DIRECTORIES[store] = NamespaceDirectory()
        return found


class MemoryReader:
    """Typed reads of the memory databases inside one transaction."""

    def __init__(self, txn: ReadTxn) -> None:
        self.txn = txn.txn
        self.codec = txn.store.codec
        self.items_db = txn.store.db("items")
        self.ns_db = txn.store.db("item_ns")
        self.vectors_db = txn.store.db("item_vectors")
        self.ttl_db = txn.store.db("item_ttl")

    @property
    def available(self) -> bool:
        """False for a read-only open of a store without memory databases."""
        return self.items_db is not None

    # -- namespaces ----------------------------------------------------------------

    def ns_entries(self) -> int:
        """Entry count of ``item_ns`` (it changes exactly when a namespace is added)."""
        if self.ns_db is None:
            return 0
        return int(self.txn.stat(self.ns_db)["entries"])

    def namespaces_after(self, after: int) -> list[tuple[int, tuple[str, ...]]]:
        """Every namespace with an id above ``after``, in id order."""
        out: list[tuple[int, tuple[str, ...]]] = []
        if self.ns_db is None:
            return out
        cur = self.txn.cursor(db=self.ns_db)
        ok = cur.set_range(keys.item_ns_rev_key(after + 1))
        while ok:
            key = cur.key()
            ns_id = keys.decode_item_ns_rev_key(key)
            labels = self.codec.decode(cur.value(), f"item_ns {key.hex()}")
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                raise CorruptRecordError(f"item_ns {key.hex()} does not hold a namespace")
            out.append((ns_id, tuple(labels)))
            ok = cur.next()
        return out

    def ns_id(self, namespace: tuple[str, ...]) -> int | None:
        """The id of ``namespace``, or None if nothing was ever put there."""
        if self.ns_db is None:
            return None
        raw = self.txn.get(keys.item_ns_key(namespace), db=self.ns_db)
        if raw is None:
            return None
        if len(raw) > 8 and raw[8:].decode("utf-8") != ".".join(namespace):
            return None  # a hashed long namespace that only shares the hash
        return int.from_bytes(raw[:8], "big")

    # -- items ---------------------------------------------------------------------

    def _item(self, namespace: tuple[str, ...], key: bytes, raw: bytes) -> ItemRecord:
        rec = self.codec.decode(raw, f"items {key.hex()}")
        try:
            name, value, created, updated, ttl, expires = rec
            if not isinstance(name, str) or not isinstance(value, dict):
                raise TypeError("bad field types")
        except (TypeError, ValueError) as exc:
            raise CorruptRecordError(
                f"items {key.hex()} is not an item record ({exc}); run `deltalog verify`"
            ) from None
        return ItemRecord(namespace, name, value, created, updated, ttl, expires)

    def get(self, ns_id: int, namespace: tuple[str, ...], key: str) -> ItemRecord | None:
        """The item at (namespace, key), expired or not; None if absent."""
        if self.items_db is None:
            return None
        ikey = keys.item_key(ns_id, key)
        raw = self.txn.get(ikey, db=self.items_db)
        if raw is None:
            return None
        rec = self._item(namespace, ikey, raw)
        return rec if rec.key == key else None

    def scan(self, ns_id: int, namespace: tuple[str, ...]) -> Iterator[tuple[bytes, ItemRecord]]:
        """Every item of one namespace in key order, with its ``items`` key."""
        if self.items_db is None:
            return
        prefix = keys.item_prefix(ns_id)
        cur = self.txn.cursor(db=self.items_db)
        ok = cur.set_range(prefix)
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                return
            yield bytes(key), self._item(namespace, key, cur.value())
            ok = cur.next()

    def has_live(self, ns_id: int, now_ms: int) -> bool:
        """Whether the namespace holds an item that has not expired."""
        if self.items_db is None:
            return False
        prefix = keys.item_prefix(ns_id)
        cur = self.txn.cursor(db=self.items_db)
        ok = cur.set_range(prefix)
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                return False
            rec = self.codec.decode(cur.value(), f"items {key.hex()}")
            if not (isinstance(rec, list) and len(rec) == 6):
                raise CorruptRecordError(f"items {key.hex()} is not an item record")
            if rec[5] is None or rec[5] > now_ms:
                return True
            ok = cur.next()
        return False

    def vectors(self, item: bytes) -> list[VectorRecord]:
        """The vector records of one item (by its ``items`` key), in field order."""
        out: list[VectorRecord] = []
        if self.vectors_db is None:
            return out
        cur = self.txn.cursor(db=self.vectors_db)
        ok = cur.set_range(item)
        while ok:
            key = cur.key()
            if not (key.startswith(item) and len(key) == len(item) + 2):
                break
            rec = self.codec.decode(cur.value(), f"item_vectors {key.hex()}")
            if not (isinstance(rec, list) and len(rec) == 3):
                raise CorruptRecordError(f"item_vectors {key.hex()} is not a vector record")
            out.append(VectorRecord(rec[0], rec[1], rec[2]))
            ok = cur.next()
        return out

    def namespace_vectors(self, ns_id: int) -> Iterator[tuple[bytes, VectorRecord]]:
        """Every vector record of one namespace with its item's key, in key order.

        One cursor pass per namespace rather than one cursor per item (py-lmdb
        cursors are not free: ~25 us each, the bulk of a 10k-item ranking).
        """
        if self.vectors_db is None:
            return
        prefix = keys.item_prefix(ns_id)
        cur = self.txn.cursor(db=self.vectors_db)
        ok = cur.set_range(prefix)
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                return
            rec = self.codec.decode(cur.value(), f"item_vectors {bytes(key).hex()}")
            if not (isinstance(rec, list) and len(rec) == 3):
                raise CorruptRecordError(f"item_vectors {bytes(key).hex()} is not a vector record")
            yield bytes(key[:-2]), VectorRecord(rec[0], rec[1], rec[2])
            ok = cur.next()

    def item_vectors(self, ns_id: int, key: str) -> list[VectorRecord]:
        """The vector records of the item at (namespace id, key)."""
        return self.vectors(keys.item_key(ns_id, key))

    def problems(self, limit: int = 100) -> list[str]:
        """Every inconsistency of the memory databases (at most ``limit``), for verify.

        Checks each record's frame (CRC) and shape, that every item's namespace
        id is known, that ``item_ttl`` holds exactly one entry per item with an
        expiry, and that every vector record belongs to an item. One read
        transaction over all four databases.
        """
        out: list[str] = []
        if self.items_db is None:
            return out
        known = {ns_id for ns_id, _ in self.namespaces_after(0)}
        expiries: set[bytes] = set()
        items: set[bytes] = set()
        cur = self.txn.cursor(db=self.items_db)
        ok = cur.first()
        while ok and len(out) < limit:
            key = bytes(cur.key())
            items.add(key)  # a damaged item is reported once, not again by its vectors
            try:
                (ns_id,), _ = keys.split_ids(key, 1)
                rec = self._item((), key, cur.value())
                if ns_id not in known:
                    out.append(f"items {key.hex()}: namespace id {ns_id} is not in item_ns")
                if keys.item_key(ns_id, rec.key) != key:
                    out.append(f"items {key.hex()}: the record's key {rec.key!r:.60} differs")
                if rec.expires_ms is not None:
                    expiries.add(keys.item_ttl_key(rec.expires_ms, key))
            except CorruptRecordError as exc:
                out.append(str(exc))
            ok = cur.next()
        cur = self.txn.cursor(db=self.ttl_db)
        ttl_keys = {bytes(k) for k, _ in cur} if cur.first() else set()
        for missing in sorted(expiries - ttl_keys)[: max(0, limit - len(out))]:
            out.append(f"item_ttl lacks the entry {missing.hex()} of its item")
        for stray in sorted(ttl_keys - expiries)[: max(0, limit - len(out))]:
            out.append(f"item_ttl {stray.hex()} has no item with that expiry")
        cur = self.txn.cursor(db=self.vectors_db)
        ok = cur.first()
        while ok and len(out) < limit:
            key = bytes(cur.key())
            try:
                rec = self.codec.decode(cur.value(), f"item_vectors {key.hex()}")
                if not (isinstance(rec, list) and len(rec) == 3 and isinstance(rec[2], bytes)):
                    out.append(f"item_vectors {key.hex()} is not a vector record")
                elif len(rec[2]) % 4:
                    out.append(
                        f"item_vectors {key.hex()}: {len(rec[2])} bytes is no float32 vector"
                    )
                if key[:-2] not in items:
                    out.append(f"item_vectors {key.hex()} belongs to no item")
            except CorruptRecordError as exc:
                out.append(str(exc))
            ok = cur.next()
        return out[:limit]

    def expired(self, now_ms: int, limit: int) -> list[bytes]:
        """Up to ``limit`` ``item_ttl`` keys whose expiry is at or before ``now_ms``."""
        out: list[bytes] = []
        if self.ttl_db is None:
            return out
        cur = self.txn.cursor(db=self.ttl_db)
        ok = cur.first()
        while ok and len(out) < limit:
            key = bytes(cur.key())
            expires, _ = keys.decode_item_ttl_key(key)
            if expires > now_ms:
                break
            out.append(key)
            ok = cur.next()
        return out


class MemoryWriter(MemoryReader):
    """Typed writes of the memory databases inside one ``Environment.write`` op."""

    def __init__(self, txn: WriteTxn) -> None:
        super().__init__(txn)
        #: Namespaces this transaction interned (for the directory after commit).
        self.new_namespaces: dict[tuple[str, ...], int] = {}

    def intern_ns(self, namespace: tuple[str, ...]) -> int:
        """The id of ``namespace``, allocating one if it is new."""
        found = self.new_namespaces.get(namespace)
        if found is not None:
            return found
        found = self.ns_id(namespace)
        if found is not None:
            return found
        cur = self.txn.cursor(db=self.ns_db)
        last = cur.key() if cur.last() else b""
        ns_id = keys.decode_item_ns_rev_key(last) + 1 if last[:1] == keys.ITEM_NS_REV else 1
        name_key = keys.item_ns_key(namespace)
        value = keys.u64(ns_id)
        if name_key[1] == 1:  # hashed: keep the full name to detect collisions
            value += ".".join(namespace).encode("utf-8")
        self.txn.put(name_key, value, db=self.ns_db)
        self.txn.put(keys.item_ns_rev_key(ns_id), self.codec.encode(list(namespace)), db=self.ns_db)
        self.new_namespaces[namespace] = ns_id
        return ns_id

    def put_item(self, ns_id: int, rec: ItemRecord, old: ItemRecord | None) -> bytes:
        """Write an item (replacing ``old``, its TTL entry too); return its key."""
        ikey = keys.item_key(ns_id, rec.key)
        if old is not None and old.expires_ms is not None:
            self.txn.delete(keys.item_ttl_key(old.expires_ms, ikey), db=self.ttl_db)
        record = [rec.key, rec.value, rec.created_us, rec.updated_us, rec.ttl_minutes]
        record.append(rec.expires_ms)
        self.txn.put(ikey, self.codec.encode(record), db=self.items_db)
        if rec.expires_ms is not None:
            self.txn.put(keys.item_ttl_key(rec.expires_ms, ikey), b"", db=self.ttl_db)
        return ikey

    def delete_item(self, ns_id: int, old: ItemRecord) -> None:
        """Delete an item, its vectors and its TTL entry."""
        ikey = keys.item_key(ns_id, old.key)
        self.txn.delete(ikey, db=self.items_db)
        if old.expires_ms is not None:
            self.txn.delete(keys.item_ttl_key(old.expires_ms, ikey), db=self.ttl_db)
        self.set_vectors(ikey, [])

    def set_vectors(self, item: bytes, records: list[VectorRecord]) -> None:
        """Replace every vector record of an item (none: drop them all)."""
        cur = self.txn.cursor(db=self.vectors_db)
        ok = cur.set_range(item)
        while ok:
            key = cur.key()
            if not (key.startswith(item) and len(key) == len(item) + 2):
                break
            ok = cur.delete()
        for ordinal, rec in enumerate(records):
            self.txn.put(
                keys.item_vector_key(item, ordinal),
                self.codec.encode([rec.path, rec.digest, rec.vector]),
                db=self.vectors_db,
            )

    def sweep(self, now_ms: int, limit: int = SWEEP_CHUNK) -> tuple[int, bool]:
        """Delete up to ``limit`` expired items; return (deleted, more may remain)."""
        found = self.expired(now_ms, limit)
        deleted = 0
        for ttl_key in found:
            expires, ikey = keys.decode_item_ttl_key(ttl_key)
            self.txn.delete(ttl_key, db=self.ttl_db)
            raw = self.txn.get(ikey, db=self.items_db)
            if raw is None:
                continue
            rec = self._item((), ikey, raw)
            if rec.expires_ms != expires:
                continue  # refreshed meanwhile: a newer entry carries it
            self.txn.delete(ikey, db=self.items_db)
            self.set_vectors(ikey, [])
            deleted += 1
        return deleted, len(found) == limit
