"""A flipped bit anywhere in the name tables never serves another thread's data: reads return the right data or raise CorruptRecordError, and verify reports it; the name caches stay bounded (R11, issue 15.1 and 15.11)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lmdb
import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver, keys
from deltalog.engine.cache import NameCache

from tests.checkpoints import put_values
from tests.graphs import cfg

USERS = [f"user-{i}" for i in range(6)]
# A name longer than 400 bytes is hashed in the names key (the full name sits in the value).
LONG = "L" * 450
THREADS = [*USERS, LONG]


def _secret(thread_id: str) -> dict[str, Any]:
    """Values only this thread holds: an inline scalar and a blob."""
    return {"owner": thread_id, "notes": [thread_id] * 200}


def _store(path: Path) -> None:
    with DeltaLogSaver.from_path(path) as saver:
        for thread_id in THREADS:
            parent = put_values(saver, thread_id, _secret(thread_id))
            put_values(saver, thread_id, _secret(thread_id), parent=parent)


def _rows(path: Path, db: str) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=16)
    try:
        handle = env.open_db(db.encode(), create=False)
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=handle)]
    finally:
        env.close()


def _trial_copy(pristine: Path, tmp_path: Path, trial: int) -> Path:
    """A fresh copy of the store at ``pristine`` for one damage trial."""
    path = tmp_path / f"trial-{trial}"
    path.mkdir()
    (path / "data.mdb").write_bytes((pristine / "data.mdb").read_bytes())
    return path


def _replace(path: Path, db: str, old: bytes, key: bytes, value: bytes) -> None:
    """Delete record ``old`` of ``db`` and store ``value`` under ``key`` (raw LMDB)."""
    env = lmdb.open(str(path), max_dbs=16)
    try:
        handle = env.open_db(db.encode(), create=False)
        with env.begin(write=True) as txn:
            txn.delete(old, db=handle)
            txn.put(key, value, db=handle)
    finally:
        env.close()


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    at = rng.randrange(len(out))
    out[at] ^= 1 << rng.randrange(8)
    return bytes(out)


def _reads(saver: DeltaLogSaver, thread_id: str) -> Any:
    """What a read of the thread's latest state returns (or the CorruptRecordError)."""
    try:
        found = saver.get_tuple(cfg(thread_id))
    except CorruptRecordError as exc:
        return exc
    return None if found is None else found.checkpoint["channel_values"]


@pytest.mark.parametrize("db", ["names", "names_rev"])
def test_flipped_bits_in_name_tables_never_serve_another_threads_data(
    db: str, tmp_path: Path
) -> None:
    """Issue 15.1: 60 seeded random bit flips, each in the key or the value of a random
    record of ``names``/``names_rev``: every read of every thread returns that thread's own
    values or raises CorruptRecordError, and verify reports every flip. The one exception
    (no lookup can see it; docs/reliability.md): a damaged names *key* makes its own name
    unknown, so that thread reads as empty or that channel as holding nothing."""
    pristine = tmp_path / "pristine"
    _store(pristine)
    rng = random.Random(f"name-flips-{db}")
    for trial in range(60):
        path = _trial_copy(pristine, tmp_path, trial)
        rows = _rows(path, db)
        key, value = rows[rng.randrange(len(rows))]
        in_key = rng.random() < 0.5
        new_key, new_value = (_flip(rng, key), value) if in_key else (key, _flip(rng, value))
        _replace(path, db, key, new_key, new_value)
        with DeltaLogSaver.from_path(path) as saver:
            for thread_id in THREADS:
                got = _reads(saver, thread_id)
                if isinstance(got, CorruptRecordError):
                    continue
                allowed: list[Any] = [_secret(thread_id)]
                if db == "names" and in_key:  # the damaged name is unknown, nothing else
                    if key in (
                        keys.name_key(keys.KIND_THREAD, thread_id),
                        keys.name_key(keys.KIND_NS, ""),
                    ):
                        allowed = [None]
                    for channel in _secret(thread_id):
                        if key == keys.name_key(keys.KIND_CHANNEL, channel):
                            allowed.append(
                                {c: v for c, v in _secret(thread_id).items() if c != channel}
                            )
                assert got in allowed, (trial, thread_id, key.hex(), in_key)
            report = saver.verify()
            assert not report.ok, (trial, key.hex(), in_key)


