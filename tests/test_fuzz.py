"""Hostile and bad input: property-based fuzz of the public API and of the record decoder (R9).

Every call either works exactly — what comes back is what the serializer's own
round trip gives — or raises a documented :class:`DeltaLogError` (``ConfigError``,
``InvalidInputError``, ``KeyTooLongError``) before anything is written: the
entry counts of every database are unchanged. The decoder turns any bytes into
a record or a :class:`CorruptRecordError`, never another exception, a crash or
a hang (each example runs under a deadline).
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import CorruptRecordError, DeltaLogError, DeltaLogSaver
from deltalog.engine.codec import RecordCodec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint

from tests.checkpoints import checkpoint_id, new_checkpoint, put_values

FUZZ = settings(
    max_examples=150,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Names: empty, NUL bytes, unicode, long enough to be hashed (> 400 bytes), 100 KB,
# and lone surrogates (not encodable: must be refused).
odd_names = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "\x00", "a\x00b", "\x00\xff", "\x00" * 300, "é" * 300, "🦜" * 120]),
    st.sampled_from(["x" * 100_000, "€" * 40_000]),
    st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3),
)

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(min_value=2**64, max_value=2**80) | st.integers(max_value=-(2**63) - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=40),
)
odd_values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
) | st.sampled_from([object(), lambda: 1, {1, 2}, b"\x00" * 1000, "\x00" * 1000])


def same(a: Any, b: Any) -> bool:
    """Equality that counts NaN equal to NaN (a stored NaN is still NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def counts(saver: DeltaLogSaver) -> dict[str, int]:
    """Entries per named database: equal before and after a refused call."""
    stats = saver.env.stats()
    return {k: v["entries"] for k, v in stats.items() if isinstance(v, dict)}


@pytest.fixture(scope="module")
def fuzz_saver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeltaLogSaver]:
    """One store shared by every example of a property (a fresh one each would dominate)."""
    with DeltaLogSaver.from_path(tmp_path_factory.mktemp("fuzz") / "store") as saver:
        yield saver


def expect(saver: DeltaLogSaver, value: Any) -> tuple[bool, Any]:
    """(serializable?, what the serde's own round trip of ``value`` gives)."""
    try:
        return True, saver.serde.loads_typed(saver.serde.dumps_typed(value))
    except Exception:
        return False, None


@FUZZ
@given(thread_id=odd_names, checkpoint_ns=odd_names, channel=odd_names, value=odd_values)
def test_put_roundtrips_or_refuses_before_writing(
    fuzz_saver: DeltaLogSaver, thread_id: str, checkpoint_ns: str, channel: str, value: Any
) -> None:
    """R9: put with odd ids, channel names and values stores exactly what the serde round trip gives, or raises a DeltaLogError and writes nothing."""
    saver = fuzz_saver
    before = counts(saver)
    try:
        config = put_values(saver, thread_id, {channel: value}, checkpoint_ns=checkpoint_ns)
    except DeltaLogError:
        assert counts(saver) == before
        return
    ok, expected = expect(saver, value)
    assert ok, f"{value!r} is not serializable but put accepted it"
    found = saver.get_tuple(config)
    assert found is not None
    assert found.config["configurable"]["thread_id"] == thread_id
    assert found.config["configurable"]["checkpoint_ns"] == checkpoint_ns
    assert same(found.checkpoint["channel_values"][channel], expected)
    listed = [checkpoint_id(t.config) for t in saver.list(found.config)]
    assert listed == [checkpoint_id(config)]


@FUZZ
@given(task_id=odd_names, task_path=odd_names, channel=odd_names, value=odd_values)
def test_put_writes_roundtrips_or_refuses_before_writing(
    fuzz_saver: DeltaLogSaver, task_id: str, task_path: str, channel: str, value: Any
) -> None:
    """R1/R9: put_writes with odd task ids, paths, channels and values comes back exactly, or raises a DeltaLogError and writes nothing."""
    saver = fuzz_saver
    config = put_values(saver, "writes-fuzz", {"x": 1})
    before = counts(saver)
    try:
        saver.put_writes(config, [(channel, value), ("other", 1)], task_id, task_path)
    except DeltaLogError:
        assert counts(saver) == before
        return
    ok, expected = expect(saver, value)
    assert ok
    found = saver.get_tuple(config)
    assert found is not None and found.pending_writes is not None
    assert [(t, c) for t, c, _ in found.pending_writes] == [(task_id, channel), (task_id, "other")]
    assert same(found.pending_writes[0][2], expected)


