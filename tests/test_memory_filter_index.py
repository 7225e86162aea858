"""Filtered search from the item cache and its sorted value index equals a scan with the filter: every kind of value, operator and page; writes invalidate it; returned values are copies (issue 17.3)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogStore
from deltalog.engine.memory_core import matches_filter

VALUES: list[Any] = [
    0,
    1,
    2,
    2.0,
    2.5,
    -1,
    10**18,
    True,
    False,
    None,
    "",
    "a",
    "b",
    "ab",
    [1],
    {"x": 1},
]

FILTERS: list[dict[str, Any]] = [
    {"v": 2},
    {"v": "a"},
    {"v": True},
    {"v": {"$gte": 2}},
    {"v": {"$gt": 1, "$lte": 2.5}},
    {"v": {"$lt": "b"}},
    {"v": {"$gte": "a", "$lt": "b"}},
    {"v": {"$eq": 2.0}},
    {"v": {"$ne": 2}},
    {"v": {"$gt": 1, "$lt": "z"}},
    {"m.w": {"$lte": 3}},
    {"v": {"$gte": 0}, "g": 1},
    {"g": 2, "v": {"$gte": 1}},
    {"v": [1]},
    {"v": {"x": 1}},
]


def _values(rng: random.Random, i: int) -> dict[str, Any]:
    value: dict[str, Any] = {"g": i % 3, "m": {"w": rng.randrange(6)}}
    if rng.random() < 0.9:
        value["v"] = rng.choice(VALUES)
    return value


def _expected(
    model: dict[tuple[tuple[str, ...], str], dict[str, Any]], flt: dict[str, Any]
) -> list[str]:
    # search order: namespaces in first-put order, then keys (all short) in order
    order: dict[tuple[str, ...], int] = {("p", "a"): 0, ("p", "b"): 1}
    hits = [(order[ns], k) for (ns, k), v in model.items() if matches_filter(v, flt)]
    return [k for _, k in sorted(hits)]


@pytest.mark.parametrize("flt", FILTERS, ids=[repr(f) for f in FILTERS])
def test_indexed_search_equals_scan(tmp_path: Path, flt: dict[str, Any]) -> None:
    """Three searches in a row (scan, index built, index used) give the scan's answer."""
    rng = random.Random(3)
    model: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {}
    with DeltaLogStore.from_path(tmp_path / "f") as store:
        for i in range(200):
            ns = ("p", "a") if i % 2 else ("p", "b")
            if i == 0:
                ns = ("p", "a")
            value = _values(rng, i)
            store.put(ns, f"k{i:03d}", value)
            model[(ns, f"k{i:03d}")] = value
        want = _expected(model, flt)
        for offset, limit in [(0, 500), (0, 500), (0, 7), (5, 3), (0, 500)]:
            got = store.search(("p",), filter=flt, limit=limit, offset=offset)
            assert [i.key for i in got] == want[offset : offset + limit]
        got = store.search(("p", "b"), filter=flt, limit=500)
        assert [i.key for i in got] == [k for k in want if model.get((("p", "b"), k)) is not None]


def test_writes_invalidate_and_values_are_copies(tmp_path: Path) -> None:
    """A put or delete after the index was built is seen; mutating a result changes nothing."""
    with DeltaLogStore.from_path(tmp_path / "w") as store:
        for i in range(50):
            store.put(("p",), f"k{i:02d}", {"n": i, "tags": ["x"]})
        flt = {"n": {"$gte": 45}}
        for _ in range(3):
            got = store.search(("p",), filter=flt, limit=100)
        assert [i.key for i in got] == [f"k{i}" for i in range(45, 50)]
        got[0].value["n"] = -5
        got[0].value["tags"].append("y")
        again = store.search(("p",), filter=flt, limit=100)
        assert again[0].value == {"n": 45, "tags": ["x"]}
        store.put(("p",), "new", {"n": 99})
        store.delete(("p",), "k46")
        for _ in range(3):
            got = store.search(("p",), filter=flt, limit=100)
            assert [i.key for i in got] == ["k45", "k47", "k48", "k49", "new"]


def test_expired_items_left_out_of_index_hits(tmp_path: Path) -> None:
    """An item that expires while the index is current is not returned."""
    now = [1_000_000.0]
    with DeltaLogStore.from_path(tmp_path / "t", clock=lambda: now[0]) as store:
        store.put(("p",), "short", {"n": 5}, ttl=1)
        store.put(("p",), "long", {"n": 6})
        for _ in range(3):
            got = store.search(("p",), filter={"n": {"$gte": 5}}, refresh_ttl=False)
        assert [i.key for i in got] == ["long", "short"]
        now[0] += 61
        got = store.search(("p",), filter={"n": {"$gte": 5}})
        assert [i.key for i in got] == ["long"]


def test_cache_follows_this_process_writes(tmp_path: Path) -> None:
    """Random puts, re-puts, deletes, TTL expiry and sweeps between filtered searches:
    every search (from the cache updated by each commit, or its index) equals the model."""
    now = [1_000_000.0]
    rng = random.Random(8)
    order: dict[tuple[str, ...], int] = {}
    model: dict[tuple[tuple[str, ...], str], tuple[dict[str, Any], float | None]] = {}
    with DeltaLogStore.from_path(tmp_path / "c", clock=lambda: now[0]) as store:
        for step in range(200):
            ns = ("p", rng.choice("xyz"))
            key = f"k{rng.randrange(40):02d}"
            roll = rng.random()
            if roll < 0.55:
                value = _values(rng, step)
                ttl = rng.choice([None, None, 1.0])
                store.put(ns, key, value, ttl=ttl)
                order.setdefault(ns, len(order))
                model[(ns, key)] = (value, None if ttl is None else now[0] + 60)
            elif roll < 0.75:
                store.delete(ns, key)
                model.pop((ns, key), None)
            elif roll < 0.85:
                now[0] += 40
            else:
                store.sweep_ttl()
            for flt in rng.sample(FILTERS, 2):
                live = {k: v for k, (v, exp) in model.items() if exp is None or exp > now[0]}
                want = [
                    k
                    for _, k in sorted(
                        (order[ns], k) for (ns, k), v in live.items() if matches_filter(v, flt)
                    )
                ]
                got = store.search(("p",), filter=flt, limit=500, refresh_ttl=False)
                assert [i.key for i in got] == want, (step, flt)
