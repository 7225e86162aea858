"""The `deltalog` CLI: every command run through click's CliRunner on a store built by real graphs."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph.state import CompiledStateGraph

from .graphs import (
    cfg,
    chat_graph,
    fanout_graph,
    history,
    human,
    interrupt_graph,
    program_chat,
    program_fanout,
    program_interrupt,
    program_subgraph,
    subgraph_graph,
)

REPO = Path(__file__).resolve().parent.parent
SF = 3  # snapshot_frequency: small, so the threads hold several seeds

# Attribute of the `graphs_file` module that --graph imports for each thread.
GRAPH_ATTR = {"chat": "chat", "hitl": "hitl", "waiting": "hitl", "fan": "fan", "sub": "sub"}

BUILDERS = {
    "chat": chat_graph,
    "hitl": interrupt_graph,
    "waiting": interrupt_graph,
    "fan": fanout_graph,
    "sub": subgraph_graph,
}


def build_store(path: Path) -> None:
    """Five threads: a chat with a fork and an edit, human-in-the-loop (one left
    interrupted), parallel writes with Send, and a subgraph namespace."""
    with DeltaLogSaver.from_path(path) as saver:
        program_chat(saver, SF, turns=6)
        program_interrupt(saver, SF)
        program_fanout(saver, SF)
        program_subgraph(saver, SF)
        waiting = interrupt_graph(SF).compile(checkpointer=saver)
        waiting.invoke({"messages": [human(0)]}, cfg("waiting"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store built once per module; tests that change it use `store_copy`."""
    path = tmp_path_factory.mktemp("cli") / "store.lmdb"
    build_store(path)
    return path


@pytest.fixture(scope="module")
def graphs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user module defining the graphs of the store, for --graph FILE:ATTR."""
    path = tmp_path_factory.mktemp("user") / "user_graphs.py"
    path.write_text(
        "from tests.graphs import chat_graph, fanout_graph, interrupt_graph, subgraph_graph\n"
        f"chat = chat_graph({SF})\n"  # a StateGraph: the CLI compiles it
        f"hitl = interrupt_graph({SF}).compile()\n"
        f"fan = lambda: fanout_graph({SF})\n"  # a factory
        f"sub = subgraph_graph({SF}).compile()\n"
    )
    return path


@pytest.fixture
def store_copy(store: Path, tmp_path: Path) -> Path:
    """A private copy of the module's store (the store is closed between tests)."""
    dest = tmp_path / "copy.lmdb"
    shutil.copytree(store, dest)
    return dest


@contextlib.contextmanager
def opened(path: Path) -> Iterator[DeltaLogSaver]:
    """A saver on ``path`` for reading expectations. LMDB allows one environment
    per path per process, so no CLI command may run while it is open."""
    with DeltaLogSaver.from_path(path) as saver:
        yield saver


def run(*args: Any, ok: bool = True, input: str | None = None) -> Result:
    """Invoke the CLI in-process; by default assert exit status 0."""
    runner = CliRunner()
    result = runner.invoke(cli, [str(a) for a in args], input=input, env={"COLUMNS": "200"})
    if ok:
        assert result.exit_code == 0, (result.output, result.stderr, result.exception)
    return result


def run_json(*args: Any, input: str | None = None) -> Any:
    """Invoke with --json and parse stdout."""
    return json.loads(run(*args, "--json", input=input).stdout)


