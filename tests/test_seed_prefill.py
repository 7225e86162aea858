"""A seed a put has just written is decoded ahead, off the reader's path (DecodedCache.prefill).

The serde below counts its decodes of seeds (``_DeltaSnapshot`` values) and can
hold or fail the one that runs on the prefill thread, so each test sees who
decoded a seed: the reader, or the prefill before it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver, codec
from deltalog.engine import cache as cache_mod
from deltalog.engine.cache import PREFILL_MAX, DecodedCache
from deltalog.engine.values import seed_like
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph.state import CompiledStateGraph

from tests.graphs import cfg, chat_graph, human, observe

# sf=4 and two updates a turn: turns 2, 4, 6, ... write a seed; by turn 6 it
# holds ~8 KB of messages, above the sizes the cache and the blob store keep.
SF = 4
TURNS = 8


class SeedCountingSerde(JsonPlusSerializer):
    """Counts seed decodes; optionally fails or holds the one on the prefill thread."""

    def __init__(self) -> None:
        super().__init__()
        self.seed_loads: list[str] = []
        self.fail_prefill = False
        self.hold_prefill = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if seed_like(data):
            name = threading.current_thread().name
            self.seed_loads.append(name)
            if name == "deltalog-prefill":
                if self.fail_prefill:
                    raise RuntimeError("a prefill that fails")
                if self.hold_prefill:
                    self.entered.set()
                    assert self.release.wait(30)
        return super().loads_typed(data)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _idle(saver: DeltaLogSaver) -> None:
    """Wait until no prefill is queued or running."""
    _wait_for(lambda: not saver.cache._prefills, "the queued prefills")


def _chat(saver: BaseCheckpointSaver[Any], turns: int) -> CompiledStateGraph[Any]:
    """The chat graph on ``saver``, after ``turns`` turns of thread "t"."""
    graph = chat_graph(SF).compile(checkpointer=saver)
    for turn in range(turns):
        graph.invoke({"messages": [human(turn)]}, cfg("t"))
    return graph


@functools.cache
def _expected(turns: int) -> dict[str, Any]:
    """What InMemorySaver's ``get_state`` shows after ``turns`` turns (compared, never changed)."""
    return observe(_chat(InMemorySaver(), turns).get_state(cfg("t")))


def test_the_seed_of_the_last_turn_is_read_from_the_prefill(tmp_path: Path) -> None:
    """After a pause, the first read of a seed written by the last turn is a copy of
    what the prefill decoded: the serde decodes it once, on the prefill thread."""
    serde = SeedCountingSerde()
    with DeltaLogSaver.from_path(tmp_path / "s", serde=serde) as saver:
        graph = _chat(saver, TURNS)
        _wait_for(lambda: saver.cache.prefilled >= 1, "the prefill of the last seed")
        _idle(saver)
        serde.seed_loads.clear()
        assert observe(graph.get_state(cfg("t"))) == _expected(TURNS)
        assert serde.seed_loads == []
        # Each reader gets its own copy: changing one changes no later read.
        graph.get_state(cfg("t")).values["messages"].clear()
        assert observe(graph.get_state(cfg("t"))) == _expected(TURNS)


def test_an_async_put_prefills_too(tmp_path: Path) -> None:
    serde = SeedCountingSerde()

    async def run() -> dict[str, Any]:
        async with DeltaLogSaver.from_path(tmp_path / "s", serde=serde) as saver:
            graph = chat_graph(SF).compile(checkpointer=saver)
            for turn in range(TURNS):
                await graph.ainvoke({"messages": [human(turn)]}, cfg("t"))
            await asyncio.to_thread(
                _wait_for, lambda: saver.cache.prefilled >= 1, "the prefill of the last seed"
            )
            await asyncio.to_thread(_idle, saver)
            serde.seed_loads.clear()
            return observe(await graph.aget_state(cfg("t")))

    assert asyncio.run(run()) == _expected(TURNS)
    assert serde.seed_loads == []


