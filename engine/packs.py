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
from dataclasses import dataclass
from typing import Any, Final

import ormsgpack
from deltalog.engine import keys
from deltalog.engine.codec import COMPACT, KEYED, RecordCodec, frame_body
from deltalog.engine.errors import CorruptRecordError

Entry = tuple[bytes, bytes]

#: How many of a namespace's newest checkpoints stay plain records: the head a
#: turn reads (the latest checkpoint, its parent, their writes) is never packed.
PACK_KEEP: Final = 4
#: The checkpoints a pack holds (with their writes): two chat turns, each of which
#: puts three. Six compress better together than three (the sf=100 chat: 1.44x the
#: content floor a turn in pages, 1.68x with three) for the same CPU a turn.
PACK_MIN: Final = 6
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


def encode_pack(
    codec: RecordCodec,
    checkpoints: list[tuple[bytes, bytes, bool]],
    writes: list[tuple[bytes, bytes, bytes]],
) -> tuple[bytes, bytes]:
    """``(index key, record)`` of a pack of ``checkpoints`` ``(key, body, compact)``
    and ``writes`` ``(key, body, channel)``, each in key order, all under one
    thread and namespace."""
    index_key = max(entries[-1][0] for entries in (checkpoints, writes) if entries)
    plen = len(prefix_of(index_key))
    body = ormsgpack.packb(
        [
            [[key[plen:], compact, rec] for key, rec, compact in checkpoints],
            [[key[plen:], channel, rec] for key, rec, channel in writes],
        ]
    )
    return index_key, codec.encode_body(body, key=index_key)


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


def body_of(codec: RecordCodec, key: bytes, raw: bytes, channel: bytes = b"") -> Any:
    """``(body, compact)`` of a plain record to pack, or None when it stays plain (a
    delta, or larger than :data:`PACK_RECORD_MAX`)."""
    if len(raw) > PACK_RECORD_MAX:
        return None
    body = codec.body(
        raw, f"{'writes' if channel else 'checkpoints'}/{key.hex()}", key=key, prefix=channel
    )
    if body is None:
        return None
    return body, bool(raw[0] & ~KEYED & COMPACT)
