"""Items packed into chunk records (format 6): splits, re-keying, deletes, a mix with one-item records, verify, and the bytes they save (issue 17)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lmdb
import ormsgpack
import pytest
from deltalog.engine import CorruptRecordError, DeltaLogStore, keys, memory_chunks
from deltalog.engine.memory_chunks import CHUNK_BYTES, Chunk, is_chunk
from deltalog.engine.memory_core import ItemRecord
from deltalog.engine.write_txn import WriteTxn
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.base import PutOp

from tests.memory_layout import unpack_chunks


def _records(store: DeltaLogStore) -> list[tuple[bytes, object]]:
    return [(k, store.env.codec.decode(v, "items", key=k)) for k, v in store.env.iter_db("items")]


def _pages(path: Path) -> int:
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    try:
        db = env.open_db(b"items", create=False)
        with env.begin() as txn:
            s = txn.stat(db)
        return int(s["leaf_pages"] + s["branch_pages"] + s["overflow_pages"])
    finally:
        env.close()


def test_a_growing_namespace_splits_into_chunks_in_key_order(tmp_path: Path) -> None:
    """Items put in random order end up in several chunks, each within CHUNK_BYTES,
    disjoint and in key order; everything reads back; deletes empty and drop chunks."""
    keys = [f"item-{i:04}" for i in range(600)]
    rng = random.Random(7)
    rng.shuffle(keys)
    with DeltaLogStore.from_path(tmp_path / "s") as store:
        for lo in range(0, len(keys), 50):
            store.batch([PutOp(("ns",), k, {"k": k, "pad": "x" * 20}) for k in keys[lo : lo + 50]])
        recs = _records(store)
        assert all(is_chunk(r) for _, r in recs) and 10 < len(recs) < 200
        for _, rec in recs:
            assert len(ormsgpack.packb(rec)) <= CHUNK_BYTES
        assert [it.key for it in store.search(("ns",), limit=1000)] == sorted(keys)
        for k in rng.sample(keys, 50):
            got = store.get(("ns",), k)
            assert got is not None and got.value["k"] == k
        assert store.verify() == []
        for k in keys[:550]:
            store.delete(("ns",), k)
        assert sorted(it.key for it in store.search(("ns",), limit=1000)) == sorted(keys[550:])
        assert store.verify() == []
        for k in keys[550:]:
            store.delete(("ns",), k)
        assert _records(store) == [] and store.verify() == []


def test_keys_put_in_descending_order_share_chunks(tmp_path: Path) -> None:
    """A key below every chunk of its namespace joins the first chunk (re-keyed down),
    so descending puts do not make one record per item."""
    with DeltaLogStore.from_path(tmp_path / "s") as store:
        for i in reversed(range(300)):
            store.put(("d",), f"k{i:03}", {"i": i})
        recs = _records(store)
        assert len(recs) <= 300 // 10
        assert [it.key for it in store.search(("d",), limit=1000)] == [
            f"k{i:03}" for i in range(300)
        ]
        assert store.verify() == []


def test_a_put_into_an_emptied_namespace_leaves_the_next_one_alone(tmp_path: Path) -> None:
    """The chunk a put joins is its own namespace's: with the namespace emptied, the
    next namespace's first chunk (just above the new key) is not re-keyed into it."""
    with DeltaLogStore.from_path(tmp_path / "s") as store:
        store.put(("a",), "x", {"v": 0})
        for i in range(5):
            store.put(("b",), f"y{i}", {"v": i})
        store.delete(("a",), "x")
        store.put(("a",), "z", {"v": 9})
        assert [it.key for it in store.search(("b",))] == [f"y{i}" for i in range(5)]
        assert [it.key for it in store.search(("a",))] == ["z"]
        assert store.verify() == []


