"""Snapshot policy: counters and the per-channel replay cost `explain` reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalog.channels import (
    MAX_SUPERSTEPS_SINCE_SNAPSHOT,
    ChannelReplayCost,
    aexplain,
    append,
    explain,
    read_counters,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from tests.test_channels_graphs import SAVERS, build, open_saver, run_program


@pytest.mark.parametrize("every", [1, 3, 1000])
@pytest.mark.parametrize("kind", SAVERS)
def test_explain_matches_the_saver_history(kind: str, every: int, tmp_path: Path) -> None:
    """R6: explain reports the seed and writes get_delta_channel_history returns, per channel."""
    with open_saver(kind, tmp_path) as saver:
        graph = build(every).compile(checkpointer=saver)
        run_program(graph, "t")
        cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
        snapshots_seen = 0
        for saved in list(saver.list(cfg)):  # sqlite holds a lock while listing
            report = explain(saver, saved.config, graph)
            counters = read_counters(saved.metadata)
            stored = saved.checkpoint["channel_values"]
            assert set(report) == {
                "messages", "items", "uniq", "settings", "tags", "count", "recent",
            }  # fmt: skip
            for name, cost in report.items():
                updates, supersteps = counters.get(name, (0, 0))
                assert (cost.updates_since_snapshot, cost.supersteps_since_snapshot) == (
                    updates,
                    supersteps,
                )
                assert cost.snapshot_frequency == every
                assert cost.updates_until_snapshot == max(every - updates, 0)
                assert cost.supersteps_until_snapshot == MAX_SUPERSTEPS_SINCE_SNAPSHOT - supersteps
                assert updates < every  # the runtime snapshots when the cadence is reached
                if name in stored:
                    assert cost.seed_at_checkpoint and cost.writes_to_replay == 0
                    assert cost.seed == "snapshot" and isinstance(stored[name], _DeltaSnapshot)
                    snapshots_seen += 1
                    continue
                assert not cost.seed_at_checkpoint
                if name not in saved.checkpoint["channel_versions"]:
                    assert (cost.seed, cost.writes_to_replay) == ("empty", 0)
                    continue
                history = saver.get_delta_channel_history(config=saved.config, channels=[name])
                writes = history[name]["writes"]
                assert cost.writes_to_replay == len(writes)
                assert cost.replay_bytes == sum(
                    len(saver.serde.dumps_typed(w[2])[1]) for w in writes
                )
                assert cost.seed == ("snapshot" if "seed" in history[name] else "empty")
                assert (cost.seed_bytes > 0) == ("seed" in history[name])
        assert snapshots_seen > 0  # Overwrites and the cadence wrote snapshots


async def test_aexplain_equals_explain(tmp_path: Path) -> None:
    """The async twin gives the same report."""
    with open_saver("deltalog", tmp_path) as saver:
        graph = build(3).compile(checkpointer=saver)
        run_program(graph, "t")
        cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
        for saved in list(saver.list(cfg)):  # sqlite holds a lock while listing
            assert await aexplain(saver, saved.config, graph) == explain(saver, saved.config, graph)


def test_explain_with_a_reducer_map_and_json_output() -> None:
    """A reducer map works as the source; as_dict is JSON-ready; no checkpoint gives {}."""
    saver = InMemorySaver()
    graph = build(1000).compile(checkpointer=saver)
    run_program(graph, "t")
    cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
    report = explain(saver, cfg, {"items": append})
    assert set(report) == {"items"}
    cost = report["items"]
    assert isinstance(cost, ChannelReplayCost) and cost.snapshot_frequency == 100
    assert json.loads(json.dumps(cost.as_dict()))["channel"] == "items"
    assert explain(saver, {"configurable": {"thread_id": "none"}}, graph) == {}


def test_read_counters() -> None:
    """Counters come back as (updates, supersteps) tuples; a malformed field is a clear error."""
    assert read_counters(None) == {}
    assert read_counters({"step": 3}) == {}
    meta: dict[str, Any] = {"counters_since_delta_snapshot": {"m": [2, 5], "x": (0, 1)}}
    assert read_counters(meta) == {"m": (2, 5), "x": (0, 1)}
    with pytest.raises(ValueError, match=r"\['m'\] must be \(updates, supersteps\)"):
        read_counters({"counters_since_delta_snapshot": {"m": [1]}})
    with pytest.raises(ValueError, match="must map channel"):
        read_counters({"counters_since_delta_snapshot": [1, 2]})
