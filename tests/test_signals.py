"""A signal handled on the main thread during group commit fails no other thread's write; a
write that raises was not stored (issue 15.15)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from langchain_core.runnables import RunnableConfig

from .checkpoints import put_values

WORKERS = 8


class _Interrupted(RuntimeError):
    """Raised by a SIGUSR1 handler: an ordinary Exception, as application handlers raise."""


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted


class _Gate:
    """Open while the main thread is inside a put: only then does a signal raise.

    The signaller fires every few ms whatever the main thread is doing; an exception
    raised in the test's own bookkeeping (a loop test, an ``except`` block) would end
    the test instead of testing the put. The handler closes the gate as it raises, so
    a second signal cannot raise again before the next put.
    """

    def __init__(self) -> None:
        self.open = False


@pytest.fixture(params=["SIGINT", "SIGUSR1"])
def signal_kind(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[int, type[BaseException], _Gate]]:
    """SIGINT raising KeyboardInterrupt (as Python's handler does), or SIGUSR1 with a handler
    raising an ordinary exception; either raises only while the gate is open."""
    signum = signal.SIGINT if request.param == "SIGINT" else signal.SIGUSR1
    raised: type[BaseException] = KeyboardInterrupt if signum == signal.SIGINT else _Interrupted
    gate = _Gate()

    def handler(signum: int, frame: Any) -> None:
        if gate.open:
            gate.open = False
            raise raised

    previous = signal.signal(signum, handler)
    try:
        yield signum, raised, gate
    finally:
        signal.signal(signum, previous)


@pytest.mark.timeout(180)
def test_signals_on_the_main_thread_fail_no_other_threads_put(
    tmp_path: Path, signal_kind: tuple[int, type[BaseException], _Gate]
) -> None:
    """8 writer threads and the main thread put while another thread signals the main thread
    every few ms (seeded): no other thread's put raises and all of them are stored; the main
    thread's interrupted puts that say they were committed are stored."""
    signum, raised, gate = signal_kind
    rng = random.Random(f"15.15-{signum}")
    delays = [rng.uniform(0.001, 0.01) for _ in range(60)]
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:  # durable: the leader waits in fsync
        stop = threading.Event()
        lock = threading.Lock()
        errors: list[BaseException] = []
        stored: list[tuple[RunnableConfig, int]] = []

        def writer(w: int) -> None:
            n = 0
            while not stop.is_set():
                try:
                    config = put_values(saver, f"w{w}", {"n": n})
                except BaseException as exc:
                    with lock:
                        errors.append(exc)
                    return
                with lock:
                    stored.append((config, n))
                n += 1

        def signaller() -> None:
            for delay in delays:
                time.sleep(delay)
                os.kill(os.getpid(), signum)
            stop.set()

        workers = [threading.Thread(target=writer, args=(w,)) for w in range(WORKERS)]
        sender = threading.Thread(target=signaller)
        for worker in workers:
            worker.start()
        sender.start()
        committed_interrupted: list[int] = []
        interrupted = 0
        n = 0
        finish: Callable[[], bool] = lambda: stop.is_set() and not sender.is_alive()  # noqa: E731
        while not finish() or n % 50:  # a few more puts after the last signal
            try:
                gate.open = True
                put_values(saver, "main", {"n": n})
                gate.open = False
            except raised as exc:
                interrupted += 1
                if any("was committed" in note for note in getattr(exc, "__notes__", [])):
                    committed_interrupted.append(n)
            n += 1
        sender.join(30)
        for worker in workers:
            worker.join(60)
        assert not any(worker.is_alive() for worker in workers), "a writer stalled"
        assert errors == [], f"{len(errors)} puts of other threads failed: {errors[:3]!r}"
        assert interrupted > 0  # the signals did reach the main thread's puts
        assert len(stored) > 100
        for config, value in stored:
            got = saver.get_tuple(config)
            assert got is not None and got.checkpoint["channel_values"]["n"] == value
        main = {
            t.checkpoint["channel_values"]["n"]
            for t in saver.list({"configurable": {"thread_id": "main", "checkpoint_ns": ""}})
        }
        assert set(committed_interrupted) <= main
        store = saver.env
        assert store.commits.idle()
        assert saver.verify().ok


@pytest.mark.timeout(120)
def test_an_interrupted_caller_whose_write_is_in_another_leaders_batch_learns_it_was_stored(
    tmp_path: Path,
) -> None:
    """issue 15.15: the main thread's write is in a batch another thread leads when a signal
    interrupts its wait; the exception is raised only once that batch committed, and says
    the write was committed (it is stored), instead of reading as a failed write."""
    previous = signal.signal(signal.SIGUSR1, _raise_interrupted)
    try:
        with DeltaLogSaver.from_path(tmp_path / "s") as saver:
            env = saver.env
            meta = env.db("meta")
            first_in, first_go = threading.Event(), threading.Event()
            second_in, second_go = threading.Event(), threading.Event()

            def hold(entered: threading.Event, go: threading.Event) -> Callable[[Any], None]:
                def op(w: Any) -> None:
                    entered.set()
                    assert go.wait(30)

                return op

            def mine(w: Any) -> None:
                w.put_raw(meta, b"test:mine", b"stored")

            first = threading.Thread(target=env.write, args=(hold(first_in, first_go),))
            first.start()
            assert first_in.wait(30)  # the first leader runs its batch; the rest queue
            second = threading.Thread(target=env.write, args=(hold(second_in, second_go),))
            second.start()

            def signal_then_release() -> None:
                # Once the second caller and the main thread queue behind the first
                # batch, let it commit: the second caller leads next, taking the main
                # thread's op into its batch. Then interrupt the main thread, and let
                # that batch commit a little later.
                deadline = time.monotonic() + 30
                while env.commits.state().queued < 2 and time.monotonic() < deadline:
                    time.sleep(0.001)
                first_go.set()
                assert second_in.wait(30)
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.2)
                second_go.set()

            helper = threading.Thread(target=signal_then_release)
            helper.start()
            with pytest.raises(_Interrupted) as raised:
                env.write(mine)
            helper.join(30)
            first.join(30)
            second.join(30)
            notes = getattr(raised.value, "__notes__", [])
            assert any("was committed" in note for note in notes), notes
            with env.read() as r:
                assert r.txn.get(b"test:mine", db=meta) == b"stored"
            assert env.commits.idle()
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.timeout(60)
def test_signals_during_a_main_thread_commit_run_their_handlers_after_it(tmp_path: Path) -> None:
    """Signals that arrive while the main thread leads a commit are held, then every one of
    them reaches the application's handler once the write returns, in order."""
    seen: list[tuple[int, bool]] = []
    inside = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        seen.append((signum, inside.is_set()))

    previous = {s: signal.signal(s, handler) for s in (signal.SIGUSR1, signal.SIGUSR2)}
    try:
        with DeltaLogSaver.from_path(tmp_path / "s") as saver:
            sent = [signal.SIGUSR1, signal.SIGUSR2, signal.SIGUSR1]

            def sender() -> None:
                inside.wait(10)
                for signum in sent:
                    os.kill(os.getpid(), signum)
                    time.sleep(0.05)  # the op's loop runs Python between two signals

            def op(w: Any) -> None:
                inside.set()
                deadline = time.monotonic() + 10
                while thread.is_alive() and time.monotonic() < deadline:
                    time.sleep(0.005)
                inside.clear()

            thread = threading.Thread(target=sender)
            thread.start()
            saver.env.write(op)
            thread.join(10)
            assert seen == [(signum, False) for signum in sent]
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