def test_verify_cross_checks_names_both_ways(tmp_path: Path) -> None:
    """Issue 15.1: a names entry without its reverse, a reverse entry without its names
    entry, and two names sharing one id (records otherwise intact, CRCs valid) are each
    reported by verify."""
    from deltalog.engine.names import encode_name_id

    path = tmp_path / "store"
    _store(path)
    with DeltaLogSaver.from_path(path) as saver:
        assert saver.verify().ok
    rev = dict(_rows(path, "names_rev"))
    user0 = keys.name_key(keys.KIND_THREAD, "user-0")
    user1 = keys.name_key(keys.KIND_THREAD, "user-1")
    names = dict(_rows(path, "names"))
    user1_id = int.from_bytes(names[user1][:8], "big")
    cases = {
        "no reverse": ("names_rev", keys.name_rev_key(keys.KIND_THREAD, user1_id), None),
        "no forward": ("names", user1, None),
        "shared id": ("names", user0, encode_name_id(user0, user1_id, None)),
    }
    for what, (db, key, value) in cases.items():
        case = tmp_path / what.replace(" ", "-")
        case.mkdir()
        (case / "data.mdb").write_bytes((path / "data.mdb").read_bytes())
        env = lmdb.open(str(case), max_dbs=16)
        try:
            handle = env.open_db(db.encode(), create=False)
            with env.begin(write=True) as txn:
                if value is None:
                    txn.delete(key, db=handle)
                else:
                    txn.put(key, value, db=handle)
        finally:
            env.close()
        with DeltaLogSaver.from_path(case) as saver:
            report = saver.verify()
        assert not report.ok, what
        assert any(p.kind == "undecodable" for p in report.problems), (what, report.problems)
    assert rev  # the store had reverse entries to remove


def test_damaged_name_seq_never_reuses_an_id(tmp_path: Path) -> None:
    """R11: a name_seq that went back (a damaged meta record) makes the next new name fail
    with CorruptRecordError instead of handing it an id another thread owns."""
    import ormsgpack

    path = tmp_path / "store"
    _store(path)
    env = lmdb.open(str(path), max_dbs=16)
    try:
        meta = env.open_db(b"meta", create=False)
        with env.begin(write=True) as txn:
            txn.put(b"name_seq", ormsgpack.packb(1), db=meta)
    finally:
        env.close()
    with DeltaLogSaver.from_path(path) as saver:
        with pytest.raises(CorruptRecordError, match="name_seq"):
            put_values(saver, "newcomer", {"owner": "newcomer"})
        assert _reads(saver, "user-0") == _secret("user-0")


def test_name_caches_stay_bounded(tmp_path: Path) -> None:
    """Issue 15.11: after reads and writes of more distinct threads than the cache holds,
    both name maps hold at most their bound, and every thread still reads its own data."""
    with DeltaLogSaver.from_path(tmp_path / "store") as saver:
        store = saver.env
        store._name_ids = NameCache(64)
        store._names = NameCache(64)
        thread_ids = [f"t-{i}" for i in range(300)]
        for thread_id in thread_ids:
            put_values(saver, thread_id, {"owner": thread_id})
        for thread_id in thread_ids[::7]:
            assert _reads(saver, thread_id) == {"owner": thread_id}
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert listed == set(thread_ids)
        assert len(store._name_ids) <= 64
        assert len(store._names) <= 64
    default: NameCache[str, int] = NameCache()
    for i in range(default.max_entries + 10):
        default.put(str(i), i)
    assert len(default) == default.max_entries
    assert default.get("0") is None and default.get(str(default.max_entries + 9)) is not None
