"""The on-disk key layout of a deltalog store. No other module builds key bytes.

One LMDB environment holds these named databases (``FORMAT_VERSION`` = 15):

============  ==========================================================  ==========================
database      key (byte encoding, in order)                               value
============  ==========================================================  ==========================
meta          ASCII name (``format_version``, ``name_seq``, ``dict:N``)   msgpack int / bytes
              ``wdep`` · thread(uid) · ns(uid) · channel(uid)             checkpoint_id(id), raw
              ``clog:`` · txn id (u64 BE); ``clog_on``                    a commit's history report
                                                                          (msgpack); empty
names         kind(1) · name-key                                          name id (u64 BE) · crc32
names_rev     kind(1) · name id (u64 BE, fixed)                           UTF-8 name · crc32
checkpoints   thread(uid) · ns(uid) · checkpoint_id(id)                   checkpoint record
writes        thread(uid) · ns(uid) · checkpoint_id(id) · task_id(tid)    channel(uid) · write record
              · idx(i32 sign-shifted) (format 7; before, task_path(str)   (its task path inside)
              · task_id(str) after the checkpoint id)
blobs         thread(uid) · ns(uid) · version(ver) · channel(uid)         blob record
              (format 10; before, channel(uid) · version(ver) after ns)
runs          run_id(run) · thread(uid) · ns(uid) · checkpoint_id(id)     empty
packs         sequence number (u64 BE) (format 14)                        a turn pack (engine/packs.py)
pack_index    the pack's greatest checkpoint or write key                 its sequence number (u64 BE)
item_ns       ``0x00`` · namespace name-key                              namespace id (u64 BE)
              ``0x01`` · namespace id (u64 BE, fixed)                     namespace record
              ``0x02`` (format 5: the memory change counter)              u64 BE · crc32
              ``0x03`` · namespace id (u64 BE, fixed) (format 5)          items, items with a TTL
                                                                          (u64 BE each) · crc32
items         namespace(uid) · key(ikey) of its first item (format 6)     chunk of items
item_vectors  namespace(uid) · key(ikey) · field ordinal (u16 BE)         vector record
item_ttl      expires_at (u64 BE, ms since epoch) · namespace(uid) ·      empty
              key(ikey)
============  ==========================================================  ==========================

The four ``item*`` databases hold the long-term memory store
(``deltalog.engine.memory``); they are created by the first writable open and
read as empty where they do not exist yet (a read-only open of an older store).
A namespace's name-key is that of the labels joined with ``.`` (labels never
hold a period); ``ikey`` is ``0x00`` · ``str`` for item keys whose encoding
fits 400 bytes, else ``0x01`` · sha256(UTF-8) (the record holds the full key
and is compared on lookup). ``item_ttl`` sorts by expiry, so a sweep reads only
the expired prefix. Every memory write transaction adds one to the change
counter (so a process can tell whether its in-RAM vector matrix is current)
and keeps each namespace's item counts (so ``list_namespaces`` need not read
items); a store without them (format 4, read-only) is read without them.

Encodings (all big-endian, every one order-preserving and self-delimiting):

* ``uid`` — an interned name id: one length byte (1–8), then the id's
  minimal big-endian bytes (order-preserving, self-delimiting). ``thread_id``,
  ``checkpoint_ns`` and channel names of any length are interned in
  ``names``/``names_rev`` (kind ``t``, ``n``, ``c``), so every key stays far
  below LMDB's 511-byte limit (R5). Task paths are interned too (kind ``p``,
  format 10), for write records, which hold the id instead of the path.
  A name-key is ``0x00 · UTF-8`` for names up to 400 bytes, else
  ``0x01 · sha256(UTF-8)`` (the full name is kept in ``names_rev`` and
  compared on lookup, so a hash collision cannot alias two names).
* ``id`` — a checkpoint id. ``0x10`` + 16 bytes for a canonical UUID string
  (LangGraph's uuid6, uuid7, uuid4), ``0x20`` + 16 bytes for a canonical ULID
  (the ids the engine mints), else ``0x30`` + ``str``. The original string is
  recovered exactly from the bytes (R4). Byte order equals string order within
  each family, so "latest" is the last key under a (thread, ns) prefix.
* ``str`` — UTF-8 with ``0x00`` escaped as ``0x00 0xFF``, then ``0x00 0x00``.
  Escaping rather than a length prefix keeps byte order equal to Python string
  order (the write keys of formats 1-6 sorted in ``writes_sort_key`` order by
  it); the escape makes the terminator unambiguous, so no two tuples share bytes.
* ``tid`` — a task id (format 7): ``0x10`` + 16 bytes for a canonical UUID
  string (the ids LangGraph gives tasks), else ``0x30`` + ``str``. Within a
  checkpoint, write keys sort by task id and idx; reads put the writes in
  ``writes_sort_key`` order (task path, task id, idx) themselves, the task
  path being in the record.
* ``i32 sign-shifted`` — ``idx + 2**31`` as u32, so special writes (-1…-4)
  sort before regular ones (R1).
* ``ver`` — a channel version: ``0x01`` + i64 sign-shifted for ints,
  ``0x02`` + order-preserving float64 bits, ``0x04`` + u64 counter + ``str``
  for the savers' ``"<32-digit counter>.<random>"`` strings, else ``0x03`` +
  ``str``.
* ``run`` — ``0x10`` + 16 bytes for a UUID run id, ``0x30`` + ``str`` up to
  400 bytes, else ``0x40`` + sha256 (the index only narrows the search; the
  checkpoint record's ``run_id`` is compared before anything is deleted).

Name records end in a CRC-32 over key and value since format 4 (layout in
:mod:`deltalog.engine.names`; the steps between formats in
:mod:`deltalog.engine.migrations`).

Decoding is strict: every field must be in the one form its encoder writes (a
``uid`` in minimal bytes, a ``str`` id that is not a uuid or ULID), and a key
must end where its last field does. A key with a trailing byte, or a second
spelling of the same tuple, would otherwise read as the same checkpoint twice;
it raises :class:`DamagedKeyError` instead.

Invariants: a checkpoint's writes are contiguous under its checkpoint key
prefix (in formats 1-6 also in ``writes_sort_key`` order); a (thread, ns)'s
blobs are contiguous and in version order, each version's channels together
(formats 1-9: each channel's blobs contiguous, in version order); nothing here
depends on the serializer.

Why blobs are version-major (format 10): LangGraph gives every channel a step
writes the same next version (one more than the checkpoint's highest), so a
thread's new blobs go at the end of its key range, where LMDB fills pages. Keyed
channel first, every channel but the last took its new blob in the middle of
the range, where LMDB splits a page in half and never fills the left half
again: on the benchmark chat, whether the input channel's blobs filled their
pages (0.91) or half of them (0.43) depended on where the first split fell,
~260 B a turn (docs/benchmarks.md, stop 38).
"""

