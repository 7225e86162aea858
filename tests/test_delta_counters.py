"""Metadata whose counters_since_delta_snapshot is malformed is refused before anything is written (R9, issue 15.13)."""

from __future__ import annotations

from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from deltalog.engine.errors import InvalidInputError
from deltalog.engine.txn_base import DB_NAMES

from tests.checkpoints import new_checkpoint
from tests.graphs import cfg


def dump(saver: DeltaLogSaver) -> dict[str, list[tuple[bytes, bytes]]]:
    return {db: list(saver.env.iter_db(db)) for db in DB_NAMES}


@pytest.mark.parametrize(
    ("counters", "named"),
    [
        (5, "5"),
        (2.5, "2.5"),
        ("messages", "'messages'"),
        (["messages"], "['messages']"),
        ({"messages": "x"}, "'messages': 'x'"),
        ({"messages": (1,)}, "'messages': (1,)"),
        ({1: (1, 1)}, "1: (1, 1)"),
        ({"messages": (True, 1)}, "(True, 1)"),
        ({"messages": [1, None]}, "[1, None]"),
    ],
    ids=repr,
)
def test_malformed_counters_are_refused_naming_the_value(
    counters: Any, named: str, saver: DeltaLogSaver
) -> None:
    """A non-mapping, or a mapping whose entries are not channel -> (int, int), raises InvalidInputError naming it; the store is unchanged."""
    checkpoint, versions = new_checkpoint(saver, {"n": 1})
    before = dump(saver)
    with pytest.raises(InvalidInputError, match="counters_since_delta_snapshot") as caught:
        saver.put(cfg("t"), checkpoint, {"counters_since_delta_snapshot": counters}, versions)
    assert named in str(caught.value)
    assert dump(saver) == before


@pytest.mark.parametrize("counters", [None, {}, {"messages": (3, 2)}, {"messages": [1, 1]}])
def test_wellformed_counters_are_stored(counters: Any, saver: DeltaLogSaver) -> None:
    """What LangGraph writes (and an absent or empty field) is accepted and kept."""
    checkpoint, versions = new_checkpoint(saver, {"n": 1})
    out = saver.put(cfg("t"), checkpoint, {"counters_since_delta_snapshot": counters}, versions)
    got = saver.get_tuple(out)
    assert got is not None
    stored = got.metadata.get("counters_since_delta_snapshot")
    # The serde turns tuples into lists.
    assert stored == (counters and {c: list(p) for c, p in counters.items()})
