"""Concurrency: processes, threads and coroutines on one store at once (R8).

Writers run on different LangGraph threads and on the same one, in several OS
threads, in several processes and in many coroutines; readers list and rebuild
states meanwhile. Every value written carries its own checkpoint id, so a reader
can tell a mixed-up checkpoint from a right one. Nothing may fail, nothing may be
lost, and LMDB's one-writer-at-a-time rule (plus map growth under all of it) must
not deadlock: each test runs under a timeout. Throughput is printed
(checkpoints/s) and quoted in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from deltalog.engine.group_commit import RECENT_BATCHES, GroupCommitStats
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from tests.checkpoints import at, checkpoint_id, new_checkpoint
from tests.graphs import cfg, chat_graph, human, observe

SF = 3
TINY_MAP = 256 * 1024  # forces map growth (and MapResized in other processes) mid-test
#: The second chat writer of each process gives every such turn a long reply.
LONG_EVERY = 2


def put_tagged(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    writer: str,
    seq: int,
    parent: RunnableConfig | None,
) -> RunnableConfig:
    """Put a checkpoint whose value names its own id, its writer and its sequence number."""
    config = parent or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return saver.put(config, *tagged_checkpoint(saver, writer, seq))


def tagged_checkpoint(
    saver: BaseCheckpointSaver[Any], writer: str, seq: int
) -> tuple[Checkpoint, CheckpointMetadata, ChannelVersions]:
    """``put``'s checkpoint, metadata and versions for :func:`put_tagged` (and its async twins)."""
    checkpoint, versions = new_checkpoint(saver, {"payload": None})
    checkpoint["channel_values"]["payload"] = {"id": checkpoint["id"], "writer": writer, "seq": seq}
    return checkpoint, {"source": "loop", "step": seq}, versions


def check_tuple(t: CheckpointTuple) -> None:
    """A tagged checkpoint is the one its config names (no mixing)."""
    payload = t.checkpoint["channel_values"]["payload"]
    assert payload["id"] == t.config["configurable"]["checkpoint_id"] == t.checkpoint["id"]


def check_chat_state(values: dict[str, Any]) -> None:
    """A chat state is internally consistent: one AI reply per turn, unique message ids."""
    messages = values.get("messages", [])
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids)), ids
    assert values.get("turns", 0) == sum(m.type == "ai" for m in messages)


@dataclass
class Work:
    """What one worker (thread or process) did."""

    tagged: list[tuple[str, str, str, int]] = field(default_factory=list)  # thread, id, writer, seq
    chats: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # thread, id, seen
    reads: int = 0
    errors: list[str] = field(default_factory=list)

    def merge(self, other: Work) -> None:
        """Add another worker's record to this one."""
        self.tagged += other.tagged
        self.chats += other.chats
        self.reads += other.reads
        self.errors += other.errors


def _guard(work: Work, fn: Callable[[], None]) -> None:
    try:
        fn()
    except BaseException as exc:  # reported, never swallowed
        import traceback

        work.errors.append("".join(traceback.format_exception(exc))[-2000:])


def tagged_writer(saver: DeltaLogSaver, name: str, stop: float, work: Work) -> None:
    """Chains of tagged checkpoints on a shared thread and on the writer's own thread."""

    def run() -> None:
        parents: dict[str, RunnableConfig | None] = {"shared": None, f"own-{name}": None}
        seq = 0
        while time.monotonic() < stop:
            for thread_id in parents:
                parents[thread_id] = out = put_tagged(
                    saver, thread_id, name, seq, parents[thread_id]
                )
                work.tagged.append((thread_id, checkpoint_id(out), name, seq))
            seq += 1

    _guard(work, run)


