"""A prune that frees nothing because no delta seed exists yet says so and how to re-seed (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli

from .graphs import cfg, chat_graph, human


def test_prune_without_seed_explains_and_graph_reseeds(tmp_path: Path) -> None:
    """No seed yet: the report names the thread, the cause and --graph; --graph then frees it."""
    path = tmp_path / "s.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(50).compile(checkpointer=saver)  # seeds every 50 updates: none yet
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("young"))
    runner = CliRunner()
    text = runner.invoke(cli, ["prune", str(path), "young"], env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "nothing was freed" in text.stdout and "no delta seed yet" in text.stdout
    assert "'young'" in text.stdout and "--graph MODULE:ATTR" in text.stdout
    again = json.loads(runner.invoke(cli, ["prune", str(path), "young", "--json"]).stdout)
    assert again["checkpoints"] == 0 and "no delta seed yet" in again["note"]  # a second run too
    module = tmp_path / "g.py"
    module.write_text("from tests.graphs import chat_graph\ngraph = chat_graph(50)\n")
    seeded = json.loads(
        runner.invoke(
            cli, ["prune", str(path), "young", "--graph", f"{module}:graph", "--json"]
        ).stdout
    )
    assert seeded["seeds"] > 0 and seeded["checkpoints"] > 0 and "note" not in seeded
    assert "note:" not in runner.invoke(cli, ["prune", str(path), "young"]).stdout
