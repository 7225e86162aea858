"""A crafted export whose values name `os.system` never runs code under CLI reads; `--trusted` is the documented unsafe opt-in (issue 15.14)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli_ops import encode_record

from tests.graphs import cfg, chat_graph, human

DELTALOG = Path(sys.executable).parent / "deltalog"
EXT_CONSTRUCTOR_SINGLE_ARG = 0  # langgraph.checkpoint.serde.jsonplus: getattr(module, name)(arg)


def evil(command: str) -> Any:
    """A msgpack extension the serde's type hook turns into ``os.system(command)``."""
    return ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb(["os", "system", command]))


def crafted_export(tmp_path: Path, marker: Path) -> Path:
    """A real chat's export with `os.system("touch MARKER")` in values, a write and metadata."""
    with DeltaLogSaver.from_path(tmp_path / "src") as saver:
        graph = chat_graph(2).compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("chat"))
        records = list(saver.export_records())
    payload = ormsgpack.packb(evil(f"touch {marker}"))
    for rec in records:
        if rec["kind"] in ("blob", "write") and rec["channel"] == "turns":
            rec["value"] = ["msgpack", payload]
        if rec["kind"] == "checkpoint":
            meta = ormsgpack.unpackb(rec["metadata"][1])
            meta["note"] = evil(f"touch {marker}")
            rec["metadata"] = ["msgpack", ormsgpack.packb(meta)]
    file = tmp_path / "crafted.jsonl"
    file.write_text("".join(encode_record(r) + "\n" for r in records))
    return file


def deltalog(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed script, with LangGraph's own strict switch off (its default)."""
    base = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_STRICT_MSGPACK"}
    return subprocess.run(
        [str(DELTALOG), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
    )


@pytest.fixture
def imported(tmp_path: Path) -> tuple[Path, Path]:
    """(store, marker): the crafted export imported by `deltalog import` (which must not run it)."""
    marker = tmp_path / "MARKER"
    store = tmp_path / "store"
    done = deltalog("import", store, crafted_export(tmp_path, marker))
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    return store, marker


def test_crafted_values_fire_under_the_permissive_serde(imported: tuple[Path, Path]) -> None:
    """Control: the payload is live — LangGraph's default serde runs it (so the checks below can fail)."""
    store, marker = imported
    with DeltaLogSaver.from_path(store) as saver:
        saver.get_tuple(cfg("chat"))
    assert marker.exists()


READS = [
    ("history", ["history", "{store}", "chat"]),
    ("history-json", ["history", "{store}", "chat", "--json"]),
    ("show", ["show", "{store}", "chat"]),
    ("show-json", ["show", "{store}", "chat", "--json"]),
    ("diff", ["diff", "{store}", "chat", "latest", "{first}"]),
    ("stats", ["stats", "{store}"]),
    ("threads", ["threads", "{store}"]),
    ("verify-deep", ["verify", "{store}", "--deep"]),
    ("export", ["export", "{store}"]),
    ("copy", ["copy", "{store}", "chat", "chat-2"]),
    ("backup", ["backup", "{store}", "{tmp}/bak"]),
]


@pytest.mark.parametrize("argv", [a for _, a in READS], ids=[n for n, _ in READS])
def test_cli_reads_never_run_crafted_code(
    imported: tuple[Path, Path], tmp_path: Path, argv: list[str]
) -> None:
    """Every read command on the imported store: no marker, and no traceback."""
    store, marker = imported
    with DeltaLogSaver.from_path(store) as saver:
        first = saver.checkpoint_refs("chat")[0][1]
    args = [a.format(store=store, first=first, tmp=tmp_path) for a in argv]
    done = deltalog(*args)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("target", ["sqlite", "deltalog"])
def test_migrate_refuses_blocked_types_without_running_them(
    imported: tuple[Path, Path], tmp_path: Path, target: str
) -> None:
    """`migrate` reads strictly and refuses a blocked type (it would store plain data): exit 1, no marker."""
    store, marker = imported
    uri = f"sqlite:{tmp_path / 't.db'}" if target == "sqlite" else f"deltalog:{tmp_path / 't'}"
    done = deltalog("migrate", store, "--to", uri)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: a stored value names os.system")
    assert "--trusted" in lines[0]
    assert not marker.exists()


def test_trusted_opt_in_is_the_documented_unsafe_mode(imported: tuple[Path, Path]) -> None:
    """`--trusted` (or DELTALOG_TRUSTED=1) uses LangGraph's permissive serde: the payload runs.
    That is what docs/cli.md says it does; this pins the docs to the behaviour."""
    store, marker = imported
    assert deltalog("show", store, "chat").returncode == 0 and not marker.exists()
    assert deltalog("--trusted", "show", store, "chat").returncode == 0
    assert marker.exists()
    marker.unlink()
    assert deltalog("show", store, "chat", env={"DELTALOG_TRUSTED": "1"}).returncode == 0
    assert marker.exists()
    docs = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    assert "--trusted" in docs and "runs code" in docs