from __future__ import annotations

import functools
import hashlib
import re
import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

from deltalog.engine.errors import DamagedKeyError, InvalidInputError, KeyTooLongError
from ulid import ULID

__all__ = [
    "BLOB_KEYS_FORMAT",
    "CLOG",
    "CLOG_ON",
    "FORMAT_VERSION",
    "FWD",
    "KEYED_FORMAT",
    "KIND_CHANNEL",
    "KIND_NS",
    "KIND_TASK_PATH",
    "KIND_THREAD",
    "MAX_KEY",
    "PACKS_FORMAT",
    "READABLE_FORMATS",
    "WDEP",
    "WRITE_KEYS_FORMAT",
    "blob_base_key",
    "blob_channel",
    "blob_key",
    "blob_version_bytes",
    "channel_prefix",
    "checkpoint_id_bytes",
    "checkpoint_key",
    "clog_key",
    "clog_txn",
    "decode_blob_key",
    "decode_checkpoint_key",
    "decode_id",
    "decode_item_count_key",
    "decode_item_ns_rev_key",
    "decode_item_ttl_key",
    "decode_legacy_write_key",
    "decode_run_key",
    "decode_str",
    "decode_task_id",
    "decode_uid",
    "decode_version",
    "decode_write_key",
    "encode_id",
    "encode_idx",
    "encode_run",
    "encode_str",
    "encode_task_id",
    "encode_version",
    "fwd_key",
    "id_end",
    "item_count_key",
    "item_key",
    "item_ns_key",
    "item_ns_rev_key",
    "item_prefix",
    "item_ttl_key",
    "item_vector_key",
    "legacy_write_key",
    "legacy_write_suffix",
    "name_key",
    "name_rev_key",
    "ns_prefix",
    "rethread",
    "run_key",
    "split_ids",
    "thread_prefix",
    "u64",
    "uid",
    "version_end",
    "wdep_key",
    "write_checkpoint_key",
    "write_idx",
    "write_key",
    "write_suffix",
]

