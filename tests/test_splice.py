"""Splice deltas (format 8): a blob stored as runs copied from its base plus the bytes between.

The runs and their inverse on their own (any base, any new value), the codec's
choice between a splice and a zstd delta, a splice record that lies about its
runs, and a DeltaChannel chat and an ``add_messages`` chat whose large blobs
are splices and read back as InMemorySaver's.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver
from deltalog.engine import codec as codec_mod
from deltalog.engine.codec import CRC_SIZE, TAG_DELTA, RecordCodec, WriteDict, _seal
from deltalog.engine.splice import (
    SPLICE_ANCHOR,
    SPLICE_KEEP,
    splice_apply,
    splice_literal,
    splice_runs,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AnyMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver

from .graphs import cfg, chat_graph, history, human, varied_text


def _grown(base: bytes, header: bytes, added: bytes) -> bytes:
    """``base`` with its first bytes replaced by ``header`` and ``added`` at the end:
    the shape of a seed or message list that grew (a length changed in front)."""
    return header + base[len(header) :] + added


def _copied(runs: list[int]) -> int:
    return sum(runs[2:-1:3])


def test_a_grown_value_is_one_run_of_its_base() -> None:
    # The base's fourth byte differs from the header's: were it equal (1 in 256 of
    # random bases), the run would rightly start a byte earlier.
    rng = random.Random(7)
    base = b"\xaa" * 4 + rng.randbytes(199_996)
    new = _grown(base, b"\xc9\x00\x04\x01", rng.randbytes(5_000))
    runs, copied = splice_runs(new, base)
    assert copied == _copied(runs) == len(base) - 4
    assert runs[:3] == [4, 4, len(base) - 4] and runs[-1] == 5_000
    literal = splice_literal(new, runs)
    assert len(literal) == 5_004
    assert splice_apply(runs, base, literal, "t") == new


def test_a_removed_stretch_in_the_middle_is_stepped_over() -> None:
    """A message removed from the middle (RemoveMessage): the run resumes after it."""
    base = os.urandom(100_000)
    new = base[:40_000] + base[43_000:] + b"tail"
    runs, copied = splice_runs(new, base)
    assert copied == len(base) - 3_000
    assert splice_apply(runs, base, splice_literal(new, runs), "t") == new


@pytest.mark.parametrize("width", [1, 3, 7, 8, 9, 31, 33, 63, 64])
def test_a_changed_field_costs_exactly_its_bytes(width: int) -> None:
    """A count or length rewritten in place (any width up to the last try): the
    run resumes right after it, not at the anchor that found the base again."""
    base = os.urandom(100_000)
    at = 50_000
    changed = bytes(b ^ 0xFF for b in base[at : at + width])
    new = base[:at] + changed + base[at + width :]
    runs, copied = splice_runs(new, base)
    assert copied == len(base) - width
    assert len(splice_literal(new, runs)) == width
    assert splice_apply(runs, base, splice_literal(new, runs), "t") == new


def test_a_short_stretch_the_base_also_holds_stays_literal() -> None:
    """A new message whose boilerplate (a few hundred bytes) also occurs in the base
    is literal, in one piece with the rest of the new bytes: not a run of its own."""
    rng = random.Random(3)
    boiler = rng.randbytes(300)
    base = rng.randbytes(50_000) + boiler + rng.randbytes(2_000)
    added = rng.randbytes(700) + boiler + rng.randbytes(700)
    new = base + added
    runs, copied = splice_runs(new, base)
    assert runs == [0, 0, len(base), len(added)] and copied == len(base)
    assert 32 <= SPLICE_ANCHOR <= len(boiler) < SPLICE_KEEP
    assert splice_apply(runs, base, splice_literal(new, runs), "t") == new


def test_unrelated_bytes_copy_nothing() -> None:
    base, new = os.urandom(50_000), os.urandom(50_000)
    runs, copied = splice_runs(new, base)
    assert (runs, copied) == ([50_000], 0)
    assert splice_apply(runs, base, splice_literal(new, runs), "t") == new


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(0, 1_200),
    st.lists(st.tuples(st.integers(0, 1_200), st.integers(0, 300), st.integers(0, 60)), max_size=6),
    st.booleans(),
)
def test_any_value_rebuilds_from_its_runs_and_literal(
    seed: int, size: int, edits: list[tuple[int, int, int]], repeat: bool
) -> None:
    """Whatever the base and the new value (here: random bytes, or a short piece
    repeated so that anchors match in many places, with stretches cut, replaced
    and inserted), every run is an exact copy and the value rebuilds byte for byte."""
    rnd = random.Random(seed)
    base = rnd.randbytes(size // 8) * 8 if repeat else rnd.randbytes(size)
    new = bytearray(base)
    for at, cut, insert in edits:
        at = min(at, len(new))
        new[at : at + cut] = rnd.randbytes(insert)
    value = bytes(new)
    runs, copied = splice_runs(value, base)
    assert copied == _copied(runs) and all(n >= SPLICE_KEEP for n in runs[2:-1:3])
    for k in range(0, len(runs) - 1, 3):
        src, n = runs[k + 1], runs[k + 2]
        assert src + n <= len(base)
    literal = splice_literal(value, runs)
    assert len(literal) + copied == len(value)
    assert splice_apply(runs, base, literal, "t") == value


@pytest.mark.parametrize(
    "runs",
    [
        [],  # no final literal
        [4, 0],  # not lit, src, n, …, lit
        [4, 0, 10, -1],  # negative
        [4, 990, 20, 0],  # a run past the end of the base
        [4, 0, 10, 9],  # more literal than there is
        [2, 0, 10, 0],  # literal bytes left over
        [4, 0, True, 0],  # not an int
    ],
)
def test_runs_that_do_not_fit_are_damage(runs: list[Any]) -> None:
    base, literal = bytes(1_000), b"abcd"
    with pytest.raises(CorruptRecordError, match="splice"):
        splice_apply(runs, base, literal, "blobs/00")


def _writes(base: bytes, added: bytes) -> WriteDict:
    return WriteDict(b"lo", b"hi", added + base[:1_000])


def test_the_codec_stores_a_grown_value_as_a_splice_and_reads_it_back() -> None:
    """A value that grew at its end becomes a splice: the header names the runs,
    the frame holds only the literal, and the record is a fraction of a zstd
    delta's cost to make (here: smaller, too); decode and raw_size agree."""
    codec = RecordCodec()
    words = [f"word{i}".encode() for i in range(5_000)]
    rnd = random.Random(7)
    base = b"\x92\x01" + b" ".join(rnd.choice(words) for _ in range(60_000))
    added = b" ".join(rnd.choice(words) for _ in range(400))
    typed = ("msgpack", _grown(base, b"\x92\x02", added))
    writes = _writes(base, added)
    record = codec.encode_delta(typed, base, b"ref", 3, writes, key=b"k")
    assert record is not None
    head = codec.delta_header(record, "t", key=b"k")
    assert head is not None and head.splice is not None
    assert head.splice[0] == codec_mod.SPLICE_TAIL  # the base's end in the dictionary
    assert codec.decode_delta(head, base, "t", writes.content) == list(typed)
    assert codec.raw_size(record, "t", key=b"k") == len(typed[1]) + 1
    # The same value as a zstd delta over the whole base (the format 7 form) still reads.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec_mod, "SPLICE_SHARE", 2.0)  # no runs can cover twice the value
        zstd_record = RecordCodec().encode_delta(typed, base, b"ref", 3, writes, key=b"k")
    assert zstd_record is not None
    zhead = codec.delta_header(zstd_record, "t", key=b"k")
    assert zhead is not None and zhead.splice is None
    assert codec.decode_delta(zhead, base, "t", writes.content) == list(typed)
    assert len(record) < len(zstd_record)


