"""Per-namespace item counts: kept in every write, built by the 4 → 5 migration, absent in a read-only open of a format 4 store, checked by verify (issue 17.3, R10)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import lmdb
import ormsgpack
from deltalog.engine import DeltaLogStore, keys
from deltalog.engine.env import Environment
from deltalog.engine.memory_core import decode_counts, encode_counts

from tests.memory_layout import unpack_chunks


def _raw(path: Path, db: str) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    try:
        handle = env.open_db(db.encode(), create=False)
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=handle)]
    finally:
        env.close()


def _counts(path: Path) -> dict[bytes, tuple[int, int]]:
    return {k: decode_counts(k, v) for k, v in _raw(path, "item_ns") if k[:1] == keys.ITEM_COUNT}


def _make_format_4(path: Path) -> None:
    """What format 4 wrote: the same records without counts or change counter."""
    env = lmdb.open(str(path), max_dbs=16)
    try:
        item_ns, meta = env.open_db(b"item_ns"), env.open_db(b"meta")
        with env.begin(write=True) as txn:
            for key, _ in list(txn.cursor(db=item_ns)):
                if bytes(key)[:1] in (keys.ITEM_CHANGES, keys.ITEM_COUNT):
                    txn.delete(key, db=item_ns)
            txn.put(b"format_version", ormsgpack.packb(4), db=meta)
    finally:
        env.close()


def _fill(store: DeltaLogStore) -> None:
    for i in range(12):
        store.put(("plain", str(i % 3)), f"k{i}", {"i": i})
    store.put(("ttl",), "t", {"i": 0}, ttl=1)  # only TTL items: read to tell if live
    store.put(("mixed",), "t", {"i": 0}, ttl=1)
    store.put(("mixed",), "p", {"i": 0})
    store.put(("gone",), "x", {"i": 0})
    store.delete(("gone",), "x")


EXPECTED = [("mixed",), ("plain", "0"), ("plain", "1"), ("plain", "2"), ("ttl",)]


def _digest(path: Path) -> str:
    return hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()


def test_format_4_store_reads_then_upgrades(tmp_path: Path) -> None:
    """A format 4 store lists namespaces read-only unchanged; the writable open adds counts."""
    path = tmp_path / "old"
    with DeltaLogStore.from_path(path) as store:
        _fill(store)
        assert unpack_chunks(store) == 15  # format 4 held one record per item
    fresh = _counts(path)
    assert len(fresh) == 6 and (0, 0) in fresh.values()  # ("gone",) holds none
    _make_format_4(path)
    assert _counts(path) == {}
    before = _digest(path)
    with DeltaLogStore(Environment(path, readonly=True), owns_env=True) as ro:
        assert ro.list_namespaces() == EXPECTED
        assert ro.verify() == []
    assert _digest(path) == before
    with DeltaLogStore.from_path(path) as store:
        assert store.list_namespaces() == EXPECTED
        assert store.verify() == []
        with store.env.read() as r:
            assert r.meta("format_version") == keys.FORMAT_VERSION
    assert _counts(path) == fresh


def test_counts_follow_every_write(tmp_path: Path) -> None:
    """After random puts, re-puts, deletes, TTL changes and sweeps the counts equal the items."""
    now = [1_000_000.0]
    rng = random.Random(5)
    live: dict[tuple[tuple[str, ...], str], float | None] = {}  # -> expiry (s) or None
    with DeltaLogStore.from_path(tmp_path / "c", clock=lambda: now[0]) as store:
        for step in range(250):
            ns = ("n", str(rng.randrange(4)))
            key = f"k{rng.randrange(8)}"
            roll = rng.random()
            if roll < 0.5:
                ttl = rng.choice([None, 1.0, 2.0])
                store.put(ns, key, {"s": step}, ttl=ttl)
                live[(ns, key)] = None if ttl is None else now[0] + ttl * 60
            elif roll < 0.75:
                store.delete(ns, key)
                live.pop((ns, key), None)
            elif roll < 0.9:
                now[0] += 45
            else:
                store.sweep_ttl()
            if step % 10 == 0:
                assert store.verify() == [], step
                want = sorted({ns for (ns, _), exp in live.items() if exp is None or exp > now[0]})
                assert store.list_namespaces() == want, step
        assert store.verify() == []
        store.put(("only-ttl",), "k", {"s": 0}, ttl=1)
        assert ("only-ttl",) in store.list_namespaces()
        now[0] += 61  # expired, not swept: counted, but not live
        assert ("only-ttl",) not in store.list_namespaces()


def test_verify_reports_a_wrong_count(tmp_path: Path) -> None:
    """A count record that disagrees with the items is reported with the namespace id."""
    with DeltaLogStore.from_path(tmp_path / "w") as store:
        _fill(store)
        key = keys.item_count_key(1)
        bad = encode_counts(1, 99, 0)
        store.env.write(lambda w: w.txn.put(key, bad, db=w.env.db("item_ns")))
        problems = store.verify()
        assert len(problems) == 1 and "namespace id 1 say 99 items" in problems[0]
