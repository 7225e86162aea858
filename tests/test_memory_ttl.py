"""Memory TTL: expired items are never returned, reads refresh, sweeps delete in bounded commits (issue 17)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogStore, memory_io
from langgraph.store.base import PutOp


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_expired_never_returned_before_sweep(tmp_path: Path) -> None:
    """An expired item is gone from get, search and list_namespaces before any sweep."""
    clock = Clock()
    with DeltaLogStore.from_path(tmp_path / "m", clock=clock) as s:
        s.put(("t",), "short", {"v": 1}, ttl=1)
        s.put(("t",), "forever", {"v": 2}, ttl=None)
        s.put(("gone",), "k", {"v": 3}, ttl=1)
        clock.now += 59
        assert s.get(("t",), "short", refresh_ttl=False) is not None
        clock.now += 1
        assert s.get(("t",), "short") is None
        assert [i.key for i in s.search(("t",))] == ["forever"]
        assert s.list_namespaces() == [("t",)]
        assert s.sweep_ttl() == 2
        assert s.sweep_ttl() == 0


def test_default_ttl_and_refresh_on_read(tmp_path: Path) -> None:
    """default_ttl applies to puts; get and search results push the expiry out."""
    clock = Clock()
    ttl = {"default_ttl": 2.0, "refresh_on_read": True}
    with DeltaLogStore.from_path(tmp_path / "m", clock=clock, ttl=ttl) as s:  # type: ignore[arg-type]
        s.put(("t",), "a", {"v": 1})
        s.put(("t",), "b", {"v": 2})
        s.put(("t",), "c", {"v": 3})
        for _ in range(5):  # 5 x 100 s > 120 s, but every read refreshes
            clock.now += 100
            assert s.get(("t",), "a") is not None
            assert {i.key for i in s.search(("t",), filter={"v": 2})} == {"b"}
        assert s.get(("t",), "c", refresh_ttl=False) is None  # never read: expired
        clock.now += 100
        assert s.get(("t",), "a", refresh_ttl=False) is not None
        clock.now += 21
        assert s.get(("t",), "a") is None


def test_refresh_off_by_config(tmp_path: Path) -> None:
    """refresh_on_read=False: reads do not extend the expiry."""
    clock = Clock()
    ttl = {"default_ttl": 1.0, "refresh_on_read": False}
    with DeltaLogStore.from_path(tmp_path / "m", clock=clock, ttl=ttl) as s:  # type: ignore[arg-type]
        s.put(("t",), "a", {"v": 1})
        clock.now += 50
        assert s.get(("t",), "a") is not None
        clock.now += 10
        assert s.get(("t",), "a") is None


def test_reput_moves_expiry(tmp_path: Path) -> None:
    """A re-put sets a new expiry; the old TTL index entry does not delete it."""
    clock = Clock()
    with DeltaLogStore.from_path(tmp_path / "m", clock=clock) as s:
        s.put(("t",), "a", {"v": 1}, ttl=1)
        clock.now += 30
        s.put(("t",), "a", {"v": 2}, ttl=10)
        clock.now += 60
        assert s.sweep_ttl() == 0
        item = s.get(("t",), "a")
        assert item is not None and item.value == {"v": 2}


def test_sweep_runs_in_bounded_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep of many items commits in chunks and returns the full count."""
    monkeypatch.setattr(memory_io, "SWEEP_CHUNK", 7)
    monkeypatch.setattr(memory_io.MemoryWriter.sweep, "__defaults__", (7,))
    clock = Clock()
    with DeltaLogStore.from_path(tmp_path / "m", clock=clock) as s:
        s.batch([PutOp(("t",), f"k{i}", {"i": i}, ttl=1) for i in range(30)])
        clock.now += 61
        env = s.env.env
        before = env.info()["last_txnid"]
        assert s.sweep_ttl() == 30
        assert env.info()["last_txnid"] - before >= 5  # ceil(30 / 7) commits
        assert s.search(("t",)) == []


def test_sweeper_thread_and_task(tmp_path: Path) -> None:
    """start/stop_ttl_sweeper (thread) and astart/astop_ttl_sweeper (task) delete expired items."""
    clock = Clock()
    with DeltaLogStore.from_path(tmp_path / "m", clock=clock) as s:
        s.put(("t",), "a", {"v": 1}, ttl=1)
        clock.now += 61
        done = s.start_ttl_sweeper(sweep_interval_minutes=0.001)  # 60 ms
        deadline = time.monotonic() + 10
        while _has_items(s) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.stop_ttl_sweeper(timeout=5)
        assert done.done()
        assert not _has_items(s)

        async def run() -> None:
            s.put(("t",), "b", {"v": 1}, ttl=1)
            clock.now += 61
            task = await s.astart_ttl_sweeper(sweep_interval_minutes=0.001)
            for _ in range(200):
                if not _has_items(s):
                    break
                await asyncio.sleep(0.02)
            assert await s.astop_ttl_sweeper(timeout=5)
            assert task.done()

        asyncio.run(run())
        assert not _has_items(s)


def _has_items(s: DeltaLogStore) -> bool:
    with s.env.read() as r:
        return bool(r.txn.stat(s.env.db("items"))["entries"])


def test_upstream_async_sweeper_calls(tmp_path: Path) -> None:
    """`await store.start_ttl_sweeper()` / `await store.stop_ttl_sweeper()` work as on the async upstream stores."""
    clock = Clock()

    async def run(s: DeltaLogStore) -> None:
        s.put(("t",), "a", {"v": 1}, ttl=1)
        clock.now += 61
        fut = await s.start_ttl_sweeper(sweep_interval_minutes=0.001)
        for _ in range(200):
            if not _has_items(s):
                break
            await asyncio.sleep(0.02)
        assert await s.stop_ttl_sweeper(timeout=5) is True
        assert fut.done()
        await s.setup()
        s.put(("t",), "b", {"v": 1}, ttl=1)
        clock.now += 61
        assert await s.sweep_ttl() == 1

    with DeltaLogStore.from_path(tmp_path / "m", clock=clock) as s:
        asyncio.run(run(s))
        assert not _has_items(s)
        assert s.stop_ttl_sweeper() == True  # noqa: E712 (a Stopped compares as the bool)


def test_readonly_reads_do_not_refresh(tmp_path: Path) -> None:
    """A read-only open reads TTL items without writing a refresh."""
    from deltalog.engine.env import Environment

    clock = Clock()
    with DeltaLogStore.from_path(tmp_path / "m", clock=clock) as s:
        s.put(("t",), "a", {"v": 1}, ttl=10)
    ro = Environment(tmp_path / "m", readonly=True)
    try:
        mem = DeltaLogStore(ro, clock=clock)
        assert mem.get(("t",), "a") is not None
        assert len(mem.search(("t",))) == 1
    finally:
        ro.close()