def test_one_item_records_between_chunks_read_and_are_absorbed(tmp_path: Path) -> None:
    """Format 5 records (one per item) mixed with chunks: reads find every item, and puts
    and deletes around them keep every item reachable."""
    with DeltaLogStore.from_path(tmp_path / "s") as store:
        for i in range(0, 100, 2):
            store.put(("m",), f"k{i:03}", {"i": i})
        assert unpack_chunks(store) == 50
        for i in range(1, 100, 2):  # odd keys go between the one-item records
            store.put(("m",), f"k{i:03}", {"i": i})
        for i in range(0, 100, 10):
            store.put(("m",), f"k{i:03}", {"i": -i})  # a one-item record re-put
        store.delete(("m",), "k004")
        want = {f"k{i:03}": (-i if i % 10 == 0 else i) for i in range(100) if i != 4}
        got = {it.key: it.value["i"] for it in store.search(("m",), limit=1000)}
        assert got == want
        for key, value in want.items():
            item = store.get(("m",), key)
            assert item is not None and item.value["i"] == value
        assert store.get(("m",), "k004") is None
        assert store.verify() == []


def test_chunks_take_far_fewer_pages_than_one_record_per_item(tmp_path: Path) -> None:
    """The reason for chunks: the same 5,000 small items in 500 namespaces take at most
    half the LMDB pages of one record per item."""
    packed, unpacked = tmp_path / "p", tmp_path / "u"
    for path in (packed, unpacked):
        with DeltaLogStore.from_path(path) as store:
            for lo in range(0, 5000, 100):
                store.batch(
                    [
                        PutOp(("docs", f"g{i % 500}"), f"k{i}", {"text": f"memory {i}", "n": i})
                        for i in range(lo, lo + 100)
                    ]
                )
            if path == unpacked:
                assert unpack_chunks(store) == 5000
    assert _pages(packed) * 2 <= _pages(unpacked)


def _put_raw(store: DeltaLogStore, key: bytes, rec: object) -> None:
    def op(w: WriteTxn) -> None:
        w.txn.put(key, w.env.codec.encode(rec, key=key), db=w.env.db("items"))

    store.env.write(op)


def test_verify_reports_chunks_out_of_order_and_overlapping(tmp_path: Path) -> None:
    """A chunk whose checksum holds but whose items are out of order, or that starts at or
    below an item of the record before it, is reported (a bug or a hostile file)."""
    with DeltaLogStore.from_path(tmp_path / "s") as store:
        for i in range(40):
            store.put(("v",), f"k{i:02}", {"i": i, "pad": "y" * 30})
        recs = _records(store)
        assert len(recs) >= 2 and store.verify() == []
        key, rec = recs[0]
        assert isinstance(rec, list)
        suffixes, blobs = rec
        swapped = [[suffixes[1], suffixes[0], *suffixes[2:]], [blobs[1], blobs[0], *blobs[2:]]]
        _put_raw(store, key, swapped)
        problems = store.verify()
        assert len(problems) == 1 and key.hex() in problems[0] and "order" in problems[0]
        _put_raw(store, key, rec)
        assert store.verify() == []
        # The second chunk grows down over the first one's last item.
        key2, rec2 = recs[1]
        assert isinstance(rec2, list)
        last_of_first = key[: 1 + key[0]] + suffixes[-1]
        with store.env.read() as r:
            raw2 = r.txn.get(key2, db=store.env.db("items"))
        assert raw2 is not None

        def move(w: WriteTxn) -> None:
            db = w.env.db("items")
            w.txn.delete(key2, db=db)
            chunk = Chunk(last_of_first, [suffixes[-1], *rec2[0]], [blobs[-1], *rec2[1]])
            chunk.write(w.txn, db, w.env.codec)

        store.env.write(move)
        problems = store.verify()
        assert any("below an item of the record before" in p for p in problems), problems


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "put", "put", "delete"]),
            st.sampled_from([("a",), ("b", "c"), ("a", "z")]),
            st.text(alphabet="abk0129\x00é", min_size=0, max_size=6),
            st.integers(0, 40),
        ),
        max_size=120,
    )
)
def test_small_chunks_behave_like_a_dict(ops: list[tuple[str, tuple[str, ...], str, int]]) -> None:
    """With chunks split at 64 bytes (many splits, re-keys and empty chunks), random puts
    and deletes read back exactly as a dict of the same ops, and verify stays clean."""
    import tempfile

    model: dict[tuple[tuple[str, ...], str], int] = {}
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        mp.setattr(memory_chunks, "CHUNK_BYTES", 64)
        with DeltaLogStore.from_path(Path(tmp) / "s") as store:
            for verb, ns, key, n in ops:
                if verb == "put":
                    store.put(ns, key, {"n": n, "pad": "p" * (n % 7)})
                    model[(ns, key)] = n
                else:
                    store.delete(ns, key)
                    model.pop((ns, key), None)
            for ns in (("a",), ("b", "c"), ("a", "z")):
                got = {
                    it.key: it.value["n"]
                    for it in store.search(ns, limit=1000)
                    if it.namespace == ns
                }
                assert got == {k: v for (m, k), v in model.items() if m == ns}
            for (ns, key), n in model.items():
                item = store.get(ns, key)
                assert item is not None and item.value["n"] == n
            assert store.verify() == []


