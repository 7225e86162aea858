"""A read-only open of anything that is not a deltalog store creates or changes nothing (R12, issue 15.5)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver, Environment
from deltalog.engine.cli import cli
from deltalog.engine.errors import NotAStoreError

from .graphs import cfg, chat_graph, human

Snapshot = dict[str, tuple[int, int, bytes]]


def snapshot(folder: Path) -> Snapshot:
    """Every file under ``folder``: mode, mtime (ns) and bytes."""
    out: Snapshot = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            st = os.stat(path)
            out[os.path.relpath(path, folder)] = (
                st.st_mode,
                st.st_mtime_ns,
                Path(path).read_bytes(),
            )
    return out


def empty_folder(path: Path) -> None:
    path.mkdir()


def empty_data_file(path: Path) -> None:
    path.mkdir()
    (path / "data.mdb").write_bytes(b"")


def partial_data_file(path: Path) -> None:
    """The first bytes of a real store's data file (a copy cut short by another tool)."""
    real = path.parent / "real"
    with DeltaLogSaver.from_path(real) as saver:
        chat_graph(3).compile(checkpointer=saver).invoke({"messages": [human(0)]}, cfg("t"))
    path.mkdir()
    (path / "data.mdb").write_bytes((real / "data.mdb").read_bytes()[:20])


def foreign_environment(path: Path) -> None:
    """Another application's LMDB environment: a named database of its own, a key in the main one."""
    env = lmdb.open(str(path), max_dbs=4)
    theirs = env.open_db(b"sessions")
    with env.begin(write=True) as txn:
        txn.put(b"alice", b"secret", db=theirs)
        txn.put(b"config", b"{}")
    env.close()


def empty_environment(path: Path) -> None:
    """An LMDB environment with nothing in it (no deltalog databases)."""
    lmdb.open(str(path)).close()


TARGETS: dict[str, Callable[[Path], None]] = {
    "empty folder": empty_folder,
    "0-byte data.mdb": empty_data_file,
    "partial data.mdb": partial_data_file,
    "foreign LMDB environment": foreign_environment,
    "empty LMDB environment": empty_environment,
}

COMMANDS: dict[str, list[str]] = {
    "threads": ["threads", "{p}"],
    "history": ["history", "{p}", "t"],
    "show": ["show", "{p}", "t"],
    "diff": ["diff", "{p}", "t", "latest", "latest"],
    "stats": ["stats", "{p}"],
    "verify": ["verify", "{p}"],
    "verify --deep --json": ["verify", "{p}", "--deep", "--json"],
    "export": ["export", "{p}"],
    "backup": ["backup", "{p}", "{p}-copy"],
    "compact": ["compact", "{p}", "{p}-copy"],
    "migrate --to": ["migrate", "{p}", "--to", "sqlite:{p}-copy.db"],
    # Writing commands that need an existing store refuse the same way (an empty LMDB
    # environment aside: a writable open starts a new store in it).
    "prune --all": ["prune", "{p}", "--all", "--keep-last", "1"],
    "copy": ["copy", "{p}", "t", "u"],
    "delete": ["delete", "{p}", "t"],
}
CASES = [
    (target, command)
    for target in sorted(TARGETS)
    for command in sorted(COMMANDS)
    if not (target == "empty LMDB environment" and command in ("prune --all", "copy", "delete"))
]


