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
items          a chunk of one namespace's items (format 6, :class:`Chunk`):
               ``[[key suffix, ...], [packed fields, ...]]``, each item's
               fields ``[value, created_us, updated_us, ttl_min, expires_ms,
               key]`` (trailing nils left out; see :func:`item_fields`);
               format 5's one record per item (those fields) and format 4's
               ``[key, value, ...]`` still read
item_vectors   ``[field_path, text_sha256[:16], float32 bytes]``
item_ttl       empty (the key is the index)
=============  ============================================================

A store opened read-only before any writable open of this version has no
``item*`` databases: every read here then answers "empty".
"""

from __future__ import annotations

import bisect
import hashlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from deltalog.engine import keys
from deltalog.engine.codec import frame_plain
from deltalog.engine.env import Environment
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.memory_chunks import (
    Chunk,
    decoded,
    is_chunk,
    item_fields,
    locate,
    lookup,
    parse_item,
    prefix_of,
    record_items,
    remember,
    with_item,
)
from deltalog.engine.memory_core import (
    Changes,
    ItemRecord,
    bump_counts,
    cosines,
    decode_counter,
    decode_counts,
    encode_counts,
    next_counter,
    ns_of,
    row_norms,
)
from deltalog.engine.memory_gets import GetCache
from deltalog.engine.read_txn import ReadTxn
from deltalog.engine.write_txn import WriteTxn

__all__ = [
    "Changes",
    "FieldIndex",
    "ItemCache",
    "ItemRecord",
    "MemoryReader",
    "MemoryWriter",
    "NamespaceDirectory",
    "VectorMatrix",
    "VectorRecord",
    "apply_changes",
    "build_index",
    "directory",
    "index_lookup",
    "text_digest",
    "vector_matrix",
]

# A sweep deletes at most this many expired items per write transaction, so
# checkpoint writers queued behind it wait one short commit, not the whole sweep.
SWEEP_CHUNK: Final = 500


def _plain_record(record: list[Any], key: bytes) -> bytes:
    """A record framed as :meth:`RecordCodec.encode` frames an uncompressed one, over its key.

    For vector records: float32 noise never compresses, so the codec's
    compression attempt is wasted work, and its dictionary samples (meant for
    checkpoint and item records) would fill with vectors.
    """
    return frame_plain(record, key=key)


@dataclass(frozen=True)
class VectorRecord:
    """One embedded field path of an item (``item_vectors``)."""

    path: str
    digest: bytes
    vector: bytes  # float32, native little-endian as numpy writes it


def text_digest(text: str) -> bytes:
    """What a vector record remembers of its text, to re-embed only what changed."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16]


#: Items the per-state item cache holds at most (beyond it, searches read LMDB).
ITEM_CACHE_MAX: Final = 200_000


class ItemCache:
    """Decoded items of one snapshot state, and sorted value indexes over them.

    Filled by searches as they read whole namespaces (nothing is decoded for
    it alone); valid while the change counter stays (any memory write makes
    a new one). ``indexes`` maps (namespace prefix, filter key) to the
    prefix's items in search order and their values at the key, sorted, by
    kind: what :func:`memory_core.index_plan` conditions need.
    """

    def __init__(self, state: tuple[int, int]) -> None:
        self.state = state
        self.lists: dict[int, list[tuple[bytes, ItemRecord]]] = {}
        self.size = 0
        self.searches = 0
        self.indexes: dict[tuple[tuple[str, ...], str], FieldIndex] = {}

    def add(self, ns_id: int, items: list[tuple[bytes, ItemRecord]]) -> None:
        """Remember one namespace's items (unless the cache is full)."""
        if self.size + len(items) <= ITEM_CACHE_MAX and ns_id not in self.lists:
            self.lists[ns_id] = items
            self.size += len(items)

    def after(self, changes: Changes) -> ItemCache | None:
        """The cache of the state one committed op leads to from this one, or None
        when this is not the state the op started from.

        A new object (copy on write: a search may be reading this one): the
        namespaces it holds get the op's items, in key order; the value
        indexes are rebuilt by the next search that wants them, from RAM.
        """
        if changes.before is None or self.state != (0, changes.before):
            return None
        out = ItemCache((0, changes.after))
        out.lists = dict(self.lists)
        out.size = self.size
        out.searches = self.searches
        copied: set[int] = set()
        for ikey, rec in changes.items.items():
            ns_id = ns_of(ikey)
            items = out.lists.get(ns_id)
            if items is None:
                continue  # a namespace no search read whole: left to LMDB
            if ns_id not in copied:
                items = out.lists[ns_id] = list(items)
                copied.add(ns_id)
            i = bisect.bisect_left(items, ikey, key=lambda entry: entry[0])
            found = i < len(items) and items[i][0] == ikey
            if rec is None:
                if found:
                    del items[i]
                    out.size -= 1
            elif found:
                items[i] = (ikey, rec)
            else:
                items.insert(i, (ikey, rec))
                out.size += 1
        return out


