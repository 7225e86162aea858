"""Crash safety: a writer running a real chat graph is SIGKILLed at random moments (R8).

The victim is ``tests/crash_writer.py`` (see its docstring for the log format).
One store is reused across every kill so it grows like a real one. After each
kill the test opens the store, runs ``verify()``, and checks the log: every
checkpoint whose ``put`` returned is present, every logged state is rebuilt
exactly, and each thread's history is one unbroken chain whose newest state
extends the last logged one — so no partial checkpoint is visible.

``DELTALOG_CRASH_KILLS`` raises the number of kills for a longer run (the
default, 100, is what CI runs); ``DELTALOG_CRASH_SEED`` replays a run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from langgraph.graph.state import CompiledStateGraph

from tests.crash_writer import fingerprint
from tests.graphs import cfg, chat_graph

WRITER = Path(__file__).with_name("crash_writer.py")
SF = 3  # snapshot_frequency of the writer's DeltaChannel: chains of seeds and deltas
KILLS = int(os.environ.get("DELTALOG_CRASH_KILLS", "100"))
# Every fourth run writes on four LangGraph threads at once, so kills also land
# inside group-committed batches.
THREADED_EVERY = 4


@dataclass
class CrashStats:
    """What the kill loop observed (printed; quoted in docs/reliability.md)."""

    kills: int = 0
    puts_logged: int = 0
    turns_logged: int = 0
    states_checked: int = 0
    runs_with_unlogged_commit: int = 0
    runs_without_put: int = 0
    seconds: float = 0.0
    checkpoints_at_end: int = 0
    chunks_at_end: int = 0
    """Chunks of the turn packs (format 16: the long replies they carry) at the end."""


@dataclass
class Ledger:
    """Everything the writers logged, across runs."""

    puts: list[tuple[str, str]] = field(default_factory=list)
    turns: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    tips: dict[str, str] = field(default_factory=dict)  # newest checkpoint checked, per thread


def read_log(path: Path) -> list[dict[str, Any]]:
    """Entries of one run's log; a line torn by the kill can only be the last one."""
    entries: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").split("\n") if path.exists() else []
    for n, line in enumerate(lines):
        if not line:
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            assert n == len(lines) - 1, f"{path}: torn line {n} is not the last one"
    return entries


