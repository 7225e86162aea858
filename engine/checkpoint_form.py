"""The compact form of a checkpoint record (format 12): what LangGraph derives, left out.

A checkpoint record (:class:`~deltalog.engine.envelope.CheckpointEnvelope`)
holds, besides the values, what LangGraph makes new at each step: the parent's
id, the timestamp, the channel versions and the versions each node has seen,
the metadata. Compressed alone, each record paid for parts that another part of
the same record, or its own key, already says:

* the parent's id: LangGraph's ids are UUIDv6 (``uuid6(clock_seq=step)``), a
  100-ns timestamp, the step and 48 random bits. The parent's is kept as the
  time between the two ids, the difference of the steps and its random bits
  (``[dt, dseq, node]``): ~10 bytes instead of 17;
* the timestamp (``ts``, ISO 8601, taken a few µs before the id): kept as
  the µs from the record's own id's time to it, one or two bytes instead of
  32 characters;
* the versions: every version deltalog mints is ``"<32-digit counter>.<8 hex
  digits>"``, and a record names each of its few versions several times (in
  ``channel_versions`` and in each node's ``versions_seen``). The record keeps a
  table of its distinct versions, each a counter below the table's highest and
  four bytes, and names them by position;
* the metadata's ``source`` (one of four words) as a number, its ``step`` as
  its difference from the step the id holds. The id holds the step modulo
  2^14 (``clock_seq & 0x3FFF``), so from step 8,192 on the difference is a
  multiple of 16,384: that multiple goes into the source's number (format 13),
  which keeps the record's bytes those of a young thread's (the trained
  dictionary matched them; with the difference as a number a record took
  4-13 bytes more compressed, ~25 bytes a turn of the benchmark chat past
  turn 2,730, docs/benchmarks.md, stop 41);
* a UUID run id as its 16 bytes.

On the benchmark's sf=100 chat a record takes ~40 bytes less after compression
(docs/benchmarks.md, stop 40). The form is a function of the record and its own
checkpoint id (the last field of its key), so the record stays self-contained:
reading it needs no other record, and nothing that deletes, copies or re-links
checkpoints changes another record. The fields relative to the id appear
only when the id is a UUIDv6, which is then the last 17 bytes of the key (a
reader takes them from there); under any other id nothing in the record
depends on the key's bytes, so a copy that changes a short id's key tail
reads the same record.

:func:`front` returns None whenever a part would not come back exactly (any
other serializer, msgpack that ormsgpack would write otherwise, an id or
version of another shape) or the form would not be shorter: the writer then
stores the record as before. It checks each part where it is made rather
than expanding the record back (it runs in every ``put``, before the write
transaction: :mod:`deltalog.engine.prepare`); tests/test_checkpoint_form.py
expands what it makes, for any record hypothesis draws. :func:`compact_with`
adds the inline values and blob mask in the transaction, :func:`expand` is
the codec's, on every read of a record with
:data:`~deltalog.engine.codec.COMPACT` set.

The compact list (its positions are this module's alone)::

    [parent, table, versions, checkpoint, metadata, flags, run_id, delta, inline, blobbed?]

* ``parent``: None, the encoded id (bytes), or ``[dt, dseq, node]``;
* ``table``: ``[highest, items, suffixes]``: each item is an int ``d`` (the
  version ``highest - d`` in counter form, its four random bytes the next ones
  of ``suffixes``) or ``[version]``, kept as it is;
* ``versions``: channel → table position;
* ``checkpoint``: ``[type, bytes]`` as before, or ``[v, ts, versions_seen,
  updated_channels]`` with ``ts`` an int (µs from the id's time) or the
  string, and ``versions_seen`` node → channel → table position;
* ``metadata``: ``[type, bytes]``, or ``[source, dstep, rest]``: ``source`` the
  string, or an int ``code + 4 * wraps`` (``code`` its place in :data:`SOURCES`,
  ``wraps`` 0 before format 13), the step being ``dstep + wraps * 2^14`` plus
  the id's clock sequence read as a signed 14-bit number; ``rest`` the other
  keys in order;
* ``run_id``: None, the string, or a UUID's 16 bytes;
* ``blobbed`` present exactly when the record has it; ``inline`` always.
"""

from __future__ import annotations

import functools
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Final, NamedTuple

import ormsgpack

__all__ = [
    "FULL_FIELDS",
    "Front",
    "compact",
    "compact_with",
    "counter_parts",
    "expand",
    "front",
]