def chat_writer(
    saver: DeltaLogSaver, thread_id: str, stop: float, work: Work, long_every: int = 0
) -> None:
    """Turn after turn of a DeltaChannel chat graph, recording each state it saw
    (with ``long_every``, long replies: records a turn pack carries in chunks)."""

    def run() -> None:
        graph: CompiledStateGraph[Any] = chat_graph(SF, long_every).compile(checkpointer=saver)
        turn = 0
        while time.monotonic() < stop:
            graph.invoke({"messages": [human(turn)]}, cfg(thread_id))
            state = graph.get_state(cfg(thread_id))
            work.chats.append(
                (thread_id, state.config["configurable"]["checkpoint_id"], observe(state))
            )
            turn += 1

    _guard(work, run)


def reader(saver: DeltaLogSaver, chat_threads: list[str], stop: float, work: Work) -> None:
    """List the shared thread and rebuild chat states while the writers run."""

    def run() -> None:
        graph: CompiledStateGraph[Any] = chat_graph(SF).compile(checkpointer=saver)
        rng = random.Random()
        while time.monotonic() < stop:
            for t in saver.list(cfg("shared"), limit=20):
                check_tuple(t)
                work.reads += 1
            thread_id = rng.choice(chat_threads)
            state = graph.get_state(cfg(thread_id))
            check_chat_state(state.values)
            for snapshot in list(graph.get_state_history(cfg(thread_id), limit=6)):
                check_chat_state(snapshot.values)
                work.reads += 1

    _guard(work, run)


