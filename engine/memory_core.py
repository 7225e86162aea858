"""The pure core of the long-term memory store: fed plain data, no I/O.

Namespace validation and matching (``list_namespaces``), filter evaluation
(``search``), TTL arithmetic and cosine top-k scoring live here, so that each
can be tested with plain values. :mod:`deltalog.engine.memory_io` reads and
writes the records; :mod:`deltalog.engine.memory` is the LangGraph adapter.

Filters follow ``InMemoryStore`` (the reference in langgraph-checkpoint) with
its bugs left out: numbers compare as numbers (``1 == 1.0``, never equal to
``True``), a range operator on a missing field or on values of different kinds
is false instead of raising, and a dotted key (``"a.b"``) reaches into nested
objects when the value has no literal ``"a.b"`` key (as SqliteStore's JSON path
does).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from deltalog.engine import keys
from deltalog.engine.errors import CorruptRecordError, ItemValueError, NamespaceError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "OPERATORS",
    "Changes",
    "ItemRecord",
    "best_scores",
    "bump_counts",
    "check_filter",
    "check_ttl",
    "check_value",
    "copy_value",
    "cosines",
    "decode_counter",
    "decode_counts",
    "encode_counter",
    "encode_counts",
    "expires_at",
    "field_value",
    "index_plan",
    "is_expired",
    "list_namespaces",
    "matches_condition",
    "matches_filter",
    "namespace_matcher",
    "next_counter",
    "ns_of",
    "ranked_rows",
    "row_norms",
    "validate_labels",
    "validate_namespace",
]

OPERATORS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
# Nesting deeper than this is refused (msgpack and the filter walk recurse).
MAX_DEPTH: Final = 64


# -- namespaces -----------------------------------------------------------------------


def validate_labels(namespace: Any, what: str = "namespace") -> tuple[str, ...]:
    """Check every label of a namespace or pattern; return it as a tuple.

    Raises:
        NamespaceError: A label is not a string, is empty, or holds ``.`` or NUL.
    """
    if isinstance(namespace, str) or not isinstance(namespace, (tuple, list)):
        raise NamespaceError(
            f"{what} {namespace!r} is not a tuple of labels; pass e.g. ('users', 'u1')"
        )
    for label in namespace:
        if not isinstance(label, str):
            raise NamespaceError(
                f"{what} {tuple(namespace)!r}: label {label!r} is a {type(label).__name__}; "
                "namespace labels must be strings"
            )
        if not label:
            raise NamespaceError(f"{what} {tuple(namespace)!r}: labels cannot be empty strings")
        if "." in label:
            raise NamespaceError(
                f"{what} {tuple(namespace)!r}: label {label!r} contains a period ('.'); "
                "split it into separate labels"
            )
        if "\x00" in label:
            raise NamespaceError(
                f"{what} {tuple(namespace)!r}: label {label!r} contains a NUL byte"
            )
        try:
            label.encode("utf-8")
        except UnicodeEncodeError:
            raise NamespaceError(
                f"{what} {tuple(namespace)!r}: label {label!r} is not valid Unicode"
            ) from None
    return tuple(namespace)


def validate_namespace(namespace: Any) -> tuple[str, ...]:
    """Check the namespace of a put: non-empty, valid labels, root not ``langgraph``."""
    ns = validate_labels(namespace)
    if not ns:
        raise NamespaceError("namespace () is empty; pass at least one label, e.g. ('users',)")
    if ns[0] == "langgraph":
        raise NamespaceError(
            f'namespace {ns!r}: the root label "langgraph" is reserved; use another root'
        )
    return ns


def matches_condition(match_type: str, path: Sequence[str], namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` matches a prefix/suffix pattern (``"*"`` matches any label)."""
    if len(namespace) < len(path):
        return False
    if match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ItemValueError(
            f"match_type {match_type!r} is not supported; use 'prefix' or 'suffix'"
        )
    return all(p == "*" or n == p for n, p in pairs)


def namespace_matcher(
    conditions: Iterable[tuple[str, Sequence[str]]],
) -> Callable[[tuple[str, ...]], bool]:
    """A predicate equal to ``all(matches_condition(t, p, ns) for t, p in conditions)``,
    with plain tuple comparisons for patterns without wildcards."""
    tests: list[Callable[[tuple[str, ...]], bool]] = []
    for match_type, path in conditions:
        pattern = tuple(path)
        n = len(pattern)
        tests.append(_one_matcher(match_type, pattern, n))
    if not tests:
        return lambda ns: True
    if len(tests) == 1:
        return tests[0]
    return lambda ns: all(test(ns) for test in tests)