# An encoded checkpoint id of a canonical UUID (keys.encode_id): this tag, 16 bytes.
_UUID_ID: Final = 0x10
# 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch.
_UUID_EPOCH: Final = 0x01B21DD213814000
_UNIX_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_US: Final = timedelta(microseconds=1)
_NODE: Final = (1 << 48) - 1
_SEQ: Final = (1 << 14) - 1
# Steps one turn of the clock sequence apart.
_WRAP: Final = 1 << 14
_COUNTER: Final = re.compile(r"([0-9]{32})\.([0-9a-f]{8})")
#: The metadata ``source`` words LangGraph writes, by their number in the compact form.
SOURCES: Final = ("input", "loop", "update", "fork")
_SOURCE_CODES: Final = {s: i for i, s in enumerate(SOURCES)}
_CKPT_KEYS: Final = ["v", "ts", "versions_seen", "updated_channels"]
#: The full record's fields before its inline values and blob mask (envelope.py's
#: positions, repeated so that this module imports nothing of the engine).
FULL_FIELDS: Final = 9
_INLINE: Final = 9
_BLOBBED: Final = 10
# The compact list's fields up to ``inline``; ``blobbed`` follows when the record has it.
_COMPACT_FIELDS: Final = 9


@functools.lru_cache(maxsize=1024)
def _v6(cid: bytes) -> tuple[int, int, int] | None:
    """``(timestamp, clock_seq, node)`` of an encoded id that is a version 6 RFC 4122
    UUID, else None; :func:`_v6_id` of them gives ``cid`` back. Cached: a record's
    id is the next one's parent."""
    if len(cid) != 17 or cid[0] != _UUID_ID:
        return None
    n = int.from_bytes(cid[1:], "big")
    if (n >> 76) & 0xF != 6 or (n >> 62) & 0x3 != 0b10:
        return None
    hi = n >> 64
    return ((hi >> 16) << 12) | (hi & 0x0FFF), (n >> 48) & _SEQ, n & _NODE


def _v6_id(timestamp: int, seq: int, node: int) -> bytes:
    """The encoded id of the version 6 UUID of these fields."""
    if not 0 <= timestamp < 1 << 60:
        raise ValueError(f"parent timestamp {timestamp} out of range")
    hi = ((timestamp >> 12) << 16) | 0x6000 | (timestamp & 0x0FFF)
    n = (hi << 64) | (0b10 << 62) | (seq << 48) | node
    return bytes((_UUID_ID,)) + n.to_bytes(16, "big")


def _signed_seq(seq: int) -> int:
    """A 14-bit clock sequence read as the step LangGraph put in it (-2 is 0x3FFE)."""
    return seq - (1 << 14) if seq >= 1 << 13 else seq


def _ts_text(us: int) -> str:
    return (_UNIX_EPOCH + us * _ONE_US).isoformat()


@functools.lru_cache(maxsize=256)
def _second_of(prefix: str) -> int | None:
    """The Unix second of ``prefix`` (``YYYY-MM-DDTHH:MM:SS``) when ``isoformat``
    writes it so, else None. Cached: the puts of one second share it."""
    try:
        when = datetime.fromisoformat(prefix + "+00:00")
    except ValueError:
        return None
    if when.isoformat() != prefix + "+00:00":
        return None
    return (when - _UNIX_EPOCH) // _ONE_US // 1_000_000


def _ts_us(ts: str) -> int | None:
    """The µs since the epoch of ``ts`` when ``_ts_text`` of them gives ``ts`` back
    (``datetime.isoformat()`` of a UTC time), else None."""
    if len(ts) == 32 and ts[19] == "." and ts[26:] == "+00:00" and ts[20:26].isdigit():
        # LangGraph's form, "2026-12-05T01:00:13.023624+00:00": the second from a
        # cache, the µs from the text (isoformat leaves ".000000" out).
        second = _second_of(ts[:19])
        fraction = int(ts[20:26])
        if second is not None and fraction and ts[20:26].isascii():
            return second * 1_000_000 + fraction
        return None
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    us: int = (when - _UNIX_EPOCH) // _ONE_US
    return us if _ts_text(us) == ts else None


@functools.lru_cache(maxsize=4096)
def counter_parts(version: str) -> tuple[int, bytes] | None:
    """``(counter, four bytes)`` of a version in deltalog's counter form
    (``"<32 ASCII digits>.<8 lowercase hex digits>"``, every version
    ``get_next_version`` mints) whose counter is below 2^63, else None; the
    version is ``f"{counter:032d}.{suffix.hex()}"``. Below 2^63: a msgpack int
    (this module's version table) and an LEB128 varint of at most nine bytes
    (the codec's delta headers) both hold it. Cached: a version is named by every
    record until its channel changes."""
    m = _COUNTER.fullmatch(version)
    if m is None or int(m[1]) >= 1 << 63:
        return None
    return int(m[1]), bytes.fromhex(m[2])