BAD_CONFIGS: list[Any] = [
    None,
    [],
    "thread",
    1,
    {},
    {"configurable": None},
    {"configurable": {}},
    {"configurable": {"thread_id": None}},
    {"configurable": {"thread_id": 1.5}},
    {"configurable": {"thread_id": b"bytes"}},
    {"configurable": {"thread_id": ["list"]}},
    {"configurable": {"thread_id": "t", "checkpoint_ns": 3}},
    {"configurable": {"thread_id": "t", "checkpoint_id": 42}},
    {"configurable": {"thread_id": "t", "checkpoint_id": b"\x00" * 16}},
    {"configurable": {"thread_id": "t", "checkpoint_id": "x" * 10_000}},
    {"configurable": {"thread_id": "t", "checkpoint_id": "\ud800"}},
    {"configurable": {"thread_id": "t", "checkpoint_ns": "\ud800"}},
    {"configurable": {"thread_id": "\ud800"}},
    {"configurable": {"thread_id": 7}},  # documented: ints are converted with str()
    {"configurable": {"thread_id": "t"}},
]
BAD_CHECKPOINTS: list[Any] = [None, [], {}, {"id": 5}, {"id": "x" * 10_000}, "ckpt", "VALID"]
BAD_METADATA: list[Any] = [None, [], "meta", {"k": object()}, {}]
BAD_VERSIONS: list[Any] = [None, [], {"c": object()}, {1: 1}, {"c": None}, {}]
BAD_WRITES: list[Any] = [None, "ab", [("c",)], [(1, 2)], [["c", 1, 2]], [("c", object())], []]
BAD_TASKS: list[Any] = [None, 1, "", "t" * 10_000, "\ud800", "task"]


@FUZZ
@given(
    config=st.sampled_from(BAD_CONFIGS),
    checkpoint=st.sampled_from(BAD_CHECKPOINTS),
    metadata=st.sampled_from(BAD_METADATA),
    versions=st.sampled_from(BAD_VERSIONS),
    writes=st.sampled_from(BAD_WRITES),
    task_id=st.sampled_from(BAD_TASKS),
    task_path=st.sampled_from(BAD_TASKS),
    op=st.sampled_from(["put", "put_writes", "get_tuple", "list", "history", "delete_thread"]),
)
def test_wrong_types_raise_documented_errors_before_writing(
    fuzz_saver: DeltaLogSaver,
    config: Any,
    checkpoint: Any,
    metadata: Any,
    versions: Any,
    writes: Any,
    task_id: Any,
    task_path: Any,
    op: str,
) -> None:
    """R9: wrong types and configs missing keys, anywhere in the public API, raise a DeltaLogError (with the bad value named) and change nothing, or work."""
    saver = fuzz_saver
    if checkpoint == "VALID":
        checkpoint = empty_checkpoint()
    before = counts(saver)
    try:
        if op == "put":
            saver.put(config, checkpoint, metadata, versions)
        elif op == "put_writes":
            saver.put_writes(config, writes, task_id, task_path)
        elif op == "get_tuple":
            saver.get_tuple(config)
        elif op == "list":
            list(saver.list(config, limit=3))
        elif op == "history":
            saver.get_delta_channel_history(config=config, channels=["messages"])
        else:
            saver.delete_thread(config)
    except DeltaLogError as exc:
        assert str(exc), "an error must say what is wrong"
        assert counts(saver) == before
        return


def test_huge_value_roundtrips(make_saver: Any) -> None:
    """R9: a 100 MB channel value and a 100 MB write are stored and read back exactly (the map grows from 64 MiB)."""
    saver: DeltaLogSaver = make_saver()
    big = os.urandom(100 * 1024**2)
    config = put_values(saver, "huge", {"blob": big})
    saver.put_writes(config, [("blob", big)], task_id="huge-task")
    found = saver.get_tuple(config)
    assert found is not None
    assert found.checkpoint["channel_values"]["blob"] == big
    assert found.pending_writes is not None and found.pending_writes[0][2] == big
    assert saver.env.env.info()["map_size"] > 200 * 1024**2
    del found, big


def test_long_ids_are_handled_or_refused(make_saver: Any) -> None:
    """R5/R9: 100 KB thread ids and namespaces work; a 100 KB non-uuid checkpoint id or task id raises KeyTooLongError naming the fix, writing nothing."""
    saver: DeltaLogSaver = make_saver()
    long = "t" * 100_000
    config = put_values(saver, long, {"x": 1}, checkpoint_ns=long + "ns")
    found = saver.get_tuple(config)
    assert found is not None and found.config["configurable"]["thread_id"] == long
    before = counts(saver)
    checkpoint, versions = new_checkpoint(saver, {"x": 2})
    checkpoint["id"] = "c" * 100_000
    with pytest.raises(DeltaLogError, match="checkpoint"):
        saver.put({"configurable": {"thread_id": "t"}}, checkpoint, {}, versions)
    with pytest.raises(DeltaLogError, match="task"):
        saver.put_writes(config, [("x", 1)], task_id="k" * 100_000)
    assert counts(saver) == before


