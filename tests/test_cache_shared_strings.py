"""The caches hand out fresh copies of decoded values but share their long strings
(copies.SHARED_STR_MIN): a ``str`` cannot be changed in place, so sharing one is
safe, and not copying it is most of a large-message seed's copy time."""

from __future__ import annotations

import functools
import sys
from typing import Any

import ormsgpack
from deltalog.engine.cache import DecodedCache, HistoryCopies
from deltalog.engine.copies import SHARED_STR_MIN, may_hold_long_str, shares
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

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


def _typed(value: Any) -> tuple[str, bytes]:
    return JsonPlusSerializer().dumps_typed(value)


def test_a_payload_with_only_short_strings_is_pickled_plainly() -> None:
    """The messages LangGraph's serde writes (extension objects around nested
    msgpack) say whether they hold a long string: a seed of short messages is a
    plain pickle, one with a long string keeps it aside, and both copy the same."""
    short: list[Any] = [HumanMessage(content=SHORT, id=f"h{i}") for i in range(50)]
    assert len(_typed(short)[1]) > 40 * SHARED_STR_MIN
    assert not may_hold_long_str(*_typed(short))
    assert may_hold_long_str(*_typed(_messages()))
    for value in (short, _messages()):
        share = may_hold_long_str(*_typed(value))
        cache = DecodedCache(min_record=0)

        def decode(_: bytes, v: list[Any] = value) -> list[Any]:
            return v

        cache.load(b"seed", decode, reused=True, share=functools.partial(bool, share))
        (pickled,) = cache._entries.values()
        assert shares(pickled) is share
        assert cache.load(b"seed", lambda _: []) == value


def test_what_the_payload_says_of_its_strings() -> None:
    """Short payloads, and msgpack whose str 16 headers are all short, say no; a
    long str 16, any str 32 byte, or another serde type say yes."""
    assert not may_hold_long_str("pickle", b"x" * (SHARED_STR_MIN - 1))
    assert may_hold_long_str("pickle", b"x" * SHARED_STR_MIN)
    assert not may_hold_long_str("msgpack", ormsgpack.packb([SHORT, SHORT]))
    assert may_hold_long_str("msgpack", ormsgpack.packb([SHORT, LONG]))
    assert may_hold_long_str("msgpack", ormsgpack.packb(["a" * 70_000]))
    assert may_hold_long_str("msgpack", ormsgpack.packb([SHORT, "\xdb" + SHORT]))
    # A 0xDA byte inside text is taken for a header; it may only say yes.
    assert may_hold_long_str("msgpack", ormsgpack.packb([SHORT, "\u06a0\u06a0" + SHORT]))


@given(
    st.lists(
        st.text(max_size=SHARED_STR_MIN + 40).map(lambda s: s * (1 + SHARED_STR_MIN // 400)),
        max_size=6,
    )
)
def test_a_value_with_a_long_string_is_never_said_to_have_none(texts: list[str]) -> None:
    """No false no: whatever the characters, a decoded value with a string of
    SHARED_STR_MIN characters or more comes from a payload said to have one."""
    value = [HumanMessage(content=t, id=str(i)) for i, t in enumerate(texts)]
    if any(len(t) >= SHARED_STR_MIN for t in texts):
        assert may_hold_long_str(*_typed(value))


def test_a_merged_history_chunk_shares_when_either_part_did() -> None:
    """History chunks of short writes are plain pickles; merging one with a chunk
    that shares a string shares again, so a long string is never copied into a
    merged chunk and the copies stay equal."""
    copies = HistoryCopies()
    chunks = HistoryCopies.start([AIMessage(content=LONG, id="a0")], share=True)
    assert chunks is not None and shares(chunks[0][1])
    out, kept = copies.extend(chunks, [HumanMessage(content=SHORT, id="h1")], share=False)
    assert kept is not None and len(kept) == 1 and shares(kept[0][1])
    plain = HistoryCopies.start([HumanMessage(content=SHORT, id="h0")], share=False)
    assert plain is not None and not shares(plain[0][1])
    again, kept2 = copies.extend(plain, [HumanMessage(content=SHORT, id="h2")], share=False)
    assert kept2 is not None and not any(shares(p) for _, p in kept2)
    assert copies.extend(kept, [])[0] == out and copies.extend(kept2, [])[0] == again
    # Told there is none, a long string is copied into a plain pickle, not kept aside.
    told = HistoryCopies.start([AIMessage(content=LONG, id="a3")], share=False)
    assert told is not None and not shares(told[0][1])
    assert copies.extend(told, [])[0] == [AIMessage(content=LONG, id="a3")]


def test_the_payload_is_looked_at_only_when_a_value_is_pickled() -> None:
    """Reading a cached value does not scan its payload again (a seed's payload is
    megabytes, read by every invoke): ``share`` is asked once, when it is pickled."""
    asked: list[int] = []

    def share() -> bool:
        asked.append(1)
        return False

    cache = DecodedCache(min_record=0)
    for _ in range(3):
        assert cache.load(b"seed", lambda _: [SHORT], reused=True, share=share) == [SHORT]
    assert asked == [1] and cache.hits == 2
