"""cache.gc_paused: decoding many objects pauses the cyclic GC, and a large batch goes
to the oldest generation as the pause ends instead of a young collection that would
traverse all of it (a 20,000-message seed: 58 ms of each ~150 ms get_state)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from deltalog.engine import cache
from deltalog.engine.cache import (
    PROMOTE_MIN,
    PROMOTE_OWN,
    PROMOTE_PICKLE,
    DecodedCache,
    gc_paused,
)


def _interpreter_starts_frozen() -> bool:
    """Whether a fresh interpreter has objects in the permanent generation
    (CPython 3.12: 375 tuples; 3.11 and 3.13: none). gc_paused leaves frozen
    objects alone, so there it never promotes."""
    out = subprocess.run(
        [sys.executable, "-S", "-c", "import gc; print(gc.get_freeze_count())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout) > 0


pytestmark = pytest.mark.skipif(
    not cache._CAN_PROMOTE or _interpreter_starts_frozen(),
    reason="CPython with the GIL whose interpreter starts with no frozen objects (not 3.12)",
)


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations of the collections that run while the test does."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()
    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)


def build(n: int) -> list[dict[str, list[int]]]:
    return [{"k": [i]} for i in range(n)]


def test_a_large_batch_is_promoted_without_a_young_collection(collections: list[int]) -> None:
    with gc_paused():
        kept = build(PROMOTE_MIN)
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_count()[0] < 100  # the batch no longer counts towards a young collection
    more = build(50)
    assert collections == []
    assert gc.is_tracked(kept[0]) and gc.is_tracked(more[0])


def test_a_small_batch_is_left_to_the_young_generation(collections: list[int]) -> None:
    with gc_paused():
        kept = build(1000)
    build(50)
    assert collections[:1] == [0]  # 2,000 allocations: the young collection runs as before
    assert len(kept) == 1000


def test_cycles_built_in_a_pause_are_still_collected() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    with gc_paused():
        kept = build(PROMOTE_MIN)  # kept: the pause ends with a promotion
        Node()  # garbage at once: a cycle only the cyclic GC frees
    assert gc.collect() >= 1
    assert len(kept) == PROMOTE_MIN


def test_objects_an_application_froze_stay_frozen() -> None:
    """A pre-fork server may gc.freeze() its startup objects; a pause never unfreezes them."""
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with gc_paused():
            kept = build(PROMOTE_MIN)
        assert gc.get_freeze_count() == frozen
        assert len(kept) == PROMOTE_MIN
    finally:
        gc.unfreeze()


def test_an_application_that_turned_gc_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            kept = build(PROMOTE_MIN)
        assert not gc.isenabled()
        assert len(kept) == PROMOTE_MIN
    finally:
        gc.enable()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_large_pause_collects_what_others_made_before_promoting(
    collections: list[int],
) -> None:
    """gc_paused(large=True) runs a young collection first: a garbage cycle that
    other code left in the young generations is freed, not moved to the oldest
    unexamined; then the batch (PROMOTE_OWN objects or more) is promoted."""
    garbage = weakref.ref(Cycle())
    assert garbage() is not None  # a cycle: only the cyclic GC frees it
    with gc_paused(large=True):
        kept = build(PROMOTE_OWN)
    assert garbage() is None
    assert collections == [1]
    assert gc.get_count()[0] < 100
    assert len(kept) == PROMOTE_OWN


def test_a_large_pause_inside_another_promotes_its_batch() -> None:
    with gc_paused():
        with gc_paused(large=True):
            kept = build(PROMOTE_OWN)
        assert gc.get_count()[0] < 100
        assert not gc.isenabled()
    assert gc.isenabled()
    assert len(kept) == PROMOTE_OWN


def test_a_large_pause_leaves_an_application_s_gc_off_alone(collections: list[int]) -> None:
    """No collection and no promotion when the application turned the GC off."""
    garbage = weakref.ref(Cycle())
    gc.disable()
    try:
        with gc_paused(large=True):
            kept = build(PROMOTE_OWN)
        assert not gc.isenabled()
        assert collections == []
        assert garbage() is not None
        assert gc.get_count()[0] >= PROMOTE_OWN
    finally:
        gc.enable()
    assert len(kept) == PROMOTE_OWN


def test_large_cached_pickles_are_unpickled_in_a_large_pause() -> None:
    """DecodedCache copies of PROMOTE_PICKLE bytes or more go through
    gc_paused(large=True): no young collection traverses the copy afterwards."""
    value = [{"k": [i, f"{i:040d}"]} for i in range(PROMOTE_PICKLE // 32)]
    cache = DecodedCache(min_record=0)
    cache.load(b"seed", lambda _: value, reused=True)
    traversed: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] < 2:
            young = range(info["generation"] + 1)
            traversed.append(sum(len(gc.get_objects(generation=g)) for g in young))

    gc.collect()  # the young generations now hold nothing of the test's own
    gc.callbacks.append(callback)
    try:
        copy = cache.load(b"seed", lambda _: [])
        build(1000)  # enough allocations for a young collection to run
    finally:
        gc.callbacks.remove(callback)
    assert copy == value
    assert traversed and max(traversed) < len(value), traversed
