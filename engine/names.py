"""The records of the name tables (``names``, ``names_rev``), checksummed since format 4.

Every key of a thread, namespace or channel holds an interned id, so these two
tables decide whose data a read returns: before format 4 one flipped bit in a
thread's id made ``get_state`` of that thread return another thread's
checkpoints. Each record now ends in a CRC-32 that covers its key as well as
its value (R11), so a flipped bit in either gives :class:`CorruptRecordError`
naming the record:

==========  ================================================  ==========================
database    value (format 4)                                  value (formats 1-3)
==========  ================================================  ==========================
names       id (u64 BE) · [UTF-8 name, hashed keys only]      id (u64 BE) · [UTF-8 name]
            · crc32(key · the preceding bytes) (u32 BE)
names_rev   UTF-8 name · crc32(key · name) (u32 BE)           UTF-8 name
==========  ================================================  ==========================

The CRC covering the key matters for ``names``: a bit flipped in the name part
of a key would otherwise hand one name's id to another name.
"""

from __future__ import annotations

import zlib
from typing import Final

from deltalog.engine.errors import CorruptRecordError

__all__ = [
    "NAMES_CRC_FORMAT",
    "decode_name_id",
    "decode_name_rev",
    "encode_name_id",
    "encode_name_rev",
]

#: First format whose name records carry a CRC.
NAMES_CRC_FORMAT: Final = 4
_CRC: Final = 4
_ID: Final = 8


def _crc(key: bytes, body: bytes) -> bytes:
    return zlib.crc32(body, zlib.crc32(key)).to_bytes(_CRC, "big")


def _damaged(db: str, key: bytes, why: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"record {db}/{bytes(key).hex()} is damaged ({why}); reads of that name are refused "
        "rather than risk another thread's data. Run `deltalog verify` and restore the store "
        "from a backup"
    )


def _checked(db: str, key: bytes, raw: bytes, crc: bool) -> bytes:
    """The body of a name record, its CRC checked when the format has one."""
    if not crc:
        return bytes(raw)
    if len(raw) < _CRC or _crc(key, raw[:-_CRC]) != bytes(raw[-_CRC:]):
        raise _damaged(db, key, "checksum mismatch")
    return bytes(raw[:-_CRC])


def encode_name_id(key: bytes, name_id: int, name: str | None) -> bytes:
    """The ``names`` value for ``key``; ``name`` is kept only for hashed keys."""
    body = name_id.to_bytes(_ID, "big") + (b"" if name is None else name.encode("utf-8"))
    return body + _crc(key, body)


def decode_name_id(key: bytes, raw: bytes, *, crc: bool = True) -> tuple[int, str | None]:
    """Split a ``names`` value into (id, stored full name or None).

    Args:
        key: The record's key (covered by the CRC).
        raw: The stored value.
        crc: False for stores of formats 1-3, whose records have none.

    Raises:
        CorruptRecordError: The CRC does not match, or the record is malformed.
    """
    body = _checked("names", key, raw, crc)
    if len(body) < _ID or (len(body) > _ID) != (key[1:2] == b"\x01"):
        raise _damaged("names", key, f"{len(body)}-byte value")
    try:
        name = body[_ID:].decode("utf-8") if len(body) > _ID else None
    except UnicodeDecodeError as exc:
        raise _damaged("names", key, f"stored name is not UTF-8: {exc.reason}") from None
    return int.from_bytes(body[:_ID], "big"), name


def encode_name_rev(key: bytes, name: str) -> bytes:
    """The ``names_rev`` value for ``key``."""
    body = name.encode("utf-8")
    return body + _crc(key, body)


def decode_name_rev(key: bytes, raw: bytes, *, crc: bool = True) -> str:
    """The name of a ``names_rev`` value (see :func:`decode_name_id` for ``crc``)."""
    body = _checked("names_rev", key, raw, crc)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _damaged("names_rev", key, f"name is not UTF-8: {exc.reason}") from None