def test_decoded_chunks_are_never_served_for_other_bytes(tmp_path: Path) -> None:
    """The cache of decoded chunks is keyed by the record's bytes: two stores holding
    the same keys (same ids, same chunk keys), and a record changed under the store by
    another writer, each read their own items."""
    with (
        DeltaLogStore.from_path(tmp_path / "one") as one,
        DeltaLogStore.from_path(tmp_path / "two") as two,
    ):
        for i in range(5):
            one.put(("n",), f"k{i}", {"store": 1, "i": i})
            two.put(("n",), f"k{i}", {"store": 2, "i": i})
        for i in range(5):
            a, b = one.get(("n",), f"k{i}"), two.get(("n",), f"k{i}")
            assert a is not None and b is not None
            assert (a.value["store"], b.value["store"]) == (1, 2)
        [(key, rec)] = _records(one)
        assert isinstance(rec, list)
        changed = [rec[0], [ormsgpack.packb([{"store": 3}, 1]) for _ in rec[1]]]
        _put_raw(one, key, changed)  # as another process would: no cache of ours knows it
        assert {it.value["store"] for it in one.search(("n",))} == {3}


def test_the_decoded_chunk_cache_holds_no_large_items(tmp_path: Path) -> None:
    """Only small chunks are cached: a chunk of one large item (which alone passes
    CHUNK_BYTES) is not, so 1,024 cached chunks cannot grow to gigabytes of RAM."""
    big = "z" * 200_000  # compresses to almost nothing: the cache must look at the items
    with DeltaLogStore.from_path(tmp_path / "s") as store:
        for i in range(20):
            store.put(("big",), f"k{i:02}", {"text": big, "i": i})
            store.put(("small",), f"k{i:02}", {"i": i})
        for i in range(20):
            got = store.get(("big",), f"k{i:02}")
            assert got is not None and got.value["i"] == i
        held = list(memory_chunks._DECODED.values())
        assert held, "the small chunks are cached"
        assert max(sum(map(len, blobs)) for _, blobs in held) <= memory_chunks.DECODED_ITEM_BYTES
        assert store.verify() == []


