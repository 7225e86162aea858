"""issue 18.2: cache budgets grow with the workload, up to their cap, instead of filling a fixed 64 MiB."""

from __future__ import annotations

from pathlib import Path

from deltalog.bench.graphs import build_graph, canonical, expected_messages, human_message
from deltalog.bench.scenarios import ChatScenario, delta
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cache import START_BUDGET, DecodedCache, GrowingBudget, PayloadCache
from langchain_core.runnables import RunnableConfig

MiB = 1024**2


def _value(i: int, size: int) -> bytes:
    return i.to_bytes(4, "big") * (size // 4)


def _read_twice(cache: DecodedCache, record: bytes) -> None:
    """A record is cached on its second decode (see DecodedCache)."""
    for _ in range(2):
        cache.load(record, lambda r: bytes(r[:8]))


def test_one_thread_keeps_the_newest_values_not_the_cap() -> None:
    """Ever-new 1 MiB values, each read twice (a one-thread chat's seeds): the
    decoded cache stays near twice the largest entry, far below its 64 MiB cap."""
    cache = DecodedCache()
    for i in range(60):
        _read_twice(cache, _value(i, MiB))
    assert cache.max_bytes == 64 * MiB
    assert cache.size <= cache.budget.limit <= 2 * (MiB + 200) + START_BUDGET
    assert cache.size < 8 * MiB


def test_a_working_set_larger_than_the_start_grows_the_budget_and_hits() -> None:
    """Twenty threads' 1 MiB values read in turn: misses on evicted values grow
    the budget until the working set fits, then every read hits (up to the cap)."""
    cache = DecodedCache()
    records = [_value(i, MiB) for i in range(20)]
    for _ in range(4):
        for record in records:
            _read_twice(cache, record)
    hits = cache.hits
    for record in records:
        cache.load(record, lambda r: bytes(r[:8]))
    assert cache.hits == hits + len(records)
    assert 20 * MiB < cache.budget.limit <= cache.max_bytes
    capped = DecodedCache(max_bytes=8 * MiB)
    for _ in range(4):
        for record in records:
            _read_twice(capped, record)
    assert capped.budget.limit == 8 * MiB and capped.size <= 8 * MiB


def test_a_value_larger_than_the_start_is_still_cached() -> None:
    """A 10 MiB seed (above the 4 MiB start, below the cap) is admitted and hit."""
    cache = DecodedCache()
    big = _value(1, 10 * MiB)
    _read_twice(cache, big)
    hits = cache.hits
    cache.load(big, lambda r: bytes(r[:8]))
    assert cache.hits == hits + 1
    assert cache.budget.limit >= 2 * len(big)


def test_payload_cache_grows_on_misses_of_evicted_records() -> None:
    """The payload cache starts small, keeps the newest payloads and grows when
    an evicted record is read again."""
    cache = PayloadCache()
    records = [_value(i, MiB) for i in range(12)]
    for record in records:
        cache.put(record, ("bytes", record))
    assert cache.size <= cache.budget.limit < 12 * MiB
    assert cache.get(records[-1]) is not None
    for _ in range(3):
        for record in records:
            if cache.get(record) is None:
                cache.put(record, ("bytes", record))
    assert all(cache.get(r) is not None for r in records)


def test_budget_never_exceeds_its_cap() -> None:
    """Growth stops at the cap; an entry above the cap is refused."""
    budget = GrowingBudget(cap=6 * MiB)
    assert budget.limit == 4 * MiB
    assert budget.admit(5 * MiB) and budget.limit == 6 * MiB
    assert not budget.admit(7 * MiB)
    budget.evicted(b"k", MiB)
    budget.missed(b"k")
    assert budget.limit == 6 * MiB


def test_a_missed_small_entry_grows_the_budget_by_its_size_not_double() -> None:
    """Small entries evicted by a stream of large never-reread ones (the input
    payloads of an ``add_messages`` chat among its message blobs): their
    re-reads grow the budget by twice their size, so it does not climb to the
    cap and let the large ones fill it."""
    cache = PayloadCache()
    small = [_value(i, 800) for i in range(50)]
    for i, record in enumerate(small):
        cache.put(record, ("bytes", record))
        for j in range(8):
            big = _value(1000 + 8 * i + j, 128 * 1024)
            cache.put(big, ("bytes", big))
        if i >= 40:  # read some evicted small ones again
            for old in small[i - 40 : i - 35]:
                if cache.get(old) is None:
                    cache.put(old, ("bytes", old))
    assert cache.max_bytes == 64 * MiB
    assert cache.budget.limit < START_BUDGET + MiB
    assert cache.size <= cache.budget.limit


def test_large_message_chat_keeps_caches_small_and_state_right(tmp_path: Path) -> None:
    """A real 100-turn large-message chat (~10 KB a turn, sf=10): the decoded-value
    and payload caches hold a few MiB, not their caps, and the state is exact."""
    scenario = ChatScenario(
        name="large", field=delta(10), turns=100, human_chars=2000, ai_chars=8000
    )
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        graph = build_graph(scenario, saver)
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        for turn in range(scenario.turns):
            graph.invoke({"messages": [human_message(scenario, turn)]}, config)
        for _ in range(3):
            list(graph.get_state_history(config, limit=20))
        got = canonical(graph.get_state(config).values["messages"])
        assert got == canonical(expected_messages(scenario))
        assert saver.cache.hits > 0
        # With fixed 64 MiB budgets: 10.2, 10.3 and 50.8 MiB here.
        assert saver.cache.size < 6 * MiB
        assert saver.env.payloads.size < 9.5 * MiB
        assert saver.env.memo.size < 32 * MiB
