"""CLI output on real threads: ids never wrapped, UTC labelled, show --tail/--head, JSON Lines, message-like writes, diff of unresolved channels (issue 19, the CLI on real threads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from deltalog.channels import DeltaMessagesState, append, delta
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli
from deltalog.engine.cli_common import to_jsonable
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from .graphs import cfg, chat_graph, human

LONG_ID = "customer-[v2]-2f9c4a7e-0b1d-4c3e-9a8f-6d5e4c3b2a19-session-0042"


def run(*args: Any, columns: int = 200) -> Result:
    result = CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture(scope="module")
def chats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two chat threads, one with a long id, six turns each."""
    path = tmp_path_factory.mktemp("out") / "chats.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        for thread_id in (LONG_ID, "short"):
            for turn in range(6):
                graph.invoke({"messages": [human(turn)]}, cfg(thread_id))
    return path


def _readme_builder() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(DeltaMessagesState)
    builder.add_node("echo", lambda s: {"messages": [("ai", f"echo {len(s['messages'])}")]})
    builder.add_edge(START, "echo")
    return builder


@pytest.mark.parametrize("columns", [80, 60])
def test_ids_are_never_wrapped_in_narrow_tables(chats: Path, columns: int) -> None:
    """At 80 (and 60) columns every thread id of `threads` and `stats` stays whole on one line."""
    for command in ("threads", "stats"):
        out = run(command, chats, columns=columns).stdout
        lines = out.splitlines()
        for thread_id in (LONG_ID, "short"):
            assert any(thread_id in line for line in lines), (command, out)
    assert "last update (UTC)" in run("threads", chats, columns=columns).stdout


def test_tables_keep_their_width_in_a_pipe(chats: Path) -> None:
    """A real process writing to a pipe (no COLUMNS): one table row per thread, id whole."""
    env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-m", "deltalog.engine", "threads", str(chats)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    rows = [line for line in proc.stdout.splitlines() if LONG_ID in line]
    assert len(rows) == 1 and "│" in rows[0] and "UTC" in proc.stdout


def test_show_tail_and_head(chats: Path) -> None:
    """--tail N / --head N keep the last / first N messages; the count line says so."""
    full = json.loads(run("show", chats, "short", "--json").stdout)["values"]["messages"]
    assert len(full) == 12
    tail = json.loads(run("show", chats, "short", "--tail", 3, "--json").stdout)
    assert tail["values"]["messages"] == full[-3:]
    assert tail["message_counts"] == {"messages": 12}
    head = json.loads(run("show", chats, "short", "--head", 2, "--json").stdout)
    assert head["values"]["messages"] == full[:2]
    text = run("show", chats, "short", "--tail", 3).stdout
    assert "12 messages (last 3 shown)" in text
    assert full[-1]["id"] in text and full[0]["id"] not in text
    assert run("show", chats, "short", "--tail", 0).stdout.count("  human ") == 0
    both = CliRunner().invoke(cli, ["show", str(chats), "short", "--tail", "1", "--head", "1"])
    assert both.exit_code == 2


def test_show_header_labels_utc(chats: Path) -> None:
    """The checkpoint's timestamp is printed as UTC."""
    head = run("show", chats, "short").stdout.splitlines()[0]
    assert head.endswith(" UTC") and "+00:00" not in head


def test_json_lines_equal_the_json_documents(chats: Path) -> None:
    """--jsonl gives the --json rows, one compact object per line."""
    rows = json.loads(run("threads", chats, "--json").stdout)
    lines = run("threads", chats, "--jsonl").stdout.splitlines()
    assert [json.loads(x) for x in lines] == rows and len(lines) == 2
    doc = json.loads(run("history", chats, "short", "--json").stdout)
    lines = run("history", chats, "short", "--jsonl").stdout.splitlines()
    expected = [{"thread_id": "short", "checkpoint_ns": "", **e} for e in doc["checkpoints"]]
    assert [json.loads(x) for x in lines] == expected


