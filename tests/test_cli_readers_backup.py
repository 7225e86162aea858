"""`deltalog readers` lists LMDB reader slots and frees stale ones; `backup PATH -` streams the data file to stdout (issue 19)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli

from .graphs import cfg, chat_graph, human

# A real second process holding a read transaction until its stdin closes.
_READER = """
import sys
from deltalog.engine import Environment
store = Environment(sys.argv[1], readonly=True)
with store.read():
    print("ready", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("t"))
    return path


def _reader(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _READER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_readers_lists_a_live_reader_with_its_snapshot(store: Path) -> None:
    """Another process's open read transaction is listed: pid, alive, the snapshot it pins."""
    proc = _reader(store)
    try:
        doc = json.loads(CliRunner().invoke(cli, ["readers", str(store), "--json"]).stdout)
        mine = [r for r in doc["readers"] if r["pid"] == proc.pid]
        assert len(mine) == 1 and mine[0]["alive"] and not mine[0]["this_command"]
        assert 0 < mine[0]["txnid"] <= doc["last_txnid"] and mine[0]["behind"] >= 0
        text = CliRunner().invoke(cli, ["readers", str(store)], env={"COLUMNS": "120"}).stdout
        assert str(proc.pid) in text and "alive" in text
    finally:
        proc.communicate("")
    after = CliRunner().invoke(cli, ["readers", str(store)]).stdout
    assert "no other readers" in after


def test_readers_frees_the_slot_of_a_killed_reader(store: Path) -> None:
    """A reader killed mid-transaction leaves a stale slot while another process keeps the
    store open (a server); `readers` frees it, says so and keeps the live reader."""
    live = _reader(store)  # with no process left, LMDB's next open resets the table itself
    try:
        proc = _reader(store)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        result = CliRunner().invoke(cli, ["readers", str(store), "--json"])
        doc = json.loads(result.stdout)
        assert doc["cleared"] == 1
        assert [r["pid"] for r in doc["readers"] if not r["this_command"]] == [live.pid]
        proc = _reader(store)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        text = CliRunner().invoke(cli, ["readers", str(store), "--clear"]).stdout
        assert "cleared 1 stale reader slot(s) of processes that died" in text
    finally:
        live.communicate("")


def test_backup_to_stdout_is_a_store_data_file(store: Path, tmp_path: Path) -> None:
    """`backup PATH -` in a real process and through CliRunner: data.mdb of an equal store."""
    with DeltaLogSaver.from_path(store) as saver:
        expected = [t.config for t in saver.list(cfg("t"))]
    streamed = subprocess.run(
        [sys.executable, "-m", "deltalog.engine", "backup", str(store), "-", "--compact"],
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout
    in_process = CliRunner().invoke(cli, ["backup", str(store), "-"])
    assert in_process.exit_code == 0, in_process.output
    for name, data in (("proc", streamed), ("runner", in_process.stdout_bytes)):
        restored = tmp_path / f"{name}.lmdb"
        restored.mkdir()
        (restored / "data.mdb").write_bytes(data)
        with DeltaLogSaver.from_path(restored) as saver:
            assert [t.config for t in saver.list(cfg("t"))] == expected