def test_a_reader_before_the_delay_decodes_the_seed_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that comes before the prefill starts takes the decode over (and caches
    it); the prefill then does nothing."""
    monkeypatch.setattr(cache_mod, "PREFILL_DELAY", 1.0)
    serde = SeedCountingSerde()
    with DeltaLogSaver.from_path(tmp_path / "s", serde=serde) as saver:
        graph = _chat(saver, TURNS - 1)
        _idle(saver)
        prefilled = saver.cache.prefilled
        graph.invoke({"messages": [human(TURNS - 1)]}, cfg("t"))
        serde.seed_loads.clear()
        assert observe(graph.get_state(cfg("t"))) == _expected(TURNS)
        assert serde.seed_loads == ["MainThread"]
        _idle(saver)
        time.sleep(1.2)  # past the due time: the prefill found its job taken
        assert saver.cache.prefilled == prefilled
        assert observe(graph.get_state(cfg("t"))) == _expected(TURNS)
        assert serde.seed_loads == ["MainThread"]


def test_a_reader_during_the_prefill_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that comes while the prefill decodes the seed waits for its result
    instead of decoding the seed a second time."""
    monkeypatch.setattr(cache_mod, "PREFILL_DELAY", 0.0)
    serde = SeedCountingSerde()
    with DeltaLogSaver.from_path(tmp_path / "s", serde=serde) as saver:
        graph = _chat(saver, TURNS - 1)
        _idle(saver)
        serde.hold_prefill = True
        graph.invoke({"messages": [human(TURNS - 1)]}, cfg("t"))
        assert serde.entered.wait(20)
        serde.seed_loads.clear()
        seen: list[dict[str, Any]] = []
        reader = threading.Thread(target=lambda: seen.append(observe(graph.get_state(cfg("t")))))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and serde.seed_loads == []
        serde.release.set()
        reader.join(20)
        assert seen == [_expected(TURNS)]
        assert serde.seed_loads == []
        assert saver.cache.prefilled >= 1


def test_a_failed_prefill_leaves_the_decode_to_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_mod, "PREFILL_DELAY", 0.0)
    serde = SeedCountingSerde()
    with DeltaLogSaver.from_path(tmp_path / "s", serde=serde) as saver:
        graph = _chat(saver, TURNS - 1)
        _idle(saver)
        serde.fail_prefill = True
        prefilled = saver.cache.prefilled
        graph.invoke({"messages": [human(TURNS - 1)]}, cfg("t"))
        _wait_for(lambda: "deltalog-prefill" in serde.seed_loads, "the prefill")
        _idle(saver)
        serde.seed_loads.clear()
        assert observe(graph.get_state(cfg("t"))) == _expected(TURNS)
        assert serde.seed_loads == ["MainThread"]
        assert saver.cache.prefilled == prefilled


def test_no_prefill_without_the_cache(tmp_path: Path) -> None:
    serde = SeedCountingSerde()
    with DeltaLogSaver.from_path(tmp_path / "s", serde=serde, cache_bytes=0) as saver:
        graph = _chat(saver, TURNS)
        time.sleep(0.1)
        assert "deltalog-prefill" not in serde.seed_loads
        assert saver.cache.prefilled == 0
        assert observe(graph.get_state(cfg("t"))) == _expected(TURNS)


