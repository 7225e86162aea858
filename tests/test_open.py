"""Opening stores: one environment per path and process, format checks, permissions (R10)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogSaver, InvalidInputError
from langgraph.checkpoint.base import empty_checkpoint


def test_same_path_twice_shares_one_environment(tmp_path: Path) -> None:
    """Two savers on one path in one process share the store; closing one keeps the other working."""
    first = DeltaLogSaver.from_path(tmp_path / "s")
    second = DeltaLogSaver.from_path(tmp_path / "s")
    assert first.env is second.env
    config = first.put({"configurable": {"thread_id": "t"}}, empty_checkpoint(), {}, {})
    first.close()
    assert second.get_tuple(config) is not None
    second.close()
    assert second.env.closed


def test_same_path_with_other_options_is_refused(tmp_path: Path) -> None:
    """Opening an open path with different store options names the conflicting option."""
    with DeltaLogSaver.from_path(tmp_path / "s"), pytest.raises(InvalidInputError, match="durable"):
        DeltaLogSaver.from_path(tmp_path / "s", durable=False)


def test_store_files_are_owner_only(tmp_path: Path) -> None:
    """The store folder is 0700 and its files 0600."""
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        saver.put({"configurable": {"thread_id": "t"}}, empty_checkpoint(), {}, {})
    assert stat.S_IMODE(os.stat(tmp_path / "s").st_mode) == 0o700
    for name in ("data.mdb", "lock.mdb"):
        assert stat.S_IMODE(os.stat(tmp_path / "s" / name).st_mode) == 0o600


def test_readonly_open_reads_a_pruned_store(tmp_path: Path) -> None:
    """A read-only open works (handles outlive the opening transaction), also after a prune."""
    from deltalog.engine import Environment

    from .graphs import cfg, chat_graph, human

    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        for turn in range(20):
            graph.invoke({"messages": [human(turn)]}, cfg("t"))
        saver.prune(["t"], keep_last=2)
    reader = DeltaLogSaver(Environment(tmp_path / "s", readonly=True))
    try:
        assert len(list(reader.list(cfg("t")))) == 2
        assert reader.verify().ok
    finally:
        reader.close()
