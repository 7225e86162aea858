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
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
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
#: A stored record larger than this stays a plain record inside a pack's range:
#: a large message is already compressed on its own, and packs of several KB
#: would take LMDB overflow pages (docs/benchmarks.md, stop 43).
PACK_RECORD_MAX: Final = 1024


@dataclass(frozen=True)
class Pack:
    """A decoded pack: its entries as the plain records they read as, in key order
    (each an uncompressed frame: its body is the frame without its tag byte and CRC,
    :meth:`checkpoint_bodies` and :meth:`write_bodies`)."""

    checkpoints: list[Entry]
    writes: list[Entry]

    def checkpoint_bodies(self) -> list[tuple[bytes, bytes, bool]]:
        """``(key, body, compact)`` of each checkpoint entry."""
        return [(key, raw[1:-4], bool(raw[0] & COMPACT)) for key, raw in self.checkpoints]

    def write_bodies(self) -> list[tuple[bytes, bytes, bytes]]:
        """``(key, body, channel)`` of each write entry."""
        out = []
        for key, raw in self.writes:
            channel = raw[: 1 + raw[0]]
            out.append((key, raw[len(channel) + 1 : -4], channel))
        return out

    @property
    def least(self) -> bytes:
        """The smallest key the pack holds."""
        firsts = [entries[0][0] for entries in (self.checkpoints, self.writes) if entries]
        return min(firsts)


def prefix_of(key: bytes) -> bytes:
    """A record key's thread and namespace uids (each a length byte and the id)."""
    return key[: keys.split_ids(key, 2)[1]]


def pack_body(
    checkpoints: list[tuple[bytes, bytes, bool]], writes: list[tuple[bytes, bytes, bytes]]
) -> tuple[bytes, bytes]:
    """``(index key, msgpack body)`` of a pack of ``checkpoints`` ``(key, body,
    compact)`` and ``writes`` ``(key, body, channel)``, each in key order, all
    under one thread and namespace."""
    index_key = max(entries[-1][0] for entries in (checkpoints, writes) if entries)
    plen = len(prefix_of(index_key))
    body = ormsgpack.packb(
        [
            [[key[plen:], compact, rec] for key, rec, compact in checkpoints],
            [[key[plen:], channel, rec] for key, rec, channel in writes],
        ]
    )
    return index_key, body


def decode_pack(codec: RecordCodec, index_key: bytes, raw: bytes, where: str) -> Pack:
    """The pack stored as ``raw`` under ``index_key``.

    Raises:
        CorruptRecordError: The record fails its CRC, or its entries are not in
            key order, not under the index key's thread and namespace, or the
            greatest of them is not the index key.
    """
    found = codec.decode(raw, where, key=index_key)
    prefix = prefix_of(index_key)
    try:
        ckpt_rows, write_rows = found
        checkpoints: list[Entry] = []
        for suffix, compact, body in ckpt_rows:
            key = prefix + suffix
            checkpoints.append((key, frame_body(body, key=key, compact=bool(compact))))
        writes: list[Entry] = []
        for suffix, channel, body in write_rows:
            key = prefix + suffix
            if len(channel) != 1 + channel[0]:
                raise ValueError(f"write {key.hex()} has no channel uid")
            writes.append((key, channel + frame_body(body, key=key, prefix=channel)))
    except (TypeError, ValueError, IndexError) as exc:
        raise CorruptRecordError(f"record {where} is not a pack ({exc})") from exc
    for entries in (checkpoints, writes):
        ordered = all(a[0] < b[0] for a, b in itertools.pairwise(entries))
        if not ordered or (entries and entries[-1][0] > index_key):
            raise CorruptRecordError(f"record {where}: its entries are out of order")
    if max((e[-1][0] for e in (checkpoints, writes) if e), default=b"") != index_key:
        raise CorruptRecordError(f"record {where}: its greatest entry is not its index key")
    return Pack(checkpoints, writes)


def packable(raw: bytes) -> bool:
    """Whether a plain record (a write's without its channel uid) may go into a
    pack: not larger than :data:`PACK_RECORD_MAX`. The one rule both the cut's
    estimate (:func:`pack_cut`) and :func:`body_of` apply."""
    return len(raw) <= PACK_RECORD_MAX


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


def leaf_slot(size: int) -> int:
    """Leaf page bytes a pack of ``size`` bytes takes in the ``packs`` log: its node
    (header, key and value, even-aligned) and its index slot (``mdb_node_add``)."""
    return 2 + ((8 + SEQ_SIZE + size + 1) & ~1)


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