def graph_on(saver: DeltaLogSaver, thread_id: str) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The graph that wrote ``thread_id``, compiled with ``saver``."""
    return BUILDERS[thread_id](SF).compile(checkpointer=saver)


def norm(value: Any) -> Any:
    """Graph values and CLI JSON in one comparable form (messages as role, id, content)."""
    if isinstance(value, BaseMessage):
        return (value.type, value.id, value.content)
    if isinstance(value, dict) and {"role", "id", "content"} <= set(value):
        return (value["role"], value["id"], value["content"])
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    return value


def one_line_error(result: Result) -> str:
    """Assert exit 1 with exactly one line on stderr; return it."""
    assert result.exit_code == 1, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def checkpoint_ids(saver: DeltaLogSaver, thread_id: str, ns: str = "") -> list[str]:
    """Visible checkpoint ids of one namespace, newest first."""
    return [
        str(t.config["configurable"]["checkpoint_id"])
        for t in saver.list(cfg(thread_id, checkpoint_ns=ns))
    ]


# -- every command: help, examples, documentation ------------------------------------------


COMMANDS = sorted(cli.list_commands(click.Context(cli)))


def test_expected_commands_exist() -> None:
    """The commands the issue asks for are all registered."""
    wanted = {
        "demo",
        "threads",
        "history",
        "show",
        "diff",
        "stats",
        "verify",
        "prune",
        "copy",
        "delete",
        "compact",
        "backup",
        "export",
        "import",
        "migrate",
        "bench",
    }
    assert wanted <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_an_example(name: str) -> None:
    """`deltalog NAME --help` works, has a summary, and shows at least one example."""
    result = run(name, "--help")
    assert f"deltalog {name}" in result.stdout
    assert (
        "Examples:" in result.stdout and f"deltalog {name} " in result.stdout.split("Examples:")[1]
    )
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and (command.help or "").strip()


def _doc_sections() -> dict[str, str]:
    text = (REPO / "docs" / "cli.md").read_text()
    parts = re.split(r"^## `deltalog (\S+)`.*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_documented(name: str) -> None:
    """docs/cli.md has a section per command that names every option and shows an example."""
    sections = _doc_sections()
    assert name in sections, f"docs/cli.md lacks a '## `deltalog {name}`' section"
    body = sections[name]
    assert f"deltalog {name}" in body, "the section shows no example"
    if name == "bench":  # options documented in docs/benchmarks.md, linked from the section
        assert "benchmarks.md" in body
        return
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    for param in command.params:
        if isinstance(param, click.Option):
            longest = max(param.opts, key=len)
            if longest not in ("--help",):
                assert longest in body, f"docs/cli.md: `deltalog {name}` does not mention {longest}"


def test_python_m_runs_the_cli() -> None:
    """`python -m deltalog.engine` is the same command (entry point without the script)."""
    proc = subprocess.run(
        [sys.executable, "-m", "deltalog.engine", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "migrate" in proc.stdout and "threads" in proc.stdout


# -- errors -----------------------------------------------------------------------------------


def test_library_errors_are_one_line_exit_1(store: Path) -> None:
    """A missing thread or checkpoint is one line on stderr and exit status 1."""
    assert "nosuch" in one_line_error(run("show", store, "nosuch", ok=False))
    assert "deadbeef" in one_line_error(run("diff", store, "chat", "deadbeef", "latest", ok=False))
    assert "nosuch" in one_line_error(run("history", store, "nosuch", ok=False))


def test_missing_store_is_a_usage_error(tmp_path: Path) -> None:
    """Inspecting a path that does not exist fails before creating anything."""
    result = run("threads", tmp_path / "nope", ok=False)
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert not (tmp_path / "nope").exists()


# -- demo --------------------------------------------------------------------------------------


def test_demo_runs_a_delta_chat_with_constant_bytes_per_turn(tmp_path: Path) -> None:
    """The demo's graph stores O(1) bytes per turn while the state grows; the store is real."""
    path = tmp_path / "demo.lmdb"
    data = run_json("demo", path, "--turns", 44, "--snapshot-every", 10)
    assert data["turns"] == 44 and data["messages"] == 88
    samples = data["samples"]
    assert [s["turn"] for s in samples][-1] == 44
    per_turn = [s["bytes_per_turn"] for s in samples]
    # Growth per turn stays flat (a seed every 10 updates adds a little) while the state
    # grows: once the early record dictionary is trained (format 9; from 32 KiB of
    # records, ~turn 22 since format 12's shorter checkpoint records), and never above
    # what the first turns took.
    late = [s["bytes_per_turn"] for s in samples if s["turn"] > 26]
    assert len(late) >= 5 and max(late) < 2 * min(late)
    assert max(late) <= max(per_turn[:3])
    assert samples[-1]["state_bytes"] > 8 * samples[0]["state_bytes"]
    assert data["last_messages"][-1]["id"] == "assistant-44"
    with opened(path) as saver:
        seeds = [
            t
            for t in saver.list(cfg("demo"))
            if isinstance(t.checkpoint["channel_values"].get("messages"), _DeltaSnapshot)
        ]
        latest = saver.get_tuple(cfg("demo"))
    assert seeds and latest is not None
    assert latest.metadata.get("counters_since_delta_snapshot")


def test_demo_text_continues_the_conversation(tmp_path: Path) -> None:
    """Text mode shows the last turns and bytes per turn; a second run continues the thread."""
    path = tmp_path / "demo.lmdb"
    run("demo", path, "--turns", 3)
    out = run("demo", path, "--turns", 2).stdout
    assert "turns 4–5" in out and "bytes per turn" in out
    assert "Turn 5:" in out and "assistant-5" in out


# -- threads -----------------------------------------------------------------------------------