def process_worker(path: str, name: str, seconds: float, queue: Any) -> None:
    """One writer process: two chat writers, one tagged writer and one reader thread."""
    work = Work()
    try:
        saver = DeltaLogSaver.from_path(path, map_size=TINY_MAP)
        stop = time.monotonic() + seconds
        chats = [f"{name}-chat-{k}" for k in range(2)]
        threads = [
            threading.Thread(target=chat_writer, args=(saver, c, stop, work, LONG_EVERY * k))
            for k, c in enumerate(chats)
        ]
        threads.append(threading.Thread(target=tagged_writer, args=(saver, name, stop, work)))
        threads.append(threading.Thread(target=reader, args=(saver, chats, stop, work)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        saver.close()
    except BaseException as exc:
        work.errors.append(repr(exc))
    queue.put(work)


def check_everything(saver: DeltaLogSaver, work: Work) -> None:
    """Every recorded put is stored with its own value; every recorded chat state rebuilds exactly."""
    assert not work.errors, "\n".join(work.errors)
    for thread_id, cid, writer, seq in work.tagged:
        t = saver.get_tuple(at(thread_id, cid))
        assert t is not None, f"{writer}#{seq} {cid} lost"
        check_tuple(t)
        assert t.checkpoint["channel_values"]["payload"]["seq"] == seq
    graph: CompiledStateGraph[Any] = chat_graph(SF).compile(checkpointer=saver)
    for thread_id, cid, seen in work.chats:
        assert observe(graph.get_state(at(thread_id, cid))) == seen
    assert sum(1 for _ in saver.list(cfg("shared"))) == sum(
        1 for w in work.tagged if w[0] == "shared"
    )
    report = saver.verify()
    assert report.ok, report.problems


@pytest.mark.stress
@pytest.mark.timeout(180)
def test_processes_threads_readers_writers_at_once(tmp_path: Path) -> None:
    """R8: 2 processes + this one, each with chat writers, a tagged writer on a shared thread and a reader, for 8 s on a growing map: no error, nothing lost or mixed up, no deadlock."""
    path = str(tmp_path / "store")
    seconds = 8.0
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=process_worker, args=(path, f"p{k}", seconds, queue)) for k in range(2)
    ]
    for p in procs:
        p.start()
    saver = DeltaLogSaver.from_path(path, map_size=TINY_MAP)
    work = Work()
    time.sleep(1.5)  # let the children finish importing so the three overlap
    start = time.monotonic()
    stop = start + seconds
    chats = ["main-chat-0", "main-chat-1"]
    threads = [
        threading.Thread(target=chat_writer, args=(saver, c, stop, work, LONG_EVERY * k))
        for k, c in enumerate(chats)
    ]
    threads += [threading.Thread(target=tagged_writer, args=(saver, "main", stop, work))]
    threads += [threading.Thread(target=reader, args=(saver, chats, stop, work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in procs:
        work.merge(queue.get(timeout=120))
    elapsed = time.monotonic() - start
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    try:
        check_everything(saver, work)
        stored = sum(1 for _ in saver.list(None))
        chunks = sum(len(key) > 8 for key, _ in saver.env.iter_db("packs"))
        print(
            f"\n3 processes x 4 threads: {stored} checkpoints in {elapsed:.1f} s = "
            f"{stored / elapsed:.0f} checkpoints/s, {work.reads} checked reads, "
            f"{chunks} pack chunks, map grew to {saver.env.env.info()['map_size']} bytes"
        )
        assert saver.env.env.info()["map_size"] > TINY_MAP
        assert chunks > 0  # packs carried long replies while the processes wrote
    finally:
        saver.close()


@pytest.mark.timeout(120)
def test_threads_on_one_saver_with_a_growing_map(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """R8: 6 writer threads (3 on one shared LangGraph thread) and 2 readers on a 64 KiB map that must grow under them: no error, nothing lost, no deadlock."""
    saver = make_saver(map_size=64 * 1024)
    work = Work()
    stop = time.monotonic() + 4
    chats = ["c0", "c1", "c2"]
    threads = [
        threading.Thread(target=chat_writer, args=(saver, c, stop, work, LONG_EVERY * k))
        for k, c in enumerate(chats)
    ]
    threads += [
        threading.Thread(target=tagged_writer, args=(saver, f"t{k}", stop, work)) for k in range(3)
    ]
    threads += [threading.Thread(target=reader, args=(saver, chats, stop, work)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check_everything(saver, work)
    assert saver.env.env.info()["map_size"] > 64 * 1024


@pytest.mark.timeout(60)
def test_writing_while_iterating_on_the_same_thread(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """The single-writer rule never deadlocks one thread: it may put while iterating list() (even when the put grows the map)."""
    saver = make_saver(map_size=64 * 1024)
    parent: RunnableConfig | None = None
    for seq in range(40):
        parent = put_tagged(saver, "t", "w", seq, parent)
    seen = 0
    for t in saver.list(cfg("t")):
        check_tuple(t)
        parent = put_tagged(saver, "t", "w", 1000 + seen, parent)
        saver.put_writes(t.config, [("payload", "x" * 2000)], task_id=f"task-{seen}")
        seen += 1
    assert seen >= 40
    assert sum(1 for _ in saver.list(cfg("t"))) == 40 + seen


@pytest.mark.stress
@pytest.mark.timeout(180)
async def test_many_coroutines_on_one_async_saver(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """R8: 200 coroutines putting chains (on own and shared threads) and reading at once, plus 32 concurrent ainvoke chat threads: everything stored, nothing mixed up; each chat thread ends as a serial InMemorySaver run does."""
    saver = make_saver()
    coroutines, per = 200, 10

    async def chain(k: int) -> list[tuple[str, str, int]]:
        out: list[tuple[str, str, int]] = []
        parents: dict[str, RunnableConfig | None] = {f"own-{k}": None, "shared": None}
        for seq in range(per):
            for thread_id, parent in parents.items():
                config = parent or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
                new = await saver.aput(config, *tagged_checkpoint(saver, f"co{k}", seq))
                await saver.aput_writes(new, [("payload", seq)], task_id=f"co{k}-{seq}")
                parents[thread_id] = new
                out.append((thread_id, checkpoint_id(new), seq))
            found = await saver.aget_tuple(parents[f"own-{k}"] or {})
            assert found is not None
            check_tuple(found)
            async for t in saver.alist(cfg("shared"), limit=5):
                check_tuple(t)
        return out

    start = time.monotonic()
    results = await asyncio.gather(*(chain(k) for k in range(coroutines)))
    elapsed = time.monotonic() - start
    puts = sum(len(r) for r in results)
    assert puts == coroutines * per * 2
    for records in results:
        for thread_id, cid, seq in records:
            t = await saver.aget_tuple(at(thread_id, cid))
            assert t is not None
            check_tuple(t)
            assert t.checkpoint["channel_values"]["payload"]["seq"] == seq
            assert [w[2] for w in t.pending_writes or []] == [seq]
    print(
        f"\n{coroutines} coroutines: {puts} aput + {puts} aput_writes in {elapsed:.1f} s = "
        f"{puts / elapsed:.0f} checkpoints/s"
    )

    graph: CompiledStateGraph[Any] = chat_graph(SF).compile(checkpointer=saver)

    async def chat(k: int) -> dict[str, Any]:
        for turn in range(3):
            await graph.ainvoke({"messages": [human(100 * k + turn)]}, cfg(f"chat-{k}"))
        return observe(await graph.aget_state(cfg(f"chat-{k}")))

    states = await asyncio.gather(*(chat(k) for k in range(32)))
    reference: CompiledStateGraph[Any] = chat_graph(SF).compile(checkpointer=InMemorySaver())
    for k, state in enumerate(states):
        for turn in range(3):
            reference.invoke({"messages": [human(100 * k + turn)]}, cfg(f"chat-{k}"))
        assert state == observe(reference.get_state(cfg(f"chat-{k}")))
    report = await asyncio.to_thread(saver.verify)
    assert report.ok, report.problems


@pytest.mark.timeout(120)
@pytest.mark.parametrize("group_commit", [True, False])
def test_group_commit_shares_transactions(
    group_commit: bool, make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """R8: with group commit, 16 concurrent writers share fsync'd transactions (fewer commits than puts) and every put that returned is stored; without it, one commit per put."""
    saver = make_saver(group_commit=group_commit)
    before = saver.env.commits.stats()
    work = Work()
    threads = [threading.Thread(target=_n_puts, args=(saver, f"t{k}", 30, work)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not work.errors, work.errors
    after = saver.env.commits.stats()
    commits = after.batches - before.batches
    assert after.ops - before.ops == len(work.tagged) == 16 * 30
    for thread_id, cid, _, seq in work.tagged:
        found = saver.get_tuple(at(thread_id, cid))
        assert found is not None and found.checkpoint["channel_values"]["payload"]["seq"] == seq
    print(f"\ngroup_commit={group_commit}: {len(work.tagged)} puts in {commits} commits")
    if group_commit:
        assert commits < len(work.tagged) * 0.8, "concurrent puts should share commits"
    else:
        assert after.largest == 1


def _n_puts(saver: DeltaLogSaver, thread_id: str, n: int, work: Work) -> None:
    def run() -> None:
        parent: RunnableConfig | None = None
        for seq in range(n):
            parent = put_tagged(saver, thread_id, thread_id, seq, parent)
            work.tagged.append((thread_id, checkpoint_id(parent), thread_id, seq))

    _guard(work, run)


class _Interrupted(Exception):
    """Raised by the test's signal handler in a caller waiting for its commit."""


def _batches_since(store: Any, before: GroupCommitStats) -> list[int]:
    """Sizes of the batches ``store`` ran since ``before`` (at most RECENT_BATCHES of them)."""
    now = store.commits.stats()
    assert now.batches - before.batches <= RECENT_BATCHES
    return list(now.recent[len(now.recent) - (now.batches - before.batches) :])


def _queue_reaches(store: Any, n: int) -> Callable[[], bool]:
    return lambda: store.commits.state().queued >= n


def _waits_for(condition: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


class _Gates:
    """Named gates for ops that hold a batch: :meth:`op` marks its name entered, then
    blocks until the gate is opened."""

    def __init__(self, *names: str) -> None:
        self.gates = {name: threading.Event() for name in names}
        self.entered = {name: threading.Event() for name in names}

    def op(self, name: str) -> Callable[[Any], None]:
        def blocking(w: Any) -> None:
            self.entered[name].set()
            assert self.gates[name].wait(30)

        return blocking

    def open_all(self) -> None:
        for gate in self.gates.values():
            gate.set()


@dataclass
class _LastBatch:
    """Threads of :func:`_last_batch_waiting`; ``put`` gets the leading put's config."""

    first: threading.Thread
    leader: threading.Thread
    sleeper: threading.Thread
    put: list[RunnableConfig]


def _last_batch_waiting(saver: DeltaLogSaver, gates: _Gates) -> _LastBatch:
    """A write held in gate "first", and queued behind it a batch of a put (whose caller
    leads it) and an op held in gate "shared" (whose caller sleeps until the batch's
    callers are woken); "first" is then opened. Returns once the batch runs "shared"."""
    store = saver.env
    put: list[RunnableConfig] = []
    first = threading.Thread(target=store.write, args=(gates.op("first"),))
    first.start()
    assert gates.entered["first"].wait(20)
    leader = threading.Thread(target=lambda: put.append(put_tagged(saver, "lead", "l", 0, None)))
    leader.start()
    assert _waits_for(lambda: store.commits.state().queued == 1)
    sleeper = threading.Thread(target=store.write, args=(gates.op("shared"),))
    sleeper.start()
    assert _waits_for(lambda: store.commits.state().queued == 2)
    gates.gates["first"].set()
    assert gates.entered["shared"].wait(20)
    return _LastBatch(first, leader, sleeper, put)


def _write_interrupted(
    store: Any,
    op: Callable[[Any], None],
    signal_when_ready: Callable[[], None],
    on_signal: Callable[[], None],
    release: Callable[[], None],
) -> None:
    """``store.write(op)`` on the main thread, interrupted while it waits by SIGUSR1 (as by
    KeyboardInterrupt): a helper thread runs ``signal_when_ready``, which sends it; the
    handler runs ``on_signal`` and raises. ``release`` runs afterwards in any case."""

    def handler(signum: int, frame: Any) -> None:
        on_signal()
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    helper = threading.Thread(target=signal_when_ready)
    try:
        helper.start()
        with pytest.raises(_Interrupted):
            store.write(op)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        release()
        helper.join(30)
    assert not helper.is_alive(), "the signalling thread stalled"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("made_leader", [False, True])
def test_interrupted_waiter_does_not_stall_group_commit(
    made_leader: bool, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """A caller interrupted while it waits for its commit (KeyboardInterrupt, here another
    signal) withdraws its write: queued, it never runs; made the next leader, it passes the
    lead on. Either way the writers queued behind it finish."""
    saver = make_saver()
    store = saver.env
    gate, entered = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocking(w: Any) -> None:  # holds the lead until the gate opens
        entered.set()
        assert gate.wait(20)

    def mine(w: Any) -> None:
        ran.append("interrupted caller's op")

    leader = threading.Thread(target=store.write, args=(blocking,))
    leader.start()
    assert entered.wait(20)
    behind: list[RunnableConfig] = []

    def follow() -> None:  # queue a put behind the main thread's request, then signal it
        _waits_for(_queue_reaches(store, 1))
        putter = threading.Thread(
            target=lambda: behind.append(put_tagged(saver, "behind", "b", 0, None))
        )
        putter.start()
        _waits_for(_queue_reaches(store, 2))
        os.kill(os.getpid(), signal.SIGUSR1)
        putter.join(20)

    def on_signal() -> None:
        if made_leader:  # let the leader finish and hand the lead to this waiter first
            gate.set()
            _waits_for(lambda: store.commits.state().next_op is not None)
            assert store.commits.state().next_op is mine

    try:
        _write_interrupted(store, mine, follow, on_signal, release=gate.set)
    finally:
        gate.set()
        leader.join(30)
    assert not leader.is_alive(), "a writer queued behind stalled"
    assert len(behind) == 1 and saver.get_tuple(behind[0]) is not None
    assert ran == []
    assert store.commits.idle()


@pytest.mark.timeout(120)
def test_a_withdrawn_next_leader_wakes_the_batch_left_to_it(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A leader with a successor leaves its batch's callers to it: it wakes them once its
    own ops ran (GroupCommit._lead). A successor interrupted before it starts, with no one queued
    behind it, wakes them itself; a caller of that batch never waits for a later write."""
    saver = make_saver()
    store = saver.env
    gates = _Gates("first", "shared")
    ran: list[str] = []

    def mine(w: Any) -> None:
        ran.append("interrupted caller's op")

    last = _last_batch_waiting(saver, gates)

    def signal_when_queued() -> None:  # the main thread's write, queued for the next batch
        if _waits_for(lambda: store.commits.state().queued == 1):
            os.kill(os.getpid(), signal.SIGUSR1)

    def on_signal() -> None:
        gates.gates["shared"].set()  # the batch commits and makes this waiter the next leader
        assert _waits_for(lambda: store.commits.state().next_op is mine)

    _write_interrupted(store, mine, signal_when_queued, on_signal, release=gates.open_all)
    last.sleeper.join(20)
    assert not last.sleeper.is_alive(), "a caller of the last batch was never woken"
    last.leader.join(20)
    last.first.join(20)
    assert len(last.put) == 1 and saver.get_tuple(last.put[0]) is not None
    assert ran == []
    assert store.commits.idle()


@pytest.mark.timeout(60)
def test_a_failing_op_fails_alone_and_leaves_nothing_in_its_batch(
    make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ops of a batch share one transaction: one that writes and then raises fails its
    own caller, none of what it wrote is stored, and the other ops of the batch commit."""
    saver = make_saver()
    store = saver.env
    before = store.commits.stats()
    gate, entered = threading.Event(), threading.Event()

    def blocking(w: Any) -> None:  # holds the lead while the batch queues behind it
        entered.set()
        assert gate.wait(20)

    def half_then_fail(w: Any) -> None:
        w.put_raw(store.db("meta"), b"half-written", b"x")
        raise ValueError("bad op")

    first = threading.Thread(target=store.write, args=(blocking,))
    first.start()
    assert entered.wait(20)
    puts: dict[str, RunnableConfig] = {}
    errors: list[BaseException] = []

    def failing() -> None:
        try:
            store.write(half_then_fail)
        except ValueError as exc:
            errors.append(exc)

    writers = [
        threading.Thread(target=lambda: puts.update(a=put_tagged(saver, "a", "a", 0, None))),
        threading.Thread(target=failing),
        threading.Thread(target=lambda: puts.update(c=put_tagged(saver, "c", "c", 0, None))),
    ]
    for k, writer in enumerate(writers, 1):  # queued in this order, one at a time
        writer.start()
        assert _waits_for(_queue_reaches(store, k))
    gate.set()
    for writer in [first, *writers]:
        writer.join(20)
    assert _batches_since(store, before)[:2] == [1, 3], "the three writes did not share one batch"
    assert [str(e) for e in errors] == ["bad op"]
    assert saver.get_tuple(puts["a"]) is not None and saver.get_tuple(puts["c"]) is not None
    assert [k for k, _ in store.iter_db("meta", b"half-written")] == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("slow_kind", ["maintenance", "after WAKE_AFTER"])
def test_a_committed_caller_does_not_wait_for_the_next_batchs_long_op(
    slow_kind: str, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """The next leader wakes the last batch's callers after its own ops, but earlier
    before an op that may run long (not history-safe: maintenance) or once its ops ran
    WAKE_AFTER: a caller whose write is durable returns while the next batch still runs."""
    saver = make_saver()
    store = saver.env
    gates = _Gates("first", "shared", "slow")
    last = _last_batch_waiting(saver, gates)
    # Queued behind that batch, so its caller leads next and inherits the batch to wake.
    maintenance = slow_kind == "maintenance"
    slow_ops = [] if maintenance else [lambda w: time.sleep(0.05)]
    slow_ops.append(gates.op("slow"))
    writers = [
        threading.Thread(target=store.write, args=(op,), kwargs={"history_safe": not maintenance})
        for op in slow_ops
    ]
    for k, writer in enumerate(writers, 1):
        writer.start()
        assert _waits_for(_queue_reaches(store, k))
    try:
        gates.gates["shared"].set()
        assert gates.entered["slow"].wait(20)
        last.sleeper.join(10)
        assert not last.sleeper.is_alive(), "a durable write waited for the next batch's slow op"
    finally:
        gates.open_all()
        for t in (last.first, last.leader, last.sleeper, *writers):
            t.join(20)
    assert store.commits.idle()


@pytest.mark.timeout(120)
def test_callers_woken_in_turn_skip_one_that_stopped_waiting(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """The callers of a batch are woken one after another, each waking the next. One
    interrupted while its batch waited to be woken (its write is durable; it raises)
    is skipped: the callers after it still wake, none waits for a later write."""
    saver = make_saver()
    store = saver.env
    gates = _Gates("first", "shared", "slow")
    withdrawn = threading.Event()

    def mine(w: Any) -> None:
        w.put_raw(store.db("meta"), b"interrupted caller's op", b"x")

    done: dict[str, RunnableConfig] = {}
    first = threading.Thread(target=store.write, args=(gates.op("first"),))
    leader = threading.Thread(target=lambda: done.update(l=put_tagged(saver, "l", "l", 0, None)))
    before = threading.Thread(target=store.write, args=(gates.op("shared"),))
    after = threading.Thread(target=lambda: done.update(c=put_tagged(saver, "c", "c", 0, None)))
    slow = threading.Thread(
        target=store.write, args=(gates.op("slow"),), kwargs={"history_safe": True}
    )

    def orchestrate() -> None:  # the main thread's write is queued third, as "mine"
        try:
            assert _waits_for(_queue_reaches(store, 3))
            after.start()
            assert _waits_for(_queue_reaches(store, 4))
            gates.gates["first"].set()  # the leader's batch: its put, before, mine, after
            assert gates.entered["shared"].wait(20)
            slow.start()  # queued during that batch: leads next, wakes it after its op
            assert _waits_for(_queue_reaches(store, 1))
            gates.gates["shared"].set()
            assert gates.entered["slow"].wait(20)
            os.kill(os.getpid(), signal.SIGUSR1)  # mine is done, not yet woken
            assert withdrawn.wait(20)
        finally:
            gates.open_all()

    first.start()
    assert gates.entered["first"].wait(20)
    leader.start()
    assert _waits_for(_queue_reaches(store, 1))
    before.start()
    assert _waits_for(_queue_reaches(store, 2))
    _write_interrupted(store, mine, orchestrate, on_signal=lambda: None, release=withdrawn.set)
    for t in (first, leader, before, slow):
        t.join(20)
    after.join(10)
    assert not after.is_alive(), "a caller chained after the interrupted one was never woken"
    assert saver.get_tuple(done["c"]) is not None and saver.get_tuple(done["l"]) is not None
    assert [k for k, _ in store.iter_db("meta", b"interrupted")] == [b"interrupted caller's op"]
    assert store.commits.idle()


async def _aput_chain(saver: DeltaLogSaver, thread_id: str, n: int) -> list[tuple[str, int]]:
    """n async puts on a chain; (checkpoint id, seq) of each."""
    out: list[tuple[str, int]] = []
    parent: RunnableConfig | None = None
    for seq in range(n):
        config = parent or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        parent = await saver.aput(config, *tagged_checkpoint(saver, "a", seq))
        out.append((checkpoint_id(parent), seq))
    return out


@pytest.mark.timeout(120)
async def test_async_writes_share_commits_without_a_thread_each(
    make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """R8: concurrent coroutines' puts are queued (Environment.submit) and share commits; no thread
    waits per pending write (the process gains at most the store's one lead thread), and every
    put that returned is stored."""
    saver = make_saver()
    before = saver.env.commits.stats()
    baseline = threading.active_count()
    peak = [baseline]
    running = True

    async def sample() -> None:
        while running:
            peak[0] = max(peak[0], threading.active_count())
            await asyncio.sleep(0.001)

    sampler = asyncio.create_task(sample())
    chains = await asyncio.gather(*(_aput_chain(saver, f"a{k}", 20) for k in range(64)))
    running = False
    await sampler
    puts = sum(len(c) for c in chains)
    after = saver.env.commits.stats()
    commits = after.batches - before.batches
    assert puts == 64 * 20 == after.ops - before.ops
    assert commits < puts * 0.5, f"{puts} puts took {commits} commits"
    assert peak[0] <= baseline + 1, f"{peak[0] - baseline} threads were started for the writes"
    for k, chain in enumerate(chains):
        for cid, seq in chain:
            found = saver.get_tuple(at(f"a{k}", cid))
            assert found is not None and found.checkpoint["channel_values"]["payload"]["seq"] == seq
    print(f"\n{puts} aput in {commits} commits, {peak[0] - baseline} thread(s) started")


@pytest.mark.timeout(120)
async def test_async_and_thread_writers_on_one_saver(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Thread callers (which lead their own batches) and queued coroutine callers (led by the
    lead thread) mixed on one store: nothing stalls, nothing is lost."""
    saver = make_saver()
    work = Work()
    threads = [threading.Thread(target=_n_puts, args=(saver, f"t{k}", 40, work)) for k in range(8)]
    for t in threads:
        t.start()
    chains = await asyncio.gather(*(_aput_chain(saver, f"a{k}", 40) for k in range(16)))
    for t in threads:
        await asyncio.to_thread(t.join, 60)
    assert not work.errors, work.errors
    assert len(work.tagged) == 8 * 40 and sum(len(c) for c in chains) == 16 * 40
    for thread_id, cid, _, seq in work.tagged:
        found = saver.get_tuple(at(thread_id, cid))
        assert found is not None and found.checkpoint["channel_values"]["payload"]["seq"] == seq
    for k, chain in enumerate(chains):
        for cid, _seq in chain:
            assert saver.get_tuple(at(f"a{k}", cid)) is not None
    assert saver.env.commits.idle()


@pytest.mark.timeout(60)
async def test_async_write_errors_reach_only_their_coroutine(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """An op that fails inside the shared transaction fails its own coroutine; the other
    writes of the batch commit; a cancelled coroutine's write still commits and nothing
    raises afterwards; a caller that cannot be told (its loop closed) does not stop the
    leader from telling the others."""
    saver = make_saver()

    def boom(w: Any) -> None:
        raise ValueError("bad op")

    results = await asyncio.gather(
        saver._in_writer(boom),
        *(_aput_chain(saver, f"ok{k}", 3) for k in range(8)),
        return_exceptions=True,
    )
    assert isinstance(results[0], ValueError)
    assert all(isinstance(r, list) and len(r) == 3 for r in results[1:])

    task = asyncio.ensure_future(_aput_chain(saver, "cancelled", 1))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(await _aput_chain(saver, "after", 5)) == 5

    told: list[Any] = []

    def unreachable(error: BaseException | None, value: Any) -> None:
        raise RuntimeError("Event loop is closed")

    saver.env.submit(lambda w: told.append("ran"), unreachable)
    assert len(await _aput_chain(saver, "after-closed-loop", 3)) == 3
    assert told == ["ran"]
