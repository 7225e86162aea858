"""A memory store written by format 5 (one record per item) reads the same read-only and after the writable open packs it into chunks (format 6); damage does not block the upgrade (R10, issue 17)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import lmdb
import pytest
from deltalog.engine import DeltaLogStore, keys
from deltalog.engine.env import Environment
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.memory_chunks import is_chunk

from tests.golden_memory_gen import READ_AT, index, read_back

GOLDEN = Path(__file__).resolve().parent / "data" / "golden" / "memory-format-5"


def expected() -> dict[str, Any]:
    value: dict[str, Any] = json.loads((GOLDEN / "expected.json").read_text())
    return value


def copy_of(tmp_path: Path) -> Path:
    store = tmp_path / "m5"
    store.mkdir()
    shutil.copy(GOLDEN / "data.mdb", store / "data.mdb")
    return store


def raw_items(path: Path) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    try:
        db = env.open_db(b"items", create=False)
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    finally:
        env.close()


def states(path: Path, *, readonly: bool) -> dict[str, Any]:
    def clock() -> float:
        return READ_AT

    if readonly:
        env = Environment(path, readonly=True)
        store = DeltaLogStore(env, owns_env=True, index=index(), clock=clock)
    else:
        store = DeltaLogStore.from_path(path, index=index(), clock=clock)
    with store:
        got = read_back(store)
        got["problems"] = store.verify()
        with store.env.read() as r:
            got["format_version"] = r.meta("format_version")
            got["chunks"] = [
                is_chunk(store.env.codec.decode(raw, "items", key=key))
                for key, raw in store.env.iter_db("items")
            ]
        return got


def test_the_golden_store_is_format_5_with_one_record_per_item() -> None:
    want = expected()
    assert want["format_version"] == 5
    assert len(raw_items(GOLDEN)) >= len(want["items"]) > 150
    assert len(want["namespaces"]) == 8 and want["query"]


def test_read_only_open_reads_it_and_writes_nothing(tmp_path: Path) -> None:
    path = copy_of(tmp_path)
    before = hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()
    got = states(path, readonly=True)
    assert got["format_version"] == 5 and not any(got["chunks"]) and got["problems"] == []
    want = expected()
    for part in ("namespaces", "items", "query"):
        assert got[part] == want[part], part
    assert hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest() == before


def test_writable_open_packs_the_items_and_keeps_them(tmp_path: Path) -> None:
    path = copy_of(tmp_path)
    rows_before = len(raw_items(path))
    got = states(path, readonly=False)
    assert got["format_version"] == keys.FORMAT_VERSION == 16
    assert got["problems"] == []
    want = expected()
    for part in ("namespaces", "items", "query"):
        assert got[part] == want[part], part
    assert all(got["chunks"]) and 5 * len(got["chunks"]) < rows_before  # ~11 items each
    # Still writable: puts between and around the packed items, deletes, verify.
    with DeltaLogStore.from_path(path, index=index(), clock=lambda: READ_AT) as store:
        store.put(("docs", "big"), "k0005", {"text": "between"})
        store.put(("docs", "big"), "a", {"text": "before all"})
        store.put(("docs", "big"), "z", {"text": "after all"})
        store.delete(("docs", "big"), "k002")
        keys_now = [it.key for it in store.search(("docs", "big"), limit=1000)]
        assert "k002" not in keys_now and {"a", "z", "k0005"} <= set(keys_now)
        assert len(keys_now) == sum(1 for i in want["items"] if i[0] == ["docs", "big"]) + 2
        assert store.verify() == []


def test_a_damaged_record_does_not_block_the_upgrade(tmp_path: Path) -> None:
    """A format 5 record that fails its CRC stays where it is, reported by verify; the
    chunks end before it and start after it, so every other item still reads. Its key
    range reads as damaged (a get or a put there raises, nothing is written), not as
    empty: the upgrade cannot know it held one item only."""
    path = copy_of(tmp_path)
    rows = raw_items(path)
    prefix = rows[0][0][: 1 + rows[0][0][0]]  # ("docs", "big"), the first namespace
    big = [k for k, _ in rows if k.startswith(prefix)]
    victim = big[len(big) // 2]
    name, _ = keys.decode_str(victim, len(prefix) + 1)
    raw = dict(rows)[victim]
    env = lmdb.open(str(path), max_dbs=16)
    db = env.open_db(b"items", create=False)
    with env.begin(write=True) as txn:
        txn.put(victim, raw[:-1] + bytes((raw[-1] ^ 1,)), db=db)
    env.close()
    items = [i for i in expected()["items"] if i[0] == ["docs", "big"]]
    assert name in [i[1] for i in items]
    with DeltaLogStore.from_path(path, index=index(), clock=lambda: READ_AT) as store:
        problems = store.verify()
        assert len(problems) == 1 and victim.hex() in problems[0]
        for ns, key, value, _, _ in items:
            if key == name:
                with pytest.raises(CorruptRecordError, match=victim.hex()):
                    store.get(tuple(ns), key)
            else:
                got = store.get(tuple(ns), key, refresh_ttl=False)
                assert got is not None and got.value == value
        with pytest.raises(CorruptRecordError, match=victim.hex()):
            store.put(("docs", "big"), name + "0", {"text": "next to the damage"})
        store.put(("docs", "big"), "a", {"text": "far from it"})
        far = store.get(("docs", "big"), "a")
        assert far is not None and far.value == {"text": "far from it"}
        assert len(store.verify()) == 1
