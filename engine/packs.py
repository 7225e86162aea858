"""Turn packs (format 14): a run of a thread's checkpoint and write records in one record.

A chat turn puts three checkpoint records and two or three writes, each its
own LMDB entry (key, node header) compressed alone; a pack holds such a run
as one record, compressed as one frame (docs/design.md, "Turn packs"). The
transactions (:mod:`~deltalog.engine.txn_base`) write packs once the records
are no longer the head of their thread and read them through a merged view
(:mod:`~deltalog.engine.merged`); this module is the pack's bytes only.

A pack lives in the ``packs`` database under a sequence number (u64 BE,
appended: its pages fill whatever order threads write in), and
``pack_index`` maps the pack's greatest entry key to that number. The
record is framed by the store's codec over its index key (so a number that
points at another pack fails the CRC) and its body is the msgpack list
``[[[suffix, compact, body], …], [[suffix, channel, body], …]]``: the
checkpoint entries, then the write entries, each in key order, ``suffix``
the record's key after the thread and namespace uids of the index key,
``body`` the record's body as :meth:`~deltalog.engine.codec.RecordCodec.body`
gives it (a checkpoint's compact form when ``compact``), ``channel`` the
write's channel uid bytes. An entry reads as the plain record it was
(:func:`~deltalog.engine.codec.frame_body`: tag, body and a CRC over its key
and channel, computed again), so every reader decodes it as before.

A record stored larger than :data:`PACK_RECORD_MAX` (a large message) does not
go into the frame (format 16): its entry's ``body`` is the int length of the
record as it was stored, and the records themselves, concatenated in entry
order, follow the pack in the log as chunks keyed by the pack's number and a
u16 chunk number from 1 (:func:`chunk_key`), each cut to fill the log's
leaf pages (:func:`chunk_sizes`); the body's list then has a third item,
the CRC-32 of those bytes. Such an entry reads as the stored record
itself, checked by its own CRC; LMDB had kept it alone on a half-empty leaf
page of ``writes``, or on an overflow page, once the small records around it
were packed.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import ormsgpack
from deltalog.engine import keys
from deltalog.engine.codec import COMPACT, KEYED, PAGE_HEADER, RecordCodec, frame_body, leaf_max
from deltalog.engine.errors import CorruptRecordError

Entry = tuple[bytes, bytes]

#: How many of a namespace's newest checkpoints stay plain records: the head a
#: turn reads (the latest checkpoint, its parent, their writes) is never packed.
PACK_KEEP: Final = 4
#: The most checkpoints a pack holds (five chat turns of three); a put packs when
#: this many wait behind the newest :data:`PACK_KEEP`, or fewer whose pack would
#: fill the page space it is cut for (:func:`pack_cut`).
PACK_MAX: Final = 15
#: A pack's size over the stored bytes of the records it packs, and over those of
#: its checkpoint records alone (whether enough wait is judged from those), before
#: the store has packed any; afterwards the last pack's own ratios guide the next.
PACK_RATIO: Final = 0.8
PACK_CHECKPOINT_RATIO: Final = 2.0
#: A pack's size compressed at the codec's dense level over its size at level 3
#: (the cut is tried at level 3), before the store has packed any.
PACK_DENSE_RATIO: Final = 0.87
#: A pack of fewer checkpoint bytes than this (its records mostly left plain)
#: leaves the ratio as it was.
RATIO_MIN_BYTES: Final = 256
#: A stored record larger than this is not compressed into the pack's frame: a
#: large message is already compressed on its own, and packs of several KB would
#: take LMDB overflow pages (docs/benchmarks.md, stop 43). Up to
#: :data:`OUTSIDE_MAX` it follows the pack in chunks (format 16), larger it stays
#: a plain record inside the pack's range.
PACK_RECORD_MAX: Final = 1024
#: The largest stored record a pack carries in chunks: one larger takes enough
#: overflow pages that the part of a page it leaves empty is under an eighth.
OUTSIDE_MAX: Final = 16 * 1024
#: A chunk's key: the pack's number, then the chunk's (u16 BE, from 1).
CHUNK_KEY_SIZE: Final = 8 + 2
#: A chunk goes into the free bytes of the log's last leaf page when it can hold
#: this many of the records' bytes there; else it starts a page.
CHUNK_MIN: Final = 256


@dataclass(frozen=True)
class Pack:
    """A decoded pack: its entries as the plain records they read as, in key order
    (each an uncompressed frame: its body is the frame without its tag byte and CRC,
    :meth:`checkpoint_bodies` and :meth:`write_bodies`)."""

    checkpoints: list[Entry]
    writes: list[Entry]
    stored: frozenset[bytes] = frozenset()
    """Keys of the entries carried in chunks: they read as the record as it was stored."""

    def checkpoint_bodies(self) -> list[tuple[bytes, bytes, bool]]:
        """``(key, body, compact)`` of each checkpoint entry framed by the pack."""
        return [
            (key, raw[1:-4], bool(raw[0] & COMPACT))
            for key, raw in self.checkpoints
            if key not in self.stored
        ]

    def write_bodies(self) -> list[tuple[bytes, bytes, bytes]]:
        """``(key, body, channel)`` of each write entry framed by the pack."""
        out = []
        for key, raw in self.writes:
            if key not in self.stored:
                channel = raw[: 1 + raw[0]]
                out.append((key, raw[len(channel) + 1 : -4], channel))
        return out

    def stored_records(self) -> tuple[list[Entry], list[Entry]]:
        """``(checkpoints, writes)``: ``(key, value)`` of each entry carried in
        chunks, the value as the plain record was stored (a write's with its
        channel uid)."""
        return (
            [(key, raw) for key, raw in self.checkpoints if key in self.stored],
            [(key, raw) for key, raw in self.writes if key in self.stored],
        )

    @property
    def least(self) -> bytes:
        """The smallest key the pack holds."""
        firsts = [entries[0][0] for entries in (self.checkpoints, self.writes) if entries]
        return min(firsts)


def prefix_of(key: bytes) -> bytes:
    """A record key's thread and namespace uids (each a length byte and the id)."""
    return key[: keys.split_ids(key, 2)[1]]


