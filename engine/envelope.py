"""The checkpoint and write record envelopes: what each stored field is, in one place.

Records (ormsgpack lists, framed by :mod:`deltalog.engine.codec`):

* checkpoint: :class:`CheckpointEnvelope` — ``[parent_id, channel_versions,
  ckpt_type, ckpt_bytes, meta_type, meta_bytes, flags, run_id]`` (format 1),
  then ``delta_channels`` (format 2), then ``inline`` (format 3, only when it
  holds a value). ``flags`` bit 0 = hidden (kept only for a delta chain, not
  listed); ``inline`` holds scalar values of at most :data:`INLINE_MAX`
  serialized bytes, and the run's input of at most :data:`INPUT_INLINE_MAX`.
  The field positions (``PARENT`` … ``INLINE``) are named here; the hot read
  path (an envelope's parent and versions) indexes with them.
* write: the channel's ``uid`` followed by the framed record — the prefix lets
  a walk skip other channels' writes with a short bytes compare. The record is
  ``[type, bytes, task_path]`` (format 7; ``[type, bytes]`` before, the task
  path in the key), or a reference into the input its checkpoint stored,
  ``[type, None, task_path, [channel id, offset, length, crc32]]``
  (:func:`write_record`, :func:`input_ref`, :func:`read_write`).
* blob: framed ``[type, bytes]``. Empty channel versions store nothing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Final

import ormsgpack
from deltalog.engine import keys
from deltalog.engine.errors import (
    CorruptRecordError,
    FormatVersionError,
)
from deltalog.engine.store_rows import FLAG_HIDDEN, StoredValue, Typed, Version

# Scalar channel values (None, bool, int, float, str) serialized to at most this
# many bytes are stored inside each checkpoint record that has them (format 3),
# not as blobs: no blob entry, key or B-tree page to write, and none to look up
# on a read. A value is copied into every checkpoint while unchanged; the bound
# caps that copy (PostgresSaver, which holds primitives the same way, has none).
INLINE_MAX: Final = 512
# The types a value must have (exactly) to be held inline.
_SCALARS: Final = frozenset({type(None), bool, int, float, str})


def is_scalar(value: Any) -> bool:
    """``None``, a ``bool``, ``int``, ``float`` or ``str`` (exact types): what may be inline."""
    return type(value) in _SCALARS


def held_inline(channel: str, value: Any, typed: Typed) -> bool:
    """The inline rule: a value is held inside the checkpoint record when it
    :func:`is_scalar` and its serialized bytes ``typed`` are at most :data:`INLINE_MAX`
    (format 3), or when it is the run's input (channel :data:`INPUT_CHANNEL`, any
    type) of at most :data:`INPUT_INLINE_MAX` bytes.

    >>> held_inline("count", 7, ("msgpack", b"\\x07"))
    True
    >>> held_inline("messages", [1], ("msgpack", b"\\x91\\x01"))
    False
    >>> held_inline(INPUT_CHANNEL, {"messages": [1]}, ("msgpack", b"\\x81"))
    True
    """
    if type(value) in _SCALARS:
        return len(typed[1]) <= INLINE_MAX
    return channel == INPUT_CHANNEL and len(typed[1]) <= INPUT_INLINE_MAX


def held_inline_typed(channel: str, typed: Typed) -> bool:
    """:func:`held_inline` from the serialized value alone, for values that arrive
    serialized (an import): the value is the scalar its bytes hold, if they hold
    one (:func:`_scalar_in`). Never calls the serde.

    >>> held_inline_typed("count", ("msgpack", b"\\x07")), held_inline_typed("x", ("null", b""))
    (True, True)
    >>> held_inline_typed("messages", ("msgpack", b"\\x91\\x01"))
    False
    >>> held_inline_typed(INPUT_CHANNEL, ("msgpack", b"\\x81\\xa1a\\x01"))
    True
    """
    return held_inline(channel, _scalar_in(typed), typed)


#: What :func:`_scalar_in` returns for bytes that hold no scalar.
_NOT_SCALAR: Final = object()


def _scalar_in(typed: Typed) -> Any:
    """The scalar serialized in ``typed``: ``None`` for LangGraph's ``("null", b"")``,
    or a ``"msgpack"`` payload that is exactly one msgpack nil, bool, int, float
    or str, as LangGraph's ormsgpack encodes it (a value of another type carries
    an extension or a container); else :data:`_NOT_SCALAR`. Payloads longer than
    any inline bound are not decoded: :func:`held_inline` refuses them anyway."""
    kind, payload = typed
    if kind == "null":
        return None
    if kind != "msgpack" or len(payload) > max(INLINE_MAX, INPUT_INLINE_MAX):
        return _NOT_SCALAR
    try:
        value = ormsgpack.unpackb(payload)
    except (ormsgpack.MsgpackDecodeError, TypeError, ValueError):
        return _NOT_SCALAR  # an extension type, or no msgpack at all
    return value if type(value) in _SCALARS and ormsgpack.packb(value) == payload else _NOT_SCALAR


# Positions of the checkpoint record's fields (see CheckpointEnvelope).
PARENT, VERSIONS, CKPT_TYPE, CKPT_BYTES, META_TYPE, META_BYTES, FLAGS, RUN_ID = range(8)
DELTA: Final = 8  # format 2
INLINE: Final = 9  # format 3
BLOBBED: Final = 10  # format 5
_FORMAT_1_FIELDS: Final = 8


@dataclass(slots=True)
class CheckpointEnvelope:
    """A checkpoint record's fields, by name; :meth:`pack` and :meth:`unpack` are the
    only code that knows their order (every format: 1 has no ``delta``, 1–2 no ``inline``)."""

    parent: bytes | None
    """The parent's encoded id (:func:`parent_in`), or None."""
    versions: dict[str, Version]
    checkpoint: Typed
    metadata: Typed
    flags: int = 0
    run_id: str | None = None
    delta: list[str] = field(default_factory=list)
    inline: dict[str, list[Any]] = field(default_factory=dict)
    blobbed: int | None = None
    """Format 5: bit ``i`` set when the ``i``-th channel of ``versions`` (in stored order)
    has its value in a blob record, so a read that finds no blob there knows it is
    missing (an empty version stores nothing); None in older records."""

    def pack(self) -> list[Any]:
        """The record as stored (current format): ``inline`` only when it holds a value
        or ``blobbed`` follows it."""
        rec: list[Any] = [
            self.parent,
            self.versions,
            self.checkpoint[0],
            self.checkpoint[1],
            self.metadata[0],
            self.metadata[1],
            self.flags,
            self.run_id,
            list(self.delta),
        ]
        if self.inline or self.blobbed is not None:
            rec.append(self.inline)
        if self.blobbed is not None:
            rec.append(self.blobbed)
        return rec

    @classmethod
    def unpack(cls, rec: Any, where: str) -> CheckpointEnvelope:
        """A decoded record of any format, shape-checked.

        Raises:
            CorruptRecordError: ``rec`` is not a checkpoint record (naming ``where``).
        """
        try:
            if not isinstance(rec, list) or len(rec) < _FORMAT_1_FIELDS:
                raise ValueError(
                    f"{type(rec).__name__} of {len(rec) if isinstance(rec, list) else '?'} fields"
                )
            parent, versions, ctype, cbytes, mtype, mbytes, flags, run_id = rec[:_FORMAT_1_FIELDS]
            if not isinstance(versions, dict) or type(flags) is not int:
                raise ValueError("no versions map or flags")
            delta = rec[DELTA] if len(rec) > DELTA else []
            if not isinstance(delta, list):
                raise ValueError("delta channels are not a list")
        except ValueError as exc:
            raise CorruptRecordError(
                f"record {where} has an unexpected shape ({exc}); run `deltalog verify`"
            ) from exc
        return cls(
            parent,
            versions,
            (ctype, cbytes),
            (mtype, mbytes),
            flags,
            run_id,
            delta,
            inline_of(rec),
            blobbed_of(rec),
        )

    @property
    def parent_id(self) -> str | None:
        """The parent's checkpoint id (:func:`parent_out`)."""
        return parent_out(self.parent)

    @property
    def hidden(self) -> bool:
        """Kept only for a delta chain: not listed."""
        return bool(self.flags & FLAG_HIDDEN)