def test_threads_lists_counts_namespaces_and_time(store: Path) -> None:
    """Every thread with its checkpoint count, namespaces and last update (from the id)."""
    rows = {r["thread_id"]: r for r in run_json("threads", store)}
    assert set(rows) == set(BUILDERS)
    with opened(store) as saver:
        _check_thread_rows(saver, rows)
    assert rows["sub"]["namespaces"][0] == "" and len(rows["sub"]["namespaces"]) >= 2


def _check_thread_rows(saver: DeltaLogSaver, rows: dict[str, Any]) -> None:
    for thread_id, row in rows.items():
        namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(cfg(thread_id))}
        assert set(row["namespaces"]) == namespaces
        assert row["checkpoints"] == sum(
            len(checkpoint_ids(saver, thread_id, ns)) for ns in namespaces
        )
        latest = saver.get_tuple(cfg(thread_id, checkpoint_ns=""))
        assert latest is not None
        assert row["last_checkpoint_id"] == latest.config["configurable"]["checkpoint_id"]
        when = datetime.fromisoformat(row["last_update"])
        stamp = datetime.fromisoformat(latest.checkpoint["ts"])
        assert abs(when - stamp) < timedelta(seconds=1)
        assert row["bytes"] > 0 and row["writes"] > 0


def test_threads_sorting(store: Path) -> None:
    """--sort orders by the chosen column, --reverse flips it, --limit cuts."""
    by_count = run_json("threads", store, "--sort", "checkpoints")
    counts = [r["checkpoints"] for r in by_count]
    assert counts == sorted(counts, reverse=True)
    by_name = run_json("threads", store, "--sort", "thread", "--reverse")
    assert [r["thread_id"] for r in by_name] == sorted(BUILDERS, reverse=True)
    newest = run_json("threads", store, "--limit", 1)
    assert len(newest) == 1 and newest[0]["last_update"] == max(r["last_update"] for r in by_count)
    text = run("threads", store).stdout
    assert "5 threads" in text and "chat" in text


