"""Group commit: concurrent writers share one transaction and one fsync (R8).

No LMDB here: :class:`GroupCommit` queues requests and chooses leaders; the
environment hands it ``run_batch``, which runs a batch's ops in one write
transaction and marks each request done (with its value or error).
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from deltalog.engine.errors import (
    DeltaLogError,
    GroupCommitOffError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A group-commit leader wakes the callers of the batch before it (durable
# already) once its own ops ran this long, so they never wait out a long batch.
WAKE_AFTER: Final = 0.002


class Request(Generic[T]):
    __slots__ = ("chain", "done", "error", "gone", "history_safe", "notify", "op", "value", "wake")

    def __init__(
        self,
        op: Callable[[Any], T],
        history_safe: bool = False,
        notify: Callable[[BaseException | None, T | None], None] | None = None,
    ) -> None:
        self.op = op
        self.history_safe = history_safe
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None
        # A thread caller (notify is None) sleeps on ``wake``, held until the
        # request is done or its caller is made the next leader; only the leader
        # that finished (or passes on the lead to) this request releases it. A
        # queued caller (Environment.submit) is told by ``notify`` instead and never
        # leads: a leader task on the store's lead thread runs its batch.
        self.notify = notify
        self.wake: threading.Lock | None = None
        # Done thread callers of the same batch to wake after this one, in
        # turn (see GroupCommit._wake); ``gone``: the caller stopped waiting.
        self.chain: list[Request[Any]] = []
        self.gone = False
        if notify is None:
            self.wake = threading.Lock()
            self.wake.acquire()


# The C module under ``signal``: the same calls without the enum conversions
# that made ``signal.getsignal`` cost 2.5 µs each.
_signal: Any = importlib.import_module("_signal")
# Signals whose Python handlers a group-commit leader on the main thread holds
# off (see signals_deferred): the ones applications handle, SIGINT first.
_DEFERRED_SIGNALS: Final = tuple(
    int(getattr(_signal, name))
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(_signal, name)
)
_deferring = False


_NOT_DEFERRED: Final = contextlib.nullcontext()

_get_ident: Final = threading.get_ident
#: The main thread's id (``threading.main_thread().ident`` without its two
#: Python calls on every write): in a forked child, the thread that forked.
_main_ident = threading.main_thread().ident


def _forked_child() -> None:
    global _main_ident
    _main_ident = _get_ident()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def signals_deferred() -> contextlib.AbstractContextManager[None]:
    """On the main thread: run Python signal handlers after the block, not inside it.

    CPython runs signal handlers on the main thread between bytecodes, so a
    KeyboardInterrupt can surface anywhere in a group-commit leader, in the
    middle of another thread's op or of waking its caller: 106 puts of other
    threads failed from one SIGINT (issue 15.15). Handlers of
    ``_DEFERRED_SIGNALS`` are swapped for one that records the signal, and
    the recorded signals go to the real handlers when the block ends (so a
    KeyboardInterrupt is raised then, in this thread only). Costs about 2 µs;
    other threads never run signal handlers, so for them this does nothing.
    """
    if _deferring or _get_ident() != _main_ident:
        return _NOT_DEFERRED  # reentrant: writer threads pass here
    return _Deferred()


class _Deferred:
    """The block of :func:`signals_deferred` on the main thread (a class, not a
    generator: ~1 µs less per write, which every single put pays)."""

    __slots__ = ("pending", "saved")

    def __init__(self) -> None:
        self.saved: list[tuple[int, Any]] = []
        self.pending: list[int] = []

    def record(self, signum: int, frame: Any) -> None:
        self.pending.append(signum)

    def __enter__(self) -> None:
        global _deferring
        _deferring = True
        getsignal, record = _signal.getsignal, self.record
        for signum in _DEFERRED_SIGNALS:
            handler = getsignal(signum)
            if callable(handler):
                self.saved.append((signum, handler))
                _signal.signal(signum, record)

    def __exit__(self, *exc: object) -> None:
        global _deferring
        try:
            for signum, handler in self.saved:
                _signal.signal(signum, handler)
        finally:
            _deferring = False
        if self.pending:  # rare: a put without a signal builds nothing here
            saved = dict(self.saved)
            for signum in self.pending:
                saved[signum](signum, sys._getframe())


#: The note an interrupt raised in a writer's wait carries when the write was
#: committed all the same.
COMMITTED_NOTE: Final = "deltalog: this write was committed before the interrupt was delivered"


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``; on Python 3.10, which has no ``add_note``, the same
    ``__notes__`` list (PEP 678) set by hand, which code can read there too."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]


# How often an interrupted caller whose op is in a running batch looks whether
# the batch is done (see GroupCommit.write).
_DONE_POLL: Final = 0.0005
#: Batch sizes :meth:`GroupCommit.stats` remembers.
RECENT_BATCHES: Final = 64

#: Runs one batch in one transaction (see :class:`GroupCommit`).
RunBatch = Callable[[list[Request[Any]], Callable[[], None] | None], None]


@dataclass(frozen=True)
class GroupCommitStats:
    """What a :class:`GroupCommit` ran since it was made."""

    batches: int
    """Batches handed to ``run_batch`` (one write transaction each, retries aside)."""
    ops: int
    """Requests in those batches."""
    largest: int
    """Requests in the largest batch."""
    recent: tuple[int, ...]
    """Requests in each of the last :data:`RECENT_BATCHES` batches, oldest first."""


@dataclass(frozen=True)
class GroupCommitState:
    """A snapshot of a :class:`GroupCommit`'s queue."""

    queued: int
    """Requests waiting for the next batch."""
    leading: bool
    """A leader is chosen or running."""
    next_op: Callable[[Any], Any] | None
    """The op of the thread caller chosen to lead next, if any."""
    unwoken: int
    """Done requests of the last batch its next leader has yet to wake."""