@dataclass
class RawNode:
    cid: str
    parent: str | None
    versions: dict[str, Version]
    delta: frozenset[str]
    flags: int
    run_id: str | None
    inline: frozenset[str]

    @classmethod
    def of(cls, rec: Any, key: bytes, extra_delta: frozenset[str]) -> RawNode:
        versions: dict[str, Version] = rec[VERSIONS]
        delta = (frozenset(rec[DELTA]) if len(rec) > DELTA else frozenset()) | extra_delta
        return cls(
            keys.decode_checkpoint_key(key)[2],
            parent_out(rec[PARENT]),
            versions,
            frozenset(c for c in delta if c in versions),
            rec[FLAGS],
            rec[RUN_ID],
            frozenset(c for c in inline_of(rec) if c in versions),
        )


def blobbed_of(rec: Any) -> int | None:
    """The ``blobbed`` mask of a checkpoint record (format 5), or None before it."""
    if len(rec) <= BLOBBED:
        return None
    mask = rec[BLOBBED]
    if type(mask) is not int or mask < 0:
        raise CorruptRecordError(
            f"checkpoint record holds a blob mask of an unexpected shape ({mask!r:.40}); "
            "run `deltalog verify`"
        )
    return mask


def inline_of(rec: Any) -> dict[str, Any]:
    """The values a checkpoint record holds itself (format 3): channel → [type, bytes]."""
    if len(rec) <= INLINE:
        return {}
    held = rec[INLINE]
    if not isinstance(held, dict) or not all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], bytes)
        for v in held.values()
    ):
        raise CorruptRecordError(
            f"checkpoint record holds inline values of an unexpected shape ({held!r:.80}); "
            "run `deltalog verify`"
        )
    return held