def _one_matcher(
    match_type: str, pattern: tuple[str, ...], n: int
) -> Callable[[tuple[str, ...]], bool]:
    if "*" in pattern or match_type not in ("prefix", "suffix"):
        return lambda ns: matches_condition(match_type, pattern, ns)
    if match_type == "prefix":
        return lambda ns: ns[:n] == pattern
    return lambda ns: len(ns) >= n and ns[len(ns) - n :] == pattern


def list_namespaces(
    namespaces: Iterable[tuple[str, ...]],
    conditions: Iterable[tuple[str, Sequence[str]]],
    *,
    max_depth: int | None,
    limit: int,
    offset: int,
) -> list[tuple[str, ...]]:
    """The ``list_namespaces`` answer over the namespaces that hold items.

    Matching namespaces are truncated to ``max_depth``, de-duplicated, sorted,
    then paged by ``offset``/``limit``.
    """
    match = namespace_matcher(conditions)
    kept = {ns[:max_depth] if max_depth is not None else ns for ns in namespaces if match(ns)}
    return sorted(kept)[offset : offset + limit]


# -- values and filters ---------------------------------------------------------------


def check_value(value: Any, what: str | Callable[[], str]) -> dict[str, Any]:
    """A JSON-compatible copy of an item value (tuples become lists).

    ``what`` names the value in error messages (a callable is only called
    to raise one).

    Raises:
        ItemValueError: ``value`` is not a mapping with string keys, or holds a
            value JSON cannot carry (the message names its path).
    """
    if type(value) is dict:
        try:
            return _copy_json(value, 0)  # type: ignore[no-any-return]
        except _Unusual:  # a subclass, a bad value: the checks below name what and where
            pass
    name = what() if callable(what) else what
    if not isinstance(value, Mapping):
        raise ItemValueError(
            f"{name}: value {value!r:.80} is a {type(value).__name__}; pass a dict of "
            "JSON values (or None to delete)"
        )
    out: dict[str, Any] = _json(value, name, "$", 0)
    return out


class _Unusual(Exception):
    """:func:`_copy_json` met a value it leaves to :func:`_json`."""


def _copy_json(value: Any, depth: int) -> Any:
    """:func:`_json` for plain ``dict``/``list``/scalar trees, without the path
    strings its messages need (a put's value is checked before every write):
    anything else, sound or not, raises :class:`_Unusual` and is checked again
    by :func:`_json`, so both accept exactly the same values."""
    t = type(value)
    if t is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate
                raise _Unusual from None
        return value
    if t is dict:
        if depth >= MAX_DEPTH:
            raise _Unusual
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _Unusual
            tv = type(v)
            # The common leaves in line (their calls were 28 % of a three-key
            # value's check); the rest, and any doubt, go through the call.
            if (tv is int and -(2**63) <= v < 2**64) or (tv is str and v.isascii()):
                out[k] = v
            else:
                out[k] = _copy_json(v, depth + 1)
        return out
    if t is int:
        if not -(2**63) <= value < 2**64:
            raise _Unusual
        return value
    if value is None or t is bool:
        return value
    if t is float:
        if not math.isfinite(value):
            raise _Unusual
        return value
    if t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise _Unusual
        return [_copy_json(v, depth + 1) for v in value]
    raise _Unusual


