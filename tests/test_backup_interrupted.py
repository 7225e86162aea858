"""A backup or compact killed at any moment leaves no store that opens as one (issue 15.4)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogSaver, Environment
from deltalog.engine.errors import InvalidInputError, NotAStoreError

from .checkpoints import put_values

_COPIER = """
import sys, time
from deltalog.engine import DeltaLogSaver
with DeltaLogSaver.from_path(sys.argv[1]) as saver:
    print("ready", flush=True)
    started = time.perf_counter()
    saver.backup(sys.argv[2], compact=sys.argv[3] == "compact")
print(time.perf_counter() - started, flush=True)
"""


def _files(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Size, mtime and mode of each file in ``folder``; a file renamed away meanwhile is skipped."""
    found: dict[str, tuple[int, int, int]] = {}
    if not folder.exists():
        return found
    for p in folder.iterdir():
        try:
            st = p.stat()
        except FileNotFoundError:  # a copy in progress renames its temporary file
            continue
        found[p.name] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return found


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 16 MiB store (random values, so compaction cannot shrink the copy to nothing)."""
    path = tmp_path_factory.mktemp("src") / "s"
    rng = random.Random(7)
    with DeltaLogSaver.from_path(path, compress_threshold=None, durable=False) as saver:
        for thread in range(8):
            put_values(saver, f"t{thread}", {"blob": rng.randbytes(2 * 1024**2)})
    return path


def _copy_seconds(source: Path, dest: Path, mode: str) -> float:
    """How long one whole copy takes (after the store is open)."""
    proc = subprocess.run(
        [sys.executable, "-c", _COPIER, str(source), str(dest), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    ready, seconds = proc.stdout.split()
    assert ready == "ready"
    return float(seconds)


@pytest.mark.parametrize("mode", ["backup", "compact"])
def test_killed_copy_never_opens_as_a_store(source: Path, tmp_path: Path, mode: str) -> None:
    """SIGKILL at seeded random moments: the destination is either refused as "not a deltalog
    store" or holds the complete copy, and opening it read-only changes nothing."""
    with DeltaLogSaver(Environment(source, readonly=True)) as reader:
        expected = sorted((t.thread_id, t.checkpoints) for t in reader.threads())
    budget = _copy_seconds(source, tmp_path / "timing", mode)
    rng = random.Random(f"15.4-{mode}")
    outcomes = {"refused": 0, "complete": 0}
    for trial in range(6):
        dest = tmp_path / f"copy-{trial}"
        proc = subprocess.Popen(
            [sys.executable, "-c", _COPIER, str(source), str(dest), mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0, 1.2 * budget))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        before = _files(dest)
        try:
            with DeltaLogSaver(Environment(dest, readonly=True)) as copy:
                assert sorted((t.thread_id, t.checkpoints) for t in copy.threads()) == expected
                assert copy.verify(deep=True).ok
            outcomes["complete"] += 1
        except NotAStoreError as exc:
            assert "not a deltalog store" in str(exc)
            outcomes["refused"] += 1
        assert _files(dest) == before
        assert "lock.mdb" not in before
    print(mode, outcomes)
    assert sum(outcomes.values()) == 6
    assert outcomes["refused"], outcomes  # the kills did land mid-copy


def test_copy_files_are_owner_only_while_written(source: Path, tmp_path: Path) -> None:
    """Every file of a copy in progress is 0600 whatever the umask (issue 15.10)."""
    old = os.umask(0)
    try:
        dest = tmp_path / "copy"
        proc = subprocess.Popen(
            [sys.executable, "-c", _COPIER, str(source), str(dest), "backup"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        modes: set[int] = set()
        while proc.poll() is None:
            modes |= {mode & 0o777 for _size, _mtime, mode in _files(dest).values()}
        proc.stdout.close()
    finally:
        os.umask(old)
    assert modes == {0o600}


def test_backup_into_an_existing_store_or_file_is_refused(source: Path, tmp_path: Path) -> None:
    """A destination holding a store, or a file, raises InvalidInputError and is left unchanged."""
    (tmp_path / "file").write_bytes(b"x")
    with DeltaLogSaver(Environment(source, readonly=True)) as saver:
        saver.backup(tmp_path / "b")
        before = _files(tmp_path / "b")
        with pytest.raises(InvalidInputError, match="already holds a store"):
            saver.backup(tmp_path / "b")
        with pytest.raises(InvalidInputError, match="is a file"):
            saver.backup(tmp_path / "file")
    assert _files(tmp_path / "b") == before
    assert (tmp_path / "file").read_bytes() == b"x"