def inline_value(key: bytes, channel: str, typed: Any) -> StoredValue:
    """A value held in checkpoint record ``key`` as a :class:`StoredValue`.

    Its ``record`` (the key of the decoded-value caches) is the type and
    payload, which identify the value as a blob record's bytes do.
    """
    ctype, payload = typed
    return StoredValue(
        ctype.encode() + b"\x00" + payload,
        f"checkpoints/{key.hex()}[{channel!r}]",
        (ctype, payload),
    )


# The channel a run's input is stored in (LangGraph's ``START``). The checkpoint
# that takes the input stores it in a blob of this channel (or in its own record,
# see INPUT_INLINE_MAX), and the ``__start__`` task then writes the same values
# again, one write per state channel: on a chat, the human message twice. Since
# format 7 such a write holds a reference into the input instead of its payload
# (see input_ref).
INPUT_CHANNEL: Final = "__start__"
# Payloads shorter than this are stored as they are: a reference costs ~15 bytes.
REF_MIN: Final = 64
# The input of a run serialized to at most this many bytes (a chat's human
# message, usually) is held in the record of the checkpoint that takes it, like a
# small scalar: no blob entry, key and record frame (~50 bytes of LMDB page a
# turn on the benchmark's chats), and the ``__start__`` write's reference reads
# it from the cached envelope. Not a format change: readers of every format
# since 3 take any inline value. Bounded so that the record stays in its leaf
# page (LMDB moves a node above ~2 KB of a 4 KiB page to overflow pages) even
# when the input does not compress, and so that the copy a child record makes
# of an unchanged version (rare: the input's version changes when the first
# step consumes it) stays small.
INPUT_INLINE_MAX: Final = 1024


TaskPath = str | int
"""A task path as a write record holds it: the path (formats 7-9, and records
compressed ahead of their transaction) or, since format 10, its interned id
(kind :data:`~deltalog.engine.keys.KIND_TASK_PATH`): one to five bytes instead of
the ~25 of ``"~__pregel_pull, __start__"``, the most of a small write record."""


def write_record(typed: Typed, task_path: TaskPath) -> list[Any]:
    """The record of a write that holds its payload (format 7)."""
    return [typed[0], typed[1], task_path]


def input_ref(typed: Typed, task_path: TaskPath, source_id: int, source: Typed) -> list[Any] | None:
    """The record of a write as a reference into ``source`` (format 7), or None.

    ``source`` is the value the write's own checkpoint stores for the channel
    whose interned id is ``source_id`` (its input, :data:`INPUT_CHANNEL`). When
    the write's payload occurs in the source's payload (same serde type), the
    record is ``[type, None, task_path, [source_id, offset, length, crc32 of the
    payload]]``: :func:`read_write` reads it back, and the CRC makes a source
    that no longer holds those bytes an error, never another value.
    """
    ctype, payload = typed
    if len(payload) < REF_MIN or ctype != source[0]:
        return None
    offset = source[1].find(payload)
    if offset < 0:
        return None
    return [ctype, None, task_path, [source_id, offset, len(payload), zlib.crc32(payload)]]


