"""A channel version keeps the value stored when it was new, wherever the checkpoint that shares it sits: same as InMemorySaver (issue 15.18)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from tests.graphs import cfg

# Small scalars (held in checkpoint records), a long string and lists (blobs).
VALUES: list[Any] = [None, True, 7, 2.5, "short", "x" * 2000, [1, 2], {"k": [3]}, 0, ""]


def states(saver: BaseCheckpointSaver[Any]) -> list[tuple[Any, ...]]:
    """Every checkpoint of thread t as (id, parent, versions, values), newest first."""
    return [
        (
            tup.config["configurable"]["checkpoint_id"],
            (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            tup.checkpoint["channel_versions"],
            tup.checkpoint["channel_values"],
        )
        for tup in saver.list(cfg("t"))
    ]


def put(
    savers: list[BaseCheckpointSaver[Any]],
    parent: str | None,
    versions: dict[str, str],
    values: dict[str, Any],
    new: dict[str, str],
) -> str:
    """The same hand-built put on every saver; returns the new checkpoint id."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = dict(versions)
    checkpoint["channel_values"] = dict(values)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    for saver in savers:
        saver.put(config, checkpoint, {}, dict(new))
    return checkpoint["id"]


def test_version_shared_with_a_non_parent_keeps_its_value(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A child of B that goes back to A's version of a scalar (not passed) shows A's value, as InMemorySaver does."""
    savers: list[BaseCheckpointSaver[Any]] = [make_saver(), InMemorySaver()]
    a = put(savers, None, {"n": "1", "l": "1"}, {"n": 1, "l": [1]}, {"n": "1", "l": "1"})
    b = put(savers, a, {"n": "2", "l": "1"}, {"n": 2}, {"n": "2"})
    put(savers, b, {"n": "1", "l": "1"}, {}, {})  # n back at A's version, nothing passed
    put(savers, None, {"n": "2", "l": "1"}, {}, {})  # a root sharing B's and A's versions
    ours, theirs = (states(s) for s in savers)
    assert ours == theirs
    assert ours[1][3] == {"n": 1, "l": [1]}
    assert ours[0][3] == {"n": 2, "l": [1]}


@pytest.mark.parametrize("seed", range(6))
def test_random_puts_sharing_versions_match_inmemory(
    seed: int, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """Random trees of puts whose versions mix new ones, the parent's and any earlier checkpoint's, with values passed or not: every listed state equals InMemorySaver's."""
    rng = random.Random(seed)
    savers: list[BaseCheckpointSaver[Any]] = [make_saver(), InMemorySaver()]
    channels = ["a", "b", "c", "d"]
    value_of: dict[tuple[str, str], Any] = {}  # (channel, version) -> value when new
    stored: list[tuple[str, dict[str, str]]] = []
    counter = 0
    for _ in range(25):
        parent = rng.choice(stored) if stored and rng.random() < 0.8 else None
        versions: dict[str, str] = {}
        values: dict[str, Any] = {}
        new: dict[str, str] = {}
        for channel in channels:
            known = [v for (c, v) in value_of if c == channel]
            pick = rng.random()
            if pick < 0.3 or not known:
                counter += 1
                version = f"{counter:08}"
                value_of[(channel, version)] = rng.choice(VALUES)
                new[channel] = version
            elif pick < 0.5 and parent is not None and channel in parent[1]:
                version = parent[1][channel]
            elif pick < 0.9:
                version = rng.choice(known)  # any earlier checkpoint's version
            else:
                continue  # channel absent here
            versions[channel] = version
            if channel in new or rng.random() < 0.3:
                values[channel] = value_of[(channel, version)]
        cid = put(savers, parent[0] if parent else None, versions, values, new)
        stored.append((cid, versions))
    ours, theirs = (states(s) for s in savers)
    assert ours == theirs