@dataclass(frozen=True)
class Stored:
    """A record a pack carries in chunks (:func:`outside`): as it was stored, a
    write's without its channel uid."""

    raw: bytes


def pack_body(
    checkpoints: Sequence[tuple[bytes, bytes | Stored, bool]],
    writes: Sequence[tuple[bytes, bytes | Stored, bytes]],
) -> tuple[bytes, bytes, bytes]:
    """``(index key, msgpack body, chunked bytes)`` of a pack of ``checkpoints``
    ``(key, body, compact)`` and ``writes`` ``(key, body, channel)``, each in key
    order, all under one thread and namespace. A :class:`Stored` body is entered
    as its length, its bytes appended to the chunked bytes."""
    index_key = max(entries[-1][0] for entries in (checkpoints, writes) if entries)
    plen = len(prefix_of(index_key))
    chunked: list[bytes] = []

    def row(rec: bytes | Stored) -> bytes | int:
        if isinstance(rec, Stored):
            chunked.append(rec.raw)
            return len(rec.raw)
        return rec

    rows: list[Any] = [
        [[key[plen:], compact, row(rec)] for key, rec, compact in checkpoints],
        [[key[plen:], channel, row(rec)] for key, rec, channel in writes],
    ]
    carried = b"".join(chunked)
    if chunked:
        # The chunks' CRC makes the pack's bytes differ whenever its chunks do: a
        # pack decoded once is kept by its bytes (TxnBase.pack).
        rows.append(zlib.crc32(carried))
    return index_key, ormsgpack.packb(rows), carried