def test_a_value_mostly_new_is_a_zstd_delta() -> None:
    """Runs covering less than SPLICE_SHARE of the value: the whole value is
    compressed against base and writes, as before format 8."""
    codec = RecordCodec()
    base = os.urandom(20_000)
    added = os.urandom(30_000)
    typed = ("msgpack", base + added)
    writes = WriteDict(b"lo", b"hi", added)
    record = codec.encode_delta(typed, base, b"ref", 1, writes, key=b"k")
    assert record is not None
    head = codec.delta_header(record, "t", key=b"k")
    assert head is not None and head.splice is None
    assert codec.decode_delta(head, base, "t", writes.content) == list(typed)


def _splice_record(codec: RecordCodec, splice: list[Any], literal: bytes) -> bytes:
    """A delta record with a valid CRC whose header says ``splice``."""
    frame = codec.compressor.compress_with_base(literal, b"base", codec_mod.DELTA_LEVEL, b"")
    header = ormsgpack.packb([b"ref", 1, "msgpack", splice])
    framed = bytes((TAG_DELTA,)) + len(header).to_bytes(4, "big") + header + frame
    return _seal(framed, b"k", b"")


@pytest.mark.parametrize(
    "splice",
    [
        [4, 4, 0, 100, 0],  # a run past the base's end
        [4, 2, 0, 50, 0],  # literal bytes left over
        [10**6, 4, 0, 50, 0],  # a dictionary tail longer than the base
        [4],  # no runs at all
        [4, "x"],  # not ints
    ],
)
def test_a_splice_record_whose_runs_lie_is_reported_not_decoded(splice: list[Any]) -> None:
    """The CRC only says the bytes are as written; runs that do not fit the base
    the record names (a bug, or a base replaced under it) raise CorruptRecordError
    naming the record, never return other bytes."""
    codec = RecordCodec()
    base = bytes(range(64))
    record = _splice_record(codec, splice, b"abcd")
    assert record[-CRC_SIZE:]  # sealed
    with pytest.raises(CorruptRecordError, match="blobs/00"):
        head = codec.delta_header(record, "blobs/00", key=b"k")
        assert head is not None
        codec.decode_delta(head, base, "blobs/00")


