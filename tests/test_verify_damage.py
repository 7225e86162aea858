"""Damage a read would hit is reported by verify and raised as CorruptRecordError by every read path, stats included (R11, issue 15.2 and 15.9)."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver, keys
from deltalog.engine.codec import KEYED, TAG_ZSTD
from deltalog.engine.errors import DamagedKeyError

from tests.checkpoints import checkpoint_id, put_values
from tests.graphs import cfg
from tests.test_name_tables import _rows, _trial_copy

PAGE = 4096


def _raw_put(path: Path, db: str, key: bytes, value: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    try:
        handle = env.open_db(db.encode(), create=False)
        with env.begin(write=True) as txn:
            txn.put(key, value, db=handle)
    finally:
        env.close()


def test_key_decoders_refuse_trailing_bytes_and_second_spellings() -> None:
    """Issue 15.2: a key with a byte after its last field, an id in non-minimal bytes, or a
    uuid spelled as a plain string decodes to DamagedKeyError, not to the same tuple."""
    cid = "1ef1ed75-ec4b-6e69-8c6b-ffed37100000"
    key = keys.checkpoint_key(3, 1, keys.encode_id(cid))
    assert keys.decode_checkpoint_key(key) == (3, 1, cid)
    blob = keys.blob_key(3, 1, 2, 7)
    run = keys.run_key(keys.encode_run("run"), 3, 1, keys.encode_id(cid))
    bad = {
        "trailing checkpoint": key + b"\x00",
        "non-minimal uid": b"\x02\x00\x03" + key[2:],
        "uuid as str": keys.checkpoint_key(3, 1, b"\x30" + keys.encode_str(cid)),
    }
    for what, damaged in bad.items():
        with pytest.raises(DamagedKeyError):
            keys.decode_checkpoint_key(damaged)
        assert what
    with pytest.raises(DamagedKeyError):
        keys.decode_blob_key(blob + b"\x01")
    with pytest.raises(DamagedKeyError):
        keys.decode_run_key(run + b"\x01")
    with pytest.raises(DamagedKeyError):
        keys.decode_blob_key(
            keys.ns_prefix(3, 1) + b"\x03" + keys.encode_str("0" * 32 + ".x") + keys.uid(2)
        )


def test_checkpoint_key_with_trailing_garbage_is_damage(tmp_path: Path) -> None:
    """Issue 15.2: a checkpoint record stored again under its key plus one garbage byte is
    never listed twice: listing the thread raises CorruptRecordError, the latest read too
    (the damaged key sorts last), and verify(deep=True) reports it; other threads read."""
    path = tmp_path / "store"
    with DeltaLogSaver.from_path(path) as saver:
        first = put_values(saver, "victim", {"x": 1})
        put_values(saver, "victim", {"x": 2}, parent=first)
        put_values(saver, "other", {"x": 3})
    key, value = next(
        (k, v)
        for k, v in _rows(path, "checkpoints")
        if k.endswith(keys.encode_id(checkpoint_id(first)))
    )
    _raw_put(path, "checkpoints", key + b"\x07", value)
    with DeltaLogSaver.from_path(path) as saver:
        with pytest.raises(CorruptRecordError):
            list(saver.list(cfg("victim")))
        assert saver.get_tuple(cfg("other")) is not None
        report = saver.verify(deep=True)
        assert not report.ok
        assert any(
            p.thread_id == "victim" and (key + b"\x07").hex() in p.detail for p in report.problems
        ), report.problems


def _damage_a_checkpoint_leaf(path: Path) -> int:
    """Mark one leaf page of ``checkpoints`` as neither leaf nor branch (what a torn or
    stray write leaves); return the id of a thread whose keys all sit inside that page."""
    data = bytearray((path / "data.mdb").read_bytes())
    by_thread: dict[int, set[int]] = {}
    for key, _ in _rows(path, "checkpoints"):
        at = data.find(key)
        while at >= 0 and struct.unpack_from("<H", data, at - 2)[0] != len(key):
            at = data.find(key, at + 1)  # a writes key starting with it, not this node
        assert at >= 0
        by_thread.setdefault(keys.decode_uid(key, 0)[0], set()).add(at // PAGE)
    pages = {t: p.pop() for t, p in by_thread.items() if len(p) == 1}
    threads = sorted(pages)
    # A thread in the middle of its page: a search for any of its keys lands there.
    inner = [
        t
        for i, t in enumerate(threads[1:-1], 1)
        if pages[threads[i - 1]] == pages[t] == pages[threads[i + 1]]
    ]
    victim = inner[len(inner) // 2]
    page = pages[victim]
    assert struct.unpack_from("<H", data, page * PAGE + 10)[0] == 0x02  # P_LEAF
    struct.pack_into("<H", data, page * PAGE + 10, 0)
    (path / "data.mdb").write_bytes(bytes(data))
    return victim


def test_damaged_btree_page_is_reported_by_verify(tmp_path: Path) -> None:
    """Issue 15.2: a checkpoints leaf page whose type LMDB rejects (MDB_CORRUPTED "Located
    page was wrong type" on every read of a thread on it) makes verify report `unreadable`
    instead of ok, and the read raises CorruptRecordError (verify walks in a child, since
    LMDB aborts a process whose cursor steps onto such a page)."""
    path = tmp_path / "store"
    with DeltaLogSaver.from_path(path) as saver:
        for i in range(120):
            parent = put_values(saver, f"thread-{i:03d}", {"pad": "x"})
            put_values(saver, f"thread-{i:03d}", {"pad": "y"}, parent=parent)
        with saver.env.read() as r:
            names = {
                r.name_id(keys.KIND_THREAD, f"thread-{i:03d}"): f"thread-{i:03d}"
                for i in range(120)
            }
    victim = names[_damage_a_checkpoint_leaf(path)]
    with DeltaLogSaver.from_path(path) as saver:
        with pytest.raises(CorruptRecordError, match=r"wrong type|damaged"):
            saver.get_tuple(cfg(victim))
        report = saver.verify(deep=True)
        assert not report.ok
        assert any(p.kind == "unreadable" for p in report.problems), report.problems


def _zstd_blob(path: Path) -> tuple[bytes, bytes]:
    for key, value in _rows(path, "blobs"):
        if value[0] & ~KEYED == TAG_ZSTD:
            return key, value
    raise AssertionError("no compressed blob")


def test_damaged_compressed_frame_under_stats_is_corrupt_record_error(tmp_path: Path) -> None:
    """Issue 15.9: one damaged byte in a compressed frame's header makes channel_stats()
    raise CorruptRecordError naming the record, and `deltalog stats` print a one-line
    Error and exit 1 — not a zstandard.ZstdError traceback."""
    path = tmp_path / "store"
    with DeltaLogSaver.from_path(path) as saver:
        put_values(saver, "t", {"notes": ["a fairly compressible line of text"] * 400})
    key, value = _zstd_blob(path)
    damaged = bytearray(value)
    damaged[1] ^= 0xFF  # the zstd magic number
    _raw_put(path, "blobs", key, bytes(damaged))
    with (
        DeltaLogSaver.from_path(path) as saver,
        pytest.raises(CorruptRecordError, match=f"blobs/{key.hex()}"),
    ):
        saver.channel_stats()
    done = subprocess.run(
        [sys.executable, "-m", "deltalog.engine", "stats", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Error:" in done.stderr, done.stderr


def test_flipped_bits_in_checkpoint_keys_are_reported_or_read_whole(tmp_path: Path) -> None:
    """Issue 15.2: 60 seeded random bit flips in random checkpoint keys (each on its own
    copy): reads of every thread return data or raise CorruptRecordError (nothing else),
    verify never raises, and every damaged key that no longer decodes strictly to a key of
    known names is reported. (A flip that yields another valid key is not detectable
    without a CRC over record keys: docs/reliability.md, "not guaranteed".)"""
    import random

    pristine = tmp_path / "pristine"
    with DeltaLogSaver.from_path(pristine) as saver:
        for i in range(5):
            parent = put_values(saver, f"user-{i}", {"owner": f"user-{i}"})
            put_values(saver, f"user-{i}", {"owner": f"user-{i}", "n": 2}, parent=parent)
    known = {int.from_bytes(k[1:], "big") for k, _ in _rows(pristine, "names_rev")}
    rng = random.Random("checkpoint-key-flips")
    reported = 0
    for trial in range(60):
        path = _trial_copy(pristine, tmp_path, trial)
        rows = _rows(path, "checkpoints")
        key, value = rows[rng.randrange(len(rows))]
        damaged = bytearray(key)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        if bytes(damaged) in dict(rows):
            continue
        env = lmdb.open(str(path), max_dbs=16)
        try:
            handle = env.open_db(b"checkpoints", create=False)
            with env.begin(write=True) as txn:
                txn.delete(key, db=handle)
                txn.put(bytes(damaged), value, db=handle)
        finally:
            env.close()
        try:
            t, n, _ = keys.decode_checkpoint_key(bytes(damaged))
            valid = t in known and n in known
        except DamagedKeyError:
            valid = False
        with DeltaLogSaver.from_path(path) as saver:
            for i in range(5):
                try:
                    saver.get_tuple(cfg(f"user-{i}"))
                    list(saver.list(cfg(f"user-{i}")))
                except CorruptRecordError:
                    pass
            report = saver.verify(deep=True)
        if not valid:
            assert not report.ok, (trial, key.hex(), bytes(damaged).hex())
            reported += 1
    assert reported >= 10  # the trials did reach keys that stopped decoding


@pytest.mark.parametrize("mark", ["fwd", "wdep"])
def test_damaged_meta_mark_keys_are_reported(mark: str, tmp_path: Path) -> None:
    """A forward-link or write-range mark key with a trailing byte, or naming an id no
    name record holds, is a table problem verify() reports (table_check's meta rule)."""
    path = tmp_path / "store"
    with DeltaLogSaver.from_path(path) as saver:
        put_values(saver, "victim", {"x": 1})
        with saver.env.read() as r:
            found = r.ids("victim", "")
            channel = r.name_id(keys.KIND_CHANNEL, "x")
    assert found is not None and channel is not None
    t, n = found
    good = keys.fwd_key(t, n) if mark == "fwd" else keys.wdep_key(t, n, channel)
    unknown = keys.fwd_key(t, 250) if mark == "fwd" else keys.wdep_key(t, n, 250)
    what = "forward-link" if mark == "fwd" else "write-range"
    for key, detail in [
        (good + b"\x07", f"{what} mark key has trailing bytes"),
        (unknown, "unknown name id"),
    ]:
        _raw_put(path, "meta", key, b"\x00" * 16)
        with DeltaLogSaver.from_path(path) as saver:
            report = saver.verify()
        assert any(detail in p.detail for p in report.problems), report.problems
        env = lmdb.open(str(path), max_dbs=16)
        try:
            meta = env.open_db(b"meta", create=False)  # before the write transaction
            with env.begin(write=True) as txn:
                txn.delete(key, db=meta)
        finally:
            env.close()