def test_prefill_queues_only_what_a_read_would_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not when the cache is off, for a small value, for a record cached or queued
    already, nor beyond PREFILL_MAX waiting at once."""
    monkeypatch.setattr(cache_mod, "PREFILL_DELAY", 1.0)
    big = b"x" * 4096

    def decode(record: bytes) -> bytes:
        return bytes(record[:4])

    assert not DecodedCache(max_bytes=0).prefill(big, decode)
    cache = DecodedCache()
    assert not cache.prefill(big, decode)  # it served no read yet: nobody reads
    assert not cache.prefill(b"x" * 100, decode)
    for _ in range(2):  # cached on its second decode
        cache.load(big, decode)
    assert not cache.prefill(big, decode)
    records = [i.to_bytes(4, "big") * 1024 for i in range(PREFILL_MAX + 1)]
    assert [cache.prefill(r, decode) for r in records] == [True] * PREFILL_MAX + [False]
    assert not cache.prefill(records[0], decode)
    _wait_for(lambda: not cache._prefills, "the queued prefills")
    assert cache.prefilled == PREFILL_MAX
    hits = cache.hits
    assert [cache.load(r, decode) for r in records[:PREFILL_MAX]] == [
        r[:4] for r in records[:PREFILL_MAX]
    ]
    assert cache.hits == hits + PREFILL_MAX
    monkeypatch.setattr(cache_mod, "PREFILL_RECENT", 0.05)
    time.sleep(0.1)  # no read for longer than PREFILL_RECENT
    assert not cache.prefill(b"y" * 4096, decode)
    cache.load(b"r", decode)
    assert cache.prefill(b"y" * 4096, decode)
    _wait_for(lambda: not cache._prefills, "the last prefill")


def test_a_store_only_written_decodes_no_seed_ahead(tmp_path: Path) -> None:
    """A bulk load (here `migrate` into a fresh store, which reads nothing from it)
    prefills nothing: no reader would use the decodes."""
    from deltalog.engine.migrate import migrate

    source = InMemorySaver()
    _chat(source, TURNS)
    serde = SeedCountingSerde()
    with DeltaLogSaver.from_path(tmp_path / "s", serde=serde) as target:
        migrate(source, target, verify=False)
        assert not target.cache._prefills  # none queued
        time.sleep(0.2)  # past PREFILL_DELAY
        assert "deltalog-prefill" not in serde.seed_loads
        assert target.cache.prefilled == 0
        after = chat_graph(SF).compile(checkpointer=target)
        assert observe(after.get_state(cfg("t"))) == _expected(TURNS)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.timeout(60)
def test_a_forked_child_decodes_what_the_parent_had_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After fork() the parent's prefill thread is gone: a child's reader decodes a
    record the parent was prefilling or had queued (no wait for a thread that is
    not there), and the child's own prefills run on a thread of its own."""
    monkeypatch.setattr(cache_mod, "PREFILL_DELAY", 0.0)
    started, release = threading.Event(), threading.Event()

    def held(record: bytes) -> bytes:
        if os.getpid() == parent:
            started.set()
            assert release.wait(30)
        return bytes(record[:4])

    def decode(record: bytes) -> bytes:
        return bytes(record[:4])

    parent = os.getpid()
    cache = DecodedCache()
    cache.load(b"r", decode)  # a cache nobody reads prefills nothing
    running, queued, fresh = (bytes([i]) * 4096 for i in (1, 2, 3))
    assert cache.prefill(running, held)
    assert started.wait(20)  # the parent's thread is busy with it
    assert cache.prefill(queued, decode)
    pid = os.fork()
    if pid == 0:  # the child: its exit status says what happened
        signal.alarm(5)  # a reader waiting for the parent's thread (10 s) gets killed
        try:
            ok = cache.load(running, decode) == running[:4]
            ok = ok and cache.load(queued, decode) == queued[:4]
            ok = ok and cache.prefill(fresh, decode)
            deadline = time.monotonic() + 4
            while cache.prefilled < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            os._exit(0 if ok and cache.prefilled == 1 else 3)
        except BaseException:
            os._exit(4)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
    assert os.waitstatus_to_exitcode(status) == 0
    _wait_for(lambda: not cache._prefills, "the parent's prefills")
    assert cache.prefilled == 2


def test_a_large_prefill_trims_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """After decoding a value of TRIM_MIN bytes or more the prefill thread calls
    malloc_trim(0) once (the decoded value's pages stay in its glibc arena
    otherwise); after a smaller one it does not."""
    calls: list[str] = []

    def trim(pad: int) -> int:
        calls.append(threading.current_thread().name)
        return 1

    monkeypatch.setattr(cache_mod, "PREFILL_DELAY", 0.0)
    monkeypatch.setattr(codec._Trim, "looked_up", True)
    monkeypatch.setattr(codec._Trim, "fn", trim)
    cache = DecodedCache()

    def decode(record: bytes) -> bytes:
        return bytes(record[:4])

    cache.load(b"r", decode)  # a cache nobody reads prefills nothing
    assert cache.prefill(b"s" * 4096, decode)
    _wait_for(lambda: cache.prefilled == 1, "the small prefill")
    time.sleep(0.05)
    assert calls == []
    assert cache.prefill(b"L" * codec.TRIM_MIN, decode)
    _wait_for(lambda: calls != [], "the trim after the large prefill")
    assert calls == ["deltalog-prefill"]