def test_threads_is_fast_on_10000_threads_and_decodes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 threads list in seconds, without deserializing any checkpoint."""
    path = tmp_path / "many.lmdb"
    with DeltaLogSaver.from_path(path, durable=False) as saver:
        chat_graph(SF).compile(checkpointer=saver).invoke({"messages": [human(0)]}, cfg("seed"))
        records = list(saver.export_records(["seed"]))[1:-1]  # no header, no end
        header = {"kind": "header", "format": "deltalog-export", "version": 1}  # needs no end
        copies = [{**r, "thread_id": f"thread-{i:05}"} for i in range(10_000) for r in records]
        saver.import_records([header, *copies])

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("threads deserialized a record")

    monkeypatch.setattr(JsonPlusSerializer, "loads_typed", boom)
    started = time.perf_counter()
    rows = run_json("threads", path, "--sort", "bytes")
    elapsed = time.perf_counter() - started
    assert len(rows) == 10_001
    assert elapsed < 20, f"threads took {elapsed:.1f} s on 10,000 threads"
    started = time.perf_counter()
    text = run("threads", path).stdout
    assert "10001 threads" in text and "--limit 0 shows all" in text
    assert time.perf_counter() - started < 20


# -- history ----------------------------------------------------------------------------------


def test_history_is_the_checkpoint_chain_with_the_fork_as_a_tree(store: Path) -> None:
    """Every checkpoint once; the branch to the latest is the trunk; the fork hangs off its parent."""
    data = run_json("history", store, "chat")
    entries = data["checkpoints"]
    with opened(store) as saver:
        graph = graph_on(saver, "chat")
        snapshots = list(graph.get_state_history(cfg("chat")))
        latest = graph.get_state(cfg("chat")).config["configurable"]["checkpoint_id"]
    assert {e["checkpoint_id"] for e in entries} == {
        s.config["configurable"]["checkpoint_id"] for s in snapshots
    }
    trunk = [e for e in entries if e["depth"] == 0]
    assert trunk[0]["parent_id"] is None
    for parent, child in itertools.pairwise(trunk):
        assert child["parent_id"] == parent["checkpoint_id"]
    assert trunk[-1]["checkpoint_id"] == latest
    forks = [e for e in entries if e["fork"]]
    assert len(forks) == 1 and forks[0]["depth"] == 1
    by_id = {e["checkpoint_id"]: e for e in entries}
    fork_point = by_id[forks[0]["parent_id"]]
    assert fork_point["depth"] == 0
    # the side branch follows its fork point directly
    assert entries.index(forks[0]) == entries.index(fork_point) + 1


@pytest.mark.parametrize("thread_id", sorted(BUILDERS))
def test_history_fields_match_the_graph(thread_id: str, store: Path) -> None:
    """step, source, next nodes, writes per channel and seeds agree with LangGraph and the saver."""
    entries = run_json("history", store, thread_id)["checkpoints"]
    with opened(store) as saver:
        _check_history_fields(saver, thread_id, entries)
    if thread_id == "chat":
        assert sum(bool(e["seeds"]) for e in entries) >= 2


def _check_history_fields(saver: DeltaLogSaver, thread_id: str, entries: list[Any]) -> None:
    graph = graph_on(saver, thread_id)
    for e in entries:
        config = cfg(thread_id, checkpoint_ns="", checkpoint_id=e["checkpoint_id"])
        snapshot = graph.get_state(config)
        assert sorted(e["next"]) == sorted(snapshot.next), e
        meta = snapshot.metadata or {}
        assert e["step"] == meta.get("step") and e["source"] == meta.get("source")
        writes: dict[str, int] = {}
        for w in saver.get_writes(config):
            writes[w.channel] = writes.get(w.channel, 0) + 1
        assert e["writes"] == writes
        stored = saver.get_tuple(config)
        assert stored is not None
        for channel in e["seeds"]:
            assert isinstance(stored.checkpoint["channel_values"][channel], _DeltaSnapshot)


def test_history_with_graph_and_namespace(store: Path, tmp_path: Path) -> None:
    """--graph gives LangGraph's own next nodes; --ns shows a subgraph's chain."""
    module = tmp_path / "user_graph.py"
    module.write_text(f"from tests.graphs import subgraph_graph\ngraph = subgraph_graph({SF})\n")
    root = run_json("history", store, "sub", "--graph", f"{module}:graph")
    sub_ns = next(n for n in root["namespaces"] if n)
    assert [e["next"] for e in root["checkpoints"]][:3] == [["__start__"], ["outer"], ["sub"]]
    inner = run_json("history", store, "sub", "--ns", sub_ns)
    assert inner["checkpoint_ns"] == sub_ns and len(inner["checkpoints"]) >= 3
    assert inner["checkpoints"][1]["next"] == ["inner_model"]


def test_history_text_marks_latest_seeds_and_fork(store: Path) -> None:
    """The table marks the latest checkpoint, seeds (S:) and the fork (└)."""
    out = run("history", store, "chat").stdout
    assert "(latest)" in out and "S:messages" in out and "└" in out
    assert len(run("history", store, "chat", "--limit", 3, "--json").stdout) > 0
    assert len(run_json("history", store, "chat", "--limit", 3)["checkpoints"]) == 3


# -- show ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("thread_id", sorted(BUILDERS))
def test_show_equals_get_state_at_every_checkpoint(
    thread_id: str, store: Path, graphs_file: Path
) -> None:
    """Without --graph, the rebuilt state equals graph.get_state(config).values everywhere
    (channels never written by then are left out: their empty value needs the graph)."""
    with opened(store) as saver:
        graph = graph_on(saver, thread_id)
        expected = {
            cid: graph.get_state(config_with(thread_id, cid)).values
            for cid in checkpoint_ids(saver, thread_id)
        }
    for cid, values in expected.items():
        data = run_json("show", store, thread_id, "--checkpoint", cid)
        assert norm(data["values"]) == norm({k: v for k, v in values.items() if v != []}), cid
        with_graph = run_json(
            "show",
            store,
            thread_id,
            "--checkpoint",
            cid,
            "--graph",
            f"{graphs_file}:{GRAPH_ATTR[thread_id]}",
        )
        assert norm(with_graph["values"]) == norm(values), cid
        assert data["checkpoint_id"] == cid and not data["unresolved"]


def test_show_latest_with_graph_prefix_and_subgraph(store: Path, tmp_path: Path) -> None:
    """--graph gives the same state; an id prefix works; a subgraph namespace shows its messages."""
    with opened(store) as saver:
        expected = norm(graph_on(saver, "chat").get_state(cfg("chat")).values)
        ids = checkpoint_ids(saver, "chat")
    module = tmp_path / "g.py"
    module.write_text(f"from tests.graphs import chat_graph\ngraph = chat_graph({SF}).compile()\n")
    with_graph = run_json("show", store, "chat", "--graph", f"{module}:graph")
    assert norm(with_graph["values"]) == expected
    assert with_graph["reducers"] == {"messages": "graph"}
    prefix = ids[2][:30]
    assert run_json("show", store, "chat", "--checkpoint", prefix)["checkpoint_id"] == ids[2]
    sub_ns = next(r for r in run_json("threads", store) if r["thread_id"] == "sub")["namespaces"][
        -1
    ]
    inner = run_json("show", store, "sub", "--ns", sub_ns)["values"]["messages"]
    outer = run_json("show", store, "sub")["values"]["messages"]
    assert {m["id"] for m in inner} <= {m["id"] for m in outer}
    assert inner[-1]["content"].startswith("inner sub-1")


def test_show_text_prints_messages_by_role(store: Path) -> None:
    """Text mode prints each message under its role, with its id."""
    out = run("show", store, "chat").stdout
    assert re.search(r"human\s+h-0", out) and re.search(r"ai\s+a-1", out)
    assert "messages (delta, messages)" in out and "turns: " in out
    only = run("show", store, "chat", "--channel", "turns").stdout
    assert "turns: " in only and "human" not in only


def test_show_unknown_reducer_is_unresolved_until_graph_given(tmp_path: Path) -> None:
    """A non-message delta channel is reported unresolved; --graph rebuilds it exactly."""
    module = tmp_path / "events_graph.py"
    module.write_text(
        "from typing import Annotated\n"
        "from typing_extensions import TypedDict\n"
        "from langgraph.graph import START, StateGraph\n"
        "from deltalog.channels import append, delta\n"
        "class S(TypedDict):\n"
        "    events: Annotated[list, delta(append, snapshot_every=4)]\n"
        "b = StateGraph(S)\n"
        "b.add_node('step', lambda s: {'events': [len(s['events'])]})\n"
        "b.add_edge(START, 'step')\n"
        "graph = b.compile()\n"
    )
    from deltalog.engine.cli_common import load_graph

    path = tmp_path / "events.lmdb"
    with opened(path) as saver:
        graph = load_graph(f"{module}:graph").copy(update={"checkpointer": saver})
        for i in range(7):
            graph.invoke({"events": [f"in-{i}"]}, cfg("ev"))
        expected = graph.get_state(cfg("ev")).values
    plain = run_json("show", path, "ev")
    assert "events" in plain["unresolved"] and plain["unresolved"]["events"]["writes"] > 0
    exact = run_json("show", path, "ev", "--graph", f"{module}:graph")
    assert exact["values"] == expected and not exact["unresolved"]
    assert "pass --graph" in run("show", path, "ev").stdout


def test_bad_graph_spec_is_one_line(store: Path) -> None:
    """A --graph that cannot be imported is a one-line error."""
    assert "MODULE:ATTR" in one_line_error(
        run("show", store, "chat", "--graph", "nocolon", ok=False)
    )
    assert "no_such_module" in one_line_error(
        run("show", store, "chat", "--graph", "no_such_module:g", ok=False)
    )


# -- diff -----------------------------------------------------------------------------------------


def test_diff_descendant_and_fork(store: Path) -> None:
    """Messages added between an ancestor and the latest; a fork names the common ancestor."""
    entries = run_json("history", store, "chat")["checkpoints"]
    trunk = [e["checkpoint_id"] for e in entries if e["depth"] == 0]
    side = [e for e in entries if e["depth"] == 1]
    a, b = trunk[3], trunk[-1]
    data = run_json("diff", store, "chat", a, "latest")
    assert data["b"]["checkpoint_id"] == b
    assert data["relation"] == {"kind": "descendant", "steps": len(trunk) - 1 - 3}
    with opened(store) as saver:
        graph = graph_on(saver, "chat")
        old = graph.get_state(config_with("chat", a)).values["messages"]
        new = graph.get_state(config_with("chat", b)).values["messages"]
    channels = {c["channel"]: c for c in data["channels"]}
    old_ids = {m.id for m in old}
    assert [m["id"] for m in channels["messages"]["added"]] == [
        m.id for m in new if m.id not in old_ids
    ]
    assert channels["turns"]["old"] != channels["turns"]["new"]
    forked = run_json("diff", store, "chat", side[-1]["checkpoint_id"], b)
    assert forked["relation"] == {"kind": "fork", "common_ancestor": side[0]["parent_id"]}
    same = run_json("diff", store, "chat", b, "latest")
    assert same["relation"] == {"kind": "same"} and same["channels"] == []
    text = run("diff", store, "chat", a, b).stdout
    assert "checkpoint(s) after A" in text and "messages: -0 +" in text


# -- stats --------------------------------------------------------------------------------------------


def test_stats_by_thread_and_channel(store: Path) -> None:
    """Totals agree with the saver; per channel values/writes/ratio; map size versus use."""
    data = run_json("stats", store)
    with opened(store) as saver:
        threads = saver.threads()
    assert data["store"]["threads"] == len(threads)
    assert data["store"]["checkpoints"] == sum(t.checkpoints for t in threads)
    assert {r["thread_id"] for r in data["threads"]} == set(BUILDERS)
    bytes_ = [r["bytes"] for r in data["threads"]]
    assert bytes_ == sorted(bytes_, reverse=True)
    channels = {r["channel"]: r for r in data["channels"]}
    messages = channels["messages"]
    assert messages["writes"] > messages["values"] > 0
    assert messages["compression_ratio"] > 1  # long lorem-ipsum messages compress
    turns = channels["turns"]  # a small int: held in the checkpoint records, no blob
    assert turns["inline"] > 0 and turns["inline_bytes"] >= turns["inline"] and turns["values"] == 0
    assert data["store"]["map_size"] >= data["store"]["used_bytes"] > 0
    assert 0 <= data["store"]["free_bytes"] < data["store"]["used_bytes"]
    assert data["store"]["file_bytes"] > 0
    text = run("stats", store, "--top", 2).stdout
    assert "█" in text and "by channel" in text and "top 2 threads" in text and "inline" in text
    assert "free for reuse" in text


# -- verify ---------------------------------------------------------------------------------------------


def test_verify_ok_and_broken(store_copy: Path) -> None:
    """A sound store verifies (exit 0); a dangling parent is an error (exit 1)."""
    data = run_json("verify", store_copy, "--deep")
    assert data["ok"] and data["threads"] == len(BUILDERS) and data["checkpoints"] > 0
    assert "ok" in run("verify", store_copy).stdout
    with opened(store_copy) as saver:
        tup = saver.get_tuple(cfg("chat"))
        assert tup is not None
        orphan = dict(tup.checkpoint)
        orphan["id"] = "1f000000-0000-6000-8000-000000000001"
        saver.put(
            config_with("broken", "1f000000-0000-6000-8000-000000000000"),
            orphan,  # type: ignore[arg-type]
            {"source": "loop", "step": 1, "parents": {}},
            {},
        )
    result = run("verify", store_copy, "--json", ok=False)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert not report["ok"]
    assert any(
        p["kind"] == "dangling_parent" and p["thread_id"] == "broken" for p in report["problems"]
    )
    only_chat = run_json("verify", store_copy, "chat")
    assert only_chat["ok"] and only_chat["threads"] == 1


# -- prune ------------------------------------------------------------------------------------------------


def test_prune_dry_run_then_keep_last(store_copy: Path) -> None:
    """A dry run changes nothing; --keep-last N keeps N per namespace and every kept state."""
    with opened(store_copy) as saver:
        graph = graph_on(saver, "chat")
        before_ids = checkpoint_ids(saver, "chat")
        kept_before = {
            cid: graph.get_state(config_with("chat", cid)).values for cid in before_ids[:2]
        }
    dry = run_json("prune", store_copy, "chat", "--keep-last", 2, "--dry-run")
    assert dry["dry_run"] and dry["checkpoints"] > 0
    with opened(store_copy) as saver:
        assert checkpoint_ids(saver, "chat") == before_ids
    done = run_json("prune", store_copy, "chat", "--keep-last", 2)
    assert not done["dry_run"] and done["checkpoints"] > 0
    with opened(store_copy) as saver:
        graph = graph_on(saver, "chat")
        assert checkpoint_ids(saver, "chat") == before_ids[:2]
        for cid, values in kept_before.items():
            assert graph.get_state(config_with("chat", cid)).values == values
    assert run_json("verify", store_copy)["ok"]
    # the chain kept for the delta channel is hidden from history unless asked for
    assert done["hidden"] > 0
    shown = run_json("history", store_copy, "chat", "--hidden")["checkpoints"]
    assert sum(e["hidden"] for e in shown) == done["hidden"]
    assert len(shown) == 2 + done["hidden"]
    assert "(hidden)" in run("history", store_copy, "chat", "--hidden").stdout


def test_prune_with_graph_reseeds_and_older_than(store_copy: Path, tmp_path: Path) -> None:
    """--graph writes seeds instead of keeping chains; --older-than keeps recent checkpoints."""
    recent = run_json("prune", store_copy, "--all", "--older-than", "1h")
    assert recent["checkpoints"] == 0 and recent["threads"] == len(BUILDERS)
    module = tmp_path / "g.py"
    module.write_text(f"from tests.graphs import chat_graph\ngraph = chat_graph({SF})\n")
    before = run_json("show", store_copy, "chat")["values"]
    seeded = run_json("prune", store_copy, "chat", "--keep-latest", "--graph", f"{module}:graph")
    assert seeded["checkpoints"] > 0 and seeded["hidden"] == 0
    assert run_json("show", store_copy, "chat")["values"] == before
    assert len(run_json("history", store_copy, "chat")["checkpoints"]) == 1
    text = run("prune", store_copy, "hitl", "--dry-run").stdout
    assert "would remove" in text and "dry run" in text


def test_prune_usage_errors(store_copy: Path) -> None:
    """Threads or --all (not both); --keep-latest excludes the others; bad ages are refused."""
    assert run("prune", store_copy, ok=False).exit_code == 2
    assert run("prune", store_copy, "chat", "--all", ok=False).exit_code == 2
    assert (
        run("prune", store_copy, "chat", "--keep-latest", "--keep-last", 2, ok=False).exit_code == 2
    )
    bad = run("prune", store_copy, "chat", "--older-than", "soon", ok=False)
    assert bad.exit_code == 2 and "neither an age" in bad.stderr


# -- copy / delete --------------------------------------------------------------------------------------------


def test_copy_thread(store_copy: Path) -> None:
    """The copy shows the same state and history; copying onto it again is a one-line error."""
    report = run_json("copy", store_copy, "chat", "chat-2")
    assert report["found"] and report["checkpoints"] > 0
    assert (
        run_json("show", store_copy, "chat-2")["values"]
        == run_json("show", store_copy, "chat")["values"]
    )
    h1 = run_json("history", store_copy, "chat")["checkpoints"]
    h2 = run_json("history", store_copy, "chat-2")["checkpoints"]
    assert h1 == h2
    assert "already has checkpoints" in one_line_error(
        run("copy", store_copy, "chat", "chat-2", ok=False)
    )
    assert "no checkpoints" in one_line_error(run("copy", store_copy, "nosuch", "x", ok=False))
    assert "copied" in run("copy", store_copy, "hitl", "hitl-2").stdout


def test_delete_threads(store_copy: Path) -> None:
    """--dry-run deletes nothing; a missing thread fails and deletes nothing; then delete works."""
    dry = run_json("delete", store_copy, "chat", "fan", "--dry-run")
    assert dry["dry_run"] and {r["thread_id"] for r in dry["deleted"]} == {"chat", "fan"}
    assert "nosuch" in one_line_error(run("delete", store_copy, "chat", "nosuch", ok=False))
    assert {r["thread_id"] for r in run_json("threads", store_copy)} == set(BUILDERS)
    assert "deleted 'chat'" in run("delete", store_copy, "chat").stdout
    assert {r["thread_id"] for r in run_json("threads", store_copy)} == set(BUILDERS) - {"chat"}


# -- compact / backup ----------------------------------------------------------------------------------------


def test_compact_and_backup(store_copy: Path, tmp_path: Path) -> None:
    """Both write a store that holds the same threads and states; an occupied DEST fails."""
    run("delete", store_copy, "chat")
    compacted = run_json("compact", store_copy, tmp_path / "small.lmdb")
    assert compacted["bytes_after"] < compacted["bytes_before"]
    backup = run_json("backup", store_copy, tmp_path / "bak.lmdb")
    assert backup["dest"] == str(tmp_path / "bak.lmdb")
    original = run_json("threads", store_copy)
    for dest in ("small.lmdb", "bak.lmdb"):
        copy = run_json("threads", tmp_path / dest)
        assert [(r["thread_id"], r["checkpoints"]) for r in copy] == [
            (r["thread_id"], r["checkpoints"]) for r in original
        ]
        assert run_json("show", tmp_path / dest, "fan") == run_json("show", store_copy, "fan")
    assert "already holds a store" in one_line_error(
        run("backup", store_copy, tmp_path / "bak.lmdb", ok=False)
    )
    assert "compacted" in run("compact", store_copy, tmp_path / "c2.lmdb").stdout
    assert "backed up" in run("backup", store_copy, tmp_path / "b2.lmdb", "--compact").stdout


# -- export / import -------------------------------------------------------------------------------------------


def test_export_import_round_trip_is_exact(store_copy: Path, tmp_path: Path) -> None:
    """export → import gives a store whose every state and history equals the original's."""
    store = store_copy
    stream = run("export", store).stdout
    lines = stream.splitlines()
    assert json.loads(lines[0]) == {"kind": "header", "format": "deltalog-export", "version": 2}
    assert {json.loads(line)["kind"] for line in lines[1:-1]} == {"checkpoint", "blob", "write"}
    assert json.loads(lines[-1]) == {"kind": "end", "records": len(lines) - 2}
    copy = tmp_path / "imported.lmdb"
    counts = run_json("import", copy, input=stream)
    assert counts["threads"] == len(BUILDERS)
    assert sorted(run("export", copy).stdout.splitlines()) == sorted(lines)
    with opened(store) as original, opened(copy) as imported:
        _check_same_threads(original, imported)


