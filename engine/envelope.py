"""The checkpoint and write record envelopes: what each stored field is, in one place.

Records (ormsgpack lists, framed by :mod:`deltalog.engine.codec`):

* checkpoint: ``[parent_id, channel_versions, ckpt_type, ckpt_bytes,
  meta_type, meta_bytes, flags, run_id, delta_channels, inline]`` — ``flags`` bit 0 =
  hidden (kept only for a delta chain, not listed); ``inline`` (format 3) holds
  scalar values of at most :data:`INLINE_MAX` serialized bytes.
* write: the channel's ``uid`` followed by the framed ``[type, bytes]`` — the
  prefix lets a walk skip other channels' writes with a short bytes compare.
* blob: framed ``[type, bytes]``. Empty channel versions store nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import ormsgpack
from deltalog.engine import keys
from deltalog.engine.errors import (
    CorruptRecordError,
    FormatVersionError,
)
from deltalog.engine.store_rows import (
    StoredValue,
    Version,
)

# Scalar channel values (None, bool, int, float, str) serialized to at most this
# many bytes are stored inside each checkpoint record that has them (format 3),
# not as blobs: no blob entry, key or B-tree page to write, and none to look up
# on a read. A value is copied into every checkpoint while unchanged; the bound
# caps that copy (PostgresSaver, which holds primitives the same way, has none).
INLINE_MAX: Final = 512


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
        versions: dict[str, Version] = rec[1]
        delta = (frozenset(rec[8]) if len(rec) > 8 else frozenset()) | extra_delta
        return cls(
            keys.decode_checkpoint_key(key)[2],
            parent_out(rec[0]),
            versions,
            frozenset(c for c in delta if c in versions),
            rec[6],
            rec[7],
            frozenset(c for c in inline_of(rec) if c in versions),
        )


def inline_of(rec: Any) -> dict[str, Any]:
    """The values a checkpoint record holds itself (format 3): channel → [type, bytes]."""
    if len(rec) <= 9:
        return {}
    held = rec[9]
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