def test_readme_conversation_shows_without_graph(tmp_path: Path) -> None:
    """The README's graph (("user", "hi") pairs, dicts, strings) shows as get_state shows it."""
    path = tmp_path / "chat.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        graph = _readme_builder().compile(checkpointer=saver)
        graph.invoke({"messages": [("user", "hi")]}, cfg("t1"))
        graph.invoke({"messages": [{"role": "user", "content": "again"}, "plain"]}, cfg("t1"))
        expected = graph.get_state(cfg("t1")).values
    shown = json.loads(run("show", path, "t1", "--json").stdout)
    assert shown["unresolved"] == {} and shown["reducers"] == {"messages": "messages"}
    assert shown["values"] == to_jsonable(expected)
    text = run("show", path, "t1").stdout
    assert "5 messages" in text and "echo 4" in text and "pass --graph" not in text


def test_diff_never_calls_an_unresolved_side_added(tmp_path: Path) -> None:
    """A side whose channel is unresolved is named, with the fix; never `added`/`removed`."""
    path = tmp_path / "chat.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        graph = _readme_builder().compile(checkpointer=saver)
        graph.invoke({"messages": ["hello"]}, cfg("t"))  # only a string: could be any list
        ids = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))]
    after_input, latest = ids[1], ids[0]
    doc = json.loads(run("diff", path, "t", after_input, latest, "--json").stdout)
    assert doc["channels"] == [
        {
            "channel": "messages",
            "kind": "unresolved",
            "sides": ["A"],
            "hint": doc["channels"][0]["hint"],
        }
    ]
    assert "--graph" in doc["channels"][0]["hint"]
    text = run("diff", path, "t", after_input, latest).stdout
    assert "not compared" in text and "rebuilt at A" in text and "--graph" in text
    assert "added" not in text


def test_diff_of_two_unresolved_sides(tmp_path: Path) -> None:
    """A non-message delta channel on both sides: unresolved at A and B, not `no differences`."""

    class S(TypedDict):
        events: Any

    builder: StateGraph[Any] = StateGraph(S)
    S.__annotations__["events"] = __import__("typing").Annotated[
        list, delta(append, snapshot_every=4)
    ]
    builder = StateGraph(S)
    builder.add_node("step", lambda s: {"events": [len(s["events"])]})
    builder.add_edge(START, "step")
    path = tmp_path / "ev.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        graph = builder.compile(checkpointer=saver)
        for i in range(3):
            graph.invoke({"events": [f"in-{i}"]}, cfg("ev"))
        ids = [
            s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("ev"))
        ]
    doc = json.loads(run("diff", path, "ev", ids[-2], ids[0], "--json").stdout)
    assert [(c["channel"], c["kind"], c["sides"]) for c in doc["channels"]] == [
        ("events", "unresolved", ["A", "B"])
    ]
    assert "no differences" not in run("diff", path, "ev", ids[-2], ids[0]).stdout


def _default_sigint() -> None:
    """In the child before exec: SIGINT as a terminal gives it, even when the tests
    run as a shell's background job (which starts with SIGINT ignored, and an
    ignored signal stays ignored across exec)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """A real `deltalog import` waiting on its pipe, interrupted: exit 130, one line on stderr."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "deltalog.engine", "import", str(tmp_path / "new.lmdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        # Started, and blocked reading its stdin pipe (a fixed sleep was too short on
        # a loaded machine: the signal came while it still imported).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with open(f"/proc/{proc.pid}/wchan") as wchan:
                if "pipe" in wchan.read():
                    break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert [x for x in err.splitlines() if x.strip()] == ["deltalog: interrupted"]


def test_ctrl_c_inside_a_serializer_callback_is_still_an_interrupt() -> None:
    """Ctrl-C that lands in ormsgpack's `default` callback comes out of ormsgpack as a
    TypeError; the CLI still says "interrupted" with status 130, not "internal error"."""
    import os
    import signal

    import click
    import ormsgpack
    from deltalog.engine.cli import main

    def interrupted_here(obj: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        return str(obj)  # the handler raises in here, inside ormsgpack

    @click.command("interrupt-me")
    def interrupt_me() -> None:
        ormsgpack.packb(object(), default=interrupted_here)

    cli.add_command(interrupt_me)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(TypeError):  # what ormsgpack makes of it outside the CLI
            ormsgpack.packb(object(), default=interrupted_here)
        assert main(["interrupt-me"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
        cli.commands.pop("interrupt-me")