def _json(value: Any, what: str, path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ItemValueError(f"{what}: value nests deeper than {MAX_DEPTH} levels at {path}")
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ItemValueError(
                    f"{what}: string at {path} is not valid Unicode (lone surrogate)"
                ) from None
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise ItemValueError(
                f"{what}: integer {value} at {path} does not fit 64 bits; store it as a string"
            )
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ItemValueError(
                f"{what}: {value} at {path} is not a JSON number; store finite floats"
            )
        return float(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ItemValueError(
                    f"{what}: key {k!r} at {path} is a {type(k).__name__}; JSON object keys "
                    "must be strings"
                )
            out[k] = _json(v, what, f"{path}.{k}", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_json(v, what, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise ItemValueError(
        f"{what}: {type(value).__name__} at {path} is not a JSON value; convert it to "
        "str, int, float, bool, None, list or dict before storing"
    )


def copy_value(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a checked JSON value (dicts, lists, scalars)."""
    out = dict(value)  # scalars are shared; only containers need copies
    for k, v in value.items():
        if type(v) is dict or type(v) is list:
            out[k] = _copy(v)
    return out


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


def check_filter(flt: Any) -> None:
    """Refuse a filter with non-string keys or unknown ``$`` operators."""
    if flt is None:
        return
    if not isinstance(flt, Mapping):
        raise ItemValueError(f"filter {flt!r:.80} is not a dict; pass e.g. {{'status': 'done'}}")
    for key, cond in flt.items():
        if not isinstance(key, str):
            raise ItemValueError(f"filter key {key!r} is not a string")
        _check_cond(cond)


def _check_cond(cond: Any) -> None:
    if isinstance(cond, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in cond):
            for k in cond:
                if k not in OPERATORS:
                    raise ItemValueError(
                        f"filter operator {k!r} is not supported; use one of {sorted(OPERATORS)}"
                    )
        else:
            for v in cond.values():
                _check_cond(v)


def _field(value: Mapping[str, Any], key: str) -> Any:
    if key in value:
        return value[key]
    if "." in key:
        current: Any = value
        for part in key.split("."):
            if not isinstance(current, Mapping) or part not in current:
                return None
            current = current[part]
        return current
    return None


def field_value(value: Mapping[str, Any], key: str) -> Any:
    """The value a filter key reaches (a literal key first, then a dotted path); None if none."""
    return _field(value, key)


def index_plan(flt: Mapping[str, Any] | None) -> tuple[str, str, Any, Any] | None:
    """A filter key a sorted value index can answer: ``(key, kind, low, high)``.

    Every item the filter matches has, at ``key``, a value of ``kind``
    (``"num"``: int or float, never bool; ``"str"``) within ``[low, high]``
    (None: unbounded): the index gives a superset, which the caller checks
    with :func:`matches_filter`. None when no condition is of that form
    (``$ne``, bools, nested dicts, lists, mixed kinds).
    """
    if not flt:
        return None
    for key, cond in flt.items():
        if isinstance(cond, Mapping):
            if not cond or not all(op in ("$eq", "$gt", "$gte", "$lt", "$lte") for op in cond):
                continue
            operands = list(cond.values())
        else:
            operands, cond = [cond], {"$eq": cond}
        if all(_is_number(v) for v in operands):
            kind = "num"
        elif all(isinstance(v, str) for v in operands):
            kind = "str"
        else:
            continue
        lows = [v for op, v in cond.items() if op in ("$eq", "$gt", "$gte")]
        highs = [v for op, v in cond.items() if op in ("$eq", "$lt", "$lte")]
        return key, kind, max(lows) if lows else None, min(highs) if highs else None
    return None


def matches_filter(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """Whether an item value passes a search filter (all conditions must hold)."""
    if not flt:
        return True
    return all(_matches(_field(value, key), cond) for key, cond in flt.items())


def _matches(actual: Any, cond: Any) -> bool:
    if isinstance(cond, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in cond):
            return all(_apply(actual, op, operand) for op, operand in cond.items())
        if not isinstance(actual, Mapping):
            return False
        return all(_matches(actual.get(k), v) for k, v in cond.items())
    if isinstance(cond, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(cond)
            and all(_matches(a, c) for a, c in zip(actual, cond, strict=False))
        )
    return _equal(actual, cond)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=False))
    return bool(a == b)


def _apply(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return _equal(actual, operand)
    if op == "$ne":
        return not _equal(actual, operand)
    if _is_number(actual) and _is_number(operand):
        pass
    elif not (isinstance(actual, str) and isinstance(operand, str)):
        return False  # missing field, or values of different kinds
    if op == "$gt":
        return bool(actual > operand)
    if op == "$gte":
        return bool(actual >= operand)
    if op == "$lt":
        return bool(actual < operand)
    if op == "$lte":
        return bool(actual <= operand)
    raise ItemValueError(f"filter operator {op!r} is not supported; use one of {sorted(OPERATORS)}")


# -- count records (item_ns, format 5) ------------------------------------------------

_COUNTER = struct.Struct(">QI")
_COUNTS = struct.Struct(">QQI")
_COUNTS_BODY = struct.Struct(">QQ")


#: The CRC-32 of the change counter's key: the seed of its record's CRC.
_COUNTER_SEED: Final = zlib.crc32(keys.ITEM_CHANGES)


def encode_counter(value: int) -> bytes:
    """The change counter record (u64 and a CRC-32 over key and value)."""
    raw = value.to_bytes(8, "big")
    return raw + zlib.crc32(raw, _COUNTER_SEED).to_bytes(4, "big")


def decode_counter(raw: bytes) -> int:
    """The change counter; CorruptRecordError if the record is damaged."""
    if len(raw) != _COUNTER.size:
        raise CorruptRecordError(f"item_ns change counter is {len(raw)} bytes, not 12")
    value, crc = _COUNTER.unpack(raw)
    if zlib.crc32(raw[:8], _COUNTER_SEED) != crc:
        raise CorruptRecordError("item_ns change counter fails its checksum")
    return int(value)


def next_counter(raw: bytes | None) -> tuple[int | None, int, bytes]:
    """One more memory change: the counter in ``raw`` (None: no counter yet), the
    count after it and its record (:func:`decode_counter` and :func:`encode_counter`
    in one call, as every memory write op makes it).

    Raises:
        CorruptRecordError: ``raw`` is damaged (as :func:`decode_counter`).
    """
    if raw is None:
        before, after = None, 1
    else:  # decode_counter in line
        if len(raw) != _COUNTER.size:
            raise CorruptRecordError(f"item_ns change counter is {len(raw)} bytes, not 12")
        before, crc = _COUNTER.unpack(raw)
        if zlib.crc32(raw[:8], _COUNTER_SEED) != crc:
            raise CorruptRecordError("item_ns change counter fails its checksum")
        after = before + 1
    body = after.to_bytes(8, "big")
    return before, after, body + zlib.crc32(body, _COUNTER_SEED).to_bytes(4, "big")


def bump_counts(key: bytes, raw: bytes, items: int, with_ttl: int) -> bytes:
    """The count record ``raw`` at ``key`` with ``items`` and ``with_ttl`` added to
    its counts (neither below 0): :func:`decode_counts` then :func:`encode_counts`,
    the CRC of the key computed once (every put of a new item makes one).

    Raises:
        CorruptRecordError: ``raw`` is damaged (as :func:`decode_counts`).
    """
    if len(raw) != _COUNTS.size:
        raise CorruptRecordError(f"item_ns {bytes(key).hex()} is not a count record")
    have, have_ttl, crc = _COUNTS.unpack(raw)
    seed = zlib.crc32(key)
    if zlib.crc32(raw[:16], seed) != crc:
        raise CorruptRecordError(f"item_ns {bytes(key).hex()} fails its checksum")
    body = _COUNTS_BODY.pack(max(0, have + items), max(0, have_ttl + with_ttl))
    return body + zlib.crc32(body, seed).to_bytes(4, "big")


def encode_counts(ns_id: int, items: int, with_ttl: int, *, key: bytes | None = None) -> bytes:
    """A namespace's count record: its items, those with a TTL, a CRC-32
    (``key``: the record's key, ``keys.item_count_key(ns_id)``, if at hand)."""
    raw = _COUNTS_BODY.pack(items, with_ttl)
    seed = zlib.crc32(keys.item_count_key(ns_id) if key is None else key)
    return raw + zlib.crc32(raw, seed).to_bytes(4, "big")


def decode_counts(key: bytes, raw: bytes) -> tuple[int, int]:
    """``(items, items with a TTL)`` of a count record; CorruptRecordError if damaged."""
    if len(raw) != _COUNTS.size:
        raise CorruptRecordError(f"item_ns {bytes(key).hex()} is not a count record")
    items, with_ttl, crc = _COUNTS.unpack(raw)
    if zlib.crc32(raw[:16], zlib.crc32(key)) != crc:
        raise CorruptRecordError(f"item_ns {bytes(key).hex()} fails its checksum")
    return int(items), int(with_ttl)


def ns_of(item: bytes) -> int:
    """The namespace id an ``items`` key starts with (a ``uid``)."""
    return int.from_bytes(item[1 : 1 + item[0]], "big")


# -- TTL ------------------------------------------------------------------------------


def check_ttl(ttl: Any, what: str) -> float | None:
    """A put's TTL in minutes (None: never expires)."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl):
        raise ItemValueError(f"{what}: ttl {ttl!r} is not a number of minutes; pass e.g. 60.0")
    if ttl <= 0:
        raise ItemValueError(f"{what}: ttl {ttl!r} is not positive; pass minutes > 0 or None")
    return float(ttl)


def expires_at(now_ms: int, ttl_minutes: float) -> int:
    """Expiry in ms since the epoch of an item written or read at ``now_ms``."""
    # Capped to what the u64 TTL index holds (a TTL of ~10^13 years).
    return min(now_ms + max(1, round(ttl_minutes * 60_000)), 2**63 - 1)


def is_expired(expires_ms: int | None, now_ms: int) -> bool:
    """An item expires at its expiry instant (never returned from then on)."""
    return expires_ms is not None and expires_ms <= now_ms


# -- vectors --------------------------------------------------------------------------


def row_norms(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The Euclidean norm of each row, each from that row alone (see :func:`cosines`)."""
    import numpy as np

    squares: npt.NDArray[np.float32] = np.einsum("ij,ij->i", matrix, matrix)
    return np.sqrt(squares)


def cosines(
    query: npt.NDArray[np.float32],
    matrix: npt.NDArray[np.float32],
    norms: npt.NDArray[np.float32],
) -> npt.NDArray[np.float32]:
    """Cosine similarity of ``query`` with each row of ``matrix`` (whose
    :func:`row_norms` are ``norms``), in [-1, 1]; a zero vector scores 0.0, as
    in ``InMemoryStore``.

    Each score depends on its row alone, so equal vectors score exactly equal
    wherever they sit and rank by the tie-break: the sums run in numpy's
    ``einsum``, in one order for every row. A BLAS matrix-vector product sums
    rows in blocks: equal vectors scored differently in the last bits by row
    position, ranked out of tie-break order, and an item's score changed
    between the in-RAM matrix, a search inside a write and a reopen.
    """
    import numpy as np

    qn = float(np.sqrt(np.einsum("j,j->", query, query)))
    dots = np.einsum("ij,j->i", matrix, query)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.where((norms > 0) & (qn > 0), dots / (norms * (qn or 1.0)), 0.0)
    return np.clip(scores, -1.0, 1.0).astype(np.float32, copy=False)


def best_scores(
    query: npt.NDArray[np.float32], matrix: npt.NDArray[np.float32], owners: Sequence[int]
) -> dict[int, float]:
    """Cosine similarity of ``query`` with each row, keeping each owner's best row.

    Exact brute force (recall 1.0) over float32 (:func:`cosines`).
    """
    if len(owners) == 0:
        return {}
    scores = cosines(query, matrix, row_norms(matrix))
    best: dict[int, float] = {}
    for owner, score in zip(owners, scores.tolist(), strict=False):
        if owner not in best or score > best[owner]:
            best[owner] = float(score)
    return best


def ranked_rows(
    scores: npt.NDArray[np.float32], tiebreak: Callable[[int], Any], first: int
) -> Iterator[int]:
    """Row indexes by descending score, equal scores by ``tiebreak(row)``; rows
    scored ``-inf`` are left out.

    Exact and lazy: the best ``first`` rows (and every row tied with the last
    of them) are sorted first; a caller that wants more rows gets the next,
    four times wider, slice. Each slice holds every row scoring at least its
    threshold, so the order of the rows already given never changes.
    """
    import numpy as np

    neg = -scores
    valid = int(np.count_nonzero(neg < np.inf))
    k, done = max(1, first), 0
    while True:
        if k >= valid:
            idx = np.flatnonzero(neg < np.inf)
        else:
            kth = np.partition(neg, k - 1)[k - 1]
            idx = np.flatnonzero(neg <= kth)
        order = idx[np.argsort(neg[idx], kind="stable")]
        vals = neg[order]
        rows: list[int] = order.tolist()
        ties: list[int] = np.flatnonzero(vals[1:] == vals[:-1]).tolist()
        j = 0
        while j < len(ties):  # each run of equal scores, sorted by the tie-break
            lo = hi = ties[j]
            while j + 1 < len(ties) and ties[j + 1] == hi + 1:
                j, hi = j + 1, hi + 1
            rows[lo : hi + 2] = sorted(rows[lo : hi + 2], key=tiebreak)
            j += 1
        yield from rows[done:]
        done = len(rows)
        if k >= valid:
            return
        k *= 4


@dataclass(slots=True, init=False)
class Changes:
    """What one write op changed, for the in-RAM matrices after its commit.

    ``before``/``after`` are the change counter around the op (``before`` None:
    the store had no counter yet); ``vectors`` maps each item key whose vectors
    were replaced to its vectors now (empty: none, the item may be gone);
    ``items`` each item key written to its record now (None: deleted).
    """

    before: int | None
    after: int
    vectors: dict[bytes, list[bytes]]
    items: dict[bytes, ItemRecord | None]

    def __init__(
        self,
        before: int | None,
        after: int,
        vectors: dict[bytes, list[bytes]] | None = None,
        items: dict[bytes, ItemRecord | None] | None = None,
    ) -> None:
        # Written out: the generated one with default factories took twice as
        # long (every memory write op makes one).
        self.before = before
        self.after = after
        self.vectors = {} if vectors is None else vectors
        self.items = {} if items is None else items


@dataclass(slots=True)
class ItemRecord:
    """One stored item as decoded from ``items`` (treat as read-only; not frozen
    because a frozen dataclass costs ~3 us more per item decoded)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_us: int
    updated_us: int
    ttl_minutes: float | None
    expires_ms: int | None
