"""The validation pass of an import: every record of an export stream checked before a write.

:func:`check_import` is pure: it takes the decoded records of a
``deltalog-export`` stream (:mod:`deltalog.engine.export`; docs/cli.md, "The export stream") and returns
them normalized, or raises :class:`~deltalog.engine.errors.ImportRecordError`
naming the line (record ``i`` of the stream is line ``i`` of an export file;
the header is line 1) and the fix. Only then does the store open its write
transaction, so a bad stream writes nothing (issue 15.8).

What it refuses: a record that is not an object, a missing or second header,
an unknown ``kind``, a field of the wrong type, a name that is not valid
Unicode, an id, version or index the key layout cannot hold (NaN and
infinite float versions too), a value pair ``[type, bytes]`` whose type the
store's serde would not load (``pickle`` unless the serde has its pickle
fallback on) or whose ``msgpack``/``json`` bytes do not parse, a checkpoint
or metadata body that is not a mapping, duplicate checkpoints, values or
writes, and parent cycles (a self-parent included) within a namespace. A
memory ``item`` record is checked as a put would be (namespace labels, key,
JSON value), with its instants, TTL and float32 vectors; a duplicate item too.
Parsing never constructs a value: msgpack extension types (the ones a
serde's type hooks would turn into objects) are skipped, not called.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import ormsgpack
from deltalog.engine import keys
from deltalog.engine.errors import DeltaLogError, ImportRecordError, InvalidInputError
from deltalog.engine.export import EXPORT_FORMAT, EXPORT_VERSION, KINDS, check_header
from deltalog.engine.store_rows import FLAG_HIDDEN
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "check_import", "serde_types"]

#: The type tags LangGraph's JsonPlusSerializer.loads_typed accepts (pickle only with its fallback).
_JSONPLUS_TYPES: Final = frozenset({"null", "bytes", "bytearray", "json", "msgpack"})
_KNOWN_FLAGS: Final = FLAG_HIDDEN
#: Largest microsecond/millisecond instant an item record may carry (the u64 TTL index).
_MAX_INSTANT: Final = 2**63 - 1


def serde_types(serde: SerializerProtocol) -> Callable[[str], bool] | None:
    """Which value type tags ``serde`` loads, or None when its type is not known here.

    >>> accepts = serde_types(JsonPlusSerializer())
    >>> accepts("msgpack"), accepts("pickle")
    (True, False)
    """
    if isinstance(serde, JsonPlusSerializer):
        types = _JSONPLUS_TYPES | ({"pickle"} if serde.pickle_fallback else set())
        return types.__contains__
    if isinstance(serde, EncryptedSerializer):
        inner = serde_types(serde.serde)
        if inner is None:
            return None
        # "msgpack+aes": the inner type, encrypted; unencrypted values pass to the inner serde.
        return lambda tag: inner(tag.split("+", 1)[0])
    return None


def _never_construct(code: int, data: bytes) -> None:
    """The ext hook of the parse check: an extension type is skipped, never built."""
    return None


class _Checker:
    """State of one validation pass (duplicates, parents per namespace)."""

    def __init__(self, accepts: Callable[[str], bool] | None, serde_name: str) -> None:
        self.accepts = accepts
        self.serde_name = serde_name
        self.line = 0
        self.checkpoints: dict[tuple[str, str, str], int] = {}
        self.parents: dict[tuple[str, str], dict[str, str | None]] = {}
        self.blobs: dict[tuple[str, str, str, Any], int] = {}
        self.writes: dict[tuple[str, str, str, str, int], int] = {}
        self.first_lines: dict[str, int] = {}
        self.items: dict[tuple[tuple[str, ...], str], int] = {}

    def fail(self, reason: str) -> ImportRecordError:
        return ImportRecordError(self.line, reason)

    def field(self, rec: Mapping[str, Any], name: str, kind: str) -> Any:
        if name not in rec:
            raise self.fail(
                f"the {kind} record has no {name!r} field; pass `deltalog export` output"
            )
        return rec[name]

    def text(self, rec: Mapping[str, Any], name: str, kind: str, *, optional: bool = False) -> Any:
        value = self.field(rec, name, kind)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            want = "a string or null" if optional else "a string"
            raise self.fail(f"{name} {value!r:.60} is a {type(value).__name__}, not {want}")
        try:
            keys.name_key(b"t", value)
        except InvalidInputError as exc:
            raise self.fail(f"{name}: {exc}") from None
        return value

    def checkpoint_id(self, rec: Mapping[str, Any], name: str, kind: str) -> Any:
        value = self.text(rec, name, kind, optional=name == "parent_id")
        if value is None:
            return None
        if not value:
            raise self.fail(f"{name} is empty; a checkpoint id is a non-empty string")
        self.wrap(lambda: keys.encode_id(value), name)
        return value

    def version(self, value: Any, what: str) -> Any:
        if type(value) not in (str, int, float):
            raise self.fail(
                f"{what} {value!r:.60} is a {type(value).__name__}; versions are strings, "
                "ints or floats"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(f"{what} {value!r} is not a finite number")
        self.wrap(lambda: keys.encode_version(value), what)
        return value

    def wrap(self, check: Callable[[], object], what: str) -> None:
        try:
            check()
        except DeltaLogError as exc:
            raise self.fail(f"{what}: {exc}") from None

    def typed(self, rec: Mapping[str, Any], name: str, kind: str, *, body: bool = False) -> Any:
        value = self.field(rec, name, kind)
        if not (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and isinstance(value[0], str)
            and isinstance(value[1], bytes)
        ):
            raise self.fail(
                f'{name} {value!r:.60} is not a [type, bytes] pair (bytes as {{"$b64": ...}})'
            )
        tag, data = value
        if self.accepts is not None and not self.accepts(tag):
            raise self.fail(
                f"{name} has type {tag!r}, which this store's serde ({self.serde_name}) does not "
                "load; import into a store opened with a serde that does, or re-export from the "
                "source store"
            )
        if body and tag in _JSONPLUS_TYPES - {"msgpack", "json"}:
            raise self.fail(f"{name} has type {tag!r}: a body must be a mapping")
        parsed: Any = None
        try:
            if tag == "msgpack":
                parsed = ormsgpack.unpackb(
                    data, ext_hook=_never_construct, option=ormsgpack.OPT_NON_STR_KEYS
                )
            elif tag == "json":
                parsed = json.loads(data)
            elif tag == "null" and data:
                raise ValueError("a null value carries no bytes")
            else:
                return (tag, data)
        except (ValueError, TypeError, ormsgpack.MsgpackDecodeError) as exc:
            raise self.fail(f"{name}: its {tag} bytes do not parse ({exc})") from None
        if body and not isinstance(parsed, dict):
            raise self.fail(f"{name} holds a {type(parsed).__name__}, not a mapping")
        return (tag, data)

    def record(self, rec: Any) -> dict[str, Any]:
        if not isinstance(rec, Mapping):
            raise self.fail(f"the record is a {type(rec).__name__}, not an object")
        kind = rec.get("kind")
        if kind == "header":
            raise self.fail("a second header; concatenate streams by importing them one by one")
        if kind not in KINDS:
            raise self.fail(f"kind {kind!r:.40} is unknown; expected one of {', '.join(KINDS)}")
        if kind == "item":
            return self.item(rec)
        thread_id = self.text(rec, "thread_id", kind)
        ns = self.text(rec, "checkpoint_ns", kind)
        self.first_lines.setdefault(thread_id, self.line)
        out: dict[str, Any] = {"kind": kind, "thread_id": thread_id, "checkpoint_ns": ns}
        if kind == "checkpoint":
            self.checkpoint(rec, out)
        elif kind == "blob":
            channel = self.text(rec, "channel", kind)
            version = self.version(self.field(rec, "version", kind), "version")
            out.update(channel=channel, version=version, value=self.typed(rec, "value", kind))
            where = (thread_id, ns, channel, (type(version), version))
            self.duplicate(self.blobs, where, f"value of channel {channel!r} at {version!r}")
        else:
            cid = self.checkpoint_id(rec, "checkpoint_id", kind)
            task_id = self.text(rec, "task_id", kind)
            task_path = self.text(rec, "task_path", kind)
            idx = self.field(rec, "idx", kind)
            if type(idx) is not int:
                raise self.fail(f"idx {idx!r:.40} is a {type(idx).__name__}, not an int")
            self.wrap(lambda: keys.write_key(1, 1, keys.encode_id(cid), task_id, idx), "write")
            channel = self.text(rec, "channel", kind)
            out.update(
                checkpoint_id=cid,
                task_id=task_id,
                task_path=task_path,
                idx=idx,
                channel=channel,
                value=self.typed(rec, "value", kind),
            )
            # A store keeps one write per (task_id, idx) of a checkpoint (format 7).
            where5 = (thread_id, ns, cid, task_id, idx)
            self.duplicate(self.writes, where5, f"write {idx} of task {task_id!r} under {cid!r}")
        return out

    def checkpoint(self, rec: Mapping[str, Any], out: dict[str, Any]) -> None:
        kind = "checkpoint"
        cid = self.checkpoint_id(rec, "checkpoint_id", kind)
        parent = self.checkpoint_id(rec, "parent_id", kind)
        if parent == cid:
            raise self.fail(f"checkpoint {cid!r} names itself as its parent (a cycle)")
        versions = self.field(rec, "channel_versions", kind)
        if not isinstance(versions, dict):
            raise self.fail(f"channel_versions {versions!r:.60} is not an object")
        for channel, version in versions.items():
            if not isinstance(channel, str):
                raise self.fail(f"channel name {channel!r} is not a string")
            self.wrap(functools.partial(keys.name_key, b"c", channel), "channel name")
            self.version(version, f"version of channel {channel!r}")
        delta = rec.get("delta", [])
        if not isinstance(delta, list) or not all(isinstance(c, str) for c in delta):
            raise self.fail(f"delta {delta!r:.60} is not a list of channel names")
        flags = rec.get("flags", 0)
        if type(flags) is not int or flags & ~_KNOWN_FLAGS or flags < 0:
            raise self.fail(f"flags {flags!r:.40} is not 0 or {_KNOWN_FLAGS} (hidden)")
        run_id = self.text(rec, "run_id", kind, optional=True)
        if run_id is not None:
            self.wrap(lambda: keys.encode_run(run_id), "run_id")
        out.update(
            checkpoint_id=cid,
            parent_id=parent,
            channel_versions=dict(versions),
            checkpoint=self.typed(rec, "checkpoint", kind, body=True),
            metadata=self.typed(rec, "metadata", kind, body=True),
            flags=flags,
            run_id=run_id,
            delta=list(delta),
        )
        group = (out["thread_id"], out["checkpoint_ns"])
        self.duplicate(self.checkpoints, (*group, cid), f"checkpoint {cid!r}")
        self.parents.setdefault(group, {})[cid] = parent

    def item(self, rec: Mapping[str, Any]) -> dict[str, Any]:
        """A memory store item (deltalog.engine.memory_export), checked as a put would be."""
        from deltalog.engine import memory_core as core

        kind = "item"
        try:
            ns = core.validate_labels(self.field(rec, "namespace", kind))
        except InvalidInputError as exc:
            raise self.fail(f"namespace: {exc}") from None
        key = self.field(rec, "key", kind)
        if not isinstance(key, str):
            raise self.fail(f"key {key!r:.60} is a {type(key).__name__}, not a string")
        self.wrap(lambda: keys.item_key(1, key), "key")
        try:
            value = core.check_value(self.field(rec, "value", kind), f"item {key!r:.60}")
        except InvalidInputError as exc:
            raise self.fail(str(exc)) from None
        instants: dict[str, int | None] = {}
        for name in ("created_us", "updated_us", "expires_ms"):
            at = self.field(rec, name, kind)
            if at is None and name == "expires_ms":
                instants[name] = None
                continue
            if type(at) is not int or not 0 <= at <= _MAX_INSTANT:
                raise self.fail(
                    f"{name} {at!r:.40} is not an int instant in 0..2**63-1"
                    + (" (or null: never expires)" if name == "expires_ms" else "")
                )
            instants[name] = at
        try:
            ttl = core.check_ttl(self.field(rec, "ttl_minutes", kind), "ttl_minutes")
        except InvalidInputError as exc:
            raise self.fail(str(exc)) from None
        if (ttl is None) != (instants["expires_ms"] is None):
            raise self.fail(
                f"ttl_minutes {ttl!r} and expires_ms {instants['expires_ms']!r} disagree: an "
                "item with a TTL has an expiry and one without has none"
            )
        out: dict[str, Any] = {
            "kind": kind,
            "namespace": ns,
            "key": key,
            "value": value,
            "ttl_minutes": ttl,
            "vectors": self.vectors(self.field(rec, "vectors", kind)),
            "line": self.line,
            **instants,
        }
        self.duplicate(self.items, (ns, key), f"item {key!r:.60} of namespace {ns!r:.60}")
        return out

    def vectors(self, found: Any) -> list[dict[str, Any]]:
        if not isinstance(found, list) or len(found) > 0xFFFF:
            raise self.fail(f"vectors {found!r:.60} is not a list (of at most 65535 records)")
        out: list[dict[str, Any]] = []
        for i, vec in enumerate(found):
            what = f"vectors[{i}]"
            if not isinstance(vec, Mapping):
                raise self.fail(f"{what} {vec!r:.60} is not an object")
            path, digest, data = (
                self.field(vec, n, "vector") for n in ("path", "digest", "vector")
            )
            if not isinstance(path, str) or not path:
                raise self.fail(f"{what}.path {path!r:.60} is not a non-empty string")
            if not isinstance(digest, bytes) or len(digest) != 16:
                raise self.fail(f"{what}.digest {digest!r:.60} is not 16 bytes")
            if not isinstance(data, bytes) or not data or len(data) % 4:
                raise self.fail(
                    f"{what}.vector {data!r:.40} is not float32 bytes (a non-empty multiple of 4)"
                )
            floats = memoryview(data).cast("f")
            if not all(math.isfinite(x) for x in floats):
                raise self.fail(f"{what}.vector holds a NaN or infinite float")
            out.append({"path": path, "digest": digest, "vector": data})
        return out

    def duplicate(self, seen: dict[Any, int], where: Any, what: str) -> None:
        first = seen.setdefault(where, self.line)
        if first != self.line:
            raise self.fail(f"{what} appears twice (first on line {first})")

    def cycles(self) -> None:
        """Refuse a parent chain that returns to a checkpoint it left (within one namespace)."""
        for (thread_id, ns), parents in self.parents.items():
            done: set[str] = set()
            for start in parents:
                path: list[str] = []
                on_path: set[str] = set()
                cid: str | None = start
                while cid is not None and cid in parents and cid not in done:
                    if cid in on_path:
                        loop = path[path.index(cid) :]
                        self.line = self.checkpoints[(thread_id, ns, cid)]
                        raise self.fail(
                            f"the parents of checkpoint {cid!r} (thread {thread_id!r}, namespace "
                            f"{ns!r}) form a cycle of {len(loop)}: {' -> '.join(loop)} -> {cid}"
                        )
                    path.append(cid)
                    on_path.add(cid)
                    cid = parents[cid]
                done.update(path)


def check_import(
    records: Iterable[Any], serde: SerializerProtocol
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Validate a whole export stream (header first) without writing anything.

    Args:
        records: The decoded records, header first (``export_records`` output,
            or ``decode_record`` of each line of an export file).
        serde: The importing saver's serializer: values whose type it would
            not load are refused.

    Returns:
        The records after the header, normalized, and the line of each
        thread's first record.

    Raises:
        InvalidInputError: ``records`` is not an iterable of records.
        ImportRecordError: A record is malformed (the message names its line).
    """
    if isinstance(records, (str, bytes, bytearray, Mapping)) or not isinstance(records, Iterable):
        raise InvalidInputError(
            f"import_records got {records!r:.60} (a {type(records).__name__}); pass an iterable "
            "of export records, e.g. saver.export_records() or decode_record() of each line"
        )
    checker = _Checker(serde_types(serde), type(serde).__name__)
    rows: list[dict[str, Any]] = []
    version, ended = 0, False
    for checker.line, rec in enumerate(records, 1):
        if checker.line == 1:
            version = check_header(rec)
        elif ended:
            raise checker.fail("a record after the end record; import streams one by one")
        elif version >= 2 and isinstance(rec, Mapping) and rec.get("kind") == "end":
            count = rec.get("records")
            if type(count) is not int or count != len(rows):
                raise checker.fail(
                    f"the end record counts {count!r:.20} records, the stream has {len(rows)}: "
                    "records are missing or were added since the export (a stream cut or "
                    "edited; to import part of a store, export just that: "
                    "export_records(thread_ids, items=...))"
                )
            ended = True
        else:
            rows.append(checker.record(rec))
    if checker.line == 0:
        raise ImportRecordError(1, "the stream is empty; pass the output of `deltalog export`")
    if version >= 2 and not ended:
        raise ImportRecordError(
            checker.line + 1,
            f"the stream ends after {len(rows)} records without its end record: it was cut "
            "short (an interrupted export or copy); export again",
        )
    checker.cycles()
    return rows, checker.first_lines
