"""Group commit as its own unit: batches, results, failures and leaders, with no LMDB (issue 16, R8)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from deltalog.engine.errors import GroupCommitOffError
from deltalog.engine.group_commit import GroupCommit, Request


class Log:
    """A ``run_batch`` over a plain list: each op appends to ``rows`` (its "transaction")."""

    def __init__(self, delay: float = 0.0) -> None:
        self.rows: list[Any] = []
        self.batches: list[int] = []
        self.delay = delay
        self.inside = threading.local()

    def run_batch(
        self, batch: list[Request[Any]], before_commit: Callable[[], None] | None
    ) -> None:
        self.batches.append(len(batch))
        staged: list[Any] = []
        for req in batch:
            try:
                req.value = req.op(staged)
            except Exception as exc:
                req.error = exc
            req.done = True
        if before_commit is not None:
            before_commit()
        time.sleep(self.delay)  # the "fsync", during which others queue
        self.rows.extend(staged)


def test_concurrent_writes_share_batches_and_each_caller_gets_its_own_result() -> None:
    """16 threads × 20 writes: fewer batches than writes, every value returned to its caller."""
    log = Log(delay=0.002)
    commits = GroupCommit(log.run_batch)
    got: dict[tuple[int, int], Any] = {}

    def op(k: int, i: int) -> Callable[[list[Any]], tuple[int, int]]:
        def run(rows: list[Any]) -> tuple[int, int]:
            rows.append((k, i))
            return k, i

        return run

    def writer(k: int) -> None:
        for i in range(20):
            got[(k, i)] = commits.write(op(k, i))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == {(k, i): (k, i) for k in range(16) for i in range(20)}
    assert sorted(log.rows) == sorted(got)
    stats = commits.stats()
    assert stats.ops == 320 == sum(log.batches) and stats.batches == len(log.batches)
    assert stats.batches < 320 * 0.8 and stats.largest == max(log.batches) > 1
    assert commits.idle()


def test_an_op_that_raises_fails_its_own_caller_only() -> None:
    """The error of one op is raised to its caller; the others' values are returned."""
    log = Log()
    commits = GroupCommit(log.run_batch)

    def bad(rows: list[Any]) -> None:
        raise ValueError("bad op")

    with pytest.raises(ValueError, match="bad op"):
        commits.write(bad)
    assert commits.write(lambda rows: 7) == 7
    assert commits.idle()


def test_without_group_commit_every_write_is_its_own_batch() -> None:
    """enabled=False: one batch per write, and submit is refused (GroupCommitOffError)."""
    log = Log(delay=0.001)
    commits = GroupCommit(log.run_batch, enabled=False)
    threads = [
        threading.Thread(target=lambda: [commits.write(lambda rows: None) for _ in range(10)])
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert log.batches == [1] * 40
    with pytest.raises(GroupCommitOffError):
        commits.submit(lambda rows: None, lambda err, value: None)


def test_submitted_ops_are_led_by_the_lead_thread_and_notified_once() -> None:
    """submit never blocks; each notify is called once with the op's value, after its batch."""
    log = Log(delay=0.001)
    commits = GroupCommit(log.run_batch)
    seen: list[tuple[BaseException | None, Any]] = []
    done = threading.Event()

    def notify(err: BaseException | None, value: Any) -> None:
        seen.append((err, value))
        if len(seen) == 50:
            done.set()

    def op(i: int) -> Callable[[list[Any]], int]:
        def run(rows: list[Any]) -> int:
            rows.append(i)
            return i

        return run

    for i in range(50):
        commits.submit(op(i), notify)
    assert done.wait(30)
    assert sorted(v for _, v in seen) == list(range(50)) and all(e is None for e, _ in seen)
    assert sorted(log.rows) == list(range(50))
    commits.close()


def test_a_child_forked_from_a_thread_defers_signals_on_that_thread() -> None:
    """After fork() from a worker thread, that thread is the child's main thread (as
    threading.main_thread() says there): its writes defer signal handlers, as they would
    on the main thread of any process."""
    import os

    from deltalog.engine import group_commit

    codes: list[int] = []

    def fork_and_check() -> None:
        pid = os.fork()
        if pid == 0:  # the child: this thread is its only one
            main = threading.main_thread().ident == threading.get_ident()
            deferred = group_commit.signals_deferred() is not group_commit._NOT_DEFERRED
            os._exit(0 if main and deferred else 1)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
        # And in this process, a worker thread still defers nothing.
        codes.append(int(group_commit.signals_deferred() is not group_commit._NOT_DEFERRED))

    worker = threading.Thread(target=fork_and_check)
    worker.start()
    worker.join(30)
    assert codes == [0, 0]
