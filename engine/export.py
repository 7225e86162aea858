"""The portable export stream, format ``deltalog-export``: header, record kinds, line codec.

docs/cli.md ("The export stream") documents the stream, field by field; this
module owns it in code. The stream is JSON Lines: the header
``{"kind": "header", "format": "deltalog-export", "version": 2}`` on line 1,
then per thread its ``checkpoint``, ``blob`` and ``write`` records, then the
memory store's ``item`` records, then ``{"kind": "end", "records": N}`` with
the number of records between (version 2; version 1 streams end without it).
Values stay as the saver's serde wrote them; every ``bytes`` value is written
as ``{"$b64": "<base64>"}``.

Who builds the records: the store's read transaction (``export_thread``) the
checkpoint, blob and write records; :mod:`deltalog.engine.memory_export` the
item records. :func:`~deltalog.engine.import_check.check_import` validates a
decoded stream before anything is written.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from deltalog.engine.errors import ImportRecordError, InvalidInputError

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "KINDS",
    "READ_VERSIONS",
    "check_header",
    "decode_record",
    "encode_record",
    "end",
    "header",
    "read_lines",
]

EXPORT_FORMAT: Final = "deltalog-export"
#: The version written. Version 2 ends the stream with an ``end`` record
#: (:func:`end`), so a stream cut short on a line boundary is refused instead
#: of importing part of its threads; version 1 streams (no ``end``) still read.
EXPORT_VERSION: Final = 2
#: Every version this deltalog reads.
READ_VERSIONS: Final = (1, 2)
#: The record kinds after the header, in stream order (then ``end``, version 2).
KINDS: Final = ("checkpoint", "blob", "write", "item")

_B64 = "$b64"


def header() -> dict[str, Any]:
    """The first record of every stream.

    >>> header()
    {'kind': 'header', 'format': 'deltalog-export', 'version': 2}
    """
    return {"kind": "header", "format": EXPORT_FORMAT, "version": EXPORT_VERSION}


def end(records: int) -> dict[str, Any]:
    """The last record of a version 2 stream: how many records came between it
    and the header.

    >>> end(3)
    {'kind': 'end', 'records': 3}
    """
    return {"kind": "end", "records": records}


def check_header(record: Any) -> int:
    """Refuse a first record that is not a header of this format and a version
    this deltalog reads; return the version.

    Raises:
        ImportRecordError: For line 1, naming what was found.
    """
    if not isinstance(record, Mapping) or record.get("format") != EXPORT_FORMAT:
        raise ImportRecordError(
            1,
            f"the stream starts with {record!r:.80}, not a {EXPORT_FORMAT} header; pass the "
            "output of `deltalog export`",
        )
    version = record.get("version")
    if type(version) is not int or version not in READ_VERSIONS:
        raise ImportRecordError(
            1,
            f"export stream version {version!r:.40}; this deltalog reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}",
        )
    return version


def _encode(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {_B64: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        if list(value) == [_B64]:
            raise InvalidInputError(
                f"cannot export a mapping whose only key is {_B64!r}: it would read back as bytes"
            )
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _B64 in value:
            return base64.b64decode(value[_B64], validate=True)
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def encode_record(record: Mapping[str, Any]) -> str:
    """One export record as a JSON line (no newline), bytes as ``{"$b64": ...}``.

    >>> encode_record({"kind": "blob", "value": ["msgpack", b"\\x01"]})
    '{"kind":"blob","value":["msgpack",{"$b64":"AQ=="}]}'

    Raises:
        InvalidInputError: The record holds a mapping whose only key is ``"$b64"``.
    """
    return json.dumps(_encode(record), ensure_ascii=False, separators=(",", ":"))


def decode_record(line: str) -> dict[str, Any]:
    """Inverse of :func:`encode_record`.

    >>> decode_record('{"kind":"blob","value":["msgpack",{"$b64":"AQ=="}]}')
    {'kind': 'blob', 'value': ['msgpack', b'\\x01']}

    Raises:
        ValueError: The line is not a JSON object.
    """
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError(f"export line is not a JSON object: {line[:80]!r}")
    decoded: dict[str, Any] = _decode(value)
    return decoded


def read_lines(stream: Iterable[bytes]) -> tuple[list[Any], list[int]]:
    """Every non-blank line of an import stream, decoded, and its line number.

    A line that is JSON but not an object is kept: the validation pass names it.

    Raises:
        ImportRecordError: A line is not UTF-8, not JSON, has bad base64 or nests too deep.
    """
    records: list[Any] = []
    numbers: list[int] = []
    for number, raw in enumerate(stream, 1):
        try:
            line = raw.decode("utf-8")
            if not line.strip():
                continue
            records.append(_decode(json.loads(line)))
        except (ValueError, RecursionError) as exc:
            # json's and base64's errors, UnicodeDecodeError, nesting too deep to decode.
            reason = "nested too deeply" if isinstance(exc, RecursionError) else _one_line(exc)
            raise ImportRecordError(number, reason) from None
        numbers.append(number)
    return records, numbers


def _one_line(exc: BaseException) -> str:
    """``TypeName: message`` on one line (json's messages are single lines already)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
