"""A spare copy of the seed read last, made while reads pause (``DecodedCache.load(spare=...)``).

Each ``get_state`` and each invoke of a delta-channel thread copies the
thread's seed out of the cache (a 2,000-message list at 1,000 turns). The
cache makes the next copy ahead, on the prefill thread once reads pause, and
hands it to the next single-state read of the same record. These tests pin
that the copy handed out is private (as if unpickled on the spot), that a
read of many states neither takes nor makes one, that only one is kept, that
none is made while reads go on, and that the states read through a real
graph equal InMemorySaver's.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from deltalog.engine import cache as cache_mod
from deltalog.engine.cache import SPARE_HISTORY, SPARE_STATE, DecodedCache
from deltalog.engine.errors import OptionError
from langgraph.checkpoint.memory import InMemorySaver

from tests.graphs import cfg, chat_graph, human, observe


def _wait(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _value(n: int) -> list[dict[str, Any]]:
    return [{"id": f"m-{i}", "content": f"message {i} " + "x" * 300, "tags": [i]} for i in range(n)]


def _cached(cache: DecodedCache, record: bytes, value: Any) -> Callable[..., Any]:
    """A read of ``record`` through ``cache`` (the first one caches it at once)."""

    def decode(_: bytes) -> Any:
        return pickle.loads(pickle.dumps(value))

    def read(spare: int = SPARE_STATE) -> Any:
        return cache.load(record, decode, len(record), reused=True, spare=spare)

    return read


def test_the_next_read_gets_the_spare_a_private_copy() -> None:
    cache = DecodedCache(64 * 2**20)
    value = _value(1200)
    read = _cached(cache, b"seed-1" * 400, value)
    first = read()
    assert first == value
    _wait(lambda: cache.spares_made == 1)
    second = read()
    assert cache.spares_used == 1
    assert second == value and second is not first
    assert read() is not second  # taken once: the next read before a new spare copies
    # The caller owns it: changing it changes no later copy.
    second[0]["content"] = "changed"
    second.append({"id": "extra"})
    _wait(lambda: cache.spares_made == 2)
    third = read()
    assert cache.spares_used == 2
    assert third == value
    assert all(a is not b for a, b in zip(third, second, strict=False))


def test_a_read_of_many_states_neither_takes_nor_makes_a_spare() -> None:
    cache = DecodedCache(64 * 2**20)
    read = _cached(cache, b"seed-2" * 400, _value(1200))
    read(spare=0)
    read(spare=0)
    time.sleep(cache_mod.SPARE_DELAY * 3)
    assert cache.spares_made == 0
    read()
    _wait(lambda: cache.spares_made == 1)
    assert read(spare=0) == _value(1200)
    assert cache.spares_used == 0
    read()
    assert cache.spares_used == 1


def test_one_spare_per_cache_for_the_record_read_last() -> None:
    cache = DecodedCache(64 * 2**20)
    read_a = _cached(cache, b"seed-a" * 400, _value(1200))
    read_b = _cached(cache, b"seed-b" * 400, _value(1100))
    read_a()
    _wait(lambda: cache.spares_made == 1)
    assert read_b() == _value(1100)  # another record: the spare of a is dropped
    _wait(lambda: cache.spares_made == 2)
    assert read_a() == _value(1200)  # b's spare is not a's: copied on the spot
    assert cache.spares_used == 0
    _wait(lambda: cache.spares_made == 3)
    read_a()
    assert cache.spares_used == 1


def test_no_spare_is_made_while_reads_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # A long pause threshold, so that a loaded machine's stall between two
    # reads of the loop is not taken for a pause.
    monkeypatch.setattr(cache_mod, "SPARE_DELAY", 0.3)
    cache = DecodedCache(64 * 2**20)
    read = _cached(cache, b"seed-3" * 400, _value(1200))
    small = _cached(cache, b"small" * 500, _value(3))
    read()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:  # other reads, closer together than SPARE_DELAY
        small(spare=0)
        time.sleep(0.02)
    assert cache.spares_made == 0
    _wait(lambda: cache.spares_made == 1)


def test_small_values_and_spare_bytes_zero_make_none() -> None:
    off = DecodedCache(64 * 2**20, spare_bytes=0)
    read = _cached(off, b"seed-4" * 400, _value(1200))
    read()
    small = DecodedCache(64 * 2**20)
    read_small = _cached(small, b"seed-5" * 400, _value(20))
    read_small()
    time.sleep(cache_mod.SPARE_DELAY * 3)
    assert off.spares_made == 0 and small.spares_made == 0
    with pytest.raises(OptionError, match="spare_bytes -1"):
        DecodedCache(spare_bytes=-1)


def test_states_read_with_spares_equal_in_memory_savers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real DeltaChannel chat: ``get_state`` after a pause and the next turns
    are served from spares, and every state equals InMemorySaver's."""
    monkeypatch.setattr(cache_mod, "SPARE_MIN", 1024)
    ours = chat_graph(4)
    theirs = chat_graph(4)
    with DeltaLogSaver.from_path(tmp_path / "store") as saver:
        graph = ours.compile(checkpointer=saver)
        ref = theirs.compile(checkpointer=InMemorySaver())
        config = cfg("spares")
        for turn in range(12):
            graph.invoke({"messages": [human(turn)]}, config)
            ref.invoke({"messages": [human(turn)]}, config)
            time.sleep(cache_mod.SPARE_DELAY * 4)
        assert saver.cache.spares_used > 0
        used = saver.cache.spares_used
        want = observe(ref.get_state(config))
        first = graph.get_state(config)
        assert observe(first) == want
        _wait(lambda: saver.cache._spare is not None)
        second = graph.get_state(config)
        assert saver.cache.spares_used > used
        assert observe(second) == want
        second.values["messages"][0].content = "changed in place"
        second.values["messages"].clear()
        _wait(lambda: saver.cache._spare is not None)
        # A history (many states) neither takes the spare nor replaces it.
        used = saver.cache.spares_used
        spare = saver.cache._spare
        assert len(list(graph.get_state_history(config, limit=6))) == 6
        assert saver.cache.spares_used == used and saver.cache._spare is spare
        assert observe(graph.get_state(config)) == want
        assert saver.cache.spares_used == used + 1
        graph.invoke({"messages": [human(12)]}, config)
        ref.invoke({"messages": [human(12)]}, config)
        assert observe(graph.get_state(config)) == observe(ref.get_state(config))


