"""Each distinct error condition raises its own DeltaLogError subclass from deltalog.engine.errors (issue 16, errors)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver, errors
from deltalog.engine import migrate as migrate_module
from deltalog.engine.cache import DecodedCache
from deltalog.engine.codec import RecordCodec
from deltalog.engine.env import Environment
from deltalog.engine.errors import (
    ConcurrentChangeError,
    DeltaLogError,
    GroupCommitOffError,
    InvalidInputError,
    MigrationError,
    OptionError,
    ReadOnlyStoreError,
    ReentrantWriteError,
    StoreClosedError,
)
from deltalog.engine.maintenance import Maintenance
from deltalog.engine.memo import HistoryMemo
from deltalog.engine.migrate import open_saver_uri
from deltalog.engine.write_txn import WriteTxn
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from tests.checkpoints import new_checkpoint, put_values


def count_checkpoints(path: Path) -> int:
    with DeltaLogSaver(Environment(path, readonly=True)) as saver:
        return len(list(saver.list(None)))


def test_every_error_is_exported_and_a_deltalog_error() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, DeltaLogError), name
    assert len(set(errors.__all__)) == len(errors.__all__)


def test_a_write_to_a_read_only_store(tmp_path: Path) -> None:
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        put_values(saver, "t", {"x": 1})
    with (
        DeltaLogSaver(Environment(tmp_path / "s", readonly=True)) as reader,
        pytest.raises(ReadOnlyStoreError, match="read-only"),
    ):
        put_values(reader, "t", {"x": 2})
    assert count_checkpoints(tmp_path / "s") == 1


def test_a_call_on_a_closed_saver(tmp_path: Path) -> None:
    saver = DeltaLogSaver.from_path(tmp_path / "s")
    config = put_values(saver, "t", {"x": 1})
    saver.close()
    with pytest.raises(StoreClosedError, match="closed"):
        saver.get_tuple(config)
    with pytest.raises(StoreClosedError, match="closed"):
        put_values(saver, "t", {"x": 2})


def test_submit_without_group_commit(tmp_path: Path) -> None:
    def op(w: WriteTxn) -> None:
        raise AssertionError("never run")

    def notify(exc: BaseException | None, result: None) -> None:
        raise AssertionError("never called")

    store = Environment(tmp_path / "s", group_commit=False)
    try:
        with pytest.raises(GroupCommitOffError, match="group commit"):
            store.submit(op, notify)
    finally:
        store.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda: DecodedCache(max_bytes=-1),
        lambda: HistoryMemo(max_entries=-1),
        lambda: HistoryMemo(max_bytes=-1),
        lambda: RecordCodec(compress_threshold=-1),
    ],
    ids=["cache", "memo-entries", "memo-bytes", "codec"],
)
def test_a_negative_budget_is_an_option_error(make: Callable[[], object]) -> None:
    """Still a ValueError (and an InvalidInputError), as these constructors raised before."""
    with pytest.raises(OptionError, match="-1") as caught:
        make()
    assert isinstance(caught.value, InvalidInputError) and isinstance(caught.value, ValueError)


def test_migration_error_lives_in_errors_and_keeps_its_old_name() -> None:
    assert migrate_module.MigrationError is MigrationError
    with pytest.raises(MigrationError, match="nosuch"), open_saver_uri("nosuch://x"):
        pass


def test_a_prune_that_the_threads_keep_outrunning(
    make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-seeding prune whose plan is outrun by a writer on every attempt (a checkpoint
    put between its planning read and its write transaction) gives up after its retries
    with ConcurrentChangeError, deleting nothing."""
    saver = make_saver()
    config = put_values(saver, "t", {"msgs": _DeltaSnapshot(["a"])})
    for i in range(3):
        saver.put_writes(config, [("msgs", f"w{i}")], f"task-{i}")
        config = grow(saver, config)
    before = len(list(saver.list({"configurable": {"thread_id": "t"}})))
    plans = []
    planned = Maintenance._groups_of

    def outrun(*args: Any, **kwargs: Any) -> Any:
        groups = planned(*args, **kwargs)
        plans.append(len(groups))
        grow(saver, latest(saver))  # another writer gets in between plan and commit
        return groups

    monkeypatch.setattr(Maintenance, "_groups_of", outrun)
    with pytest.raises(ConcurrentChangeError, match="kept changing"):
        saver.prune(["t"], keep_last=1, reducers={"msgs": lambda s, w: [*s, *w]})
    assert len(plans) > 1
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == before + len(plans)


# Without the guard this test waits for itself forever; "thread": the signal method
# cannot fire while a group-commit leader defers SIGALRM.
@pytest.mark.timeout(60, method="thread")
def test_a_write_from_inside_a_write_transaction_is_refused(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A reducer that writes to the saver during the prune's write transaction gets
    ReentrantWriteError instead of waiting for itself forever; nothing is pruned."""
    saver = make_saver()
    config = put_values(saver, "t", {"msgs": _DeltaSnapshot(["a"])})
    for i in range(3):
        saver.put_writes(config, [("msgs", f"w{i}")], f"task-{i}")
        config = grow(saver, config)
    before = len(list(saver.list({"configurable": {"thread_id": "t"}})))

    def reducer(state: Any, writes: Sequence[Any]) -> Any:
        grow(saver, latest(saver))
        return [*state, *writes]

    with pytest.raises(ReentrantWriteError, match="inside one of its own write transactions"):
        saver.prune(["t"], keep_last=1, reducers={"msgs": reducer})
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == before
    grow(saver, latest(saver))  # the store still takes writes


def latest(saver: DeltaLogSaver) -> Any:
    tup = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert tup is not None
    return tup.config


def grow(saver: DeltaLogSaver, parent: Any) -> Any:
    """A child of ``parent`` whose delta channel "msgs" moved on without a stored value."""
    tup = saver.get_tuple(parent)
    assert tup is not None
    bumped = saver.get_next_version(str(tup.checkpoint["channel_versions"]["msgs"]), None)
    checkpoint, _ = new_checkpoint(saver, {})
    checkpoint["channel_versions"] = {"msgs": bumped}
    return saver.put(tup.config, checkpoint, {"source": "loop", "step": 1}, {"msgs": bumped})