def _check_same_threads(original: DeltaLogSaver, imported: DeltaLogSaver) -> None:
    for thread_id in BUILDERS:
        g1, g2 = graph_on(original, thread_id), graph_on(imported, thread_id)
        assert history(g2, cfg(thread_id)) == history(g1, cfg(thread_id))
        for ns in {
            t.config["configurable"]["checkpoint_ns"] for t in original.list(cfg(thread_id))
        }:
            for t in original.list(cfg(thread_id, checkpoint_ns=ns)):
                other = imported.get_tuple(t.config)
                assert other is not None
                assert other.checkpoint == t.checkpoint and other.metadata == t.metadata
                assert other.pending_writes == t.pending_writes
    # the imported thread continues like the original
    for saver in (original, imported):
        graph_on(saver, "waiting").invoke(None, cfg("waiting"))  # type: ignore[arg-type]
    assert observe_latest(original, "waiting") == observe_latest(imported, "waiting")


def observe_latest(saver: DeltaLogSaver, thread_id: str) -> Any:
    """Observed latest state of a thread."""
    from .graphs import observe

    return observe(graph_on(saver, thread_id).get_state(cfg(thread_id)))


def test_export_some_threads_to_a_file_and_import_from_it(store: Path, tmp_path: Path) -> None:
    """-o writes a file; naming threads exports only those; FILE is read instead of stdin."""
    out = tmp_path / "two.jsonl"
    run("export", store, "chat", "fan", "-o", out)
    threads = {json.loads(line).get("thread_id") for line in out.read_text().splitlines()[1:-1]}
    assert threads == {"chat", "fan"}
    target = tmp_path / "two.lmdb"
    assert "imported" in run("import", target, out).stdout
    assert {r["thread_id"] for r in run_json("threads", target)} == {"chat", "fan"}
    assert "already exists" in one_line_error(run("import", target, out, ok=False))
    assert {r["thread_id"] for r in run_json("threads", target)} == {"chat", "fan"}
    assert "nosuch" in one_line_error(run("export", store, "nosuch", ok=False))