@dataclass
class FieldIndex:
    """The items of a prefix in search order, and their values at one key sorted by kind."""

    entries: list[tuple[int, bytes, ItemRecord]]
    values: dict[str, tuple[list[Any], list[int]]]  # kind -> (sorted values, entry positions)


def build_index(entries: list[tuple[int, bytes, ItemRecord]], key: str) -> FieldIndex:
    """A :class:`FieldIndex` over ``entries`` at filter key ``key``."""
    from deltalog.engine.memory_core import field_value

    pairs: dict[str, list[tuple[Any, int]]] = {"num": [], "str": []}
    for pos, (_, _, rec) in enumerate(entries):
        v = field_value(rec.value, key)
        if isinstance(v, str):
            pairs["str"].append((v, pos))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            pairs["num"].append((v, pos))
    values: dict[str, tuple[list[Any], list[int]]] = {}
    for kind, found in pairs.items():
        found.sort(key=lambda vp: vp[0])
        values[kind] = ([v for v, _ in found], [p for _, p in found])
    return FieldIndex(entries, values)


def index_lookup(
    index: FieldIndex, kind: str, low: Any, high: Any
) -> list[tuple[int, bytes, ItemRecord]]:
    """The entries whose value of ``kind`` lies within ``[low, high]``, in search order."""
    import bisect

    values, positions = index.values[kind]
    lo = 0 if low is None else bisect.bisect_left(values, low)
    hi = len(values) if high is None else bisect.bisect_right(values, high)
    return [index.entries[p] for p in sorted(positions[lo:hi])]


class NamespaceDirectory:
    """The namespaces of one environment (id ↔ labels), shared by its memory stores.

    Namespace ids are never reused and their records never deleted, so the
    directory only grows; it catches up with other processes when the entry
    count of ``item_ns`` changed. Ids interned by a write enter it only after
    the commit (:meth:`learn`), so an aborted transaction leaves none behind.
    """

    def __init__(self, item_entries: int = 0) -> None:
        self._lock = threading.Lock()
        self.by_id: dict[int, tuple[str, ...]] = {}
        self.by_labels: dict[tuple[str, ...], int] = {}
        self._entries = -1
        #: ``list_namespaces``' cache: (change state, namespaces holding an item
        #: without a TTL, those that must be read to tell: only TTL items, or no counts).
        self.live: tuple[tuple[int, int], list[tuple[str, ...]], list[tuple[int, tuple[str, ...]]]]
        self.live = ((-1, -1), [], [])
        #: Decoded items of the latest snapshot state a search read.
        self.cache = ItemCache((-1, -1))
        #: Items of the latest state, for ``get`` (see :mod:`deltalog.engine.memory_gets`).
        self.gets = GetCache(item_entries)
        #: The in-RAM vector matrices, one per ``dims`` (see :func:`vector_matrix`).
        self.matrices: dict[int, VectorMatrix] = {}
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
            found = _DIRECTORIES[store] = NamespaceDirectory(store.caches.item_entries)
        return found


_Near = tuple[bytes, bytes] | None
"""An ``items`` record near a key, as (key, raw), or None (see MemoryReader._around)."""