def test_a_history_read_does_not_displace_a_state_reads_spare() -> None:
    """The bench's read of a delta history from a checkpoint that holds its own
    seed walks to the seed before it; the next ``get_state`` reads the newer one."""
    cache = DecodedCache(64 * 2**20)
    new = _cached(cache, b"seed-new" * 300, _value(1200))
    old = _cached(cache, b"seed-old" * 300, _value(1100))
    new()
    old(spare=SPARE_HISTORY)
    _wait(lambda: cache.spares_made == 1)
    assert new() == _value(1200)
    assert cache.spares_used == 1
    _wait(lambda: cache.spares_made == 2)
    old(spare=SPARE_HISTORY)  # the spare of new stays
    time.sleep(cache_mod.SPARE_DELAY * 3)
    assert cache.spares_made == 2
    new()
    assert cache.spares_used == 2
    _wait(lambda: cache.spares_made == 3)
    old()  # a state read of another record takes the slot
    _wait(lambda: cache.spares_made == 4)
    assert old() == _value(1100)
    assert cache.spares_used == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.timeout(60)
def test_a_forked_child_makes_its_own_spares(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spare the parent queued runs on the parent's prefill thread, which a
    child lacks: it must not outrank the child's own requests."""
    monkeypatch.setattr(cache_mod, "SPARE_DELAY", 0.5)
    cache = DecodedCache(64 * 2**20)
    parent_read = _cached(cache, b"seed-p" * 400, _value(1200))
    child_read = _cached(cache, b"seed-c" * 400, _value(1100))
    parent_read()  # a state read's spare, queued and not made before the fork
    pid = os.fork()
    if pid == 0:  # the child: its exit status says what happened
        try:
            child_read(spare=SPARE_HISTORY)
            deadline = time.monotonic() + 5
            while cache.spares_made < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            ok = cache.spares_made == 1 and child_read(spare=SPARE_HISTORY) == _value(1100)
            os._exit(0 if ok and cache.spares_used == 1 else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _wait(lambda: cache.spares_made == 1)  # the parent's own spare is made as queued
    assert parent_read() == _value(1200) and cache.spares_used == 1


def test_a_spare_that_fails_blocks_no_later_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_mod, "SPARE_DELAY", 0.3)  # patched before it runs
    cache = DecodedCache(64 * 2**20)
    state = _cached(cache, b"seed-s" * 400, _value(1200))
    history = _cached(cache, b"seed-h" * 400, _value(1100))
    state()
    target = cache._entries[b"seed-s" * 400]  # the state read's pickle
    loads = cache_mod._loads
    failed: list[bool] = []

    def failing(pickled: Any) -> Any:
        if pickled is target:
            failed.append(True)
            raise MemoryError("a copy that fails")
        return loads(pickled)

    monkeypatch.setattr(cache_mod, "_loads", failing)
    _wait(lambda: bool(failed) and cache._spare_job is None)
    assert cache.spares_made == 0
    history(spare=SPARE_HISTORY)  # no failed job of the state read outranks it
    _wait(lambda: cache.spares_made == 1)
    assert history(spare=SPARE_HISTORY) == _value(1100) and cache.spares_used == 1