FORMAT_VERSION: Final = 16
#: Formats this version reads. Formats 2 and 3 only added record shapes (delta
#: blobs over writes, small values inside checkpoint records); format 4 put a
#: CRC on the name records, format 5 a CRC over each record's key (checkpoints,
#: writes, blobs), format 6 packed the memory store's items into chunks, format 7
#: moved the task path from write keys into write records and added writes that
#: refer to their checkpoint's input, format 8 added splice deltas (a blob as runs
#: copied from its base, :mod:`deltalog.engine.splice`), format 9 a shorter frame
#: for records compressed with the trained dictionary
#: (:data:`deltalog.engine.codec.TAG_DICT_COMPACT`) and an early dictionary
#: (:data:`deltalog.engine.codec.EARLY_DICT`), format 10 blob keys with the version before
#: the channel (:data:`BLOB_KEYS_FORMAT`), format 11 delta records with a compact header
#: (:data:`deltalog.engine.codec.TAG_DELTA_COMPACT`), format 12 checkpoint records in a compact
#: form (:mod:`deltalog.engine.checkpoint_form`), format 13 that form's step past the 14 bits of the
#: id's clock sequence, format 14 turn packs (:data:`PACKS_FORMAT`), format 15 delta
#: records over write payloads without their array headers
#: (:func:`deltalog.engine.codec.array_items`), format 16 packs that carry large records in
#: chunks (:data:`deltalog.engine.packs.OUTSIDE_MAX`). A writable open upgrades an older store through
#: :data:`deltalog.engine.migrations.MIGRATIONS`; a read-only open reads it as it is.
READABLE_FORMATS: Final = frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
#: The first format with turn packs (the ``packs`` and ``pack_index`` databases).
PACKS_FORMAT: Final = 14
#: The first format whose records (and trained dictionaries) carry a CRC over their key.
KEYED_FORMAT: Final = 5
#: The first format whose write keys hold the task id alone (the task path is in the record).
WRITE_KEYS_FORMAT: Final = 7
#: The first format whose blob keys hold the version before the channel (``legacy=True``
#: of the blob key functions reads the layout before it).
BLOB_KEYS_FORMAT: Final = 10
#: ``meta`` key prefix of the write-dependency marks (``wdep_key``).
WDEP: Final = b"wdep"
#: ``meta`` key prefix of the forward-link marks (``fwd_key``).
FWD: Final = b"fwd"
#: ``meta`` key prefix of the commit reports that let other processes keep their
#: history memo (``clog_key``; :mod:`deltalog.engine.memo`), and the mark that
#: writers report: set by the first writer that finds another process's commit.
CLOG: Final = b"clog:"
CLOG_ON: Final = b"clog_on"
MAX_KEY: Final = 511
# Names longer than this are hashed in the `names` key; 400 leaves room for the kind byte.
_INLINE_NAME: Final = 400
# A non-uuid checkpoint id must leave room for task_path/task_id in write keys.
_MAX_STR_ID: Final = 160

KIND_THREAD: Final = b"t"
KIND_NS: Final = b"n"
KIND_CHANNEL: Final = b"c"
#: Task paths (format 10): a write record holds its task's path as this kind's id.
KIND_TASK_PATH: Final = b"p"

_ID_UUID: Final = 0x10
_ID_ULID: Final = 0x20
_ID_STR: Final = 0x30
_RUN_HASH: Final = 0x40
_VER_INT: Final = 0x01
_VER_FLOAT: Final = 0x02
_VER_STR: Final = 0x03
_VER_COUNTER: Final = 0x04
# LangGraph's own saver version format: a 32-digit zero-padded counter, a dot,
# then a random part. Stored as u64 counter + the rest: 20 bytes, not 52.
_COUNTER_VERSION: Final = re.compile(r"(\d{32})\.(.*)\Z", re.S)

_UUID_TAG: Final = bytes((_ID_UUID,))
# Only the canonical form (lowercase, hyphenated) maps to 16 bytes, so decoding
# returns exactly the string that was given.
_CANONICAL_UUID: Final = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z"
)

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


def u64(n: int) -> bytes:
    """Fixed 8-byte big-endian (the id stored as a ``names`` value)."""
    return _U64.pack(n)


# Every key starts with two or three uids; encoding them is a measurable part
# of a put. Ids are small and few, so a plain dict memoizes them.
_UID_CACHE: Final = 1 << 16
_UIDS: dict[int, bytes] = {}


