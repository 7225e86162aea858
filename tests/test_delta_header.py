"""Format 11: delta records with a compact header (codec.TAG_DELTA_COMPACT)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

import ormsgpack
import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver, keys
from deltalog.engine.codec import (
    CRC_SIZE,
    KEYED,
    TAG_DELTA,
    TAG_DELTA_COMPACT,
    ZSTD_MAGIC,
    DeltaHeader,
    RecordCodec,
    WriteDict,
    _delta_fields,
    _pack_delta_body,
    _seal,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.memory import InMemorySaver

from .graphs import cfg, chat_graph, history, human

# A version as deltalog's get_next_version mints it, and two that are not in that form.
COUNTER_REF = keys.encode_version("00000000000000000000000000000899.f106b9d8")
OTHER_REFS = [
    keys.encode_version(17),
    keys.encode_version("00000000000000000000000000000003.0.8148739101957462"),
]

refs = st.one_of(
    st.just(b""),
    st.just(COUNTER_REF),
    st.sampled_from(OTHER_REFS),
    st.builds(
        lambda n, suffix: keys.encode_version(f"{n:032}.{suffix.hex()}"),
        st.integers(0, 2**64 - 1),
        st.binary(min_size=4, max_size=4),
    ),
)
write_dicts = st.one_of(
    st.none(),
    st.builds(
        WriteDict,
        st.binary(max_size=40),
        st.binary(max_size=40),
        st.binary(max_size=64),
        items=st.booleans(),
    ),
)
splices = st.one_of(st.none(), st.lists(st.integers(0, 2**40), min_size=2, max_size=12))


def _long_layout(head: DeltaHeader, frame: bytes) -> bytes:
    """The same delta in the layout of formats 2-10 (``0x02``, a u32 length, a msgpack
    header), sealed over key ``k``."""
    items: list[object] = [head.ref, head.seq, head.type]
    if head.lo is not None:
        items += [head.lo, head.hi, head.crc]
    if head.splice is not None:
        items.append(list(head.splice))
    header = ormsgpack.packb(items)
    return _seal(bytes((TAG_DELTA,)) + len(header).to_bytes(4, "big") + header + frame, b"k", b"")


@settings(max_examples=300, deadline=None)
@given(
    typ=st.one_of(st.just("msgpack"), st.just("pickle"), st.text(max_size=12)),
    ref=refs,
    seq=st.integers(0, 2**40),
    writes=write_dicts,
    splice=splices,
    frame=st.binary(max_size=40),
    whole=st.booleans(),
)
def test_the_compact_header_gives_back_every_field(
    typ: str,
    ref: bytes,
    seq: int,
    writes: WriteDict | None,
    splice: list[int] | None,
    frame: bytes,
    whole: bool,
) -> None:
    """Every field comes back; a zstandard frame is stored without its magic number,
    any other frame (``whole``: a compressor of another kind) as it is."""
    crc = zlib.crc32(writes.content) if writes is not None else 0
    packed = frame if whole else ZSTD_MAGIC + frame
    body = _pack_delta_body(typ, ref, seq, writes, crc, splice, packed)
    head = _delta_fields(memoryview(bytes((TAG_DELTA_COMPACT,)) + body))
    assert head == DeltaHeader(
        ref,
        seq,
        typ,
        packed,
        None if writes is None else writes.lo,
        None if writes is None else writes.hi,
        None if writes is None else crc,
        None if splice is None else tuple(splice),
        writes is not None and writes.items,
    )


def test_a_delta_is_written_compact_and_reads_back() -> None:
    """A splice over a counter-form base and a write range: 0x05, 35 bytes shorter
    than the format 8-10 layout of the same delta (42 on an add_messages chat's, whose
    runs are longer), and both layouts read back."""
    codec = RecordCodec()
    base = os.urandom(20_000)
    added = os.urandom(600)
    typed = ("msgpack", base + added)
    writes = WriteDict(keys.encode_id(str(_uuid(1))), keys.encode_id(str(_uuid(2))), added)
    record = codec.encode_delta(typed, base, COUNTER_REF, 5, writes, key=b"k")
    assert record is not None
    assert record[0] == TAG_DELTA_COMPACT | KEYED
    head = codec.delta_header(record, "t", key=b"k")
    assert head is not None and head.splice is not None and head.ref == COUNTER_REF
    assert codec.decode_delta(head, base, "t", writes.content) == list(typed)
    long = _long_layout(head, head.packed)
    assert len(record) + 30 <= len(long)
    old = codec.delta_header(long, "t", key=b"k")
    assert old == head
    assert codec.decode_delta(old, base, "t", writes.content) == list(typed)


class _Tagged:
    """A compressor whose frames are not zstandard's: zstd's behind a byte of its own."""

    def __init__(self) -> None:
        self.zstd = RecordCodec().compressor

    def compress_with_base(self, data: bytes, base: bytes, level: int, tail: bytes = b"") -> bytes:
        return b"T" + self.zstd.compress_with_base(data, base, level, tail)

    def decompress_with_base(self, data: bytes, base: bytes, tail: bytes = b"") -> bytes:
        assert data[:1] == b"T"
        return self.zstd.decompress_with_base(data[1:], base, tail)

    def __getattr__(self, name: str) -> object:
        return getattr(self.zstd, name)


def test_a_compressor_of_another_kind_keeps_its_whole_frame() -> None:
    """An injected compressor whose frames have no zstd magic number: the compact
    header says so, the frame is stored whole, and the value reads back."""
    codec = RecordCodec(compressor=_Tagged())  # type: ignore[arg-type]
    base = os.urandom(5_000)
    added = os.urandom(600)
    typed = ("msgpack", base + added)
    writes = WriteDict(b"lo", b"hi", added)
    record = codec.encode_delta(typed, base, COUNTER_REF, 2, writes, key=b"k")
    assert record is not None and record[0] == TAG_DELTA_COMPACT | KEYED
    head = codec.delta_header(record, "t", key=b"k")
    assert head is not None and head.packed[:1] == b"T"
    assert codec.decode_delta(head, base, "t", writes.content) == list(typed)


def _uuid(n: int) -> str:
    return f"1ef00000-0000-6000-8000-{n:012d}"


@pytest.mark.parametrize(
    "header",
    [
        bytes((0x80, 1)),  # an unknown flag
        bytes((0x40, 1)),  # payloads without their array headers, but no write range
        bytes((0x03, 1, 5)),  # a base both raw and in counter form
        bytes((0x02, 1, 5, 1, 2)),  # a counter-form base cut short
        bytes((0x01, 1, 50, 1)),  # a raw base longer than the header
        bytes((0x00,)) + b"\xff" * 11,  # a varint past 64 bits
        bytes((0x08, 1, 2, 1, 2, 1, 2, 0)),  # a write range without its CRC
        bytes((0x10, 1, 1, 7)),  # a splice of one integer
    ],
)
def test_a_malformed_compact_header_is_damage(header: bytes) -> None:
    """A header that does not parse (its CRC intact: written so by a bug, not a flipped
    bit) is CorruptRecordError, never another exception or another value."""
    codec = RecordCodec()
    record = _seal(bytes((TAG_DELTA_COMPACT,)) + header, b"k", b"")
    with pytest.raises(CorruptRecordError):
        codec.delta_header(record, "t", key=b"k")
    with pytest.raises(CorruptRecordError):
        codec.raw_size(record, "t", key=b"k")


def test_a_flipped_bit_in_a_compact_delta_fails_its_crc(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    saver = make_saver()
    graph = chat_graph(None).compile(checkpointer=saver)
    for turn in range(12):
        graph.invoke({"messages": [human(turn)]}, cfg("t"))
    deltas = [(k, v) for k, v in saver.env.iter_db("blobs") if v[0] & ~KEYED == TAG_DELTA_COMPACT]
    assert deltas
    key, raw = deltas[-1]
    for i in range(1, len(raw) - CRC_SIZE):
        flipped = raw[:i] + bytes((raw[i] ^ 0x10,)) + raw[i + 1 :]
        with pytest.raises(CorruptRecordError):
            saver.env.codec.delta_header(flipped, "t", key=key)


def test_an_add_messages_chat_reads_like_in_memory_with_compact_deltas(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Every message list after the first few is a compact delta; the whole history
    (every checkpoint's values and pending writes) equals InMemorySaver's."""
    saver = make_saver()
    graph = chat_graph(None).compile(checkpointer=saver)
    reference = chat_graph(None).compile(checkpointer=InMemorySaver())
    for turn in range(30):
        graph.invoke({"messages": [human(turn)]}, cfg("t"))
        reference.invoke({"messages": [human(turn)]}, cfg("t"))
    tags = [v[0] & ~KEYED for _, v in saver.env.iter_db("blobs")]
    assert tags.count(TAG_DELTA_COMPACT) >= 40 and TAG_DELTA not in tags
    assert history(graph, cfg("t")) == history(reference, cfg("t"))
    assert saver.verify(deep=True).ok


@pytest.mark.parametrize(
    "version",
    [
        "99999999999999999999999999999999.abcdef12",  # a counter past 64 bits
        "00000000000018446744073709551616.00000000",  # 2^64
        "00000000000009223372036854775808.0a0b0c0d",  # 2^63
    ],
)
def test_a_base_version_whose_counter_a_varint_cannot_hold_reads_back(version: str) -> None:
    """A base in counter form whose counter is 2^63 or more is kept as its bytes
    (``_DH_BASE``), not as a varint the reader would refuse past 64 bits."""
    codec = RecordCodec()
    base = os.urandom(20_000)
    typed = ("msgpack", base + os.urandom(300))
    ref = keys.encode_version(version)
    record = codec.encode_delta(typed, base, ref, 5, None, key=b"k")
    assert record is not None
    head = codec.delta_header(record, "t", key=b"k")
    assert head is not None and head.ref == ref
    assert codec.decode_delta(head, base, "t", b"") == list(typed)