HEADER_LINE = '{"kind": "header", "format": "deltalog-export", "version": 1}'


def test_import_rejects_garbage(tmp_path: Path) -> None:
    """A stream that is not an export fails on one line and writes nothing."""
    assert "line 2" in one_line_error(
        run("import", tmp_path / "x.lmdb", input=HEADER_LINE + "\nnot json\n", ok=False)
    )
    assert "header" in one_line_error(
        run("import", tmp_path / "y.lmdb", input='{"kind": "blob"}\n', ok=False)
    )
    assert "version 3" in one_line_error(
        run("import", tmp_path / "z.lmdb", input=HEADER_LINE.replace("1}", "3}"), ok=False)
    )
    cut = one_line_error(
        run("import", tmp_path / "w.lmdb", input=HEADER_LINE.replace("1}", "2}"), ok=False)
    )
    assert "line 2" in cut and "cut short" in cut


def test_export_encoding_round_trips_bytes() -> None:
    """Bytes anywhere in a record survive the JSON line exactly."""
    from deltalog.engine.cli_ops import decode_record, encode_record

    record = {
        "kind": "write",
        "value": ["msgpack", bytes(range(256))],
        "channel_versions": {"a": 1.5, "b": "00.1"},
        "nested": [[b""], {"x": b"\x00"}],
    }
    assert decode_record(encode_record(record)) == record