def test_a_chunk_with_a_suffix_that_is_no_bytes_is_damage(tmp_path: Path) -> None:
    """A chunk whose checksum holds but one of whose key suffixes is not bytes makes a get
    and a put in its range raise CorruptRecordError naming the record, never TypeError."""
    with DeltaLogStore.from_path(tmp_path / "s") as store:
        for i in range(5):
            store.put(("n",), f"k{i}", {"i": i})
        [(key, rec)] = _records(store)
        assert isinstance(rec, list)
        _put_raw(store, key, [[rec[0][0], 7, *rec[0][2:]], rec[1]])
    with DeltaLogStore.from_path(tmp_path / "s") as store:  # no cache of ours knows it
        with pytest.raises(CorruptRecordError, match=key.hex()):
            store.get(("n",), "k1")
        with pytest.raises(CorruptRecordError, match=key.hex()):
            store.put(("n",), "k1", {"i": 11})


def _fields_reference(rec: ItemRecord, ikey: bytes) -> list[Any]:
    """item_fields as its docstring states it: every field, trailing nils dropped."""
    out: list[Any] = [
        rec.value,
        rec.created_us,
        None if rec.updated_us == rec.created_us else rec.updated_us,
        rec.ttl_minutes,
        rec.expires_ms,
        rec.key if ikey[1 + ikey[0]] != 0 else None,
    ]
    while out[-1] is None:
        out.pop()
    return out


@given(
    key=st.sampled_from(["k", "é", "x" * 500]),
    created=st.integers(0, 2**60),
    updated=st.none() | st.integers(0, 2**60),
    ttl=st.none() | st.floats(0.5, 1e6),
    expires=st.none() | st.integers(0, 2**62),
)
def test_item_fields_drop_exactly_the_trailing_nils(
    key: str, created: int, updated: int | None, ttl: float | None, expires: int | None
) -> None:
    """Every shape of item record (hashed key, TTL, expiry, update time or not) packs the
    fields up to the last one that is set, as format 5 defines them, and parses back."""
    ikey = keys.item_key(3, key)
    rec = ItemRecord(
        ("n",), key, {"v": 1}, created, created if updated is None else updated, ttl, expires
    )
    fields = memory_chunks.item_fields(rec, ikey)
    assert fields == _fields_reference(rec, ikey)
    assert memory_chunks.parse_item(("n",), ikey, fields) == rec


@given(
    present=st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=12, unique=True),
    suffix=st.binary(min_size=1, max_size=4),
)
def test_with_item_is_of_then_put(present: list[bytes], suffix: bytes) -> None:
    """with_item gives the chunk Chunk.of then Chunk.put give (a new item or a replaced
    one), and leaves the record it was given as it was."""
    present.sort()
    key = b"\x01\x07" + present[0]
    rec = (tuple(present), tuple(ormsgpack.packb([{"i": i}, i]) for i in range(len(present))))
    kept = (rec[0][:], rec[1][:])
    fields: list[Any] = [{"new": True}, 5]
    expected = Chunk.of(key, rec)
    expected.put(suffix, fields)
    got = memory_chunks.with_item(key, rec, suffix, fields)
    assert (got.key, got.suffixes, got.blobs) == (expected.key, expected.suffixes, expected.blobs)
    assert rec == kept


@given(
    data=st.one_of(st.binary(max_size=600), st.binary(max_size=8).map(lambda b: b * 60)),
    threshold=st.sampled_from([None, 0, 64, 512]),
    compress_from=st.sampled_from([0, 96, 10_000]),
    key=st.binary(min_size=1, max_size=20),
)
def test_encode_fast_frames_as_encode_body(
    data: bytes, threshold: int | None, compress_from: int, key: bytes
) -> None:
    """The chunk records' fast framing gives encode_body's bytes (fast, over the key, no
    prefix), whatever the thresholds, with or without a trained dictionary, and decodes."""
    from deltalog.engine.codec import RecordCodec

    codec = RecordCodec(compress_threshold=threshold)
    body = ormsgpack.packb(data)
    for _ in range(2):
        want = codec.encode_body(body, key=key, compress_from=compress_from, fast=True)
        assert codec.encode_fast(body, key, compress_from) == want
        assert codec.decode(want, "t", key=key) == data
        codec.install(1, b"a trained dictionary would be here" * 4, activate=True)
