"""Older formats open read-only unchanged and are upgraded, whole, on the first writable open; a malformed format record is a clear error (R10, R12, issue 15.1 and 15.17)."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import lmdb
import ormsgpack
import pytest
from deltalog.engine import DeltaLogSaver, Environment, FormatVersionError, keys
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.migrations import MIGRATIONS, pending
from deltalog.engine.names import decode_name_id, decode_name_rev
from langgraph.graph.state import CompiledStateGraph

from tests.graphs import cfg, chat_graph, history

FIXTURE = Path(__file__).resolve().parent / "data" / "format3-names"


def _make_module() -> ModuleType:
    """The fixture's generator (its ``program`` says what the store holds)."""
    spec = importlib.util.spec_from_file_location("format3_make", FIXTURE / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE = _make_module()
# The delta setting each fixture thread was written with (see make.py).
SNAPSHOT_FREQUENCY = dict(zip(MAKE.THREADS, (None, 2, None), strict=True))


def _copy_fixture(tmp_path: Path, version: int = 3) -> Path:
    """A private copy of the format-3 store, relabelled ``version`` if asked."""
    path = tmp_path / "old"
    shutil.copytree(FIXTURE / "store", path)
    if version != 3:
        _raw_meta(path, b"format_version", ormsgpack.packb(version))
    return path


def _raw_meta(path: Path, key: bytes, value: bytes | None = None) -> bytes | None:
    """Read (or, given ``value``, overwrite) one ``meta`` record with raw LMDB."""
    env = lmdb.open(str(path), max_dbs=16, lock=False, readonly=value is None)
    try:
        meta = env.open_db(b"meta", create=False)
        with env.begin(write=value is not None) as txn:
            if value is not None:
                txn.put(key, value, db=meta)
            found = txn.get(key, db=meta)
            return None if found is None else bytes(found)
    finally:
        env.close()


def _raw_rows(path: Path, db: str) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=16, lock=False, readonly=True)
    try:
        handle = env.open_db(db.encode(), create=False)
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=handle)]
    finally:
        env.close()