class GroupCommit:
    """The write queue of one environment, and the choice of who commits it.

    Args:
        run_batch: Runs every request of a batch in one write transaction and
            commits it, marking each request ``done`` with its ``value`` or
            ``error``. It is called with :attr:`write_lock` held; its second
            argument, when not None, must be called once before the commit
            (it wakes the previous batch's callers).
        enabled: False runs each request alone (one transaction per write).
    """

    def __init__(self, run_batch: RunBatch, *, enabled: bool = True) -> None:
        self._run_batch = run_batch
        self.enabled = enabled
        # Reentrant: a read that must adopt a grown map takes it (see
        # Environment._begin), and so may the thread that holds it to reopen after fork.
        self.write_lock = threading.RLock()
        # Callers queue requests; one leader at a time runs the queue as one
        # transaction, then wakes the callers it committed for and makes a
        # thread caller queued meanwhile (``_next``) the next leader, or starts a
        # leader task on ``_lead_pool`` when only async callers (submit) wait.
        self._queue_lock = threading.Lock()
        self._queue: list[Request[Any]] = []
        self._leading = False
        self._next: Request[Any] | None = None
        # The last committed batch, when a next leader was chosen: that leader
        # wakes its callers once its own ops ran (or sooner, see _lead).
        self._unwoken: list[Request[Any]] = []
        # Runs leader tasks for queues that hold no thread caller (submit).
        self._lead_pool: ThreadPoolExecutor | None = None
        self._batches = self._ops = self._largest = 0
        self._recent: collections.deque[int] = collections.deque(maxlen=RECENT_BATCHES)

    def stats(self) -> GroupCommitStats:
        """Batches and requests run so far."""
        with self._queue_lock:
            return GroupCommitStats(self._batches, self._ops, self._largest, tuple(self._recent))

    def state(self) -> GroupCommitState:
        """Where the queue stands now (for tests and diagnostics: it changes at once)."""
        with self._queue_lock:
            return GroupCommitState(
                len(self._queue),
                self._leading,
                None if self._next is None else self._next.op,
                len(self._unwoken),
            )

    def idle(self) -> bool:
        """True when no request is queued, no leader runs and no done batch waits to be woken."""
        with self._queue_lock:
            return not (self._queue or self._leading or self._next or self._unwoken)

    def close(self) -> None:
        """Stop the lead thread once its queued leader tasks ran (they fail cleanly)."""
        if self._lead_pool is not None:
            self._lead_pool.shutdown(wait=False)

    def _run(
        self, batch: list[Request[Any]], before_commit: Callable[[], None] | None = None
    ) -> None:
        with self._queue_lock:
            self._count(batch)
        self._run_batch(batch, before_commit)

    def _count(self, batch: list[Request[Any]]) -> None:
        """Under ``_queue_lock``: count a batch about to run, for :meth:`stats`."""
        n = len(batch)
        self._batches += 1
        self._ops += n
        if n > self._largest:
            self._largest = n
        self._recent.append(n)

    def write(self, op: Callable[[Any], T], *, history_safe: bool = False) -> T:
        """Run ``op`` in a write transaction (one of ``run_batch``) and return once it committed.

        With group commit, concurrent callers queue their ops; when no commit
        is running, one of them leads: it takes every queued op and runs them in
        one transaction (an op that raises fails alone: the transaction is
        dropped with what it wrote and the others run again), commits once,
        then wakes the callers it committed for.
        While it commits, new ops queue up for the next leader. Every caller
        returns only after the commit holding its op is done, so a returned
        write is as durable as with one commit each. ``op`` may run more than
        once (map growth retries it) and must only touch the transaction.

        ``history_safe`` is kept on the request for ``run_batch`` (see
        :meth:`deltalog.engine.env.Environment.write`); an op that is not
        history-safe also wakes the previous batch's callers before it runs.
        """
        req: Request[T] = Request(op, history_safe)
        if not self.enabled:
            with self.write_lock:
                self._run([req])
        else:
            with self._queue_lock:
                self._queue.append(req)
                lead = not self._leading
                if lead:
                    self._leading, self._next = True, req
            try:
                if not lead:
                    assert req.wake is not None
                    req.wake.acquire()  # until done, or made the next leader
                # Other callers' writes depend on what follows (waking them, their
                # ops in this thread's batch): a signal handler raising in here
                # must not fail them (issue 15.15), so it runs after it.
                if _deferring or _get_ident() != _main_ident:  # signals_deferred() is a no-op
                    self._woken(req)
                else:
                    with _Deferred():
                        self._woken(req)
            except BaseException as exc:  # e.g. KeyboardInterrupt while waiting
                with signals_deferred():
                    if self._withdraw(req):
                        # Its batch runs on: wait for it (one commit at most), so
                        # the interrupt says truly whether this write is stored.
                        while not req.done:
                            time.sleep(_DONE_POLL)
                if req.done and req.error is None:
                    _add_note(exc, COMMITTED_NOTE)
                raise
        if req.error is not None:
            raise req.error
        return req.value  # type: ignore[return-value]

    def _woken(self, req: Request[Any]) -> None:
        """A thread caller's request, once its caller is woken (or led at once):
        wake the next caller of its chain, then lead if it is not done."""
        if req.chain:
            self._wake_next(req)
        if not req.done:
            self._lead(req)

    def submit(
        self,
        op: Callable[[Any], T],
        notify: Callable[[BaseException | None, T | None], None],
        *,
        history_safe: bool = False,
    ) -> None:
        """Queue ``op`` for the next group commit without waiting for it (async callers).

        ``notify(error, value)`` is called once the commit holding ``op`` is
        durable (``error`` None, ``value`` what ``op`` returned) or failed, on
        the thread that committed it: it must only hand the result over (e.g.
        with ``loop.call_soon_threadsafe``). If no commit is running, a leader task
        on the store's lead thread takes the queue, so the caller never blocks
        and no thread waits per queued op. Same durability as :meth:`write`.
        """
        if not self.enabled:
            raise GroupCommitOffError("submit needs group commit; use write")
        req: Request[T] = Request(op, history_safe, notify)
        with self._queue_lock:
            self._queue.append(req)
            spawn = not self._leading
            if spawn:
                self._leading, self._next = True, None
        if spawn:
            self._spawn_leader()

    def _spawn_leader(self) -> None:
        """Run :meth:`_lead` on the lead thread, which never waits for a caller."""
        with self._queue_lock:
            if self._lead_pool is None:
                self._lead_pool = ThreadPoolExecutor(1, thread_name_prefix="deltalog-lead")
            pool = self._lead_pool
        try:
            pool.submit(self._lead_task)
        except RuntimeError:  # shut down by close(): lead here, so no request is left waiting
            self._lead_task()

    def _lead_task(self) -> None:
        try:
            self._lead()
        except BaseException:  # every request of the batch was told in _lead's finally
            logger.exception("group commit leader task failed")

    def _lead(self, own: Request[Any] | None = None) -> None:
        """As the designated leader: commit the queue, wake callers, pass the lead on.

        Only callers of committed batches are woken (or notified), and one
        thread caller queued meanwhile (if any) is made the next leader; the
        other queued callers sleep on (``notify_all`` to every waiter ran at
        about ¾ of the rate; docs/benchmarks.md, "Design measurements").

        When there is a next leader, it wakes this batch's callers, once its
        own ops ran and just before its commit (``_unwoken``), or earlier,
        before an op that may run long (one not ``history_safe``, or once its
        ops ran ``WAKE_AFTER``); with no one queued they are woken at once.
        Callers woken straight after the commit take the GIL from the next
        leader at each of its LMDB calls (its ops ran at 39 µs instead of 18);
        woken later, they prepare while it waits for fsync, and a returned
        write is still durable.
        """
        batch: list[Request[Any]] = []
        unwoken: list[Request[Any]] = []

        def wake_last_batch() -> None:
            done, unwoken[:] = unwoken[:], []
            self._wake(done)

        try:
            with self._queue_lock:
                self._next = None
                batch, self._queue = self._queue, []
                unwoken[:], self._unwoken = self._unwoken, []
                self._count(batch)
            with self.write_lock:
                self._run_batch(batch, wake_last_batch if unwoken else None)
        finally:
            for req in batch:
                if not req.done:  # _run_batch was interrupted (e.g. KeyboardInterrupt)
                    req.error = req.error or DeltaLogError("the write was interrupted")
                    req.done = True
            with self._queue_lock:
                nxt, spawn = self._pass_lead()
                # The leader's own caller is this thread: it needs no waking.
                batch = [req for req in batch if req is not own]
                if nxt is not None or spawn:
                    self._unwoken, batch = batch, []
            try:
                if unwoken:
                    wake_last_batch()
                if batch:
                    self._wake(batch)
            finally:  # whatever happens telling callers, the queue gets its next leader
                if nxt is not None or spawn:
                    self._hand_on(nxt, spawn)

    def _wake(self, done: list[Request[Any]]) -> None:
        """Hand done requests back: async callers are told at once; thread callers
        are woken one after another, each woken caller waking the next as soon
        as it runs (:meth:`_wake_next`).

        Woken all at once they queue for the GIL together: woken in turn was
        faster in nine of ten paired runs at 16 writer threads.
        """
        threads: list[Request[Any]] = []
        for req in done:
            if req.wake is None:
                self._finish(req)
            else:
                threads.append(req)
        self._start_chain(threads)

    def _start_chain(self, reqs: list[Request[Any]]) -> None:
        """Wake the first caller of ``reqs`` that still waits, carrying the rest."""
        if reqs:
            with self._queue_lock:
                first = self._chain(reqs)
            if first is not None:
                self._finish(first)

    @staticmethod
    def _chain(reqs: list[Request[Any]]) -> Request[Any] | None:
        """Under ``_queue_lock``: the first request whose caller still waits, now
        carrying the rest as its chain."""
        for i, req in enumerate(reqs):
            if not req.gone:
                req.chain = reqs[i + 1 :]
                return req
        return None

    def _wake_next(self, req: Request[Any]) -> None:
        """Wake the next caller of ``req``'s chain (``req``'s caller is running, so
        only its own thread touches ``req.chain`` now)."""
        chain, req.chain = req.chain, []
        self._start_chain(chain)

    @staticmethod
    def _finish(req: Request[Any]) -> None:
        """Hand a done request back to its caller."""
        if req.wake is not None:
            req.wake.release()
            return
        assert req.notify is not None
        try:
            req.notify(req.error, req.value)
        except Exception:  # e.g. the caller's event loop is closed; the others still hear
            logger.exception("could not hand a committed write back to its caller")

    def _pass_lead(self) -> tuple[Request[Any] | None, bool]:
        """Choose who leads next, under ``_queue_lock``: a queued thread caller if any,
        else a leader task if only queued callers wait. Returns ``(caller, spawn)``."""
        if not self._queue:  # the common case of a lone writer
            self._next, self._leading = None, False
            return None, False
        nxt = next((r for r in self._queue if r.wake is not None), None)
        self._next, self._leading = nxt, True
        return nxt, nxt is None

    def _hand_on(self, nxt: Request[Any] | None, spawn: bool) -> None:
        """Start the next leader chosen by :meth:`_pass_lead` (outside the lock)."""
        if nxt is not None:
            assert nxt.wake is not None
            nxt.wake.release()
        elif spawn:
            self._spawn_leader()

    def _withdraw(self, req: Request[Any]) -> bool:
        """Take back the request of a thread caller interrupted before it was done.

        A request still queued is dropped (its op never runs); one already in
        a running batch runs anyway, and the callers to be woken after it are
        woken without it. If the caller had been made the leader but not
        started, the lead passes on, so the queue never stalls; with no one
        left to lead, the batch it was to wake is woken here. Returns True
        when the request was in a batch (so it may be stored).
        """
        nxt: Request[Any] | None = None
        spawn = False
        after: Request[Any] | None = None
        unwoken: list[Request[Any]] = []
        in_batch = False
        with self._queue_lock:
            if self._next is req:
                self._queue.remove(req)
                nxt, spawn = self._pass_lead()
                if nxt is None and not spawn:  # no leader left to wake the last batch
                    unwoken, self._unwoken = self._unwoken, []
            elif req in self._queue:
                self._queue.remove(req)
            else:  # in a batch: skipped when its batch is woken, its chain handed on
                in_batch = req.gone = True
                chain, req.chain = req.chain, []
                after = self._chain(chain)
        if after is not None:
            self._finish(after)
        self._wake(unwoken)
        self._hand_on(nxt, spawn)
        return in_batch
