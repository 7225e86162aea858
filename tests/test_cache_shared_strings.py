"""The caches hand out fresh copies of decoded values but share their long strings
(cache.SHARED_STR_MIN): a ``str`` cannot be changed in place, so sharing one is
safe, and not copying it is most of a large-message seed's copy time."""

from __future__ import annotations

import sys
from typing import Any

from deltalog.engine.cache import SHARED_STR_MIN, DecodedCache, HistoryCopies
from langchain_core.messages import AIMessage, HumanMessage

LONG = "x" * SHARED_STR_MIN
SHORT = "y" * (SHARED_STR_MIN - 1)


def _messages() -> list[Any]:
    return [
        HumanMessage(content=SHORT, id="h1"),
        AIMessage(content=LONG + "a", id="a1", additional_kwargs={"k": [LONG + "b"]}),
    ]


def _cached(value: list[Any]) -> tuple[DecodedCache, bytes]:
    cache = DecodedCache(min_record=0)
    record = b"a seed"
    cache.load(record, lambda _: value, reused=True)
    return cache, record


def test_copies_share_long_strings_and_nothing_else() -> None:
    original = _messages()
    cache, record = _cached(original)
    first = cache.load(record, lambda _: [])
    second = cache.load(record, lambda _: [])
    assert first == second == original
    assert cache.hits == 2
    assert first[1].content is second[1].content is original[1].content
    assert first[1].additional_kwargs["k"][0] is original[1].additional_kwargs["k"][0]
    assert first[0].content is not second[0].content  # short: copied, as before
    assert first[1] is not second[1]
    assert first[1].additional_kwargs is not second[1].additional_kwargs


def test_changing_a_copy_does_not_change_the_next_one() -> None:
    cache, record = _cached(_messages())
    first = cache.load(record, lambda _: [])
    first[1].content += " and more"
    first[1].additional_kwargs["k"].append("new")
    first.append(HumanMessage(content="extra"))
    again = cache.load(record, lambda _: [])
    assert again == _messages()


def test_the_budget_counts_the_shared_strings() -> None:
    """The cache keeps the strings alive, so they count toward its budget."""
    big = "z" * (4 * 1024**2)
    cache, _ = _cached([big])
    assert cache.size >= sys.getsizeof(big)
    small = DecodedCache(max_bytes=1024**2, min_record=0)
    small.load(b"r", lambda _: [big], reused=True)
    assert small.size == 0  # over the cap: not kept


def test_history_chunks_share_long_strings_and_give_fresh_lists() -> None:
    copies = HistoryCopies()
    chunks = HistoryCopies.start(_messages())
    assert chunks is not None
    out, kept = copies.extend(chunks, [AIMessage(content=LONG + "c", id="a2")])
    assert kept is not None
    again, _ = copies.extend(kept, [])
    assert again == out == [*_messages(), AIMessage(content=LONG + "c", id="a2")]
    assert again[2].content is out[2].content
    assert again[1] is not out[1]