def config_with(thread_id: str, checkpoint_id: str) -> RunnableConfig:
    """A root-namespace config naming a checkpoint."""
    return cfg(thread_id, checkpoint_ns="", checkpoint_id=checkpoint_id)


def test_id_time_reads_langgraph_ids() -> None:
    """The time read from a fresh LangGraph checkpoint id is now."""
    from deltalog.engine.cli_common import id_time
    from langgraph.checkpoint.base.id import uuid6

    when = id_time(str(uuid6(clock_seq=3)))
    assert when is not None and abs(when - datetime.now(timezone.utc)) < timedelta(seconds=5)


def test_demo_without_path_uses_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`deltalog demo` (the README's main job) needs no PATH: it uses ./deltalog-demo.lmdb."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["demo", "--turns", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "deltalog-demo.lmdb" / "data.mdb").exists()


def test_a_cut_export_names_the_file_line_after_its_last_record(
    store_copy: Path, tmp_path: Path
) -> None:
    """An export without its end record, with blank lines in it: the error names the file's
    line after the last record (blank lines counted), and nothing is created."""
    lines = run("export", store_copy).stdout.splitlines()
    cut = [lines[0], "", "", *lines[1:-1]]  # two blank lines; the end record gone
    target = tmp_path / "cut.lmdb"
    error = one_line_error(run("import", target, input="\n".join(cut) + "\n", ok=False))
    assert f"line {len(cut) + 1} of the import stream" in error and "cut short" in error
    assert not target.exists()
