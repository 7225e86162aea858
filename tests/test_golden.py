"""Stores written by each earlier format open with today's code: bytes kept read-only, same states (R10, issue 16)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import lmdb
import pytest
from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine.env import Environment
from deltalog.engine.errors import StoreFullError

from tests.golden_gen import delta_blobs, raw_summary, read_back

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"
FORMATS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
"""Every earlier on-disk format, each written by its own last commit (tests/golden_gen.py)."""


def expected(fmt: int) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((GOLDEN / f"format-{fmt}" / "expected.json").read_text())
    return value


def copy_of(fmt: int, tmp_path: Path) -> Path:
    """A private copy of the golden store (opening adds lock.mdb; a writable open may upgrade)."""
    store = tmp_path / f"format-{fmt}"
    store.mkdir()
    shutil.copy(GOLDEN / f"format-{fmt}" / "data.mdb", store / "data.mdb")
    return store


def states(path: Path, *, readonly: bool) -> dict[str, Any]:
    """Everything the golden scenario wrote, read back through today's saver."""
    with DeltaLogSaver(Environment(path, readonly=readonly)) as saver:
        return read_back(saver)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_golden_store_is_what_it_claims(fmt: int, tmp_path: Path) -> None:
    """The committed bytes say format N and hold delta blobs, as recorded when written."""
    raw = raw_summary(GOLDEN / f"format-{fmt}")
    assert raw["format_version"] == fmt == expected(fmt)["format_version"]
    assert raw["tags"] == expected(fmt)["tags"]
    assert delta_blobs(raw) > 0
    assert (GOLDEN / f"format-{fmt}" / "data.mdb").stat().st_size < 100 * 1024


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_only_open_reads_the_same_states_and_writes_nothing(fmt: int, tmp_path: Path) -> None:
    store = copy_of(fmt, tmp_path)
    before = (store / "data.mdb").read_bytes()
    assert states(store, readonly=True) == expected(fmt)["states"]
    assert (store / "data.mdb").read_bytes() == before
    assert raw_summary(store)["format_version"] == fmt


@pytest.mark.parametrize("fmt", FORMATS)
def test_writable_open_keeps_the_states(fmt: int, tmp_path: Path) -> None:
    """A writable open (which may upgrade the format) and every later open read the same."""
    store = copy_of(fmt, tmp_path)
    assert states(store, readonly=False) == expected(fmt)["states"]
    assert states(store, readonly=True) == expected(fmt)["states"]
    assert states(store, readonly=False) == expected(fmt)["states"]


def test_the_9_to_10_step_moves_every_blob_to_its_version_major_key(tmp_path: Path) -> None:
    """Format 10: a writable open moves each blob of the format-9 store from thread · ns ·
    channel · version to thread · ns · version · channel, re-framed over the new key with
    the same body (nothing decompressed), and the store verifies clean."""
    store = copy_of(9, tmp_path)
    env = lmdb.open(str(store), max_dbs=16, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            db = env.open_db(b"blobs", txn=txn, create=False)
            old = {bytes(k): bytes(v) for k, v in txn.cursor(db=db)}
    finally:
        env.close()
    assert len(old) >= 5
    with DeltaLogSaver.from_path(store) as saver:
        assert saver.env.format_version == keys.FORMAT_VERSION == 16
        new = dict(saver.env.iter_db("blobs"))
        assert saver.verify(deep=True).ok
    moved = {keys.blob_key(*keys.decode_blob_key(k, legacy=True)): v for k, v in old.items()}
    assert set(new) == set(moved) and not set(new) & set(old)
    for key, raw in new.items():
        assert raw[:-4] == moved[key][:-4] and raw[-4:] != moved[key][-4:]  # only the CRC
    groups: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for key in sorted(new):
        t, n, c, version = keys.decode_blob_key(key)
        groups.setdefault((t, n), []).append((str(version), c))
    assert any(len({c for _, c in g}) > 1 for g in groups.values())
    assert all(g == sorted(g) for g in groups.values())  # version-major in each (thread, ns)


def test_an_upgrade_that_needs_more_room_grows_the_map(tmp_path: Path) -> None:
    """A step that rewrites records needs room for both copies until it commits: a store
    whose file is full (its map no larger than the file) is upgraded in a grown map
    instead of failing with MDB_MAP_FULL, and a cap too low for that is a clear
    StoreFullError that changes nothing."""
    store = copy_of(9, tmp_path)
    before = (store / "data.mdb").read_bytes()
    size = len(before)
    with pytest.raises(StoreFullError, match="max_map_size"):
        DeltaLogSaver(Environment(store, map_size=size, max_map_size=size))
    assert (store / "data.mdb").read_bytes() == before
    with DeltaLogSaver(Environment(store, map_size=size)) as saver:
        assert saver.env.format_version == keys.FORMAT_VERSION
        assert read_back(saver) == expected(9)["states"]
        assert saver.verify(deep=True).ok


def test_a_reader_open_across_another_process_upgrading_reads_the_new_layout(
    tmp_path: Path,
) -> None:
    """A read-only process that opened the format-9 store before another process upgraded
    it reads the same states after (blob keys in the new layout, read per transaction),
    also for values it had not read before the upgrade."""
    store = copy_of(9, tmp_path)
    with DeltaLogSaver(Environment(store, readonly=True)) as reader:
        assert reader.env.format_version == 9
        first = next(iter(reader.list({"configurable": {"thread_id": "chat"}})), None)
        assert first is not None
        upgrade = (
            "import sys; from deltalog.engine import DeltaLogSaver\n"
            "with DeltaLogSaver.from_path(sys.argv[1]) as s: print(s.env.format_version)"
        )
        done = subprocess.run(
            [sys.executable, "-c", upgrade, str(store)], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == str(keys.FORMAT_VERSION)
        assert raw_summary(store)["format_version"] == keys.FORMAT_VERSION
        assert read_back(reader) == expected(9)["states"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_only_verify_stats_and_export_read_the_old_layouts(fmt: int, tmp_path: Path) -> None:
    """verify, channel_stats and export read an older store read-only in its own key
    layouts (formats 1-9: blob keys channel first; 1-6: task paths in write keys): no
    damage reported, each channel's blobs and writes counted, and the export imported
    into a new store reads the same states. Nothing is written."""
    store = copy_of(fmt, tmp_path)
    before = (store / "data.mdb").read_bytes()
    with DeltaLogSaver(Environment(store, readonly=True)) as saver:
        report = saver.verify(deep=True)
        assert not [p for p in report.problems if p.severity == "error"], report.problems
        stats = saver.channel_stats()
        records = list(saver.export_records())
    assert (store / "data.mdb").read_bytes() == before
    assert stats["msgs"]["blobs"] == 2 and stats["msgs"]["writes"] == 4  # the delta channel
    assert stats["items"]["blobs"] == 2 and stats["big"]["blobs"] == 1
    with DeltaLogSaver.from_path(tmp_path / "imported") as fresh:
        fresh.import_records(records)
        assert read_back(fresh) == expected(fmt)["states"]


def test_the_storage_format_page_names_todays_format() -> None:
    """docs/storage-format.md's title names the format this code writes."""
    title = (GOLDEN.parents[2] / "docs" / "storage-format.md").read_text().splitlines()[0]
    assert title == f"# Storage format (format version {keys.FORMAT_VERSION})"