def _states(saver: DeltaLogSaver) -> dict[str, list[dict[str, Any]]]:
    """Every fixture thread's whole history as a user sees it (no ids or times)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for thread_id, sf in SNAPSHOT_FREQUENCY.items():
        graph: CompiledStateGraph[Any] = chat_graph(sf).compile(checkpointer=saver)
        out[thread_id] = history(graph, cfg(thread_id))
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()


def test_migration_list_is_ordered_and_reaches_the_current_format() -> None:
    """R10: MIGRATIONS chains 1 → … → FORMAT_VERSION without gaps; every older format has a path."""
    assert [m[0] for m in MIGRATIONS] == list(range(1, keys.FORMAT_VERSION))
    assert all(new == old + 1 for old, new, _ in MIGRATIONS)
    assert frozenset(range(1, keys.FORMAT_VERSION + 1)) == keys.READABLE_FORMATS
    for version in range(1, keys.FORMAT_VERSION + 1):
        assert [m[0] for m in pending(version)] == list(range(version, keys.FORMAT_VERSION))
    with pytest.raises(ValueError, match="no migration path"):
        pending(keys.FORMAT_VERSION + 1)


@pytest.mark.parametrize("old", [1, 2, 3])
def test_older_store_reads_unchanged_read_only_then_upgrades(old: int, tmp_path: Path) -> None:
    """R10/R12: a store written by the format-3 code (formats 1 and 2 only lacked record
    shapes, so it stands for them too) reads the same states read-only (bytes unchanged,
    still format ``old``) and after the writable open that upgrades it to format 4, whose
    name records then all carry a CRC; the states equal a fresh run of the same program."""
    path = _copy_fixture(tmp_path, old)
    before = _digest(path)
    with DeltaLogSaver(Environment(path, readonly=True)) as saver:
        read_only = _states(saver)
    assert _digest(path) == before
    assert _raw_meta(path, b"format_version") == ormsgpack.packb(old)
    legacy = _raw_rows(path, "names")
    assert all(len(v) == 8 for k, v in legacy if k[1] == 0)  # no CRC yet

    with DeltaLogSaver.from_path(path) as saver:
        with saver.env.read() as r:
            assert r.meta("format_version") == keys.FORMAT_VERSION
        upgraded = _states(saver)
        report = saver.verify(deep=True)
        assert report.ok, report.problems
        graph: CompiledStateGraph[Any] = chat_graph(None).compile(checkpointer=saver)
        graph.invoke({"messages": []}, cfg("alice"))  # still writable
    assert upgraded == read_only
    with DeltaLogSaver.from_path(tmp_path / "fresh") as fresh:
        MAKE.program(fresh)
        assert _states(fresh) == read_only
    names, names_rev = _raw_rows(path, "names"), _raw_rows(path, "names_rev")
    # The invoke after the upgrade interned its task paths (format 10), no other name.
    paths = [k for k, _ in names if k[:1] == keys.KIND_TASK_PATH]
    assert paths and not any(k[:1] == keys.KIND_TASK_PATH for k, _ in legacy)
    assert len(names) - len(paths) == len(legacy) == len(names_rev) - len(paths)
    assert len(legacy) > len(MAKE.THREADS)
    for key, raw in names:
        decode_name_id(key, raw)  # CRC checked
    for key, raw in names_rev:
        decode_name_rev(key, raw)


GOLDEN_4 = Path(__file__).resolve().parent / "data" / "golden" / "format-4"


def test_format_5_frames_every_record_over_its_key_and_a_damaged_one_does_not_block_it(
    tmp_path: Path,
) -> None:
    """R10, issue 15.2: the 4 → 5 step re-frames every checkpoint, write and blob record
    (tag bit KEYED, CRC over the key); a record already damaged in format 4 is left as it
    was (still reported by verify), and the upgrade and every other record go through."""
    from deltalog.engine.codec import KEYED

    path = tmp_path / "s"
    path.mkdir()
    shutil.copy(GOLDEN_4 / "data.mdb", path / "data.mdb")
    rows = {db: _raw_rows(path, db) for db in ("checkpoints", "writes", "blobs")}
    assert all(not v[0] & KEYED for db in ("checkpoints", "blobs") for _, v in rows[db])
    victim_key, victim = rows["blobs"][0]
    damaged = victim[:-1] + bytes((victim[-1] ^ 1,))
    env = lmdb.open(str(path), max_dbs=16)
    blobs = env.open_db(b"blobs", create=False)
    with env.begin(write=True) as txn:
        txn.put(victim_key, damaged, db=blobs)
    env.close()
    with DeltaLogSaver.from_path(path) as saver:
        with saver.env.read() as r:
            assert r.meta("format_version") == keys.FORMAT_VERSION == 16
        report = saver.verify(deep=True)
    assert not report.ok and any(victim_key.hex() in p.detail for p in report.problems)
    after = {db: dict(_raw_rows(path, db)) for db in rows}
    assert after["blobs"][victim_key] == damaged
    with DeltaLogSaver.from_path(path) as saver:  # every record now says which blobs it has
        with saver.env.read() as r:
            ids = r.ids("chat", "")
            assert ids is not None
            rows_ = [r.checkpoint(*ids, cid, with_values=False) for cid in r.checkpoint_ids(*ids)]
        assert rows_ and all(row is not None and row.blobbed is not None for row in rows_)
    for db, old_rows in rows.items():
        for key, old in old_rows:
            if key == victim_key:
                continue
            if db == "writes":  # moved to its format 7 key by the 6 -> 7 step
                t, n, cid, _, task_id, idx = keys.decode_legacy_write_key(key)
                key = keys.write_key(t, n, keys.encode_id(cid), task_id, idx)
            elif db == "blobs":  # moved to its format 10 key by the 9 -> 10 step
                key = keys.blob_key(*keys.decode_blob_key(key, legacy=True))
            new = after[db][key]
            if db == "writes":
                end = 1 + new[0]
                assert new[:end] == old[:end] and new[end] & KEYED and not old[end] & KEYED
            elif db == "blobs":
                assert new[0] == old[0] | KEYED and new[1:-4] == old[1:-4]
            else:  # checkpoints: re-encoded with their blob mask
                assert new[0] & KEYED


def test_upgrade_that_fails_leaves_the_old_format(tmp_path: Path) -> None:
    """R8/R10: a name record the old format cannot read either stops the upgrade with
    CorruptRecordError, and nothing of it is written (the store stays format 3)."""
    path = _copy_fixture(tmp_path)
    key, raw = _raw_rows(path, "names")[0]
    env = lmdb.open(str(path), max_dbs=16, lock=False)
    try:
        names = env.open_db(b"names")
        with env.begin(write=True) as txn:
            txn.put(key, raw + b"\x01", db=names)
    finally:
        env.close()
    rows = {db: _raw_rows(path, db) for db in ("names", "names_rev")}
    with pytest.raises(CorruptRecordError, match=f"names/{key.hex()}"):
        DeltaLogSaver.from_path(path)
    assert _raw_meta(path, b"format_version") == ormsgpack.packb(3)
    assert {db: _raw_rows(path, db) for db in rows} == rows


@pytest.mark.parametrize(
    "stored",
    [
        ormsgpack.packb([3]),
        ormsgpack.packb({"v": 3}),
        ormsgpack.packb(True),
        ormsgpack.packb(3.0),
        ormsgpack.packb("4"),
        b"\xc1garbage",
    ],
    ids=["list", "dict", "bool", "float", "str", "not-msgpack"],
)
@pytest.mark.parametrize("readonly", [True, False])
def test_malformed_format_version_is_a_clear_error(
    stored: bytes, readonly: bool, tmp_path: Path
) -> None:
    """Issue 15.17: a format_version that is a list, dict or garbage gives FormatVersionError
    naming the record (not ``TypeError: unhashable type``), read-only or not, and the store
    is not changed."""
    path = _copy_fixture(tmp_path)
    _raw_meta(path, b"format_version", stored)
    before = _digest(path)
    with pytest.raises(FormatVersionError, match="meta/format_version"):
        DeltaLogSaver(Environment(path, readonly=readonly))
    assert _digest(path) == before
