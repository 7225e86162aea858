"""The memory store's pure core and key builders decide correctly on plain data (issue 17, R5, R9)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from deltalog.engine import keys
from deltalog.engine import memory_core as core
from deltalog.engine.errors import CorruptRecordError, ItemValueError, NamespaceError
from hypothesis import example, given, settings
from hypothesis import strategies as st
from langgraph.store.base import InvalidNamespaceError

labels = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters=".\x00"),
    min_size=1,
    max_size=600,
)
item_keys = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=900)


@given(ns_id=st.integers(0, 2**64 - 1), key=item_keys, ordinal=st.integers(0, 2**16 - 1))
@example(ns_id=2**64 - 1, key="é" * 500, ordinal=2**16 - 1)
@example(ns_id=1, key="\x00" * 300, ordinal=0)
def test_item_keys_fit_lmdb(ns_id: int, key: str, ordinal: int) -> None:
    """Item, vector and TTL keys stay under 511 bytes for any key length (R5)."""
    item = keys.item_key(ns_id, key)
    assert len(item) <= 411
    assert len(keys.item_vector_key(item, ordinal)) <= keys.MAX_KEY
    assert len(keys.item_ttl_key(2**63, item)) <= keys.MAX_KEY
    assert keys.decode_item_ttl_key(keys.item_ttl_key(5, item)) == (5, item)


@given(ns=st.lists(labels, min_size=1, max_size=40).map(tuple))
@example(ns=("ß" * 300, "x" * 300))
def test_namespace_keys_fit_lmdb(ns: tuple[str, ...]) -> None:
    """Namespace keys stay under 511 bytes for any depth and label length (R5)."""
    assert len(keys.item_ns_key(ns)) <= keys.MAX_KEY
    assert keys.decode_item_ns_rev_key(keys.item_ns_rev_key(7)) == 7


@given(a=item_keys.filter(lambda k: len(k) < 100), b=item_keys.filter(lambda k: len(k) < 100))
def test_item_keys_order_and_delimit(a: str, b: str) -> None:
    """Short item keys sort like the strings and none is a prefix of another (vector scans)."""
    ka, kb = keys.item_key(3, a), keys.item_key(3, b)
    assert (ka < kb) == (a < b)
    if a != b:
        assert not kb.startswith(ka) and not ka.startswith(kb)


@pytest.mark.parametrize(
    "ns",
    [(), ("langgraph", "x"), ("a.b",), ("",), ("a", 3), ("a\x00",), "users"],
)
def test_put_namespace_refused(ns: Any) -> None:
    """Namespaces the contract forbids raise InvalidNamespaceError (a DeltaLogError too)."""
    with pytest.raises(InvalidNamespaceError) as info:
        core.validate_namespace(ns)
    assert isinstance(info.value, NamespaceError)


def test_match_conditions() -> None:
    """Prefix/suffix patterns with wildcards match as InMemoryStore's do."""
    ns = ("a", "b", "c")
    assert core.matches_condition("prefix", ("a", "*"), ns)
    assert not core.matches_condition("prefix", ("b",), ns)
    assert core.matches_condition("suffix", ("*", "c"), ns)
    assert not core.matches_condition("suffix", ("a", "b", "c", "d"), ns)
    got = core.list_namespaces(
        [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c")],
        [("prefix", ("a", "b"))],
        max_depth=3,
        limit=10,
        offset=0,
    )
    assert got == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]


@pytest.mark.parametrize(
    ("value", "flt", "expected"),
    [
        ({"n": 5}, {"n": {"$gt": 4}}, True),
        ({"n": 5}, {"n": {"$gt": 4.5, "$lte": 5}}, True),
        ({"n": 5}, {"n": 5.0}, True),  # numbers compare as numbers
        ({"n": 1}, {"n": True}, False),  # a bool is no number
        ({"n": True}, {"n": {"$gt": 0}}, False),
        ({"s": "b"}, {"s": {"$gt": "a"}}, True),
        ({"s": "b"}, {"s": {"$gt": 1}}, False),  # different kinds: false, no raise
        ({}, {"n": {"$gt": 1}}, False),  # missing field: false, no raise
        ({}, {"n": {"$ne": 1}}, True),  # as InMemoryStore
        ({"a": {"b": 2}}, {"a": {"b": 2}}, True),  # nested object
        ({"a": {"b": 2}}, {"a.b": {"$gte": 2}}, True),  # dotted path
        ({"a.b": 1, "a": {"b": 2}}, {"a.b": 1}, True),  # a literal key wins
        ({"t": [1, 2]}, {"t": [1, 2]}, True),
        ({"t": [1, 2]}, {"t": [2, 1]}, False),
        ({"n": None}, {"n": None}, True),
    ],
)
def test_filters(value: dict[str, Any], flt: dict[str, Any], expected: bool) -> None:
    """Filters: operators, numbers as numbers, nested keys, missing fields never raise."""
    assert core.matches_filter(value, flt) is expected


def test_unknown_operator_refused() -> None:
    """An unknown $ operator is refused by name before the search runs."""
    with pytest.raises(ItemValueError, match=r"\$like"):
        core.check_filter({"a": {"$like": "x"}})


@pytest.mark.parametrize(
    "value",
    [{"d": object()}, {1: "x"}, {"f": float("nan")}, {"i": 2**70}, [1], {"s": "\ud800"}],
)
def test_non_json_values_refused(value: Any) -> None:
    """Values JSON cannot carry are refused with the path named (R9)."""
    with pytest.raises(ItemValueError):
        core.check_value(value, "put")


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


class _Str(str):
    pass


