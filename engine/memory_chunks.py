"""The memory store's item records: one item's fields, and the chunks that pack a
namespace's items into few records (format 6).

Pure record logic (no LMDB import, like :mod:`deltalog.engine.migrations`):
:mod:`deltalog.engine.memory_io` reads and writes these records inside its
transactions, and the 5 -> 6 migration packs older stores with
:func:`pack_items` on the raw transaction it is given.

Since format 6 the ``items`` database holds the items of a namespace packed
into chunk records rather than one record per item: with ~50 bytes per item,
LMDB's per-entry overhead (node header, page slot, key) and its half-full
pages after middle splits cost more than the item itself, and one item alone
is too short to compress. A chunk is keyed by an ``items`` key at or below
every item it holds and holds the items up to the next record's key: the
item at ``ikey`` lives in the record with the greatest key at or below
``ikey`` in its namespace. Records of format 4 and 5 (one item each, the
record's key being the item's) keep reading: a writable open packs them
(the 5 -> 6 migration), a read-only one reads them as they are, and the rules
hold for a mix, which a record left by the migration because it was damaged
can make.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Final

import ormsgpack
from deltalog.engine import keys
from deltalog.engine.errors import CorruptRecordError, DeltaLogError
from deltalog.engine.memory_core import ItemRecord

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_COMPRESS_FROM",
    "DECODED_ITEM_BYTES",
    "DECODED_MAX",
    "Chunk",
    "decoded",
    "is_chunk",
    "item_fields",
    "locate",
    "lookup",
    "pack_items",
    "parse_item",
    "prefix_of",
    "record_items",
    "remember",
    "with_item",
]


def item_fields(rec: ItemRecord, ikey: bytes) -> list[Any]:
    """The format 5 item record: ``[value, created_us, updated_us, ttl_min,
    expires_ms, key]`` with ``updated_us`` nil when it equals ``created_us``,
    ``key`` nil unless the ``items`` key holds only its hash, and trailing nils
    left out (a first put without TTL is ``[value, created_us]``)."""
    # Each shape written out: popping the trailing nils in a loop took twice
    # as many steps (every put packs one).
    created = rec.created_us
    updated = None if rec.updated_us == created else rec.updated_us
    if ikey[1 + ikey[0]] != 0:  # hashed
        return [rec.value, created, updated, rec.ttl_minutes, rec.expires_ms, rec.key]
    if rec.expires_ms is not None:
        return [rec.value, created, updated, rec.ttl_minutes, rec.expires_ms]
    if rec.ttl_minutes is not None:
        return [rec.value, created, updated, rec.ttl_minutes]
    if updated is not None:
        return [rec.value, created, updated]
    return [rec.value, created]


#: A chunk whose msgpack body passes this many bytes is split in two. A read
#: of one item decompresses its chunk (~2 us at this size) and unpacks only its
#: own fields; larger chunks compress a little better and cost more per put.
CHUNK_BYTES: Final = 1024
#: Chunks compress from this many bytes (records otherwise from the codec's
#: ``compress_threshold``, 512): their items repeat the same field names.
CHUNK_COMPRESS_FROM: Final = 96


def is_chunk(rec: Any) -> bool:
    """Whether a decoded ``items`` record is a chunk (format 6),
    ``[[key suffix, ...], [packed item fields, ...]]``; a format 5 record starts
    with the value (a map), a format 4 one with the key (a string)."""
    # A list as decoded, or the tuples of a chunk remembered in _DECODED.
    return type(rec) in _SEQ and len(rec) == 2 and type(rec[0]) in _SEQ


_SEQ: Final = (list, tuple)


def prefix_of(key: bytes) -> bytes:
    """The namespace part (a ``uid``) of an ``items`` key."""
    return key[: 1 + key[0]]


class Chunk:
    """One chunk: its items' key suffixes (the ``items`` key after the namespace
    part, strictly increasing) and each item's :func:`item_fields`, packed with
    msgpack on their own so a read unpacks only the item it wants."""

    __slots__ = ("blobs", "key", "suffixes")

    def __init__(self, key: bytes, suffixes: list[bytes], blobs: list[bytes]) -> None:
        self.key = key
        self.suffixes = suffixes
        self.blobs = blobs

    @classmethod
    def of(cls, key: bytes, rec: Any) -> Chunk:
        """The chunk record ``rec`` stored at ``key`` (copied: ``rec`` is not changed).

        Checks only what costs no loop; :meth:`check` checks every item, for
        verify and the migration (a read of a chunk whose CRC holds but whose
        items are out of order misses items; it never returns another's)."""
        suffixes, blobs = _checked(key, rec)
        return cls(key, list(suffixes), list(blobs))

    def check(self) -> Chunk:
        """Raise CorruptRecordError unless every suffix is bytes, in strictly
        increasing order from the record's key, and every item is bytes."""
        last = self.key[len(prefix_of(self.key)) :]
        for i, (suffix, blob) in enumerate(zip(self.suffixes, self.blobs, strict=True)):
            if not (
                isinstance(suffix, bytes)
                and isinstance(blob, bytes)
                and (suffix > last if i else suffix >= last)
            ):
                raise CorruptRecordError(
                    f"items {self.key.hex()}: item {i} is out of order or not an item; "
                    "run `deltalog verify`"
                )
            last = suffix
        return self

    def __len__(self) -> int:
        return len(self.suffixes)

    def find(self, suffix: bytes) -> int:
        """The position of ``suffix``, or where it would go (see :meth:`has`)."""
        return _position(self.key, self.suffixes, self.blobs, suffix)

    def has(self, at: int, suffix: bytes) -> bool:
        return at < len(self.suffixes) and self.suffixes[at] == suffix

    def fields(self, at: int) -> Any:
        """The stored fields of the item at position ``at``."""
        return _unpack(self.key, at, self.blobs[at])

    def items(self) -> list[tuple[bytes, Any]]:
        """(``items`` key, stored fields) of every item, in key order."""
        prefix = prefix_of(self.key)
        try:
            return [(prefix + s, self.fields(i)) for i, s in enumerate(self.suffixes)]
        except TypeError:  # a suffix that is no bytes
            self.check()
            raise

    def put(self, suffix: bytes, fields: list[Any]) -> None:
        at = self.find(suffix)
        blob = ormsgpack.packb(fields)
        if self.has(at, suffix):
            self.blobs[at] = blob
        else:
            self.suffixes.insert(at, suffix)
            self.blobs.insert(at, blob)

    def remove(self, suffix: bytes) -> bool:
        """Take the item out; False if the chunk does not hold it."""
        at = self.find(suffix)
        if not self.has(at, suffix):
            return False
        del self.suffixes[at], self.blobs[at]
        return True

    def write(self, txn: Any, db: Any, codec: Any) -> None:
        """Store the chunk (non-empty) at its key, split into halves (the right one
        keyed by its first item) while a body passes :data:`CHUNK_BYTES`. The
        chunk must not change after this (:data:`_DECODED` holds it)."""
        body = ormsgpack.packb([self.suffixes, self.blobs])
        if len(body) > CHUNK_BYTES and len(self) > 1:
            half = len(self) // 2
            right_key = prefix_of(self.key) + self.suffixes[half]
            Chunk(self.key, self.suffixes[:half], self.blobs[:half]).write(txn, db, codec)
            Chunk(right_key, self.suffixes[half:], self.blobs[half:]).write(txn, db, codec)
            return
        value = codec.encode_fast(body, self.key, CHUNK_COMPRESS_FROM)
        txn.put(self.key, value, db=db)
        if len(body) <= DECODED_ITEM_BYTES:  # the items are smaller than the body
            _hold(self.key, value, (tuple(self.suffixes), tuple(self.blobs)))


#: Chunks decoded or written lately: (``items`` key, record bytes) -> the decoded
#: record (never changed: :meth:`Chunk.of` copies it). Keyed by the bytes, so
#: an entry can never be stale, in any store: the same key and bytes decode the
#: same (chunks are never framed with a trained dictionary). A put reads the
#: old item and then rewrites its chunk, and the next put into that chunk reads
#: it again: with this each decodes it at most once (8 writer threads putting
#: into their own namespaces: ~40 us less per put here).
_DECODED: dict[tuple[bytes, bytes], Any] = {}
#: Entries :data:`_DECODED` holds at most (then it starts again): ~5 MB of full chunks.
DECODED_MAX: Final = 1024


#: A chunk whose items pass this many bytes is not held by :data:`_DECODED`: only
#: a chunk of one large item does (the rest split at :data:`CHUNK_BYTES`), and
#: 1,024 of those could hold gigabytes.
DECODED_ITEM_BYTES: Final = 2 * CHUNK_BYTES


def remember(key: bytes, raw: bytes, rec: Any) -> None:
    """Hold the decoded chunk ``rec`` of ``raw`` at ``key``, as tuples: tuples of
    bytes leave the cyclic GC's lists, so the cache does not make the
    collections that every put's allocations trigger walk it."""
    try:
        if len(raw) > DECODED_ITEM_BYTES or sum(map(len, rec[1])) > DECODED_ITEM_BYTES:
            return
        held = (tuple(rec[0]), tuple(rec[1]))
    except TypeError:  # not a chunk after all: its reader raises CorruptRecordError
        return
    _hold(key, raw, held)


def _hold(key: bytes, raw: bytes, held: tuple[tuple[Any, ...], tuple[Any, ...]]) -> None:
    if len(_DECODED) >= DECODED_MAX:
        _DECODED.clear()
    _DECODED[(key, raw)] = held


def _checked(key: bytes, rec: Any) -> tuple[Any, Any]:
    """The (suffixes, items) of a chunk record, checked as far as costs no loop."""
    suffixes, blobs = rec
    if not (type(blobs) in _SEQ and len(suffixes) == len(blobs) > 0):
        raise CorruptRecordError(
            f"items {key.hex()} is not a chunk of items; run `deltalog verify`"
        )
    return suffixes, blobs


def with_item(
    key: bytes, rec: Any, suffix: bytes, fields: list[Any], at: int | None = None
) -> Chunk:
    """The chunk record ``rec`` at ``key`` with the item ``suffix`` put (its stored
    ``fields``), as a new :class:`Chunk` (``rec`` is not changed): what
    :meth:`Chunk.of` then :meth:`Chunk.put` make, in one call. ``at``: where
    :func:`locate` found ``suffix`` in ``rec`` (it checked the record)."""
    suffixes, blobs = _checked(key, rec) if at is None else rec
    if at is None:
        at = _position(key, suffixes, blobs, suffix)
    suffixes, blobs = list(suffixes), list(blobs)
    blob = ormsgpack.packb(fields)
    if at < len(suffixes) and suffixes[at] == suffix:
        blobs[at] = blob
    else:
        suffixes.insert(at, suffix)
        blobs.insert(at, blob)
    return Chunk(key, suffixes, blobs)


def lookup(key: bytes, rec: Any, suffix: bytes) -> Any:
    """The stored fields of the item with key suffix ``suffix`` in the chunk ``rec``
    at ``key``, or None: :meth:`Chunk.find` and :meth:`Chunk.fields` without
    copying the chunk (a read)."""
    return locate(key, rec, suffix)[1]


def locate(key: bytes, rec: Any, suffix: bytes) -> tuple[int, Any]:
    """Where the item with key suffix ``suffix`` is, or would go, in the chunk
    ``rec`` at ``key``, and its stored fields (None: not there)."""
    suffixes, blobs = _checked(key, rec)
    at = _position(key, suffixes, blobs, suffix)
    if at == len(suffixes) or suffixes[at] != suffix:
        return at, None
    return at, _unpack(key, at, blobs[at])


def _position(key: bytes, suffixes: Sequence[Any], blobs: Sequence[Any], suffix: bytes) -> int:
    """Where ``suffix`` is, or would go, among a chunk's sorted ``suffixes``."""
    try:
        return bisect.bisect_left(suffixes, suffix)
    except TypeError:  # a suffix that is no bytes: check() names the record
        Chunk(key, list(suffixes), list(blobs)).check()
        raise


def _unpack(key: bytes, at: int, blob: Any) -> Any:
    try:
        return ormsgpack.unpackb(blob)
    except (ormsgpack.MsgpackDecodeError, TypeError):
        raise CorruptRecordError(
            f"items {key.hex()}: item {at} does not decode; run `deltalog verify`"
        ) from None


def decoded(key: bytes, raw: bytes) -> Any:
    """The decoded chunk :data:`_DECODED` holds for ``raw`` at ``key``, or None."""
    return _DECODED.get((key, raw))


def parse_item(
    namespace: tuple[str, ...], key: bytes, rec: Any, name_hint: str | None = None
) -> ItemRecord:
    """The item of one ``items`` record of format 4 or 5, or of one chunk entry
    (its stored fields; ``key`` is then the item's ``items`` key)."""
    try:
        if isinstance(rec, list) and rec and isinstance(rec[0], dict):  # format 5, chunks
            if not 2 <= len(rec) <= 6:
                raise ValueError(f"{len(rec)} fields")
            value, created, updated, ttl, expires, name = rec + [None] * (6 - len(rec))
            if updated is None:
                updated = created
            if name is None:  # the key spells it (the caller may know it already)
                name = name_hint if name_hint is not None else _inline_key(bytes(key))
        else:  # format 4: [key, value, created_us, updated_us, ttl_min, expires_ms]
            name, value, created, updated, ttl, expires = rec
        if not isinstance(name, str) or not isinstance(value, dict):
            raise TypeError("bad field types")
    except (TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"items {key.hex()} is not an item record ({exc}); run `deltalog verify`"
        ) from None
    return ItemRecord(namespace, name, value, created, updated, ttl, expires)


def record_items(key: bytes, rec: Any, *, check: bool = False) -> list[tuple[bytes, Any]]:
    """(item key, item fields) of every item one decoded ``items`` record holds
    (``check``: a chunk's order too, see :meth:`Chunk.check`)."""
    if not is_chunk(rec):
        return [(key, rec)]
    chunk = Chunk.of(key, rec)
    return (chunk.check() if check else chunk).items()


def pack_items(txn: Any, db: Any, codec: Any) -> None:
    """Format 6: pack every namespace's one-item records (format 4 and 5) into chunks.

    A record that does not decode is left where it is (reads and verify
    report it, so damage cannot block the upgrade); the chunks around it end
    before it and start after it, so every item still lives in the record with
    the greatest key at or below its own.
    """
    rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db).iternext()]
    suffixes: list[bytes] = []  # the items of the run of records being packed
    blobs: list[bytes] = []
    run_keys: list[bytes] = []  # the records they come from

    def flush() -> None:
        if run_keys:
            for old in run_keys:
                txn.delete(old, db=db)
            first = prefix_of(run_keys[0]) + suffixes[0]
            Chunk(first, suffixes[:], blobs[:]).write(txn, db, codec)
        suffixes.clear()
        blobs.clear()
        run_keys.clear()

    for key, raw in rows:
        if run_keys and prefix_of(key) != prefix_of(run_keys[0]):
            flush()
        try:
            rec = codec.decode(raw, f"items {key.hex()}", key=key)
            found = [
                (ikey, parse_item((), ikey, f)) for ikey, f in record_items(key, rec, check=True)
            ]
        except CorruptRecordError:
            flush()
            continue
        prefix = prefix_of(key)
        for ikey, item in found:
            suffixes.append(ikey[len(prefix) :])
            blobs.append(ormsgpack.packb(item_fields(item, ikey)))
        run_keys.append(key)
    flush()


def _inline_key(ikey: bytes) -> str:
    """The item key an ``items`` key spells out (format 5 records omit it)."""
    pos = 1 + ikey[0]
    if ikey[pos : pos + 1] != b"\x00":
        raise ValueError("a hashed key whose record lacks the key")
    try:
        name, end = keys.decode_str(ikey, pos + 1)
    except DeltaLogError as exc:
        raise ValueError(str(exc)) from None
    if end != len(ikey):
        raise ValueError("trailing bytes after the key")
    return name
