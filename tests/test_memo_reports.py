"""The history memo across processes: commit reports (``meta`` ``clog:``) keep it exact and used.

Several processes writing one store each learn the others' commits from the
reports those commits store (deltalog.engine.memo). Every check compares the
memo path with a cold walk in the same snapshot (``assert_same`` of
tests/test_history_memo.py) after another process changed what a remembered
history was built from, and asserts that the memo was used where the reports
say nothing changed: a memo that counted every foreign commit as a change of
everything (as before reports) would not hit, and one that trusted a commit
it has no report for would return a stale history.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest
from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine.memo import CLOG_KEEP, HistoryMemo, pack_report, unpack_report
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from tests.checkpoints import at
from tests.graphs import cfg, chat_graph
from tests.test_history_memo import (
    _id,
    _put,
    _write,
    assert_all_same,
    assert_same,
    message_ids,
    refs,
    run_turns,
)

SPAWN = multiprocessing.get_context("spawn")


# -- helpers (the spawned processes run these) -------------------------------------------------


def _turns(path: str, thread_id: str, first: int, count: int) -> None:
    """Run ``count`` chat turns on ``thread_id`` in the store at ``path``."""
    with DeltaLogSaver.from_path(path) as saver:
        run_turns(
            chat_graph(100).compile(checkpointer=saver), thread_id, range(first, first + count)
        )


def _write_to(path: str, thread_id: str, checkpoint_id: str, text: str) -> None:
    """Add a write under an old checkpoint (it changes its descendants' histories)."""
    with DeltaLogSaver.from_path(path) as saver:
        saver.put_writes(
            at(thread_id, checkpoint_id),
            [("messages", [HumanMessage(text, id=text)])],
            task_id=f"other-{text}",
        )


def _write_then_drop_report(path: str, thread_id: str, checkpoint_id: str, text: str) -> None:
    """:func:`_write_to`, then delete that commit's report in a raw LMDB commit, which
    itself leaves no report: two commits the others must count as changes of everything."""
    _write_to(path, thread_id, checkpoint_id, text)
    env = lmdb.open(path, max_dbs=16)
    try:
        meta = env.open_db(b"meta")
        with env.begin(write=True) as txn:
            own = txn.id() - 1  # the put_writes commit just before this one
            assert txn.delete(keys.clog_key(own), db=meta), "the write left no report"
    finally:
        env.close()


def _seed_ancestor_version(path: str) -> None:
    """Put a new greatest checkpoint of "t" whose blob is stored at version "2", the
    version an ancestor holds: that ancestor now has a seed."""
    with DeltaLogSaver.from_path(path) as saver:
        _put(saver, 4, 3, "2", _DeltaSnapshot([AIMessage("seeded", id="seed")]))


def _run(target: Any, *args: Any) -> None:
    proc = SPAWN.Process(target=target, args=args)
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0


def _reports(saver: DeltaLogSaver) -> tuple[bool, list[int]]:
    """(the store's ``clog_on`` mark is set, the txn ids of its stored reports)."""
    env, meta = saver.env.env, saver.env.db("meta")
    with env.begin(db=meta) as txn:
        on = txn.get(keys.CLOG_ON) is not None
        cur = txn.cursor()
        ids = []
        ok = cur.set_range(keys.CLOG)
        while ok and cur.key().startswith(keys.CLOG):
            ids.append(keys.clog_txn(cur.key()))
            ok = cur.next()
    return on, ids


def _same_snapshot(saver: DeltaLogSaver, thread_id: str) -> None:
    """The memo path equals the cold walk in one read transaction (another process may
    commit between two reads, so the values of two reads can differ)."""
    with saver.env.read() as r:
        ids = r.ids(thread_id, "")
        assert ids is not None
        rows = r.history(*ids, None, ["messages"])
        assert {c: (h.seed, list(h.writes)) for c, h in rows.items()} == r.delta_history(
            *ids, None, ["messages"]
        )


def _two_writers(path: Path, saver: DeltaLogSaver) -> Any:
    """Turns on thread "t" here and on "other" in another process, then one more turn here:
    this process finds the other's commits and marks the store for reports."""
    graph = chat_graph(100).compile(checkpointer=saver)
    run_turns(graph, "t", range(6))
    _run(_turns, str(path), "other", 0, 2)
    run_turns(graph, "t", range(6, 7))
    assert _reports(saver)[0]
    return graph


# -- tests --------------------------------------------------------------------------------------


def test_reports_round_trip_and_anything_else_reads_as_none() -> None:
    report = pack_report(True, [(1, 2)], [(1, 2, b"\x01blob")])
    assert unpack_report(report) == (True, ((1, 2),), ((1, 2, b"\x01blob"),))
    assert unpack_report(pack_report(False, (), ())) == (False, (), ())
    for bad in (b"", b"\xc1", pack_report(True, [(1, 2)], [])[:-1], b"\x93\x01\x90\x90"):
        assert unpack_report(bad) is None


def test_another_writers_turns_leave_the_memo_in_use(tmp_path: Path) -> None:
    """Once the store keeps reports, a read after another process's turns on another
    thread learns them and uses what the memo holds (before reports it could not)."""
    path = tmp_path / "shared"
    with DeltaLogSaver.from_path(path) as saver:
        graph = _two_writers(path, saver)
        assert_same(saver, cfg("t"))
        _run(_turns, str(path), "other", 2, 3)  # reported: the other process saw our turn
        hits = saver.env.memo.hits
        assert_same(saver, cfg("t"))  # a read, no write of ours in between
        assert saver.env.memo.hits > hits
        hits = saver.env.memo.hits
        run_turns(graph, "t", range(7, 9))
        assert saver.env.memo.hits > hits
        assert_all_same(saver, "t")
        assert_all_same(saver, "other", seed=1)
        on, ids = _reports(saver)
        assert on and ids


def test_a_reported_write_to_an_old_ancestor_is_seen_by_a_reader(tmp_path: Path) -> None:
    """Another process adds a write under an old checkpoint of "t": the next read here
    (without a write of its own) returns it, while "other"'s remembered history is used."""
    path = tmp_path / "shared"
    with DeltaLogSaver.from_path(path) as saver:
        _two_writers(path, saver)
        before = assert_same(saver, cfg("t"))
        assert_same(saver, cfg("other"))
        old = refs(saver, "t")[-5]["configurable"]["checkpoint_id"]
        _run(_write_to, str(path), "t", old, "elsewhere")
        hits = saver.env.memo.hits
        assert_same(saver, cfg("other"))
        assert saver.env.memo.hits > hits  # the report named "t" only
        after = assert_same(saver, cfg("t"))
        assert message_ids(after).count("elsewhere") == 1
        assert [i for i in message_ids(after) if i != "elsewhere"] == message_ids(before)
        assert_all_same(saver, "t")


def test_a_commit_without_a_report_counts_as_a_change_of_everything(tmp_path: Path) -> None:
    """A write whose report is gone, and the raw commit that removed it: a reader here
    must not trust anything it remembered from before them."""
    path = tmp_path / "shared"
    with DeltaLogSaver.from_path(path) as saver:
        _two_writers(path, saver)
        assert_same(saver, cfg("t"))
        assert_same(saver, cfg("t"))
        old = refs(saver, "t")[-5]["configurable"]["checkpoint_id"]
        _run(_write_then_drop_report, str(path), "t", old, "unreported")
        after = assert_same(saver, cfg("t"))
        assert message_ids(after).count("unreported") == 1
        assert_all_same(saver, "t")


def test_writers_keep_only_the_newest_reports(tmp_path: Path) -> None:
    path = tmp_path / "shared"
    with DeltaLogSaver.from_path(path, durable=False) as saver:
        _two_writers(path, saver)
        config = refs(saver, "t")[-1]
        for i in range(CLOG_KEEP + 50):
            saver.put_writes(config, [("count", i)], task_id=f"task-{i}")
        on, ids = _reports(saver)
    assert on and len(ids) == CLOG_KEEP
    assert ids == list(range(ids[0], ids[0] + CLOG_KEEP))


def _churn(path: str, seconds: float, seed: int) -> None:
    """For ``seconds``: turns on "other", and now and then a write under a random old
    checkpoint of "t" (each changes histories this test's process remembers)."""
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(100).compile(checkpointer=saver)
        turn = 100
        while time.monotonic() < end:
            if rng.random() < 0.3:
                old = rng.choice(refs(saver, "t"))["configurable"]["checkpoint_id"]
                saver.put_writes(
                    at("t", old),
                    [("messages", [HumanMessage(f"churn {turn}", id=f"churn-{turn}")])],
                    task_id=f"churn-{turn}",
                )
            else:
                run_turns(graph, "other", range(turn, turn + 1))
            turn += 1


@pytest.mark.timeout(300)
def test_memo_equals_cold_walk_while_another_process_writes(tmp_path: Path) -> None:
    """Turns and reads here while another process runs turns and writes under old
    checkpoints of this process's thread: in every read, the memo path and the cold walk
    agree in its snapshot, and the memo is used."""
    path = tmp_path / "shared"
    with DeltaLogSaver.from_path(path) as saver:
        graph = _two_writers(path, saver)
        proc = SPAWN.Process(target=_churn, args=(str(path), 6.0, 7))
        proc.start()
        hits = saver.env.memo.hits
        turn = 10
        while proc.is_alive():
            run_turns(graph, "t", range(turn, turn + 1))
            for thread_id in ("t", "other", "t"):
                _same_snapshot(saver, thread_id)
            turn += 1
        proc.join(60)
        assert proc.exitcode == 0
        assert saver.env.memo.hits > hits
        assert_all_same(saver, "t")
        assert_all_same(saver, "other", seed=3)


def test_a_reported_blob_under_a_key_a_history_found_absent(tmp_path: Path) -> None:
    """Another process stores a blob at a version an ancestor of a remembered history
    holds (test_history_memo's "seed stored later", across processes): the report names
    the new blob key, and the next read here starts from that seed."""
    path = tmp_path / "shared"
    with DeltaLogSaver.from_path(path) as saver:
        _put(saver, 1, None, "1")
        _write(saver, 1, "r")
        _run(_turns, str(path), "other", 0, 1)
        _put(saver, 2, 1, "2")  # finds the other process: the store now keeps reports
        _write(saver, 2, "a")
        _put(saver, 3, 2, "3")
        hits = saver.env.memo.hits
        for _ in range(2):
            assert message_ids(assert_same(saver, at("t", _id(3)))) == ["r", "a"]
        assert saver.env.memo.hits > hits
        _run(_seed_ancestor_version, str(path))
        assert message_ids(assert_same(saver, at("t", _id(3)))) == ["seed", "a"]


def test_one_process_with_many_threads_never_marks_the_store(tmp_path: Path) -> None:
    """Readers that see this process's own commit before its writer recorded it as done
    are not fooled into taking it for another process's: no mark, no reports, and the
    memo keeps being used."""
    with DeltaLogSaver.from_path(tmp_path / "one") as saver:
        graph = chat_graph(100).compile(checkpointer=saver)

        def chat(k: int) -> None:
            run_turns(graph, f"t{k}", range(12))

        workers = [threading.Thread(target=chat, args=(k,)) for k in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert _reports(saver) == (False, [])
        assert not saver.env.memo.foreign
        assert saver.env.memo.hits > 0
        for k in range(6):
            assert_all_same(saver, f"t{k}", seed=k)


def test_an_older_snapshot_never_turns_reporting_off() -> None:
    """A reader whose snapshot predates the mark must not undo what a writer found
    (the writer would stop reporting, and the others lose their memos again)."""
    memo = HistoryMemo()
    assert memo.clog is None
    memo.found_clog(False)
    assert memo.clog is False
    memo.found_clog(True)
    memo.found_clog(False)
    assert memo.clog is True
    memo.reset(5)
    assert memo.clog is None and memo.known == 5


def test_learning_is_in_commit_order_and_a_missing_report_changes_everything() -> None:
    memo = HistoryMemo()
    memo.reset(10)
    memo.learn(11, [(False, ((1, 1),), ()), None, (False, (), ())])
    assert memo.known == 13
    assert memo.floor(1, 1) == 12 and memo.floor(2, 2) == 12  # 12 had no report
    memo.learn(12, [None, None, (False, ((2, 2),), ())])  # 12 and 13 known: skipped
    assert memo.known == 14 and memo.floor(2, 2) == 14 and memo.floor(1, 1) == 12
    with pytest.raises(ValueError, match="learnt after 14"):
        memo.learn(16, [None])
    memo.learn_unknown(20)
    assert memo.known == 20 and memo.floor(3, 3) == 20