class _Int(int):
    pass


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, exclude_categories=())),
    st.sampled_from(["\ud800", _Str("sub"), _Int(7), object(), b"bytes"]),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers(0, 3)), inner, max_size=4),
    ),
    max_leaves=20,
)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except ItemValueError as exc:
        return ("error", str(exc))


@given(st.dictionaries(st.text(max_size=5), _VALUES, max_size=4))
@settings(max_examples=400, deadline=None)
@example({"deep": _nested(core.MAX_DEPTH - 1)})
@example({"deep": _nested(core.MAX_DEPTH)})
@example({"deep": _nested(core.MAX_DEPTH + 1)})
def test_check_value_fast_path_agrees(value: dict[str, Any]) -> None:
    """check_value's fast copy accepts, copies and refuses exactly as the checked
    walk (_json) that names each path: same result, same message."""
    fast = _outcome(lambda: core.check_value(value, lambda: "put"))
    slow = _outcome(lambda: core._json(value, "put", "$", 0))
    assert fast == slow
    assert repr(fast[1]) == repr(slow[1])  # 1 and 1.0, True and 1 told apart


def test_ttl_arithmetic() -> None:
    """An item expires exactly ttl minutes after the write, and from then on."""
    exp = core.expires_at(1_000, 1.5)
    assert exp == 1_000 + 90_000
    assert not core.is_expired(exp, exp - 1)
    assert core.is_expired(exp, exp)
    assert not core.is_expired(None, 10**15)
    for bad in (0, -1, "5", True, float("inf")):
        with pytest.raises(ItemValueError):
            core.check_ttl(bad, "put")


# Components are 0 or at least 1e-3 in size: float32 norms of subnormal
# vectors underflow to 0 where Python's doubles do not.
_comp = st.floats(-10, 10, width=32).filter(lambda x: x == 0 or abs(x) > 1e-3)


@settings(max_examples=50)
@given(
    rows=st.lists(st.lists(_comp, min_size=4, max_size=4), min_size=1, max_size=30),
    query=st.lists(_comp, min_size=4, max_size=4),
    owners_seed=st.integers(0, 5),
)
def test_best_scores_equal_brute_force(
    rows: list[list[float]], query: list[float], owners_seed: int
) -> None:
    """Cosine scores equal a plain Python brute force, best row per owner."""
    owners = [(i * (owners_seed + 1)) % 7 for i in range(len(rows))]
    got = core.best_scores(
        np.asarray(query, dtype=np.float32), np.asarray(rows, dtype=np.float32), owners
    )
    want: dict[int, float] = {}
    qn = sum(x * x for x in query) ** 0.5
    for owner, row in zip(owners, rows, strict=True):
        rn = sum(x * x for x in row) ** 0.5
        score = (
            sum(a * b for a, b in zip(row, query, strict=True)) / (rn * qn) if rn and qn else 0.0
        )
        want[owner] = max(want.get(owner, -2.0), score)
    assert got.keys() == want.keys()
    for owner, score in want.items():
        assert got[owner] == pytest.approx(score, abs=1e-4)


def test_import_does_not_load_numpy() -> None:
    """`import deltalog.engine` (memory store included) loads numpy only when a query is ranked."""
    import subprocess
    import sys

    code = "import sys, deltalog.engine; assert 'numpy' not in sys.modules, 'numpy imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@given(
    ns_id=st.integers(0, 2**40),
    have=st.integers(0, 2**40),
    have_ttl=st.integers(0, 2**40),
    items=st.integers(-3, 3),
    with_ttl=st.integers(-3, 3),
)
def test_bump_counts_is_decode_then_encode(
    ns_id: int, have: int, have_ttl: int, items: int, with_ttl: int
) -> None:
    """bump_counts gives the record encode_counts would write for the decoded counts
    moved by the deltas (never below 0), and refuses a damaged record as decode_counts."""
    key = keys.item_count_key(ns_id)
    raw = core.encode_counts(ns_id, have, have_ttl)
    bumped = core.bump_counts(key, raw, items, with_ttl)
    assert bumped == core.encode_counts(ns_id, max(0, have + items), max(0, have_ttl + with_ttl))
    assert core.decode_counts(key, bumped) == (max(0, have + items), max(0, have_ttl + with_ttl))
    for bad in (raw[:-1], raw[:3] + bytes([raw[3] ^ 1]) + raw[4:]):
        with pytest.raises(CorruptRecordError):
            core.bump_counts(key, bad, items, with_ttl)
    with pytest.raises(CorruptRecordError):  # another namespace's record
        core.bump_counts(keys.item_count_key(ns_id + 1), raw, items, with_ttl)


@given(st.none() | st.integers(0, 2**63 - 2))
def test_next_counter_is_decode_then_encode(count: int | None) -> None:
    """next_counter reads the counter (none yet: starts at 1) and writes it one higher."""
    raw = None if count is None else core.encode_counter(count)
    before, after, record = core.next_counter(raw)
    assert before == count and after == (count or 0) + 1
    assert record == core.encode_counter(after) and core.decode_counter(record) == after
    if raw is not None:
        with pytest.raises(CorruptRecordError):
            core.next_counter(raw[:-1] + bytes([raw[-1] ^ 1]))
        with pytest.raises(CorruptRecordError):
            core.next_counter(raw[:-1])


def test_changes_start_empty_and_apart() -> None:
    """Each Changes gets its own empty maps unless given some."""
    a, b = core.Changes(None, 1), core.Changes(1, 2, items={b"k": None})
    a.items[b"x"] = None
    assert b.items == {b"k": None} and a.vectors == {} and a.vectors is not b.vectors
    assert (a.before, a.after, b.before, b.after) == (None, 1, 1, 2)