@functools.lru_cache(maxsize=256)
def _run_bytes(run_id: str) -> bytes | None:
    """The 16 bytes of a run id that is a canonical UUID, else None. Cached: a run
    puts several checkpoints."""
    try:
        as_uuid = uuid.UUID(run_id)
    except ValueError:
        return None
    return as_uuid.bytes if str(as_uuid) == run_id else None


class _Table:
    """The distinct versions of one record, in order of first use."""

    __slots__ = ("counters", "index", "items", "suffixes")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.counters: list[int] = []
        self.suffixes: list[bytes] = []
        self.index: dict[tuple[type, Any], int] = {}

    def at(self, version: Any) -> int:
        # By type and value: 1, 1.0 and True stay apart; floats by their text,
        # since -0.0 == 0.0 and msgpack keeps them apart.
        vt = type(version)
        k = (vt, repr(version) if vt is float else version)
        pos = self.index.get(k)
        if pos is None:
            pos = self.index[k] = len(self.items)
            parts = counter_parts(version) if vt is str else None
            if parts is not None:
                self.counters.append(pos)
                self.items.append(parts[0])
                self.suffixes.append(parts[1])
            else:
                self.items.append([version])
        return pos

    def packed(self) -> list[Any]:
        top = max((self.items[i] for i in self.counters), default=0)
        items = [top - v if type(v) is int else v for v in self.items]
        return [top, items, b"".join(self.suffixes)]


def _unpack_table(table: Any) -> list[Any]:
    top, items, suffixes = table
    if type(top) is not int or not isinstance(items, list) or not isinstance(suffixes, bytes):
        raise ValueError("version table of an unexpected shape")
    out: list[Any] = []
    digits = suffixes.hex()
    end = len(digits)
    pos = 0
    for item in items:
        if type(item) is int:
            if item < 0 or item > top or pos + 8 > end:
                raise ValueError("version table item out of range")
            out.append(f"{top - item:032d}.{digits[pos : pos + 8]}")
            pos += 8
        elif type(item) is list and len(item) == 1:
            out.append(item[0])
        else:
            raise ValueError("version table item of an unexpected shape")
    if pos != end:
        raise ValueError("version table holds unused suffix bytes")
    return out


def _named(positions: Any, table: list[Any]) -> dict[str, Any]:
    if not isinstance(positions, dict):
        raise ValueError("version positions are not a map")
    size = len(table)
    out = {}
    for channel, pos in positions.items():
        if type(pos) is not int or not 0 <= pos < size:
            raise ValueError(f"version position {pos!r:.20} out of range")
        out[channel] = table[pos]
    return out


def _compact_checkpoint(
    ctype: Any, cbytes: Any, table: _Table, own: tuple[int, int, int] | None
) -> list[Any]:
    if ctype != "msgpack" or not isinstance(cbytes, bytes):
        return [ctype, cbytes]
    try:
        body = ormsgpack.unpackb(cbytes)
    except Exception:  # not plain msgpack (an extension type): kept as it is
        return [ctype, cbytes]
    if not isinstance(body, dict) or list(body) != _CKPT_KEYS:
        return [ctype, cbytes]
    if ormsgpack.packb(body) != cbytes:
        # Not msgpack as ormsgpack writes it (a longer integer or string header):
        # the rebuilt bytes would differ.
        return [ctype, cbytes]
    seen = body["versions_seen"]
    if not isinstance(seen, dict) or not all(isinstance(m, dict) for m in seen.values()):
        return [ctype, cbytes]
    ts: Any = body["ts"]
    if own is not None and type(ts) is str:
        try:
            us = _ts_us(ts)
        except OverflowError:
            us = None
        if us is not None:
            ts = us - (own[0] - _UUID_EPOCH) // 10
    return [
        body["v"],
        ts,
        {node: {c: table.at(v) for c, v in m.items()} for node, m in seen.items()},
        body["updated_channels"],
    ]


