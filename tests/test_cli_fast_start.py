"""`deltalog --help`, `--version`, `threads` and `stats` never import LangGraph or LangChain (issue 19, fast start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver
from langchain_core.messages import HumanMessage

from .graphs import cfg, chat_graph

# Run in a fresh interpreter: this test process has LangGraph loaded already.
_PROBE = """
import json, sys
from deltalog.engine.cli import main
codes = [main(args) for args in json.loads(sys.argv[1])]
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("langgraph", "langchain_core", "langchain"))
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def _probe(*commands: list[str]) -> dict[str, list[object]]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, list[object]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_help_and_version_load_no_langgraph() -> None:
    """The module set after `--help`, a command's `--help` and `--version` holds no LangGraph."""
    result = _probe(["--help"], ["--version"], ["history", "--help"], ["show", "--help"])
    assert result["codes"] == [0, 0, 0, 0]
    assert result["heavy"] == []


def test_threads_stats_and_readers_load_no_langgraph(tmp_path: Path) -> None:
    """`threads`, `stats` (tables and --json) and `readers` read without LangGraph."""
    path = tmp_path / "s.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        chat_graph(3).compile(checkpointer=saver).invoke(
            {"messages": [HumanMessage("hi", id="h")]}, cfg("t1")
        )
    result = _probe(
        ["threads", str(path)],
        ["threads", str(path), "--json"],
        ["stats", str(path)],
        ["stats", str(path), "--json"],
        ["readers", str(path)],
    )
    assert result["codes"] == [0, 0, 0, 0, 0]
    assert result["heavy"] == []


def test_root_help_lists_bench_with_its_own_short_help() -> None:
    """`bench` is listed without importing it, with the short help its command has."""
    from deltalog.bench.cli import bench_command
    from deltalog.engine.cli import cli

    out = CliRunner().invoke(cli, ["--help"], env={"COLUMNS": "200"}).stdout
    line = next(x for x in out.splitlines() if x.strip().startswith("bench "))
    assert line.split(None, 1)[1].strip() == bench_command.get_short_help_str(200)


def test_shell_completion_as_documented() -> None:
    """The completion hook docs/cli.md documents answers in a real process."""
    import os

    env = {**os.environ, "COMP_WORDS": "deltalog rea", "COMP_CWORD": "1"}
    env["_DELTALOG_COMPLETE"] = "bash_complete"
    proc = subprocess.run(
        [sys.executable, "-m", "deltalog.engine"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "plain,readers" in proc.stdout.splitlines()
    script = subprocess.run(
        [sys.executable, "-m", "deltalog.engine"],
        env={**os.environ, "_DELTALOG_COMPLETE": "bash_source"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "_deltalog_completion" in script.stdout
