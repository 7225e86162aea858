"""Every file deltalog creates with checkpoint data is owner-only whatever the umask (issue 15.10)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli

from .graphs import cfg, chat_graph, human


@pytest.fixture(params=[0o000, 0o022], ids=["umask000", "umask022"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    value: int = request.param
    old = os.umask(value)
    try:
        yield value
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _store(path: Path) -> Path:
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("t"))
    return path


def test_export_output_is_owner_only(umask: int, tmp_path: Path) -> None:
    """`deltalog export -o FILE` creates FILE 0600."""
    store = _store(tmp_path / "s")
    out = tmp_path / "all.jsonl"
    result = CliRunner().invoke(cli, ["export", str(store), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().count("\n") > 3
    assert _mode(out) == 0o600


def test_export_into_an_existing_file_keeps_its_mode(umask: int, tmp_path: Path) -> None:
    """An existing output file (the user's) is overwritten with its mode unchanged."""
    store = _store(tmp_path / "s")
    out = tmp_path / "all.jsonl"
    out.write_text("old")
    out.chmod(0o640)
    result = CliRunner().invoke(cli, ["export", str(store), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert not out.read_text().startswith("old")
    assert _mode(out) == 0o640


def test_export_that_fails_creates_no_file(umask: int, tmp_path: Path) -> None:
    """An export refused before writing (no such store) leaves no output file behind."""
    (tmp_path / "empty").mkdir()
    out = tmp_path / "all.jsonl"
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "empty"), "-o", str(out)])
    assert result.exit_code == 2
    assert not out.exists()


def test_migrate_to_sqlite_is_owner_only(umask: int, tmp_path: Path) -> None:
    """`deltalog migrate PATH --to sqlite:FILE` creates FILE (and SQLite's side files) 0600."""
    store = _store(tmp_path / "s")
    target = tmp_path / "out.db"
    result = CliRunner().invoke(cli, ["migrate", str(store), "--to", f"sqlite:{target}"])
    assert result.exit_code == 0, result.output
    created = [p for p in tmp_path.iterdir() if p.name.startswith("out.db")]
    assert target in created
    assert {p.name: _mode(p) for p in created} == {p.name: 0o600 for p in created}


def test_store_backup_and_compact_are_owner_only(umask: int, tmp_path: Path) -> None:
    """A store, its backup and its compacted copy: folders 0700, files 0600."""
    store = _store(tmp_path / "s")
    with DeltaLogSaver.from_path(store) as saver:
        saver.backup(tmp_path / "b")
        saver.compact(tmp_path / "c")
    for folder in (store, tmp_path / "b", tmp_path / "c"):
        assert _mode(folder) == 0o700
        for name in os.listdir(folder):
            assert _mode(folder / name) == 0o600, (folder, name)