def wait_ready(proc: subprocess.Popen[bytes], log: Path, errfile: Path) -> None:
    """Block until the writer logged ``ready`` (store open); fail if it died first."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"writer exited with {proc.returncode}: {errfile.read_text()[-2000:]}")
        if log.exists() and b'"ready"' in log.read_bytes():
            return
        time.sleep(0.01)
    proc.kill()
    pytest.fail("writer did not open the store within 60 s")


def assert_verified(saver: DeltaLogSaver) -> None:
    """verify() finds nothing wrong."""
    report = saver.verify()
    assert report.ok, [
        (p.kind, p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.detail) for p in report.problems
    ]


def check_store(
    path: Path,
    ledger: Ledger,
    new: list[dict[str, Any]],
    rng: random.Random,
    stats: CrashStats,
) -> None:
    """The post-kill checks of R8 (see the module docstring)."""
    with DeltaLogSaver.from_path(path) as saver:
        assert_verified(saver)
        graph: CompiledStateGraph[Any] = chat_graph(SF).compile(checkpointer=saver)
        new_puts = [(e["thread_id"], e["checkpoint_id"]) for e in new if e["kind"] == "put"]
        new_turns = [
            (e["thread_id"], e["checkpoint_id"], e["state"]) for e in new if e["kind"] == "turn"
        ]
        for thread_id, checkpoint_id in new_puts:
            config = cfg(thread_id, checkpoint_id=checkpoint_id)
            assert saver.get_tuple(config) is not None, f"returned put {checkpoint_id} lost"
        # Every state logged in this run, plus a sample of older ones (all at the end).
        sample = new_turns + rng.sample(ledger.turns, min(8, len(ledger.turns)))
        for thread_id, checkpoint_id, expected in sample:
            state = graph.get_state(cfg(thread_id, checkpoint_id=checkpoint_id))
            assert fingerprint(state.values) == expected, f"{thread_id}/{checkpoint_id} differs"
            stats.states_checked += 1
        ledger.puts.extend(new_puts)
        ledger.turns.extend(new_turns)
        threads = {t for t, _ in ledger.puts}
        logged = set(ledger.puts)
        for thread_id in threads:
            unlogged = check_chain(saver, graph, thread_id, ledger, logged)
            stats.runs_with_unlogged_commit += bool(unlogged and new_puts)


def check_chain(
    saver: DeltaLogSaver,
    graph: CompiledStateGraph[Any],
    thread_id: str,
    ledger: Ledger,
    logged: set[tuple[str, str]],
) -> int:
    """The history grew as one unbroken chain from the last checked tip, and its
    newest state extends the last logged one.

    Checkpoint ids are time-ordered and one writer owns the thread, so every
    checkpoint stored since the previous check is listed before that tip.
    Returns how many of them were committed but not logged (the kill landed
    between the commit and the log line): they must be whole too.
    """
    tip = ledger.tips.get(thread_id)
    new: list[tuple[str, str | None]] = []
    for t in saver.list(cfg(thread_id)):
        cid = t.config["configurable"]["checkpoint_id"]
        if cid == tip:
            break
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        new.append((cid, parent))
    else:
        assert tip is None, f"{thread_id}: the last checked checkpoint {tip} is gone"
    for i, (_, parent) in enumerate(new):
        older = new[i + 1][0] if i + 1 < len(new) else tip
        assert parent == older, f"{thread_id}: history forked or lost a link at {older}"
    if new:
        ledger.tips[thread_id] = new[0][0]
    latest = graph.get_state(cfg(thread_id))
    last_turn = [s for t, _, s in ledger.turns if t == thread_id][-1:]
    if last_turn:
        ids = [m.id for m in latest.values["messages"]]
        expected = [m[0] for m in last_turn[0]["messages"]]
        assert ids[: len(expected)] == expected, f"{thread_id}: newest state lost messages"
    return sum((thread_id, c) not in logged for c, _ in new)


def start_writer(
    store: Path, log: Path, errfile: Path, threads: int, durable: str, use_async: bool = False
) -> subprocess.Popen[bytes]:
    """Start a writer that imports, then waits for a line on stdin before opening the store."""
    argv = [sys.executable, str(WRITER), str(store), str(log), "--threads", str(threads)]
    argv += ["--sf", str(SF), "--wait", "--durable", durable]
    argv += ["--async"] if use_async else []
    with errfile.open("wb") as err:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)


def kill_loop(
    tmp_path: Path, kills: int, *, durable: str = "true", use_async: bool = False
) -> CrashStats:
    """Start, randomly kill and check the writer ``kills`` times on one store.

    The next writer is started (and imports) while the previous kill is
    checked; it opens the store only after the check, so every check sees the
    store exactly as the kill left it.
    """
    seed = int(os.environ.get("DELTALOG_CRASH_SEED", random.randrange(2**32)))
    print(f"crash loop seed {seed} (DELTALOG_CRASH_SEED={seed} replays it)")
    rng = random.Random(seed)
    store = tmp_path / "crash.lmdb"
    ledger = Ledger()
    stats = CrashStats()
    start = time.monotonic()

    def paths(run: int) -> tuple[Path, Path, int]:
        threads = 4 if run % THREADED_EVERY == THREADED_EVERY - 1 else 1
        return tmp_path / f"run-{run}.jsonl", tmp_path / f"run-{run}.err", threads

    log, errfile, threads = paths(0)
    proc = start_writer(store, log, errfile, threads, durable, use_async)
    for run in range(kills):
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.close()
            wait_ready(proc, log, errfile)
            time.sleep(rng.uniform(0.05, 0.6))
            if proc.poll() is not None:
                pytest.fail(f"writer died by itself: {errfile.read_text()[-2000:]}")
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        stats.kills += 1
        entries = read_log(log)
        if run + 1 < kills:
            next_log, next_err, next_threads = paths(run + 1)
            next_proc = start_writer(store, next_log, next_err, next_threads, durable, use_async)
        try:
            puts = sum(e["kind"] == "put" for e in entries)
            stats.puts_logged += puts
            stats.turns_logged += sum(e["kind"] == "turn" for e in entries)
            stats.runs_without_put += puts == 0
            check_store(store, ledger, entries, rng, stats)
        except BaseException:
            if run + 1 < kills:
                next_proc.kill()
                next_proc.wait()
            raise
        if run + 1 < kills:
            log, errfile, proc = next_log, next_err, next_proc
    # The last, complete check: every state ever logged, and every put.
    with DeltaLogSaver.from_path(store) as saver:
        assert_verified(saver)
        stats.chunks_at_end = sum(len(key) > 8 for key, _ in saver.env.iter_db("packs"))
        graph: CompiledStateGraph[Any] = chat_graph(SF).compile(checkpointer=saver)
        for thread_id, checkpoint_id in ledger.puts:
            assert saver.get_tuple(cfg(thread_id, checkpoint_id=checkpoint_id)) is not None
        for thread_id, checkpoint_id, expected in ledger.turns:
            state = graph.get_state(cfg(thread_id, checkpoint_id=checkpoint_id))
            assert fingerprint(state.values) == expected
            stats.states_checked += 1
        for thread_id in {t for t, _ in ledger.puts}:
            parents = [
                (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
                for t in saver.list(cfg(thread_id))
            ]
            stats.checkpoints_at_end += len(parents)
            # One root, and every other checkpoint is the child of the next older one.
            assert parents.count(None) == 1 and len(set(parents)) == len(parents)
    stats.seconds = time.monotonic() - start
    print(stats)
    return stats


@pytest.mark.stress
@pytest.mark.timeout(600)
def test_sigkill_loses_no_returned_put(tmp_path: Path) -> None:
    """R8: after each of ≥100 SIGKILLs the store opens, verifies clean, keeps every returned put and rebuilds every logged state; no partial checkpoint is visible."""
    stats = kill_loop(tmp_path, KILLS)
    assert stats.kills == KILLS
    # The kills must land while checkpoints are being written, not only at start-up.
    assert stats.puts_logged > KILLS
    assert stats.runs_without_put < KILLS // 2
    assert stats.chunks_at_end > 0  # kills landed where packs carry long replies


@pytest.mark.stress
@pytest.mark.timeout(300)
@pytest.mark.parametrize("durable", ["normal", "false"])
def test_relaxed_durability_survives_process_kill(tmp_path: Path, durable: str) -> None:
    """R8 with durable="normal" or False: a killed *process* still loses no returned put (the OS page cache holds the commit and its meta page); only an OS crash or power loss may drop the last commit(s)."""
    stats = kill_loop(tmp_path, max(20, KILLS // 5), durable=durable)
    assert stats.puts_logged > stats.kills


@pytest.mark.stress
@pytest.mark.timeout(300)
def test_sigkill_loses_no_returned_aput(tmp_path: Path) -> None:
    """R8 through the async path: writers on coroutines (``ainvoke``, so ``aput`` queues its
    write for group commit and awaits its future) lose no put that returned to them."""
    kills = max(20, KILLS // 4)
    stats = kill_loop(tmp_path, kills, use_async=True)
    assert stats.kills == kills
    assert stats.puts_logged > kills
    assert stats.runs_without_put < kills // 2
