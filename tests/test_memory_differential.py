"""Random batches give the same results on DeltaLogStore as on a pure model of the contract, and as on InMemoryStore where it follows it (issue 17)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalog.engine import DeltaLogStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

NAMESPACES = [("a",), ("a", "b"), ("a", "c"), ("b",), ("a", "b", "c"), ("b", "c")]
KEYS = ["k1", "k2", "k3", "k10"]
PATTERNS = [("a",), ("b",), ("*",), ("a", "*"), ("c",), ("*", "c"), ("b", "c")]

namespaces = st.sampled_from(NAMESPACES)
values = st.fixed_dictionaries(
    {"n": st.integers(0, 4), "s": st.sampled_from(["x", "y", "z"])},
    optional={"m": st.fixed_dictionaries({"x": st.integers(0, 2)})},
)
operands = st.one_of(st.integers(0, 4), st.sampled_from(["x", "y"]))
conditions = st.one_of(
    operands,
    st.builds(
        lambda op, v: {op: v},
        st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
        operands,
    ),
)
filters = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["n", "s", "missing", "m.x"]), conditions, max_size=2),
)
puts = st.builds(
    PutOp,
    namespaces,
    st.sampled_from(KEYS),
    st.one_of(values, st.none()),
    index=st.none(),
    ttl=st.sampled_from([None, 1.0, 1.0, 2.0]),
)
gets = st.builds(GetOp, namespaces, st.sampled_from(KEYS), refresh_ttl=st.booleans())
searches = st.builds(
    SearchOp,
    st.sampled_from([(), *NAMESPACES]),
    filters,
    st.sampled_from([1, 3, 10, 10]),
    st.sampled_from([0, 0, 0, 1, 2, 5]),
    query=st.none(),
    refresh_ttl=st.booleans(),
)
lists = st.builds(
    ListNamespacesOp,
    st.one_of(
        st.none(),
        st.lists(
            st.builds(
                MatchCondition, st.sampled_from(["prefix", "suffix"]), st.sampled_from(PATTERNS)
            ),
            max_size=2,
        ).map(tuple),
    ),
    st.one_of(st.none(), st.integers(1, 3)),
    st.integers(0, 5),
    st.integers(0, 3),
)
batches = st.lists(st.one_of(puts, gets, searches, lists), min_size=1, max_size=6)


@dataclass
class Row:
    value: dict[str, Any]
    created: int
    updated: int
    ttl: float | None
    expires: int | None


def _eq(a: Any, b: Any) -> bool:
    return type(a) is type(b) and bool(a == b)


def _cond(actual: Any, cond: Any) -> bool:
    if not isinstance(cond, dict):
        return _eq(actual, cond)
    ((op, v),) = cond.items()
    if op == "$eq":
        return _eq(actual, v)
    if op == "$ne":
        return not _eq(actual, v)
    if type(actual) is not type(v):
        return False
    return bool(
        {
            "$gt": actual > v,
            "$gte": actual >= v,
            "$lt": actual < v,
            "$lte": actual <= v,
        }[op]
    )


def _field(value: dict[str, Any], key: str) -> Any:
    if key == "m.x":
        return value.get("m", {}).get("x")
    return value.get(key)


class Model:
    """A pure model of the contract as docs/memory.md states it."""

    def __init__(self) -> None:
        self.rows: dict[tuple[tuple[str, ...], str], Row] = {}
        self.ns_ids: dict[tuple[str, ...], int] = {}

    def live(self, now: int) -> list[tuple[tuple[tuple[str, ...], str], Row]]:
        alive = [(k, r) for k, r in self.rows.items() if r.expires is None or r.expires > now]
        return sorted(alive, key=lambda kr: (self.ns_ids[kr[0][0]], kr[0][1]))

    def batch(self, ops: list[Op], now_s: float) -> list[Any]:
        now, now_us = int(now_s * 1000), int(now_s * 1_000_000)
        out: list[Any] = []
        refresh: list[tuple[tuple[str, ...], str]] = []
        live = self.live(now)
        for op in ops:
            if isinstance(op, GetOp):
                row = dict(live).get((op.namespace, op.key))
                out.append(None if row is None else (op.namespace, op.key, row.value))
                if row is not None and op.refresh_ttl and row.ttl is not None:
                    refresh.append((op.namespace, op.key))
            elif isinstance(op, SearchOp):
                n = len(op.namespace_prefix)
                hits = [
                    (k, r)
                    for k, r in live
                    if k[0][:n] == op.namespace_prefix
                    and all(_cond(_field(r.value, f), c) for f, c in (op.filter or {}).items())
                ][op.offset : op.offset + op.limit]
                out.append([(k[0], k[1], r.value) for k, r in hits])
                if op.refresh_ttl:
                    refresh.extend(k for k, r in hits if r.ttl is not None)
            elif isinstance(op, ListNamespacesOp):
                found = set()
                for (ns, _), _r in live:
                    if all(_match(c, ns) for c in op.match_conditions or ()):
                        found.add(ns[: op.max_depth] if op.max_depth else ns)
                out.append(sorted(found)[op.offset : op.offset + op.limit])
            else:
                out.append(None)
        for k in refresh:
            row = self.rows[k]
            assert row.ttl is not None
            row.expires = now + max(1, round(row.ttl * 60_000))
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                last[(op.namespace, op.key)] = op
        for k, put in last.items():
            old = self.rows.get(k)
            alive = old is not None and (old.expires is None or old.expires > now)
            if put.value is None:
                self.rows.pop(k, None)
                continue
            self.ns_ids.setdefault(k[0], len(self.ns_ids) + 1)
            self.rows[k] = Row(
                dict(put.value),
                old.created if old is not None and alive else now_us,
                now_us,
                put.ttl,
                None if put.ttl is None else now + max(1, round(put.ttl * 60_000)),
            )
        return out


def _match(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = cond.path
    if len(ns) < len(path):
        return False
    pairs = (
        zip(ns, path, strict=False)
        if cond.match_type == "prefix"
        else zip(ns[::-1], path[::-1], strict=False)
    )
    return all(p in ("*", n) for n, p in pairs)


def _plain(result: Result) -> Any:
    if isinstance(result, Item):
        return (result.namespace, result.key, result.value)
    if isinstance(result, list):
        return [_plain(r) if isinstance(r, Item) else r for r in result]
    return result


class StoreVsModel(RuleBasedStateMachine):
    """The same batches and clock moves on DeltaLogStore and on the model."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.now = 1_700_000_000.0
        self.store = DeltaLogStore.from_path(Path(self.dir) / "m", clock=lambda: self.now)
        self.model = Model()

    @rule(ops=batches)
    def run_batch(self, ops: list[Op]) -> None:
        want = self.model.batch(ops, self.now)
        got = [_plain(r) for r in self.store.batch(ops)]
        assert got == want, (ops, got, want)

    @rule(seconds=st.sampled_from([1.0, 30.0, 59.999, 60.0, 61.0, 150.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def sweep(self) -> None:
        now = int(self.now * 1000)
        expired = [
            k for k, r in self.model.rows.items() if r.expires is not None and r.expires <= now
        ]
        for k in expired:
            del self.model.rows[k]
        assert self.store.sweep_ttl() == len(expired)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = DeltaLogStore.from_path(Path(self.dir) / "m", clock=lambda: self.now)

    @invariant()
    def timestamps_agree(self) -> None:
        now = int(self.now * 1000)
        for (ns, key), row in self.model.live(now):
            item = self.store.get(ns, key, refresh_ttl=False)
            assert item is not None
            assert int(item.created_at.timestamp() * 1_000_000) == row.created
            assert int(item.updated_at.timestamp() * 1_000_000) == row.updated

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


StoreVsModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreVsModel = StoreVsModel.TestCase


# -- InMemoryStore, where it follows the contract ---------------------------------------

# InMemoryStore has no TTL, lists namespaces whose items were all deleted (or
# only read), orders searches by insertion and raises on a range filter over a
# missing field; so this comparison puts every field, never deletes, and
# compares searches as sets without paging.
safe_filters = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["n", "s"]),
        st.one_of(
            st.integers(0, 4),
            st.builds(
                lambda op, v: {op: v},
                st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
                st.integers(0, 4),
            ),
        ),
        max_size=2,
    ).filter(lambda f: not isinstance(f.get("s"), dict)),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(
        st.lists(
            st.builds(
                PutOp, namespaces, st.sampled_from(KEYS), values, index=st.none(), ttl=st.none()
            ),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=6,
    ),
    probes=st.lists(
        st.one_of(
            st.builds(
                SearchOp,
                st.sampled_from([(), *NAMESPACES]),
                safe_filters,
                st.just(100),
                st.just(0),
                query=st.none(),
                refresh_ttl=st.just(False),
            ),
            lists,
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_same_as_inmemorystore(
    tmp_path_factory: Any, writes: list[list[PutOp]], probes: list[Op]
) -> None:
    """Puts, filtered searches and namespace listings agree with InMemoryStore."""
    ref = InMemoryStore()
    with DeltaLogStore.from_path(tmp_path_factory.mktemp("ims") / "m") as ours:
        for batch in writes:
            assert ref.batch(batch) == ours.batch(batch)
        for op in probes:
            (want,) = ref.batch([op])
            (got,) = ours.batch([op])
            if isinstance(op, SearchOp):
                assert sorted(map(repr, _plain(got))) == sorted(map(repr, _plain(want)))
            else:
                assert got == want
        for ns in NAMESPACES:
            for key in KEYS:
                assert _plain(ours.get(ns, key)) == _plain(ref.get(ns, key))