def decode_pack(
    codec: RecordCodec,
    index_key: bytes,
    raw: bytes,
    where: str,
    chunked: Callable[[], bytes] = bytes,
) -> Pack:
    """The pack stored as ``raw`` under ``index_key``; ``chunked`` reads the bytes
    of its chunks, concatenated (called only when an entry is carried there).

    Raises:
        CorruptRecordError: The record fails its CRC, or its entries are not in
            key order, not under the index key's thread and namespace, or the
            greatest of them is not the index key, or its chunks do not hold
            the bytes its entries say.
    """
    found = codec.decode(raw, where, key=index_key)
    prefix = prefix_of(index_key)
    stored: set[bytes] = set()
    try:
        ckpt_rows, write_rows, *crc = found
        lengths = [b for rows in (ckpt_rows, write_rows) for _, _, b in rows if type(b) is int]
        if len(crc) != (1 if lengths else 0) or any(n < 1 for n in lengths):
            raise ValueError("its chunks' CRC is missing or out of place, or a length below 1")
        carried = chunked() if lengths else b""
        if sum(lengths) != len(carried):
            raise ValueError(f"its entries hold {sum(lengths)} bytes of chunks, not {len(carried)}")
        if lengths and zlib.crc32(carried) != crc[0]:
            raise ValueError("its chunks fail their CRC")
        at = 0

        def take(n: int) -> bytes:
            nonlocal at
            at += n
            return carried[at - n : at]

        checkpoints: list[Entry] = []
        for suffix, compact, body in ckpt_rows:
            key = prefix + suffix
            if type(body) is int:
                stored.add(key)
                checkpoints.append((key, take(body)))
            else:
                checkpoints.append((key, frame_body(body, key=key, compact=bool(compact))))
        writes: list[Entry] = []
        for suffix, channel, body in write_rows:
            key = prefix + suffix
            if len(channel) != 1 + channel[0]:
                raise ValueError(f"write {key.hex()} has no channel uid")
            if type(body) is int:
                stored.add(key)
                writes.append((key, channel + take(body)))
            else:
                writes.append((key, channel + frame_body(body, key=key, prefix=channel)))
    except (TypeError, ValueError, IndexError) as exc:
        raise CorruptRecordError(f"record {where} is not a pack ({exc})") from exc
    for entries in (checkpoints, writes):
        ordered = all(a[0] < b[0] for a, b in itertools.pairwise(entries))
        if not ordered or (entries and entries[-1][0] > index_key):
            raise CorruptRecordError(f"record {where}: its entries are out of order")
    if max((e[-1][0] for e in (checkpoints, writes) if e), default=b"") != index_key:
        raise CorruptRecordError(f"record {where}: its greatest entry is not its index key")
    return Pack(checkpoints, writes, frozenset(stored))


def packable(raw: bytes) -> bool:
    """Whether a plain record (a write's without its channel uid) may go into a
    pack: not larger than :data:`PACK_RECORD_MAX`. The one rule both the cut's
    estimate (:func:`pack_cut`) and :func:`body_of` apply."""
    return len(raw) <= PACK_RECORD_MAX


def outside(raw: bytes) -> bool:
    """Whether a plain record (a write's without its channel uid) that a pack's
    range holds but :func:`packable` refuses is carried in the pack's chunks:
    not larger than :data:`OUTSIDE_MAX`."""
    return PACK_RECORD_MAX < len(raw) <= OUTSIDE_MAX


def chunk_key(seq: bytes, number: int) -> bytes:
    """Key of chunk ``number`` (from 1) of the pack numbered ``seq``: after the
    pack's own key and before the next pack's."""
    return seq + number.to_bytes(CHUNK_KEY_SIZE - SEQ_SIZE, "big")


def chunk_sizes(total: int, tail_free: int, page_size: int) -> tuple[list[int], int]:
    """How to cut ``total`` bytes of chunks appended to the ``packs`` log whose
    last leaf page has ``tail_free`` bytes free: each chunk as large as the free
    bytes of its page take (at most the leaf limit of a chunk key; one that
    would hold fewer than :data:`CHUNK_MIN` starts a page). Returns the sizes
    and the free bytes left on the last page."""
    most = leaf_max(CHUNK_KEY_SIZE, page_size)
    fresh = page_size - PAGE_HEADER
    sizes: list[int] = []
    while total > 0:
        room = min(most, (tail_free - 2 - 8 - CHUNK_KEY_SIZE) & ~1)
        if room < min(CHUNK_MIN, total):
            tail_free, room = fresh, most
        size = min(total, room)
        sizes.append(size)
        tail_free -= leaf_slot(size, CHUNK_KEY_SIZE)
        total -= size
    if len(sizes) >= 1 << 8 * (CHUNK_KEY_SIZE - SEQ_SIZE):
        raise ValueError(f"{len(sizes)} chunks are more than a chunk key numbers")
    return sizes, tail_free