@pytest.mark.parametrize(("target", "command"), CASES)
def test_command_on_a_non_store_changes_nothing(tmp_path: Path, target: str, command: str) -> None:
    """Each command reading (or maintaining) a store exits 2 with "not a deltalog store" and no
    file is created or changed."""
    path = tmp_path / "p"
    TARGETS[target](path)
    before = snapshot(tmp_path)
    args = [a.replace("{p}", str(path)) for a in COMMANDS[command]]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert "not a deltalog store" in result.output
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_readonly_store_open_raises_not_a_store(tmp_path: Path, target: str) -> None:
    """``Environment(readonly=True)`` on a non-store raises NotAStoreError and touches nothing."""
    path = tmp_path / "p"
    TARGETS[target](path)
    before = snapshot(tmp_path)
    with pytest.raises(NotAStoreError, match="not a deltalog store"):
        Environment(path, readonly=True)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "target", ["0-byte data.mdb", "partial data.mdb", "foreign LMDB environment"]
)
def test_writable_open_refuses_what_is_not_a_store(tmp_path: Path, target: str) -> None:
    """A writable open never initialises a broken data file or writes into another application's
    environment (an empty folder still becomes a new store)."""
    path = tmp_path / "p"
    TARGETS[target](path)
    data_before = (path / "data.mdb").read_bytes()
    with pytest.raises(NotAStoreError, match="not a deltalog store"):
        DeltaLogSaver.from_path(path)
    assert (path / "data.mdb").read_bytes() == data_before


def test_readonly_open_of_a_store_writes_no_data(tmp_path: Path) -> None:
    """Reading a store changes no byte or mtime of data.mdb (only LMDB's reader table in an
    existing lock.mdb); a backup, which has no lock.mdb, is read without creating one."""
    path = tmp_path / "s"
    with DeltaLogSaver.from_path(path) as saver:
        chat_graph(3).compile(checkpointer=saver).invoke({"messages": [human(0)]}, cfg("t"))
        saver.backup(tmp_path / "b")
    for folder in (path, tmp_path / "b"):
        before = snapshot(tmp_path)
        for args in (["threads", str(folder)], ["verify", str(folder), "--deep"]):
            result = CliRunner().invoke(cli, args)
            assert result.exit_code == 0, result.output
        after = snapshot(tmp_path)
        assert after.keys() == before.keys()
        assert {k: v for k, v in after.items() if k != "s/lock.mdb"} == {
            k: v for k, v in before.items() if k != "s/lock.mdb"
        }


_READER = """
import os, sys
from click.testing import CliRunner
from deltalog.engine.cli import cli
def run(path):
    for args in (["threads", path], ["show", path, "t"], ["verify", path]):
        result = CliRunner().invoke(cli, args)
        yield f"{result.exit_code} {' '.join(result.output.split())[:300]}"
list(run(sys.argv[2]))  # as root, so that every module is imported before the switch
os.setgid(65534)
os.setuid(65534)
print("\\n".join(run(sys.argv[1])))
"""


def _as_nobody(path: Path, warm: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _READER, str(path), str(warm)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return proc.stdout.splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="drops privileges to nobody: needs root")
def test_a_user_with_read_access_only_can_inspect(tmp_path: Path) -> None:
    """A user who may only read the folder (0755) and files (0644) runs read-only commands on a
    store no process has open, and is told what access is needed while a writer has it open."""
    shared = Path(tempfile.mkdtemp(prefix="deltalog-ro-"))  # tmp_path's parents are 0700
    try:
        shared.chmod(0o755)
        path = shared / "s"
        with DeltaLogSaver.from_path(path) as saver:
            chat_graph(3).compile(checkpointer=saver).invoke({"messages": [human(0)]}, cfg("t"))
            saver.backup(tmp_path / "warm")
        path.chmod(0o755)
        for name in ("data.mdb", "lock.mdb"):
            (path / name).chmod(0o644)
        before = snapshot(path)
        lines = _as_nobody(path, tmp_path / "warm")
        assert [line.split()[0] for line in lines] == ["0", "0", "0"], lines
        assert "ok" in lines[2]
        assert snapshot(path) == before
        with DeltaLogSaver.from_path(path):  # a writer holds the store
            lines = _as_nobody(path, tmp_path / "warm")
        assert [line.split()[0] for line in lines] == ["1", "1", "1"], lines
        assert "needs write access to lock.mdb" in lines[0]
    finally:
        shutil.rmtree(shared)