# -- the record decoder -----------------------------------------------------------------------

CODEC = RecordCodec()


def decodes_or_corrupt(data: bytes) -> None:
    """The only two outcomes the decoder may have."""
    try:
        CODEC.decode(data, "fuzz/record")
    except CorruptRecordError as exc:
        assert "fuzz/record" in str(exc)


def with_crc(framed: bytes) -> bytes:
    """Append the codec's checksum, so a fuzzed body reaches the msgpack/zstd parsers."""
    return framed + zlib.crc32(framed).to_bytes(4, "big")


@settings(max_examples=2000, deadline=1000)
@given(st.binary(max_size=4096))
def test_decoder_random_bytes(data: bytes) -> None:
    """Random bytes: a record or CorruptRecordError, never a crash or hang."""
    decodes_or_corrupt(data)


@settings(max_examples=2000, deadline=1000)
@given(tag=st.integers(0, 255), body=st.binary(max_size=4096))
def test_decoder_random_body_with_valid_checksum(tag: int, body: bytes) -> None:
    """Random bodies behind a valid checksum reach ormsgpack and zstd: still only our error."""
    decodes_or_corrupt(with_crc(bytes((tag,)) + body))


VALID_RECORDS = [
    CODEC.encode(["parent", {"messages": "00001.0", "turns": 3}, "msgpack", b"\x81" * 40, 0, None]),
    CODEC.encode(["msgpack", os.urandom(64) + b"lorem ipsum " * 200]),  # compressed
    RecordCodec(compress_threshold=None).encode(["msgpack", b"x" * 300]),
]


@settings(max_examples=2000, deadline=1000)
@given(
    record=st.sampled_from(VALID_RECORDS),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=8),
    fix_crc=st.booleans(),
)
def test_decoder_mutated_records(
    record: bytes, flips: list[tuple[int, int]], fix_crc: bool
) -> None:
    """Valid records with bytes flipped (checksum recomputed or not): a record or our error."""
    framed = bytearray(record[:-4])
    for pos, mask in flips:
        framed[pos % len(framed)] ^= mask
    data = with_crc(bytes(framed)) if fix_crc else bytes(framed) + record[-4:]
    if not fix_crc and bytes(framed) != record[:-4]:  # two flips may cancel out
        with pytest.raises(CorruptRecordError, match="checksum"):
            CODEC.decode(data, "fuzz/record")
    else:
        decodes_or_corrupt(data)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
EMPTY_LAST_RAW_BLOCK = b"\x01\x00\x00"


@pytest.mark.parametrize("declared", [2**31 + 1, 2**40, 2**63])
def test_decoder_refuses_zstd_bombs(declared: int) -> None:
    """A zstd frame declaring a huge content size is refused, not allocated."""
    # Descriptor 0xE0: 8-byte content size, single segment, no checksum, no dictionary.
    bomb = ZSTD_MAGIC + b"\xe0" + declared.to_bytes(8, "little") + EMPTY_LAST_RAW_BLOCK
    with pytest.raises(CorruptRecordError, match="declares"):
        CODEC.decode(with_crc(b"\x01" + bomb), "fuzz/bomb")


def test_decoder_refuses_zstd_frames_of_unknown_size() -> None:
    """A zstd frame that does not declare its size (we never write one) is refused."""
    # Descriptor 0x00: no content size, a window descriptor byte follows.
    frame = ZSTD_MAGIC + b"\x00" + b"\x00" + EMPTY_LAST_RAW_BLOCK
    with pytest.raises(CorruptRecordError):
        CODEC.decode(with_crc(b"\x01" + frame), "fuzz/unknown")


def test_decoder_empty_and_tiny() -> None:
    """Empty and 1–4 byte inputs are refused with our error."""
    for data in (b"", b"\x00", b"\x01\x02", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00"):
        with pytest.raises(CorruptRecordError):
            CODEC.decode(data, "fuzz/tiny")


def test_write_channel_prefix_is_covered_by_the_crc(tmp_path: Path) -> None:
    """A flipped channel id in front of a write is caught on read (CRC covers the prefix)."""
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        config = saver.put({"configurable": {"thread_id": "t"}}, empty_checkpoint(), {}, {})
        saver.put_writes(config, [("a", 1), ("b", 2)], "task")
        key, value = next(iter(saver.env.iter_db("writes")))
        flipped = bytes((value[0], value[1] ^ 0x01)) + value[2:]
        with saver.env.env.begin(write=True) as txn:
            txn.put(key, flipped, db=saver.env.db("writes"))
        with pytest.raises(CorruptRecordError):
            saver.get_tuple(config)
        assert not saver.verify().ok
