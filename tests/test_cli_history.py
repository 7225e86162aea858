"""`deltalog history` reads metadata and write keys only: same entries as decoding every checkpoint, no channel value decoded (issue 19, history from metadata)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from deltalog.channels import read_counters
from deltalog.engine import DeltaLogSaver, Environment
from deltalog.engine.cli import cli
from deltalog.engine.inspection import (
    HistoryEntry,
    _tree_order,
    collect_history,
    next_nodes,
    task_node,
)
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from .graphs import (
    cfg,
    chat_graph,
    human,
    program_chat,
    program_fanout,
    program_interrupt,
    program_subgraph,
)

SF = 3
THREADS = ["chat", "hitl", "fan", "sub"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Chat with a fork, human-in-the-loop, Send fan-out and a subgraph; then a prune
    that hides checkpoints kept for the delta chain."""
    path = tmp_path_factory.mktemp("history") / "store.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        program_chat(saver, SF, turns=6)
        program_interrupt(saver, SF)
        program_fanout(saver, SF)
        program_subgraph(saver, SF)
        program_chat(saver, SF, turns=6)  # same ids: a second run of the chat thread
    with DeltaLogSaver.from_path(path) as saver:
        chat_graph(SF).compile(checkpointer=saver).invoke({"messages": [human(0)]}, cfg("pruned"))
        for turn in range(1, 8):
            chat_graph(SF).compile(checkpointer=saver).invoke(
                {"messages": [human(turn)]}, cfg("pruned")
            )
        saver.prune(["pruned"], keep_last=5)
    return path


def _reference_entry(saver: DeltaLogSaver, tup: CheckpointTuple, hidden: bool) -> HistoryEntry:
    """The history entry as the old code derived it: from the fully decoded tuple."""
    meta = tup.metadata or {}
    stored = tup.checkpoint["channel_values"]
    versions = tup.checkpoint["channel_versions"]
    seeds = {c: versions.get(c) for c, v in stored.items() if isinstance(v, _DeltaSnapshot)}
    rows = saver.get_writes(tup.config)
    return HistoryEntry(
        checkpoint_id=tup.config["configurable"]["checkpoint_id"],
        parent_id=(tup.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
        step=meta.get("step"),
        source=meta.get("source"),
        ts=tup.checkpoint.get("ts"),
        next=next_nodes(tup.checkpoint),
        writes=dict(Counter(w.channel for w in rows)),
        tasks=list(dict.fromkeys(task_node(w.task_path) for w in rows)),
        seeds=sorted(seeds),
        replay={c: n for c, (n, _) in sorted(read_counters(meta).items()) if c not in stored},
        hidden=hidden,
        seed_versions=seeds,
    )


def _reference(
    saver: DeltaLogSaver, thread_id: str, ns: str, *, hidden: bool, limit: int | None
) -> list[dict[str, Any]]:
    base = cfg(thread_id, checkpoint_ns=ns)
    entries = {
        e.checkpoint_id: e
        for e in (_reference_entry(saver, t, False) for t in saver.list(base, limit=limit))
    }
    if hidden:
        todo = [e.parent_id for e in entries.values()]
        while todo:
            pid = todo.pop()
            if pid is None or pid in entries:
                continue
            tup = saver.get_tuple(cfg(thread_id, checkpoint_ns=ns, checkpoint_id=pid))
            if tup is not None:
                entries[pid] = _reference_entry(saver, tup, True)
                todo.append(entries[pid].parent_id)
    for e in entries.values():
        parent = entries.get(e.parent_id) if e.parent_id is not None else None
        if parent is not None:
            e.seeds = [c for c in e.seeds if parent.seed_versions.get(c) != e.seed_versions[c]]
    return [e.to_dict() for e in _tree_order(entries)]


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("limit", [None, 4])
def test_history_equals_the_decoded_derivation(
    store: Path, hidden: bool, limit: int | None
) -> None:
    """Every field of every entry, every namespace, forks and hidden checkpoints included."""
    with DeltaLogSaver(Environment(store, readonly=True)) as saver:
        groups = [(t.thread_id, ns) for t in saver.threads() for ns in t.namespaces]
        assert len(groups) >= 6
        for thread_id, ns in groups:
            got = [
                e.to_dict()
                for e in collect_history(saver, thread_id, ns, include_hidden=hidden, limit=limit)
            ]
            assert got == _reference(saver, thread_id, ns, hidden=hidden, limit=limit)
            assert got, (thread_id, ns)
        pruned = collect_history(saver, "pruned", include_hidden=True)
        assert any(e.hidden for e in pruned) and any(e.seeds for e in pruned)


def _decodes_values(obj: Any) -> bool:
    if isinstance(obj, (_DeltaSnapshot, BaseMessage)):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_decodes_values(v) for v in obj)
    return False


def test_history_decodes_no_channel_value(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the CLI: no seed, message or message list is ever deserialized."""
    real = JsonPlusSerializer.loads_typed
    decoded: list[str] = []

    def watching(self: JsonPlusSerializer, data: tuple[str, bytes]) -> Any:
        value = real(self, data)
        if _decodes_values(value):
            decoded.append(type(value).__name__)
        return value

    monkeypatch.setattr(JsonPlusSerializer, "loads_typed", watching)
    runner = CliRunner()
    for thread_id in [*THREADS, "pruned"]:
        for extra in ([], ["--json"], ["--hidden"], ["--limit", "2"]):
            result = runner.invoke(cli, ["history", str(store), thread_id, *extra])
            assert result.exit_code == 0, result.output
    assert decoded == []
    # the watcher sees values when they are decoded: `show` decodes the messages
    assert runner.invoke(cli, ["show", str(store), "chat"]).exit_code == 0
    assert decoded


def test_tables_default_to_the_newest_100(tmp_path: Path) -> None:
    """Tables stop at 100 checkpoints and say how to see all; --json and --limit 0 give all."""
    path = tmp_path / "long.lmdb"
    with DeltaLogSaver.from_path(path, durable=False) as saver:
        graph = chat_graph(50).compile(checkpointer=saver)
        for turn in range(40):
            graph.invoke({"messages": [human(turn)]}, cfg("long"))
        total = len(list(saver.list(cfg("long"))))
    assert total > 100
    runner = CliRunner()
    text = runner.invoke(cli, ["history", str(path), "long"], env={"COLUMNS": "200"}).stdout
    assert f"the newest 100 of {total:,} shown; --limit 0 shows all" in text
    assert text.count("  step ") == 100
    every = runner.invoke(cli, ["history", str(path), "long", "--limit", "0"]).stdout
    assert every.count("  step ") == total and "--limit 0 shows all" not in every
    # a real process, as a user runs it, in a pipe: no progress bar on stdout or stderr
    proc = subprocess.run(
        [sys.executable, "-m", "deltalog.engine", "history", str(path), "long", "--limit", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert proc.stdout.count("  step ") == 5 and proc.stderr == ""