WriteRef = tuple[int, int, int, int]
"""(source channel id, offset, length, crc32) of a write that refers to its input."""


def _is_path(value: Any) -> bool:
    """A task path as a record holds it: a string, or an interned id (format 10)."""
    return isinstance(value, str) or (type(value) is int and value > 0)


def read_write(rec: Any, where: str) -> tuple[str, bytes | WriteRef, TaskPath | None]:
    """A decoded write record: (type, payload or reference, task path).

    The task path is None in a record of formats 1-6 (``[type, bytes]``: the
    path is in the key), and an interned id in most records of format 10
    (:data:`TaskPath`; the reader looks its name up).

    Raises:
        CorruptRecordError: The record has none of the shapes.
    """
    n = len(rec) if isinstance(rec, list) else 0
    ctype = rec[0] if n else None
    if isinstance(ctype, str):
        if n == 2 and isinstance(rec[1], bytes):
            return ctype, rec[1], None
        if n == 3 and isinstance(rec[1], bytes) and _is_path(rec[2]):
            return ctype, rec[1], rec[2]
        ref = rec[3] if n == 4 and rec[1] is None and _is_path(rec[2]) else None
        if isinstance(ref, list) and len(ref) == 4 and all(type(x) is int and x >= 0 for x in ref):
            return ctype, (ref[0], ref[1], ref[2], ref[3]), rec[2]
    raise CorruptRecordError(
        f"record {where} is a write of an unexpected shape ({rec!r:.80}); run `deltalog verify`"
    )


def ref_payload(source: bytes, ref: WriteRef, where: str) -> bytes:
    """The payload a reference names in its source's payload, checked by its CRC."""
    _, offset, length, crc = ref
    payload = source[offset : offset + length]
    if len(payload) != length or zlib.crc32(payload) != crc:
        raise CorruptRecordError(
            f"record {where} refers to bytes {offset}..{offset + length} of its checkpoint's "
            "input, which hold something else; run `deltalog verify` and restore from a backup"
        )
    return payload


def split_write_value(raw: bytes) -> tuple[bytes, int, bytes]:
    """A write value: (channel uid bytes, channel id, framed record).

    The uid is covered by the record's CRC (``prefix=``); a length byte out of
    range is reported here.
    """
    if not raw or not 1 <= raw[0] <= 8 or len(raw) < 2 + raw[0]:
        raise CorruptRecordError(
            f"write value {bytes(raw[:12]).hex()}… has no valid channel id; run `deltalog verify`"
        )
    end = 1 + raw[0]
    return raw[:end], int.from_bytes(raw[1:end], "big"), raw[end:]


def parent_in(parent_id: str | None) -> bytes | None:
    """A parent id as stored in a checkpoint record: its encoded key bytes."""
    return None if parent_id is None else keys.encode_id(parent_id)


def parent_out(stored: Any) -> str | None:
    """The parent id string of a stored checkpoint record."""
    if stored is None:
        return None
    if isinstance(stored, str):  # never written by this format; tolerated on read
        return stored
    return keys.decode_id(bytes(stored), 0)[0]


def read_format_version(raw: bytes | None, path: str) -> int:
    """The stored ``meta/format_version``, checked: a readable format or FormatVersionError."""
    try:
        version = None if raw is None else ormsgpack.unpackb(raw)
    except Exception:
        version = bytes(raw or b"")
    if type(version) is int and version in keys.READABLE_FORMATS:
        return version
    shown = repr(version)
    shown = shown if len(shown) <= 80 else shown[:80] + "…"
    if type(version) is int and version > keys.FORMAT_VERSION:
        raise FormatVersionError(
            f"store {path!r} has format version {version}; this deltalog reads "
            f"format {keys.FORMAT_VERSION}. Upgrade deltalog to open it"
        )
    raise FormatVersionError(
        f"store {path!r} has format version {shown} (record meta/format_version), which no "
        f"deltalog wrote; this deltalog reads formats {sorted(keys.READABLE_FORMATS)}. The "
        "store is damaged: restore it from a backup"
    )