def cut_size(raw: bytes) -> int:
    """A plain checkpoint record's stored bytes as the cut counts them
    (:func:`pack_due`, :func:`pack_cut`): 0 for one that is not :func:`packable`."""
    return len(raw) if packable(raw) else 0


def body_of(codec: RecordCodec, key: bytes, raw: bytes, channel: bytes = b"") -> Any:
    """``(body, compact)`` of a plain record to pack (a write's ``raw`` without its
    ``channel`` uid), or None when it stays plain (a delta, or not
    :func:`packable`)."""
    if not packable(raw):
        return None
    body = codec.body(
        raw, f"{'writes' if channel else 'checkpoints'}/{key.hex()}", key=key, prefix=channel
    )
    if body is None:
        return None
    return body, bool(raw[0] & ~KEYED & COMPACT)


#: A pack's key in the ``packs`` log: a u64 sequence number.
SEQ_SIZE: Final = 8
#: A pack goes into the free bytes left on the log's last leaf page when they
#: are at least this many; fewer are left empty.
TAIL_MIN: Final = 512


def leaf_slot(size: int, key_size: int = SEQ_SIZE) -> int:
    """Leaf page bytes a pack of ``size`` bytes (or a chunk, under its
    ``key_size``) takes in the ``packs`` log: its node (header, key and value,
    even-aligned) and its index slot (``mdb_node_add``)."""
    return 2 + ((8 + key_size + size + 1) & ~1)


def pack_room(tail_free: int, page_size: int) -> int:
    """Leaf page bytes the next pack is cut to fill: the ``tail_free`` bytes left on
    the ``packs`` log's last leaf page when at least :data:`TAIL_MIN` (the log is
    appended to, so a pack that fits them lands there), else half a page (a
    pack at the leaf limit; two fill a page)."""
    leaf = leaf_slot(leaf_max(SEQ_SIZE, page_size))
    return min(tail_free, leaf) if tail_free >= TAIL_MIN else leaf


def pack_due(sizes: Sequence[int], ratio: float, room: int) -> bool:
    """Whether a put packs now: :data:`PACK_MAX` candidates wait, or a pack of all
    of them, estimated at ``ratio`` times the sum of ``sizes`` (stored bytes,
    oldest first), would take more than ``room`` leaf bytes (:func:`leaf_slot`)."""
    return len(sizes) >= PACK_MAX or (bool(sizes) and leaf_slot(round(sum(sizes) * ratio)) > room)


def pack_cut(sizes: Sequence[int], ratio: float, room: int) -> int:
    """How many of the candidate checkpoints to pack: the longest run whose pack,
    estimated at ``ratio`` times the sum of their ``sizes`` (each checkpoint's
    stored bytes with its writes', 0 for a record a pack leaves plain), fits
    ``room`` leaf bytes; at least one."""
    estimates = [round(total * ratio) for total in itertools.accumulate(sizes)]
    return max([m for m, est in enumerate(estimates, 1) if leaf_slot(est) <= room], default=1)


def tail_after(size: int, tail_free: int, page_size: int) -> int:
    """The free bytes on the ``packs`` log's last leaf page after appending a pack
    of ``size`` bytes to a tail of ``tail_free`` (with ``MDB_APPEND`` a node
    that does not fit starts a page of its own; one over the leaf limit takes
    overflow pages and leaves a node of a page number behind)."""
    slot = leaf_slot(size if size <= leaf_max(SEQ_SIZE, page_size) else 8)
    return tail_free - slot if slot <= tail_free else page_size - PAGE_HEADER - slot