def _compact_metadata(mtype: Any, mbytes: Any, own: tuple[int, int, int] | None) -> list[Any]:
    if own is None or mtype != "msgpack" or not isinstance(mbytes, bytes):
        return [mtype, mbytes]
    try:
        meta = ormsgpack.unpackb(mbytes)
    except Exception:
        return [mtype, mbytes]
    if not isinstance(meta, dict) or list(meta)[:2] != ["source", "step"]:
        return [mtype, mbytes]
    if ormsgpack.packb(meta) != mbytes:
        return [mtype, mbytes]
    source, step = meta["source"], meta["step"]
    if type(step) is not int or type(source) is not str:
        return [mtype, mbytes]
    rest = {k: v for k, v in meta.items() if k not in ("source", "step")}
    dstep = step - _signed_seq(own[1])
    code = _SOURCE_CODES.get(source)
    if code is None:
        return [source, dstep, rest]
    # Format 13: whole turns of the 14-bit clock sequence go into the source's
    # number, so a LangGraph step past 8,191 stores a difference of 0 as before it.
    wraps, dstep = divmod(dstep, _WRAP) if dstep >= _WRAP else (0, dstep)
    return [code + len(SOURCES) * wraps, dstep, rest]


class Front(NamedTuple):
    """The compact form of a record's fields before its inline values and blob mask
    (which both forms hold as they are), made and checked before the write
    transaction (:func:`front`) and finished in it (:func:`compact_with`)."""

    full: list[Any]
    """The record's first nine fields (``CheckpointEnvelope.pack``'s)."""
    compact: list[Any]
    """The same in the compact form: eight fields, ``inline`` and ``blobbed`` to follow."""


def front(full: list[Any], cid: bytes) -> Front | None:
    """The :class:`Front` of a record whose first nine fields are ``full``, stored under
    checkpoint id ``cid`` (encoded); None when the compact form would not read back
    as ``full`` exactly or would not be shorter."""
    try:
        return _front(full, cid)
    except (TypeError, ValueError, OverflowError):  # unhashable or odd values: as it is
        return None


def _front(full: list[Any], cid: bytes) -> Front | None:
    if not isinstance(full, list) or len(full) != FULL_FIELDS:
        return None
    parent, versions, ctype, cbytes, mtype, mbytes, flags, run_id, delta = full
    if not isinstance(versions, dict):
        return None
    own = _v6(cid)
    pform: Any = parent
    if own is not None and isinstance(parent, bytes):
        up = _v6(parent)
        if up is not None:
            pform = [own[0] - up[0], (own[1] - up[1]) & _SEQ, up[2].to_bytes(6, "big")]
    table = _Table()
    positions = {channel: table.at(v) for channel, v in versions.items()}
    ckpt = _compact_checkpoint(ctype, cbytes, table, own)
    meta = _compact_metadata(mtype, mbytes, own)
    run: Any = run_id
    if type(run_id) is str and len(run_id) == 36:
        run = _run_bytes(run_id) or run_id
    out = [pform, table.packed(), positions, ckpt, meta, flags, run, delta]
    # Its own copies: compact_with compares the record it is given with these.
    full = [parent, dict(versions), ctype, cbytes, mtype, mbytes, flags, run_id, list(delta)]
    if (len(ckpt) == 2 or len(meta) == 2) and len(ormsgpack.packb(out)) + 1 >= len(
        ormsgpack.packb(full)
    ):
        # Shorter by more than the byte an empty ``inline`` may cost the compact
        # form (a body and metadata compacted always are).
        return None
    # Every part that is not kept as it is was checked where it was made: a parent
    # id rebuilt from its fields, a ts text rebuilt from its offset, versions
    # matched exactly by the counter pattern (or kept), the body and metadata as
    # ormsgpack packs them. tests/test_checkpoint_form.py expands every form back.
    return Front(full, out)


def compact_with(made: Front, rec: list[Any]) -> bytes | None:
    """Checkpoint record ``rec`` (the full form) in the compact form, packed with
    msgpack, from ``made`` (:func:`front` of its first nine fields); None when
    ``rec`` does not start with those fields (the caller then stores it as it is)."""
    full = made.full
    if len(rec) < FULL_FIELDS or len(rec) > _BLOBBED + 1:
        return None
    for i in range(FULL_FIELDS):
        if rec[i] is not full[i] and rec[i] != full[i]:
            return None
    if not _same_types(rec, full):
        return None
    tail = [rec[_INLINE] if len(rec) > _INLINE else {}]
    if len(rec) > _BLOBBED:
        tail.append(rec[_BLOBBED])
    try:
        return ormsgpack.packb([*made.compact, *tail])
    except TypeError:  # what the full form cannot pack either: the caller says so
        return None


def compact(rec: list[Any], cid: bytes) -> bytes | None:
    """Checkpoint record ``rec`` (the full form, as
    :meth:`~deltalog.engine.envelope.CheckpointEnvelope.pack` makes it) stored under
    checkpoint id ``cid`` (encoded, as its key ends) in the compact form, packed
    with msgpack; None when it would not read back as ``rec`` exactly or would not
    be shorter (:func:`front`, then :func:`compact_with`)."""
    if not isinstance(rec, list):
        return None
    made = front(rec[:FULL_FIELDS], cid)
    return None if made is None else compact_with(made, rec)