def _chat_reads_as_in_memory(
    sf: int | None,
    path: Path,
    turns: int,
    turn_input: Callable[[int, list[AnyMessage]], list[Any]],
) -> list[tuple[int, ...]]:
    """Run a chat (``chat_graph(sf)``) on DeltaLogSaver and InMemorySaver side by
    side, each turn's input from ``turn_input(turn, InMemorySaver's messages)``;
    check every state of the history equals InMemorySaver's, again from a fresh
    open with no cache, and that verify passes. Returns the splice items
    (``[tail, *runs]``) of the store's blob records."""
    memory = chat_graph(sf).compile(checkpointer=InMemorySaver())
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(sf).compile(checkpointer=saver)
        for turn in range(turns):
            messages = memory.get_state(cfg("t")).values.get("messages", [])
            for g in (graph, memory):
                g.invoke({"messages": turn_input(turn, messages)}, cfg("t"))
        splices = []
        for key, raw in saver.env.iter_db("blobs"):
            head = saver.env.codec.delta_header(raw, "t", key=key)
            if head is not None and head.splice is not None:
                splices.append(head.splice)
        assert history(graph, cfg("t")) == history(memory, cfg("t"))
    with DeltaLogSaver.from_path(path, cache_bytes=0) as fresh:
        again = chat_graph(sf).compile(checkpointer=fresh)
        assert history(again, cfg("t")) == history(memory, cfg("t"))
        assert fresh.verify(deep=True).ok
    return splices


@pytest.mark.parametrize("sf", [5, None])
def test_a_chat_stores_its_large_blobs_as_splices_and_reads_as_in_memory(
    sf: int | None, tmp_path: Path
) -> None:
    """A DeltaChannel chat (seeds every 5 updates) and an add_messages chat (the
    whole list every step): their large blobs are splices, every state of the
    history equals InMemorySaver's, again from a fresh open with no cache, and
    verify passes."""
    splices = _chat_reads_as_in_memory(sf, tmp_path / "s", 40, lambda turn, _: [human(turn)])
    assert len(splices) >= 5


def _edited_input(turn: int, messages: list[AnyMessage]) -> list[Any]:
    """Turn ``turn``'s input: a question, and (from turn 8) by turn modulo 4 nothing,
    a message removed from the middle, one rewritten under its id (another
    length), or the three oldest trimmed."""
    rng = random.Random(turn)
    edit: list[Any] = []
    if turn >= 8:
        middle = messages[len(messages) // 4 : 3 * len(messages) // 4]
        op = turn % 4
        if op == 1:
            edit = [RemoveMessage(id=str(rng.choice(middle).id))]
        elif op == 2:
            text = f"rewritten at {turn}: " + varied_text(turn, rng.randrange(5, 60))
            edit = [HumanMessage(content=text, id=rng.choice(middle).id)]
        elif op == 3:
            edit = [RemoveMessage(id=str(m.id)) for m in messages[:3]]
    return [*edit, human(turn)]


@pytest.mark.parametrize("sf", [5, None])
def test_edited_message_lists_splice_and_read_as_in_memory(sf: int | None, tmp_path: Path) -> None:
    """Messages removed from the middle, rewritten under their ids (so the list
    shrinks or grows inside) and trimmed at the front: the splices step over
    the changes (some copy two runs or more), and every state equals
    InMemorySaver's, again from a fresh open with no cache."""
    splices = _chat_reads_as_in_memory(sf, tmp_path / "s", 48, _edited_input)
    resumed = [runs for runs in splices if sum(1 for n in runs[3::3] if n) >= 2]
    assert len(resumed) >= 3