def uid(n: int) -> bytes:
    """An interned id inside a key: one length byte, then the id's minimal
    big-endian bytes. Order-preserving (shorter numbers sort first) and
    self-delimiting; 2 bytes for the first 255 names instead of 8, which on a
    chat thread saved ~110 bytes of keys per turn."""
    cached = _UIDS.get(n)
    if cached is not None:
        return cached
    if n < 0:
        raise ValueError(f"name id {n} is negative")
    raw = n.to_bytes(max(1, (n.bit_length() + 7) // 8), "big")
    out = bytes((len(raw),)) + raw
    if len(_UIDS) < _UID_CACHE:
        _UIDS[n] = out
    return out


def _damaged(buf: bytes, why: object) -> DamagedKeyError:
    """The error for key bytes that do not decode: names the key and the way out."""
    return DamagedKeyError(
        f"key {bytes(buf).hex()[:120]} is damaged ({why}); run `deltalog verify` and "
        "restore the store from a backup"
    )


def decode_uid(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a :func:`uid` at ``pos``; return it and the next position."""
    size = buf[pos] if pos < len(buf) else 0
    if not 1 <= size <= 8 or pos + 1 + size > len(buf):
        raise _damaged(buf, f"bad id length {size} at {pos}")
    if size > 1 and buf[pos + 1] == 0:  # not minimal: a second spelling of a smaller id
        raise _damaged(buf, f"id at {pos} has a leading zero byte")
    return int.from_bytes(buf[pos + 1 : pos + 1 + size], "big"), pos + 1 + size


def split_ids(key: bytes, count: int) -> tuple[list[int], int]:
    """The first ``count`` ids of a key and the position after them."""
    out: list[int] = []
    pos = 0
    for _ in range(count):
        value, pos = decode_uid(key, pos)
        out.append(value)
    return out, pos


def _utf8(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{what} {value!r} is not valid Unicode ({exc.reason}); "
            "pass a string without lone surrogates"
        ) from None


def encode_str(value: str, what: str = "string") -> bytes:
    """Order-preserving, self-delimiting encoding of a string."""
    return _utf8(value, what).replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def decode_str(buf: bytes, pos: int) -> tuple[str, int]:
    """Decode a ``str`` field starting at ``pos``; return it and the next position."""
    out = bytearray()
    try:
        while True:
            nul = buf.index(b"\x00", pos)
            out += buf[pos:nul]
            marker = buf[nul + 1]
            if marker == 0x00:
                return out.decode("utf-8"), nul + 2
            if marker != 0xFF:
                raise _damaged(buf, f"bad string escape 0x{marker:02x} at {nul + 1}")
            out.append(0)
            pos = nul + 2
    except DamagedKeyError:
        raise
    except (ValueError, IndexError) as exc:  # no terminator, or not UTF-8
        raise _damaged(buf, f"bad string at {pos}: {exc}") from None


def encode_id(checkpoint_id: str) -> bytes:
    """Encode a checkpoint id (R4): 16 bytes for uuid/ULID strings, else a ``str``.

    Memoized for ``str`` ids: a put encodes its own id and its parent's several
    times, and the next put encodes the same id again as its parent.
    """
    if type(checkpoint_id) is str:
        return _encode_id_cached(checkpoint_id)
    return _encode_id(checkpoint_id)


def _encode_id(checkpoint_id: str) -> bytes:
    if not isinstance(checkpoint_id, str):
        raise InvalidInputError(
            f"checkpoint_id {checkpoint_id!r} is a {type(checkpoint_id).__name__}; "
            "pass the id as a string"
        )
    n = len(checkpoint_id)
    # The regex + fromhex fast path costs ~0.5 µs against ~5 µs for uuid.UUID
    # and str() round-trip; the delta walk encodes one id per ancestor.
    if n == 36 and _CANONICAL_UUID.match(checkpoint_id):
        return _UUID_TAG + bytes.fromhex(checkpoint_id.replace("-", ""))
    if n == 26:
        try:
            ul = ULID.from_str(checkpoint_id)
        except ValueError:
            pass
        else:
            if str(ul) == checkpoint_id:
                return bytes((_ID_ULID,)) + bytes(ul)
    enc = encode_str(checkpoint_id, "checkpoint_id")
    if len(enc) > _MAX_STR_ID:
        raise KeyTooLongError(
            f"checkpoint_id {checkpoint_id[:40]!r}… is {len(enc)} bytes encoded; "
            f"ids that are not uuid/ULID strings must stay under {_MAX_STR_ID} bytes — "
            "use LangGraph's uuid6 ids or a ULID"
        )
    return bytes((_ID_STR,)) + enc


def decode_id(buf: bytes, pos: int) -> tuple[str, int]:
    """Decode an ``id`` field starting at ``pos``."""
    tag = buf[pos] if pos < len(buf) else None
    if tag in (_ID_UUID, _ID_ULID) and pos + 17 > len(buf):
        raise _damaged(buf, f"id cut short at {pos}")
    if tag == _ID_UUID:
        return _uuid_at(buf, pos + 1), pos + 17
    if tag == _ID_ULID:
        return str(ULID.from_bytes(bytes(buf[pos + 1 : pos + 17]))), pos + 17
    if tag == _ID_STR:
        return _canonical_str(buf, pos, encode_id, "id")
    raise _damaged(buf, f"unknown id tag {tag!r} at {pos}")


def id_end(buf: bytes, pos: int) -> int:
    """Where the ``id`` field at ``pos`` ends, like :func:`decode_id`'s position but
    without building the id (a uuid or ULID is its tag and 16 bytes)."""
    tag = buf[pos] if pos < len(buf) else None
    if tag in (_ID_UUID, _ID_ULID):
        if pos + 17 > len(buf):
            raise _damaged(buf, f"id cut short at {pos}")
        return pos + 17
    return decode_id(buf, pos)[1]


def _uuid_at(buf: bytes, pos: int) -> str:
    """The canonical UUID string of the 16 bytes at ``pos``."""
    h = bytes(buf[pos : pos + 16]).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _canonical_str(
    buf: bytes, pos: int, encode: Callable[[str], bytes], what: str
) -> tuple[str, int]:
    """The ``str`` after the tag byte at ``pos``, which ``encode`` must give back exactly
    (a uuid or ULID spelled as a ``str`` is a second spelling: damage)."""
    value, end = decode_str(buf, pos + 1)
    if _reencoded(encode, value) != bytes(buf[pos:end]):
        raise _damaged(buf, f"{what} {value[:40]!r} at {pos} is not in its canonical form")
    return value, end


def _reencoded(encode: Callable[[Any], bytes], value: Any) -> bytes | None:
    """``encode(value)``, or None when it refuses the value (then no key holds it)."""
    try:
        return encode(value)
    except InvalidInputError:
        return None


def _ends(key: bytes, pos: int, what: str) -> None:
    """Raise unless the key ends at ``pos`` (where its last field ends)."""
    if pos != len(key):
        raise _damaged(key, f"{len(key) - pos} bytes after the {what} at {pos}")


def encode_idx(idx: int) -> bytes:
    """Sign-shifted 32-bit write index: -4 < -1 < 0 < 2 < 10 in byte order (R1)."""
    if not -(2**31) <= idx < 2**31:
        raise InvalidInputError(f"write idx {idx} is outside the 32-bit range")
    return _U32.pack(idx + 2**31)


def encode_version(version: str | int | float) -> bytes:
    """Encode a channel version (order-preserving within one type).

    Memoized for plain ``str``/``int``/``float`` versions (typed, so ``1`` and
    ``1.0`` stay apart): every put validates all of a checkpoint's versions.
    """
    if type(version) in (str, int, float):
        return _encode_version_cached(version)
    return _encode_version(version)


def _encode_version(version: str | int | float) -> bytes:
    if isinstance(version, bool):
        raise InvalidInputError(f"channel version {version!r} is a bool; use int, float or str")
    if isinstance(version, int):
        if not -(2**63) <= version < 2**63:
            raise InvalidInputError(f"channel version {version} is outside the 64-bit range")
        return bytes((_VER_INT,)) + _U64.pack(version + 2**63)
    if isinstance(version, float):
        bits = struct.unpack(">Q", struct.pack(">d", version))[0]
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
        return bytes((_VER_FLOAT,)) + _U64.pack(bits)
    if isinstance(version, str):
        m = _COUNTER_VERSION.match(version)
        if m is not None and int(m.group(1)) < 2**64:
            return bytes((_VER_COUNTER,)) + _U64.pack(int(m.group(1))) + encode_str(m.group(2))
        enc = encode_str(version, "channel version")
        if len(enc) > 200:
            raise KeyTooLongError(
                f"channel version {version[:40]!r}… is {len(enc)} bytes; keep versions "
                "under 200 bytes (the default get_next_version uses 50)"
            )
        return bytes((_VER_STR,)) + enc
    raise InvalidInputError(
        f"channel version {version!r} is a {type(version).__name__}; use int, float or str"
    )


_encode_id_cached = functools.lru_cache(maxsize=8192)(_encode_id)
_encode_version_cached = functools.lru_cache(maxsize=8192, typed=True)(_encode_version)


def decode_version(buf: bytes, pos: int) -> tuple[str | int | float, int]:
    """Decode a ``ver`` field starting at ``pos``."""
    tag = buf[pos] if pos < len(buf) else None
    if tag in (_VER_INT, _VER_FLOAT, _VER_COUNTER) and pos + 9 > len(buf):
        raise _damaged(buf, f"version cut short at {pos}")
    if tag == _VER_INT:
        return _U64.unpack_from(buf, pos + 1)[0] - 2**63, pos + 9
    if tag == _VER_FLOAT:
        bits = _U64.unpack_from(buf, pos + 1)[0]
        bits = bits & 0x7FFFFFFFFFFFFFFF if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
        return struct.unpack(">d", struct.pack(">Q", bits))[0], pos + 9
    if tag == _VER_STR:
        value, end = decode_str(buf, pos + 1)
    elif tag == _VER_COUNTER:
        rest, end = decode_str(buf, pos + 9)
        value = f"{_U64.unpack_from(buf, pos + 1)[0]:032}.{rest}"
    else:
        raise _damaged(buf, f"unknown version tag {tag!r} at {pos}")
    if _reencoded(encode_version, value) != bytes(buf[pos:end]):
        raise _damaged(buf, f"version {value[:40]!r} at {pos} is not in its canonical form")
    return value, end


def version_end(buf: bytes, pos: int) -> int:
    """Where a ``ver`` field starting at ``pos`` ends, without decoding it (a damaged
    field raises :class:`DamagedKeyError`; :func:`decode_version` checks its form)."""
    tag = buf[pos] if pos < len(buf) else None
    if tag in (_VER_INT, _VER_FLOAT):
        end = pos + 9
    elif tag in (_VER_STR, _VER_COUNTER):
        end = _str_end(buf, pos + (1 if tag == _VER_STR else 9))
    else:
        raise _damaged(buf, f"unknown version tag {tag!r} at {pos}")
    if end > len(buf):
        raise _damaged(buf, f"version cut short at {pos}")
    return end


def _str_end(buf: bytes, pos: int) -> int:
    """Where a ``str`` field starting at ``pos`` ends (after its terminator)."""
    while True:
        nul = buf.find(b"\x00", pos)
        if nul < 0 or nul + 1 >= len(buf):
            raise _damaged(buf, f"string at {pos} has no terminator")
        if buf[nul + 1] == 0x00:
            return nul + 2
        pos = nul + 2


def encode_run(run_id: str) -> bytes:
    """Encode a run id for the ``runs`` index."""
    if len(run_id) == 36:
        try:
            u = uuid.UUID(run_id)
        except ValueError:
            pass
        else:
            if str(u) == run_id:
                return bytes((_ID_UUID,)) + u.bytes
    raw = _utf8(run_id, "run_id")
    if len(raw) <= _INLINE_NAME:
        return bytes((_ID_STR,)) + encode_str(run_id)
    return bytes((_RUN_HASH,)) + hashlib.sha256(raw).digest()


def name_key(kind: bytes, name: str) -> bytes:
    """Key of ``names``: kind byte, then the name inline or its sha256 if long."""
    raw = _utf8(name, "name")
    if len(raw) <= _INLINE_NAME:
        return kind + b"\x00" + raw
    return kind + b"\x01" + hashlib.sha256(raw).digest()


def name_rev_key(kind: bytes, name_id: int) -> bytes:
    """Key of ``names_rev``."""
    return kind + _U64.pack(name_id)


def thread_prefix(thread: int) -> bytes:
    """Prefix of every checkpoint/write/blob key of one thread."""
    return uid(thread)


def ns_prefix(thread: int, ns: int) -> bytes:
    """Prefix of every key of one (thread, checkpoint_ns)."""
    return uid(thread) + uid(ns)


def checkpoint_key(thread: int, ns: int, cid: bytes) -> bytes:
    """Key of ``checkpoints``; also the prefix of that checkpoint's ``writes``."""
    return uid(thread) + uid(ns) + cid


def encode_task_id(task_id: str) -> bytes:
    """A task id in a write key (format 7): ``0x10`` + 16 bytes for a canonical UUID
    string (LangGraph's task ids: 38 bytes as a ``str``), else ``0x30`` + ``str``."""
    if len(task_id) == 36 and _CANONICAL_UUID.match(task_id):
        return _UUID_TAG + bytes.fromhex(task_id.replace("-", ""))
    return bytes((_ID_STR,)) + encode_str(task_id, "task_id")


def decode_task_id(buf: bytes, pos: int) -> tuple[str, int]:
    """Decode a task id (:func:`encode_task_id`) at ``pos``; strict like :func:`decode_id`."""
    tag = buf[pos] if pos < len(buf) else None
    if tag == _ID_UUID:
        if pos + 17 > len(buf):
            raise _damaged(buf, f"task id cut short at {pos}")
        return _uuid_at(buf, pos + 1), pos + 17
    if tag == _ID_STR:
        return _canonical_str(buf, pos, encode_task_id, "task id")
    raise _damaged(buf, f"unknown task id tag {tag!r} at {pos}")


def write_key(thread: int, ns: int, cid: bytes, task_id: str, idx: int) -> bytes:
    """Key of ``writes`` (format 7); raises KeyTooLongError before anything is written.

    The task path is not part of the key: it is stored in the write record, and
    reads sort a checkpoint's writes by ``writes_sort_key`` (task path first).
    """
    key = uid(thread) + uid(ns) + cid + encode_task_id(task_id) + encode_idx(idx)
    if len(key) > MAX_KEY:
        raise KeyTooLongError(
            f"task_id {task_id[:40]!r}… makes a {len(key)}-byte write key (LMDB's limit is "
            f"{MAX_KEY}); use shorter task ids"
        )
    return key


def legacy_write_key(
    thread: int, ns: int, cid: bytes, task_path: str, task_id: str, idx: int
) -> bytes:
    """Key of ``writes`` in formats 1-6: the task path and id as ``str`` fields."""
    return (
        uid(thread)
        + uid(ns)
        + cid
        + encode_str(task_path, "task_path")
        + encode_str(task_id, "task_id")
        + encode_idx(idx)
    )


def rethread(key: bytes, thread: int) -> bytes:
    """The same checkpoint/write/blob key under another thread id (copy_thread)."""
    return uid(thread) + key[decode_uid(key, 0)[1] :]


def channel_prefix(thread: int, ns: int, channel: int) -> bytes:
    """thread · ns · channel: the key of a channel's write-dependency mark after
    ``wdep``, and the prefix of a channel's blobs in formats 1-9."""
    return uid(thread) + uid(ns) + uid(channel)


def blob_key(
    thread: int, ns: int, channel: int, version: str | int | float, *, legacy: bool = False
) -> bytes:
    """Key of ``blobs``: thread · ns · version · channel, or (``legacy``, formats 1-9)
    thread · ns · channel · version."""
    if legacy:
        return channel_prefix(thread, ns, channel) + encode_version(version)
    return uid(thread) + uid(ns) + encode_version(version) + uid(channel)


def _blob_parts(key: bytes, legacy: bool) -> tuple[int, int]:
    """Where a blob key's parts are: (end of thread · ns, end of the field after it).
    Only the lengths are read; :func:`decode_blob_key` checks."""
    _, pos = split_ids(key, 2)
    return pos, decode_uid(key, pos)[1] if legacy else version_end(key, pos)


def blob_version_bytes(key: bytes, *, legacy: bool = False) -> bytes:
    """The encoded version of a blob key (a delta's reference to its base)."""
    pos, mid = _blob_parts(key, legacy)
    return key[mid:] if legacy else key[pos:mid]


def blob_channel(key: bytes, *, legacy: bool = False) -> bytes:
    """The channel's uid bytes of a blob key (compare with :func:`uid`)."""
    pos, mid = _blob_parts(key, legacy)
    return key[pos:mid] if legacy else key[mid:]


def blob_base_key(key: bytes, version_bytes: bytes, *, legacy: bool = False) -> bytes:
    """Key of another version of the same blob's (thread, ns, channel)."""
    pos, mid = _blob_parts(key, legacy)
    if legacy:
        return key[:mid] + version_bytes
    return key[:pos] + version_bytes + key[mid:]


def run_key(run: bytes, thread: int, ns: int, cid: bytes) -> bytes:
    """Key of ``runs`` (``run`` from :func:`encode_run`)."""
    return run + uid(thread) + uid(ns) + cid


def decode_checkpoint_key(key: bytes) -> tuple[int, int, str]:
    """Split a ``checkpoints`` key into (thread, ns, checkpoint_id)."""
    (t, n), pos = split_ids(key, 2)
    cid, end = decode_id(key, pos)
    _ends(key, end, "checkpoint id")
    return t, n, cid


def checkpoint_id_bytes(key: bytes) -> bytes:
    """The encoded checkpoint id of a ``checkpoints`` key (what a run index entry holds)."""
    return key[split_ids(key, 2)[1] :]


def write_checkpoint_key(key: bytes) -> bytes:
    """The checkpoint key that a ``writes`` key starts with."""
    _, pos = split_ids(key, 2)
    return key[: id_end(key, pos)]


def decode_write_key(key: bytes) -> tuple[int, int, str, str, int]:
    """Split a ``writes`` key (format 7) into (thread, ns, checkpoint_id, task_id, idx)."""
    (t, n), pos = split_ids(key, 2)
    cid, pos = decode_id(key, pos)
    task_id, pos = decode_task_id(key, pos)
    return t, n, cid, task_id, _idx_at(key, pos)


def decode_legacy_write_key(key: bytes) -> tuple[int, int, str, str, str, int]:
    """Split a formats 1-6 ``writes`` key into (thread, ns, checkpoint_id, task_path,
    task_id, idx)."""
    (t, n), pos = split_ids(key, 2)
    cid, pos = decode_id(key, pos)
    task_path, pos = decode_str(key, pos)
    task_id, pos = decode_str(key, pos)
    return t, n, cid, task_path, task_id, _idx_at(key, pos)


def _idx_at(key: bytes, pos: int) -> int:
    """The ``i32 sign-shifted`` idx at ``pos``, which must end the key."""
    if pos + 4 != len(key):
        raise _damaged(key, f"write idx expected at {pos}, key is {len(key)} bytes")
    return int(_U32.unpack_from(key, pos)[0]) - 2**31


def write_idx(key: bytes) -> int:
    """The ``idx`` of a ``writes`` key (its last four bytes)."""
    return _idx_at(key, max(len(key) - 4, 0))


def fwd_key(thread: int, ns: int) -> bytes:
    """``meta`` key marking that a (thread, ns) has a checkpoint whose parent key is at
    least its own (a parent put later, or a fork back): only then can an ordinary put
    close a parent cycle (see ``CheckpointWrites._refuse_cycle``)."""
    return FWD + ns_prefix(thread, ns)


def clog_key(txn_id: int) -> bytes:
    """``meta`` key of the history report of commit ``txn_id`` (ordered by id)."""
    return CLOG + u64(txn_id)


def clog_txn(key: bytes) -> int:
    """The commit id of a :func:`clog_key`."""
    return int(_U64.unpack_from(key, len(CLOG))[0])


def wdep_key(thread: int, ns: int, channel: int) -> bytes:
    """``meta`` key of a channel's write-dependency mark (see ``WriteTxn.put_blob``)."""
    return WDEP + channel_prefix(thread, ns, channel)


def write_suffix(key: bytes, cid_end: int) -> tuple[str, int]:
    """Decode (task_id, idx) from a write key (format 7) whose id ends at ``cid_end``."""
    task_id, pos = decode_task_id(key, cid_end)
    return task_id, _idx_at(key, pos)


def legacy_write_suffix(key: bytes, cid_end: int) -> tuple[str, str, int]:
    """Decode (task_path, task_id, idx) from a formats 1-6 write key."""
    task_path, pos = decode_str(key, cid_end)
    task_id, pos = decode_str(key, pos)
    return task_path, task_id, _idx_at(key, pos)


def decode_blob_key(key: bytes, *, legacy: bool = False) -> tuple[int, int, int, str | int | float]:
    """Split a ``blobs`` key into (thread, ns, channel, version); ``legacy`` reads the
    layout of formats 1-9 (channel before version)."""
    if legacy:
        (t, n, c), pos = split_ids(key, 3)
        version, end = decode_version(key, pos)
    else:
        (t, n), pos = split_ids(key, 2)
        version, pos = decode_version(key, pos)
        c, end = decode_uid(key, pos)
    _ends(key, end, "version" if legacy else "channel")
    return t, n, c, version


def decode_run_key(key: bytes) -> tuple[int, int, str]:
    """Return (thread, ns, checkpoint_id) of a ``runs`` key."""
    tag = key[0] if key else None
    if tag in (_ID_UUID, _RUN_HASH):
        pos = 17 if tag == _ID_UUID else 33
    elif tag == _ID_STR:
        run_id, pos = decode_str(key, 1)
        if _reencoded(encode_run, run_id) != key[:pos]:
            raise _damaged(key, f"run id {run_id[:40]!r} is not in its canonical form")
    else:
        raise _damaged(key, f"unknown run tag {tag!r}")
    t, pos = decode_uid(key, pos)
    n, pos = decode_uid(key, pos)
    cid, end = decode_id(key, pos)
    _ends(key, end, "checkpoint id")
    return t, n, cid


# -- long-term memory (deltalog.engine.memory) -------------------------------------

ITEM_NS_NAME: Final = b"\x00"
ITEM_NS_REV: Final = b"\x01"
_IKEY_STR: Final = 0x00
_IKEY_HASH: Final = 0x01
_U16 = struct.Struct(">H")


def item_ns_key(namespace: tuple[str, ...]) -> bytes:
    """Key of ``item_ns`` mapping a namespace to its id (labels joined by ``.``)."""
    return ITEM_NS_NAME + name_key(b"", ".".join(namespace))


def item_ns_rev_key(ns_id: int) -> bytes:
    """Key of ``item_ns`` mapping a namespace id back to its record."""
    return ITEM_NS_REV + _U64.pack(ns_id)


def decode_item_ns_rev_key(key: bytes) -> int:
    """The namespace id of an :func:`item_ns_rev_key`."""
    if len(key) != 9 or key[:1] != ITEM_NS_REV:
        raise _damaged(key, "not an item_ns id key")
    return int(_U64.unpack_from(key, 1)[0])


ITEM_CHANGES: Final = b"\x02"
ITEM_COUNT: Final = b"\x03"


def item_count_key(ns_id: int) -> bytes:
    """Key of ``item_ns`` holding one namespace's item counts (format 5)."""
    return ITEM_COUNT + _U64.pack(ns_id)


def decode_item_count_key(key: bytes) -> int:
    """The namespace id of an :func:`item_count_key`."""
    if len(key) != 9 or key[:1] != ITEM_COUNT:
        raise _damaged(key, "not an item_ns count key")
    return int(_U64.unpack_from(key, 1)[0])


def item_prefix(ns_id: int) -> bytes:
    """Prefix of every ``items``/``item_vectors`` key of one namespace."""
    return uid(ns_id)


def _ikey(key: str) -> bytes:
    raw = encode_str(key, "item key")
    if len(raw) <= _INLINE_NAME:
        return bytes((_IKEY_STR,)) + raw
    return bytes((_IKEY_HASH,)) + hashlib.sha256(_utf8(key, "item key")).digest()


def item_key(ns_id: int, key: str) -> bytes:
    """Key of ``items``: namespace id, then the item key (at most 411 bytes)."""
    return uid(ns_id) + _ikey(key)


def item_vector_key(item: bytes, ordinal: int) -> bytes:
    """Key of ``item_vectors``: the item's key, then the field ordinal."""
    return item + _U16.pack(ordinal)


def item_ttl_key(expires_ms: int, item: bytes) -> bytes:
    """Key of ``item_ttl``: expiry (ms since epoch), then the item's key."""
    return _U64.pack(expires_ms) + item


def decode_item_ttl_key(key: bytes) -> tuple[int, bytes]:
    """The expiry and the ``items`` key of an :func:`item_ttl_key`."""
    if len(key) < 10:
        raise _damaged(key, "item_ttl key too short")
    return int(_U64.unpack_from(key, 0)[0]), bytes(key[8:])