def _same_types(a: list[Any], b: list[Any]) -> bool:
    """The versions of ``a`` and ``b`` are in the same order (a record's ``blobbed``
    bits follow it) and of the same types (``1 == 1.0 == True``)."""
    return list(a[1]) == list(b[1]) and [type(v) for v in a[1].values()] == [
        type(v) for v in b[1].values()
    ]


def _checkpoint_body(ckpt: Any, table: list[Any], own: tuple[int, int, int] | None) -> list[Any]:
    """``[type, bytes]`` of the checkpoint body of a compact record."""
    if not isinstance(ckpt, list):
        raise ValueError("checkpoint field is not a list")
    if len(ckpt) == 2:
        return ckpt
    if len(ckpt) != 4:
        raise ValueError("checkpoint field of an unexpected shape")
    v, ts, seen, updated = ckpt
    if type(ts) is int:
        if own is None:
            raise ValueError("a relative timestamp without a UUIDv6 id")
        ts = _ts_text(ts + (own[0] - _UUID_EPOCH) // 10)
    if not isinstance(seen, dict):
        raise ValueError("versions_seen is not a map")
    body = {
        "v": v,
        "ts": ts,
        "versions_seen": {node: _named(m, table) for node, m in seen.items()},
        "updated_channels": updated,
    }
    return ["msgpack", ormsgpack.packb(body)]


def _metadata(meta: Any, own: tuple[int, int, int] | None) -> list[Any]:
    """``[type, bytes]`` of the metadata of a compact record."""
    if not isinstance(meta, list):
        raise ValueError("metadata field is not a list")
    if len(meta) == 2:
        return meta
    if len(meta) != 3:
        raise ValueError("metadata field of an unexpected shape")
    source, dstep, rest = meta
    wraps = 0
    if type(source) is int:
        if source < 0:
            raise ValueError(f"metadata source {source} out of range")
        wraps, code = divmod(source, len(SOURCES))
        source = SOURCES[code]
    if type(dstep) is not int or not isinstance(rest, dict):
        raise ValueError("metadata of an unexpected shape")
    if own is None:
        raise ValueError("a relative step without a UUIDv6 id")
    step = dstep + wraps * _WRAP + _signed_seq(own[1])
    return ["msgpack", ormsgpack.packb({"source": source, "step": step, **rest})]


def expand(rec: Any, cid: bytes, *, head: bool = False) -> list[Any]:
    """The full record (the list :func:`compact` was given) of compact record ``rec``
    stored under checkpoint id ``cid``.

    ``head``: the caller reads neither the checkpoint body nor the metadata (a walk
    over parents, versions and inline values): their four fields are None, not
    rebuilt (the ``ts`` text and two msgpack encodings, most of the time this takes).

    Raises:
        ValueError: ``rec`` is not a compact record (damage; the codec reports it
            as :class:`~deltalog.engine.errors.CorruptRecordError`).
    """
    if not isinstance(rec, list) or not _COMPACT_FIELDS <= len(rec) <= _COMPACT_FIELDS + 1:
        raise ValueError("compact checkpoint record of an unexpected shape")
    pform, tform, positions, ckpt, meta, flags, run, delta, inline = rec[:_COMPACT_FIELDS]
    own = _v6(cid)
    parent: Any = pform
    if isinstance(pform, list):
        if own is None or len(pform) != 3:
            raise ValueError("a relative parent id without a UUIDv6 id of its own")
        dt, dseq, node = pform
        if type(dt) is not int or type(dseq) is not int or not isinstance(node, bytes):
            raise ValueError("relative parent id of an unexpected shape")
        if not 0 <= dseq <= _SEQ or len(node) != 6:
            raise ValueError("relative parent id out of range")
        parent = _v6_id(own[0] - dt, (own[1] - dseq) & _SEQ, int.from_bytes(node, "big"))
    table = _unpack_table(tform)
    versions = _named(positions, table)
    if head:
        ctype = cbytes = mtype = mbytes = None
    else:
        ctype, cbytes = _checkpoint_body(ckpt, table, own)
        mtype, mbytes = _metadata(meta, own)
    run_id = str(uuid.UUID(bytes=run)) if isinstance(run, bytes) else run
    out = [parent, versions, ctype, cbytes, mtype, mbytes, flags, run_id, delta]
    if len(rec) > _COMPACT_FIELDS:
        out += [inline, rec[_COMPACT_FIELDS]]
    elif inline:
        out.append(inline)
    return out