class MemoryReader:
    """Typed reads of the memory databases inside one transaction."""

    def __init__(self, txn: ReadTxn) -> None:
        self.txn = txn.txn
        self.codec = txn.env.codec
        dbs = txn.dbs  # the env's handles (Environment.db by name)
        self.items_db = dbs.items
        self.ns_db = dbs.item_ns
        self.vectors_db = dbs.item_vectors
        self.ttl_db = dbs.item_ttl

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
            if key[:1] != keys.ITEM_NS_REV:
                break  # the change counter and the counts follow the namespaces
            ns_id = keys.decode_item_ns_rev_key(key)
            labels = self.codec.decode(cur.value(), f"item_ns {key.hex()}", key=bytes(key))
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
        ns_id = int.from_bytes(raw[:8], "big")
        # The forward record carries no checksum: its id must name this namespace
        # in the reverse record (CRC-checked over its key), or a flipped bit would
        # serve another namespace's items (issue 15.1, for memory).
        rev_key = keys.item_ns_rev_key(ns_id)
        rev = self.txn.get(rev_key, db=self.ns_db)
        labels = (
            None if rev is None else self.codec.decode(rev, f"item_ns {rev_key.hex()}", key=rev_key)
        )
        if not isinstance(labels, list) or tuple(labels) != namespace:
            raise CorruptRecordError(
                f"item_ns record of namespace {namespace!r} names id {ns_id}, which "
                f"{'no namespace has' if labels is None else f'belongs to {labels!r}'}; run "
                "`deltalog verify`"
            )
        return ns_id

    def counts(self) -> dict[int, tuple[int, int]]:
        """Every namespace's ``(items, items with a TTL)``; a namespace without a
        count record (a format 4 store opened read-only) is absent: unknown."""
        out: dict[int, tuple[int, int]] = {}
        if self.ns_db is None:
            return out
        cur = self.txn.cursor(db=self.ns_db)
        ok = cur.set_range(keys.ITEM_COUNT)
        while ok:
            key = cur.key()
            out[keys.decode_item_count_key(key)] = decode_counts(key, cur.value())
            ok = cur.next()
        return out

    def change_state(self) -> tuple[int, int]:
        """What identifies this snapshot's memory records: ``(0, change counter)``,
        or ``(1, transaction id)`` in a store without a counter (yet)."""
        raw = self.txn.get(keys.ITEM_CHANGES, db=self.ns_db) if self.ns_db is not None else None
        if raw is None:
            return (1, int(self.txn.id()))
        return (0, decode_counter(raw))

    # -- items ---------------------------------------------------------------------

    def item_at(
        self, ikey: bytes, namespace: tuple[str, ...], name_hint: str | None = None
    ) -> ItemRecord | None:
        """The item stored under an ``items`` key, expired or not; None if absent."""
        holder, _ = self._around(ikey) if self.items_db is not None else (None, None)
        if holder is None:
            return None
        key, raw = holder
        rec = self._decode(key, raw)
        if not is_chunk(rec):  # a one-item record (format 4, 5): this item's or another's
            return parse_item(namespace, ikey, rec, name_hint) if key == ikey else None
        fields = self._chunk_fields(ikey, key, raw, rec)
        return None if fields is None else parse_item(namespace, ikey, fields, name_hint)

    def _chunk_fields(self, ikey: bytes, key: bytes, raw: bytes, rec: Any) -> Any:
        """The fields of ``ikey``'s item in the decoded chunk ``rec`` (``raw``, under ``key``)."""
        return lookup(key, rec, ikey[len(prefix_of(ikey)) :])

    def _decode(self, key: bytes, raw: bytes) -> Any:
        found = decoded(key, raw)
        if found is not None:
            return found
        rec = self.codec.decode(raw, f"items {key.hex()}", key=key)
        if is_chunk(rec):
            remember(key, raw, rec)
        return rec

    def _around(self, ikey: bytes) -> tuple[_Near, _Near]:
        """The ``items`` records of ``ikey``'s namespace at or just below ``ikey``
        (the one that would hold it) and just above it, as (key, raw) or None."""
        prefix = prefix_of(ikey)
        cur = self.txn.cursor(db=self.items_db)
        after: _Near = None
        if cur.set_range(ikey):
            found: tuple[bytes, bytes] = cur.item()
            if found[0] == ikey:
                return found, None
            if found[0].startswith(prefix):
                after = found
            ok = cur.prev()
        else:
            ok = cur.last()
        if ok:
            found = cur.item()
            if found[0].startswith(prefix):
                return found, after
        return None, after

    def get(self, ns_id: int, namespace: tuple[str, ...], key: str) -> ItemRecord | None:
        """The item at (namespace, key), expired or not; None if absent."""
        return self.get_at(self._item_key(ns_id, key), namespace, key)

    def get_at(self, ikey: bytes, namespace: tuple[str, ...], key: str) -> ItemRecord | None:
        """:meth:`get` of the item whose ``items`` key (``keys.item_key``) is ``ikey``."""
        if self.items_db is None:
            return None
        rec = self.item_at(ikey, namespace, key)
        return rec if rec is not None and rec.key == key else None

    def _item_key(self, ns_id: int, key: str) -> bytes:
        return keys.item_key(ns_id, key)

    def scan(self, ns_id: int, namespace: tuple[str, ...]) -> Iterator[tuple[bytes, ItemRecord]]:
        """Every item of one namespace in key order, with its ``items`` key."""
        if self.items_db is None:
            return
        for key, raw in self._prefixed(self.items_db, keys.item_prefix(ns_id)):
            for ikey, fields in record_items(key, self._decode(key, raw)):
                yield ikey, parse_item(namespace, ikey, fields)

    def has_live(self, ns_id: int, now_ms: int) -> bool:
        """Whether the namespace holds an item that has not expired."""
        for _, rec in self.scan(ns_id, ()):
            if rec.expires_ms is None or rec.expires_ms > now_ms:
                return True
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
            out.append(self._vector(bytes(key), cur.value()))
            ok = cur.next()
        return out

    def namespace_vectors(self, ns_id: int) -> Iterator[tuple[bytes, VectorRecord]]:
        """Every vector record of one namespace with its item's key, in key order.

        One cursor pass per namespace rather than one cursor per item (py-lmdb
        cursors are not free: ~25 us each, the bulk of a 10k-item ranking).
        """
        if self.vectors_db is None:
            return
        for key, raw in self._prefixed(self.vectors_db, keys.item_prefix(ns_id)):
            yield key[:-2], self._vector(key, raw)

    def _prefixed(self, db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of every record of ``db`` under ``prefix``, in key order (one cursor)."""
        cur = self.txn.cursor(db=db)
        ok = cur.set_range(prefix)
        while ok:
            key = bytes(cur.key())
            if not key.startswith(prefix):
                return
            yield key, cur.value()
            ok = cur.next()

    def _vector(self, key: bytes, raw: bytes) -> VectorRecord:
        """A vector record, CRC-checked over its key and shape-checked."""
        rec = self.codec.decode(raw, f"item_vectors {key.hex()}", key=key)
        if not (isinstance(rec, list) and len(rec) == 3):
            raise CorruptRecordError(f"item_vectors {key.hex()} is not a vector record")
        return VectorRecord(rec[0], rec[1], rec[2])

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
        per_ns: dict[int, int] = {}
        record_keys: list[bytes] = []  # every items key, in order
        damaged: set[bytes] = set()  # records that do not read: their items are unknown
        last = b""  # the greatest item key read so far
        cur = self.txn.cursor(db=self.items_db)
        ok = cur.first()
        while ok and len(out) < limit:
            key = bytes(cur.key())
            record_keys.append(key)
            try:
                (ns_id,), _ = keys.split_ids(key, 1)
                if ns_id not in known:
                    out.append(f"items {key.hex()}: namespace id {ns_id} is not in item_ns")
                found = [
                    (ikey, parse_item((), ikey, fields))
                    for ikey, fields in record_items(
                        key, self._decode(key, cur.value()), check=True
                    )
                ]
            except CorruptRecordError as exc:
                damaged.add(key)
                out.append(str(exc))
                ok = cur.next()
                continue
            if key <= last:
                out.append(f"items {key.hex()}: starts at or below an item of the record before")
            for ikey, rec in found:
                items.add(ikey)
                per_ns[ns_id] = per_ns.get(ns_id, 0) + 1
                if keys.item_key(ns_id, rec.key) != ikey:
                    out.append(f"items {ikey.hex()}: the record's key {rec.key!r:.60} differs")
                if rec.expires_ms is not None:
                    expiries.add(keys.item_ttl_key(rec.expires_ms, ikey))
                last = ikey
            ok = cur.next()

        def in_damaged(ikey: bytes) -> bool:
            """Whether ``ikey`` would live in a record that does not read (reported once)."""
            at = bisect.bisect_right(record_keys, ikey) - 1
            return (
                at >= 0
                and record_keys[at] in damaged
                and ikey.startswith(prefix_of(record_keys[at]))
            )

        cur = self.txn.cursor(db=self.ttl_db)
        ttl_keys = {bytes(k) for k, _ in cur} if cur.first() else set()
        for missing in sorted(expiries - ttl_keys)[: max(0, limit - len(out))]:
            out.append(f"item_ttl lacks the entry {missing.hex()} of its item")
        strays = sorted(k for k in ttl_keys - expiries if not in_damaged(k[8:]))
        for stray in strays[: max(0, limit - len(out))]:
            out.append(f"item_ttl {stray.hex()} has no item with that expiry")
        damaged_ns = {ns_of(k) for k in damaged if k and len(k) > k[0]}
        out.extend(self._count_problems(known, per_ns, ttl_keys, damaged_ns))
        cur = self.txn.cursor(db=self.vectors_db)
        ok = cur.first()
        while ok and len(out) < limit:
            key = bytes(cur.key())
            try:
                rec = self.codec.decode(cur.value(), f"item_vectors {key.hex()}", key=key)
                if not (isinstance(rec, list) and len(rec) == 3 and isinstance(rec[2], bytes)):
                    out.append(f"item_vectors {key.hex()} is not a vector record")
                elif len(rec[2]) % 4:
                    out.append(
                        f"item_vectors {key.hex()}: {len(rec[2])} bytes is no float32 vector"
                    )
                if key[:-2] not in items and not in_damaged(key[:-2]):
                    out.append(f"item_vectors {key.hex()} belongs to no item")
            except CorruptRecordError as exc:
                out.append(str(exc))
            ok = cur.next()
        return out[:limit]

    def _count_problems(
        self, known: set[int], per_ns: dict[int, int], ttl_keys: set[bytes], unread: set[int]
    ) -> list[str]:
        """Count records that disagree with the items (and a damaged change counter);
        the namespaces ``unread`` (a record did not read) are not counted."""
        out: list[str] = []
        try:
            self.change_state()
            counts = self.counts()
        except CorruptRecordError as exc:
            return [str(exc)]
        with_ttl: dict[int, int] = {}
        for key in ttl_keys:
            ns_id = ns_of(key[8:])
            with_ttl[ns_id] = with_ttl.get(ns_id, 0) + 1
        for ns_id, (n, n_ttl) in sorted(counts.items()):
            if ns_id not in known:
                out.append(f"item_ns counts of namespace id {ns_id}, which is not in item_ns")
            elif ns_id not in unread and (n, n_ttl) != (
                per_ns.get(ns_id, 0),
                with_ttl.get(ns_id, 0),
            ):
                out.append(
                    f"item_ns counts of namespace id {ns_id} say {n} items ({n_ttl} with a TTL); "
                    f"it holds {per_ns.get(ns_id, 0)} ({with_ttl.get(ns_id, 0)} with a TTL)"
                )
        return out

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
        #: What this op changed (None: nothing yet), for :meth:`VectorMatrix.apply`.
        self.changes: Changes | None = None
        #: The last :meth:`_item_key` (ns_id, key, items key).
        self._key_memo: tuple[int, str, bytes] | None = None
        #: The last :meth:`_around` (ikey, result), until the next ``items`` write.
        self._near: tuple[bytes, tuple[_Near, _Near]] | None = None
        #: The last record :meth:`_decode` decoded: (its bytes, the record).
        self._held: tuple[bytes, Any] | None = None
        #: Where the last :meth:`item_at` found (or would put) its item in a
        #: chunk: (ikey, the chunk's bytes, key suffix, position), for :meth:`_store`.
        self._slot: tuple[bytes, bytes, bytes, int] | None = None

    def _around(self, ikey: bytes) -> tuple[_Near, _Near]:
        # A put reads the old item, then writes its chunk: one lookup for both.
        near = self._near
        if near is not None and near[0] == ikey:
            return near[1]
        found = super()._around(ikey)
        self._near = (ikey, found)
        return found

    def _chunk_fields(self, ikey: bytes, key: bytes, raw: bytes, rec: Any) -> Any:
        # Remembers where the item is in its chunk (a put reads the old item,
        # then writes the chunk: see _store).
        suffix = ikey[len(prefix_of(ikey)) :]
        at, fields = locate(key, rec, suffix)
        self._slot = (ikey, raw, suffix, at)
        return fields

    def _decode(self, key: bytes, raw: bytes) -> Any:
        # ... and decodes the same bytes (the same object: _around's) for both.
        held = self._held
        if held is not None and held[0] is raw:
            return held[1]
        rec = super()._decode(key, raw)
        self._held = (raw, rec)
        return rec

    def touch(self) -> Changes:
        """Count this op as one memory change (the first call adds one to the counter)."""
        changes = self.changes
        if changes is None:
            before, after, raw = next_counter(self.txn.get(keys.ITEM_CHANGES, db=self.ns_db))
            self.txn.put(keys.ITEM_CHANGES, raw, db=self.ns_db)
            changes = self.changes = Changes(before, after)
        return changes

    def _count(self, ns_id: int, items: int, with_ttl: int) -> None:
        key = keys.item_count_key(ns_id)
        raw = self.txn.get(key, db=self.ns_db)
        if raw is None:
            return  # no counts for this namespace: they stay unknown (never half-right)
        self.txn.put(key, bump_counts(key, raw, items, with_ttl), db=self.ns_db)

    def intern_ns(self, namespace: tuple[str, ...]) -> int:
        """The id of ``namespace``, allocating one if it is new."""
        found = self.new_namespaces.get(namespace)
        if found is not None:
            return found
        found = self.ns_id(namespace)
        if found is not None:
            return found
        cur = self.txn.cursor(db=self.ns_db)
        # The last namespace record: the one before the change counter and counts.
        ok = cur.prev() if cur.set_range(keys.ITEM_CHANGES) else cur.last()
        last = cur.key() if ok else b""
        ns_id = keys.decode_item_ns_rev_key(last) + 1 if last[:1] == keys.ITEM_NS_REV else 1
        name_key = keys.item_ns_key(namespace)
        value = keys.u64(ns_id)
        if name_key[1] == 1:  # hashed: keep the full name to detect collisions
            value += ".".join(namespace).encode("utf-8")
        self.txn.put(name_key, value, db=self.ns_db)
        rev_key = keys.item_ns_rev_key(ns_id)
        self.txn.put(rev_key, self.codec.encode(list(namespace), key=rev_key), db=self.ns_db)
        self.new_namespaces[namespace] = ns_id
        self.txn.put(keys.item_count_key(ns_id), encode_counts(ns_id, 0, 0), db=self.ns_db)
        return ns_id

    def _item_key(self, ns_id: int, key: str) -> bytes:
        # A put reads the old item, then writes it: one key encoding for both.
        memo = self._key_memo
        if memo is not None and memo[0] == ns_id and memo[1] == key:
            return memo[2]
        ikey = keys.item_key(ns_id, key)
        self._key_memo = (ns_id, key, ikey)
        return ikey

    def put_item(
        self, ns_id: int, rec: ItemRecord, old: ItemRecord | None, ikey: bytes | None = None
    ) -> bytes:
        """Write an item (replacing ``old``, its TTL entry too); return its key
        (``ikey``, if the caller has it: ``keys.item_key(ns_id, rec.key)``)."""
        if ikey is None:
            ikey = self._item_key(ns_id, rec.key)
        changes = self.touch()
        with_ttl = (rec.expires_ms is not None) - (old is not None and old.expires_ms is not None)
        if old is None or with_ttl:
            self._count(ns_id, old is None, with_ttl)
        if old is not None and old.expires_ms is not None:
            self.txn.delete(keys.item_ttl_key(old.expires_ms, ikey), db=self.ttl_db)
        self._store(ikey, item_fields(rec, ikey))
        changes.items[ikey] = rec
        if rec.expires_ms is not None:
            self.txn.put(keys.item_ttl_key(rec.expires_ms, ikey), b"", db=self.ttl_db)
        return ikey

    def _store(self, ikey: bytes, fields: list[Any]) -> None:
        """Put one item's fields into the chunk that holds ``ikey`` (see
        :class:`Chunk`): the record at or below it if that is a chunk; else the
        next chunk of the namespace, re-keyed down to ``ikey``; else a new chunk
        at ``ikey`` (which replaces a format 4/5 record of this item there)."""
        holder, after = self._around(ikey)
        self._near = None
        slot, self._slot = self._slot, None
        if holder is not None:
            key, raw = holder
            rec = self._decode(key, raw)
            if slot is not None and slot[0] == ikey and slot[1] is raw:
                # The common case: into the chunk item_at found it in (or its place).
                with_item(key, rec, slot[2], fields, slot[3]).write(
                    self.txn, self.items_db, self.codec
                )
                return
            if is_chunk(rec):
                with_item(key, rec, ikey[len(prefix_of(ikey)) :], fields).write(
                    self.txn, self.items_db, self.codec
                )
                return
        chunk: Chunk | None = None
        if after is not None:
            key, raw = after
            rec = self._decode(key, raw)
            if is_chunk(rec):
                chunk = Chunk.of(key, rec)
                self.txn.delete(key, db=self.items_db)
                chunk.key = ikey
        if chunk is None:
            chunk = Chunk(ikey, [], [])
        chunk.put(ikey[len(prefix_of(ikey)) :], fields)
        chunk.write(self.txn, self.items_db, self.codec)

    def _remove(self, ikey: bytes) -> None:
        """Take the item at ``ikey`` out of its record (a chunk left empty is deleted)."""
        holder, _ = self._around(ikey)
        self._near = None
        if holder is None:
            return
        key, raw = holder
        rec = self._decode(key, raw)
        if not is_chunk(rec):
            if key == ikey:
                self.txn.delete(key, db=self.items_db)
            return
        chunk = Chunk.of(key, rec)
        if not chunk.remove(ikey[len(prefix_of(ikey)) :]):
            return
        if len(chunk):
            chunk.write(self.txn, self.items_db, self.codec)
        else:
            self.txn.delete(key, db=self.items_db)

    def delete_item(self, ns_id: int, old: ItemRecord) -> None:
        """Delete an item, its vectors and its TTL entry."""
        ikey = self._item_key(ns_id, old.key)
        self.touch().items[ikey] = None
        self._count(ns_id, -1, -(old.expires_ms is not None))
        self._remove(ikey)
        if old.expires_ms is not None:
            self.txn.delete(keys.item_ttl_key(old.expires_ms, ikey), db=self.ttl_db)
        self.set_vectors(ikey, [])

    def set_vectors(self, item: bytes, records: list[VectorRecord]) -> None:
        """Replace every vector record of an item (none: drop them all)."""
        self.touch().vectors[item] = [rec.vector for rec in records]
        cur = self.txn.cursor(db=self.vectors_db)
        ok = cur.set_range(item)
        while ok:
            key = cur.key()
            if not (key.startswith(item) and len(key) == len(item) + 2):
                break
            ok = cur.delete()
        for ordinal, rec in enumerate(records):
            vkey = keys.item_vector_key(item, ordinal)
            self.txn.put(
                vkey, _plain_record([rec.path, rec.digest, rec.vector], vkey), db=self.vectors_db
            )

    def sweep(self, now_ms: int, limit: int = SWEEP_CHUNK) -> tuple[int, bool]:
        """Delete up to ``limit`` expired items; return (deleted, more may remain)."""
        found = self.expired(now_ms, limit)
        deleted = 0
        for ttl_key in found:
            expires, ikey = keys.decode_item_ttl_key(ttl_key)
            self.txn.delete(ttl_key, db=self.ttl_db)
            rec = self.item_at(ikey, ())
            if rec is None or rec.expires_ms != expires:
                continue  # gone, or refreshed meanwhile: a newer entry carries it
            self._remove(ikey)
            self.touch().items[ikey] = None
            self._count(ns_of(ikey), -1, -1)
            self.set_vectors(ikey, [])
            deleted += 1
        return deleted, len(found) == limit


class VectorMatrix:
    """Every stored vector of one size, in RAM: the float32 matrix exact search scans.

    Loaded from ``item_vectors`` by the first query search of the process, then
    kept current by :meth:`apply` after each of this process's commits. Each
    state is tagged with the change counter it reflects; a search whose
    snapshot carries another counter (a write by another process, or an import)
    reloads it, so results always equal brute force over the snapshot's vectors.
    Hold :attr:`lock` around :meth:`current` and every use of the arrays.
    """

    def __init__(self, dims: int) -> None:
        self.lock = threading.Lock()
        self.dims = dims
        #: The snapshot the arrays reflect (see MemoryReader.change_state); None: not loaded.
        self.state: tuple[int, int] | None = None
        self.rows: Any = None  # (capacity, dims) float32
        self.norms: Any = None  # (capacity,) float32, 0 for free rows
        self.ns: Any = None  # (capacity,) int64 namespace id, -1 for free rows
        #: Row -> the ``items`` key it belongs to (b"" for free rows).
        self.keys: list[bytes] = []
        self.by_item: dict[bytes, list[int]] = {}
        self.size = 0  # rows in use or freed (the high-water mark)
        self._free: list[int] = []
        self._pending: dict[int, Changes] = {}

    def current(self, reader: MemoryReader, *, load: bool = True) -> bool:
        """Bring the matrix to the reader's snapshot; False where it cannot (then
        rank from LMDB): the matrix is ahead of the snapshot, or ``load`` is
        False (a write transaction: it may see changes that never commit)."""
        want = reader.change_state()
        if self.state == want:
            return True
        if not load or (
            self.state is not None and self.state[0] == want[0] == 0 and self.state[1] > want[1]
        ):
            return False
        self._load(reader, want)
        return True

    def _load(self, reader: MemoryReader, state: tuple[int, int]) -> None:
        import numpy as np

        width = 4 * self.dims
        item_keys: list[bytes] = []
        blobs: list[bytes] = []
        if reader.vectors_db is not None:
            decode = reader.codec.decode
            for key, raw in reader.txn.cursor(db=reader.vectors_db).iternext():
                try:
                    rec = decode(raw, "item_vectors", key=bytes(key))
                except CorruptRecordError:  # raises again, naming the key
                    rec = decode(raw, f"item_vectors {bytes(key).hex()}", key=bytes(key))
                if not (isinstance(rec, list) and len(rec) == 3 and isinstance(rec[2], bytes)):
                    raise CorruptRecordError(
                        f"item_vectors {bytes(key).hex()} is not a vector record"
                    )
                if len(rec[2]) == width:  # vectors of another dims setting are skipped
                    item_keys.append(bytes(key[:-2]))
                    blobs.append(rec[2])
        n = len(blobs)
        capacity = max(64, n + n // 4)
        self.rows = np.zeros((capacity, self.dims), dtype=np.float32)
        if n:
            self.rows[:n] = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(n, self.dims)
        self.norms = np.zeros(capacity, dtype=np.float32)
        self.norms[:n] = row_norms(self.rows[:n])
        self.ns = np.full(capacity, -1, dtype=np.int64)
        self.ns[:n] = [ns_of(k) for k in item_keys]
        self.keys = item_keys
        self.by_item = {}
        for row, key in enumerate(item_keys):
            self.by_item.setdefault(key, []).append(row)
        self.size = n
        self._free = []
        self.state = state
        self._pending = {k: v for k, v in self._pending.items() if k >= state[1]}
        self._catch_up()

    def apply(self, changes: Changes | None) -> None:
        """Apply one committed op's changes (in counter order; out-of-order ones wait)."""
        if changes is None:
            return
        with self.lock:
            if self.state is None:
                return
            if changes.before is None or self.state[0] != 0:
                self.state = None  # no counter to chain on: reload at the next search
                self._pending.clear()
                return
            if changes.before < self.state[1]:
                return  # a reload already read it
            self._pending[changes.before] = changes
            self._catch_up()
            if len(self._pending) > 256:  # a gap another process made: reload instead
                self.state = None
                self._pending.clear()

    def _catch_up(self) -> None:
        while self.state is not None and self.state[0] == 0 and self.state[1] in self._pending:
            changes = self._pending.pop(self.state[1])
            self._replace(changes.vectors)
            self.state = (0, changes.after)

    def _replace(self, vectors: dict[bytes, list[bytes]]) -> None:
        import numpy as np

        width = 4 * self.dims
        for ikey, blobs in vectors.items():
            for row in self.by_item.pop(ikey, ()):
                self.ns[row] = -1
                self.norms[row] = 0.0
                self.keys[row] = b""
                self._free.append(row)
            rows: list[int] = []
            for blob in blobs:
                if len(blob) != width:
                    continue
                if self._free:
                    row = self._free.pop()
                else:
                    row = self.size
                    if row == len(self.rows):
                        self._grow()
                    self.size += 1
                    self.keys.append(b"")
                self.rows[row] = np.frombuffer(blob, dtype=np.float32)
                self.norms[row] = row_norms(self.rows[row : row + 1])[0]
                self.ns[row] = ns_of(ikey)
                self.keys[row] = ikey
                rows.append(row)
            if rows:
                self.by_item[ikey] = rows

    def _grow(self) -> None:
        import numpy as np

        capacity = 2 * len(self.rows)
        rows = np.zeros((capacity, self.dims), dtype=np.float32)
        rows[: self.size] = self.rows[: self.size]
        norms = np.zeros(capacity, dtype=np.float32)
        norms[: self.size] = self.norms[: self.size]
        ns = np.full(capacity, -1, dtype=np.int64)
        ns[: self.size] = self.ns[: self.size]
        self.rows, self.norms, self.ns = rows, norms, ns

    def scores(self, query: Sequence[float], rows: Any = None, ns_ids: Sequence[int] = ()) -> Any:
        """Cosine of ``query`` with every row (``-inf`` for free rows and rows
        outside ``rows``, a boolean mask, or outside the namespaces ``ns_ids``
        when given), by :func:`memory_core.cosines` as a search inside a write ranks."""
        import numpy as np

        size = self.size
        q = np.asarray(query, dtype=np.float32)
        out = cosines(q, self.rows[:size], self.norms[:size])
        keep = self.ns[:size] >= 0
        if rows is not None:
            keep &= rows
        if ns_ids:
            keep &= np.isin(self.ns[:size], np.asarray(ns_ids, dtype=np.int64))
        out[~keep] = -np.inf
        return out


def vector_matrix(store: Environment, dims: int) -> VectorMatrix:
    """The in-RAM matrix of an open environment's vectors of size ``dims``."""
    found = directory(store)
    with _DIRECTORIES_LOCK:
        if dims not in found.matrices:
            found.matrices[dims] = VectorMatrix(dims)
        return found.matrices[dims]


def apply_changes(found: NamespaceDirectory, changes: Changes | None) -> None:
    """Bring the caches of an environment (its :func:`directory`) past one committed
    op: every vector matrix (see :meth:`VectorMatrix.apply`), the get cache and
    the item cache."""
    if changes is None:
        return
    if found.matrices:
        with _DIRECTORIES_LOCK:
            matrices = list(found.matrices.values())
        for matrix in matrices:
            matrix.apply(changes)
    found.gets.after(changes)
    cache = found.cache.after(changes)
    if cache is not None:
        found.cache = cache
