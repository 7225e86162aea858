"""Format 12: checkpoint records in a compact form (engine/checkpoint_form.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import ormsgpack
import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver, keys
from deltalog.engine.checkpoint_form import compact, expand
from deltalog.engine.codec import COMPACT, CRC_SIZE, KEYED, RecordCodec
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

from .graphs import cfg, chat_graph, history, human


def _v6(step: int) -> str:
    return str(uuid6(clock_seq=step))


def _wrap(step: int) -> int:
    """The step a UUIDv6 clock sequence of ``step`` reads as (14 bits, signed)."""
    seq = step & 0x3FFF
    return seq - 0x4000 if seq >= 0x2000 else seq


def _body(ts: str, seen: dict[str, dict[str, Any]], updated: list[str] | None) -> bytes:
    return ormsgpack.packb({"v": 4, "ts": ts, "versions_seen": seen, "updated_channels": updated})


def _meta(source: str, step: int, **rest: Any) -> bytes:
    return ormsgpack.packb({"source": source, "step": step, "parents": {}, **rest})


def _record(
    own: str,
    parent: str | None,
    *,
    step: int = 7,
    ts: str | None = None,
    versions: dict[str, Any] | None = None,
    run_id: str | None = None,
    tail: list[Any] | None = None,
) -> list[Any]:
    """A record as CheckpointEnvelope.pack makes it for a LangGraph checkpoint."""
    v1 = "00000000000000000000000000000041.0a1b2c3d"
    v2 = "00000000000000000000000000000042.deadbeef"
    versions = versions if versions is not None else {"__start__": v1, "messages": v2}
    when = ts if ts is not None else datetime.now(timezone.utc).isoformat()
    seen = {"__input__": {}, "model": {"branch:to:model": v1}}
    return [
        None if parent is None else keys.encode_id(parent),
        versions,
        "msgpack",
        _body(when, seen, ["messages"]),
        "msgpack",
        _meta("loop", step, counters_since_delta_snapshot={"messages": [3, 5]}),
        0,
        run_id,
        ["messages"],
        *(tail if tail is not None else [{}, 2]),
    ]


def _round_trip(rec: list[Any], cid: bytes) -> bytes | None:
    small = compact(rec, cid)
    if small is not None:
        back = expand(ormsgpack.unpackb(small), cid)
        assert back == rec
        assert ormsgpack.packb(back) == ormsgpack.packb(rec)
    return small


def test_a_langgraph_record_is_shorter_and_comes_back_exactly() -> None:
    """Parent id, timestamp, versions, source, step and run id all take their short
    forms; the record reads back to the same bytes."""
    own = _v6(7)
    rec = _record(own, _v6(6), run_id=str(uuid.uuid4()))
    small = _round_trip(rec, keys.encode_id(own))
    assert small is not None
    assert len(small) < len(ormsgpack.packb(rec)) - 100
    form = ormsgpack.unpackb(small)
    assert isinstance(form[0], list)  # the parent relative to the id
    assert type(form[3][1]) is int  # ts as µs from the id's time
    assert form[4][:2] == [1, 0]  # "loop", the step the id holds
    assert form[6] == uuid.UUID(rec[7]).bytes


@pytest.mark.parametrize(
    "tail",
    [[], [{"x": ["null", b""]}], [{}, 0], [{"y": ["msgpack", b"\x01"]}, 5]],
    ids=["no-inline", "inline", "mask", "both"],
)
def test_inline_values_and_the_blob_mask_keep_their_shape(tail: list[Any]) -> None:
    own = _v6(3)
    rec = _record(own, _v6(2), step=3, tail=tail)
    assert _round_trip(rec, keys.encode_id(own)) is not None


@pytest.mark.parametrize(
    ("own", "parent"),
    [
        ("plain-string-id", "another-string-id"),  # not UUIDs: the versions still shorten
        (str(uuid.uuid4()), str(uuid.uuid4())),  # UUIDv4: nothing relative to the id
        (_v6(-1), None),  # the input checkpoint: step -1, no parent
        (_v6(-2), "not-a-uuid"),  # a string parent under a UUIDv6 id
        (str(uuid.uuid1()), _v6(1)),  # UUIDv1: its time fields are in another order
    ],
)
def test_ids_of_every_form_read_back(own: str, parent: str | None) -> None:
    rec = _record(own, parent, step=-1 if "-1" in own else 7)
    small = _round_trip(rec, keys.encode_id(own))
    assert small is not None
    if keys.encode_id(own)[0] != 0x10 or uuid.UUID(own).version != 6:
        form = ormsgpack.unpackb(small)
        assert not isinstance(form[0], list) and type(form[3][1]) is str
        assert len(form[4]) == 2  # metadata as it is: its step would need the id


def test_steps_far_from_the_ids_clock_sequence_and_negative_steps() -> None:
    """The id holds the step modulo 2**14; a metadata step anywhere reads back."""
    for step in (-2, -1, 0, 1, 8191, 8192, 16383, 16384, 27000, 10**9):
        own = _v6(step)
        rec = _record(own, _v6(step - 1), step=step)
        small = _round_trip(rec, keys.encode_id(own))
        assert small is not None
        # The step the id holds costs nothing (-1 and -2 included), past 8,191 too
        # (format 13): the turns of the clock sequence are in the source's number.
        source, dstep, _ = ormsgpack.unpackb(small)[4]
        assert dstep == 0
        assert source == 1 + 4 * ((step - _wrap(step)) >> 14)
        rec = _record(own, _v6(step - 1), step=step + 5)  # a step the id does not hold
        assert _round_trip(rec, keys.encode_id(own)) is not None
        rec = _record(own, _v6(step - 1), step=step - 20_000)  # far below it
        assert _round_trip(rec, keys.encode_id(own)) is not None


@pytest.mark.parametrize("step", [8192, 16384, 27000, 10**9])
def test_a_format_12_step_past_the_clock_sequence_still_reads(step: int) -> None:
    """Format 12 kept the turns of the clock sequence in the step's difference (the
    source's number below 4): such a record reads the same step under format 13."""
    own = _v6(step)
    cid = keys.encode_id(own)
    rec = _record(own, _v6(step - 1), step=step)
    form = ormsgpack.unpackb(compact(rec, cid) or b"")
    form[4] = [1, step - _wrap(step), form[4][2]]  # as format 12 wrote it
    assert expand(form, cid) == rec


def test_longer_threads_keep_the_record_bytes_of_a_young_one() -> None:
    """Past step 8,191 a record differs from a young thread's only in the source's
    number (the dictionary, trained early, matches the rest)."""
    forms = []
    for step in (300, 27000):
        own = _v6(step)
        small = compact(_record(own, _v6(step - 1), step=step), keys.encode_id(own))
        assert small is not None
        forms.append(ormsgpack.unpackb(small)[4])
    (source, dstep, rest), (old_source, old_dstep, old_rest) = forms
    assert (old_dstep, old_rest) == (dstep, rest) and 0 <= source < old_source < 128


@pytest.mark.parametrize(
    "ts",
    [
        "2026-12-05T01:00:13+00:00",  # microsecond 0: isoformat leaves out the fraction
        "2020-01-01T00:00:00.000001+00:00",  # years before the id
        "2026-12-05T01:00:13.123456+02:00",  # another offset: kept as text
        "2026-12-05T01:00:13.123456",  # naive: kept as text
        "2026-12-05 01:00:13.123456+00:00",  # a space for the T: kept as text
        "not a time",
    ],
)
def test_timestamps_that_are_not_isoformat_utc_stay_text(ts: str) -> None:
    own = _v6(7)
    rec = _record(own, _v6(6), ts=ts)
    small = _round_trip(rec, keys.encode_id(own))
    assert small is not None
    relative = type(ormsgpack.unpackb(small)[3][1]) is int
    assert relative == (ts.endswith("+00:00") and "T" in ts)


def test_versions_of_every_type_keep_their_type_and_order() -> None:
    """int, float and other strings are kept as they are; 1, 1.0 and True stay apart."""
    own = _v6(7)
    versions = {
        "a": 1,
        "b": 1.0,
        "c": True,
        "d": "00000000000000000000000000000007.0.8148739101957462",
        "e": "00000000000000000000000000000041.0A1B2C3D",  # upper-case hex: not minted here
        "f": "00000000000000000000000000000041.0a1b2c3d",
        "g": "00000000000000000000000000000041.0a1b2c3d",
        "h": "١١١١١١١١١١١١١١١١١١١١١١١١١١١١١١١١.0a1b2c3d",  # not ASCII digits
    }
    rec = _record(own, _v6(6), versions=versions)
    small = _round_trip(rec, keys.encode_id(own))
    assert small is not None
    back = expand(ormsgpack.unpackb(small), keys.encode_id(own))
    assert list(back[1]) == list(versions)
    assert [type(v) for v in back[1].values()] == [type(v) for v in versions.values()]


def test_records_of_another_serializer_keep_their_bytes() -> None:
    """An encrypted or other serializer's body and metadata are kept as they are."""
    own = _v6(7)
    rec = _record(own, _v6(6))
    rec[2:6] = ["msgpack+aes", b"\x01\x02secret", "json", b'{"source": "loop"}']
    small = _round_trip(rec, keys.encode_id(own))
    assert small is not None
    form = ormsgpack.unpackb(small)
    assert form[3] == ["msgpack+aes", b"\x01\x02secret"] and form[4][0] == "json"


def test_a_body_with_other_keys_or_an_extension_type_is_kept() -> None:
    own = _v6(7)
    rec = _record(own, _v6(6))
    rec[3] = ormsgpack.packb({"v": 1, "ts": "x", "pending_sends": [], "versions_seen": {}})
    assert _round_trip(rec, keys.encode_id(own)) is not None
    rec[3] = b"\xc7\x03\x05abc"  # an ext type
    rec[5] = b"\x81\xa6source\xc7\x01\x05a"  # metadata whose source is an ext type
    small = _round_trip(rec, keys.encode_id(own))
    assert small is not None
    form = ormsgpack.unpackb(small)
    assert form[3][1] == rec[3] and form[4][1] == rec[5]


def test_nothing_compact_for_a_record_that_would_not_come_back() -> None:
    own = keys.encode_id(_v6(1))
    assert compact([1, 2, 3], own) is None
    rec = _record(_v6(1), None, versions={"a": [1, 2]})  # an unhashable version
    assert compact(rec, own) is None
    rec = _record(_v6(1), None)
    rec[1] = {"a": 1}
    rec[3], rec[5] = b"", b""
    # Nothing to shorten: not shorter than the full form.
    assert compact(rec, own) is None


def test_a_record_written_without_its_ids_time_ignores_a_key_tail_that_looks_like_one() -> None:
    """The key's last 17 bytes are the id only for a UUID id; a record whose id was
    not one holds nothing relative to it, so any tail (a copy under another thread
    changes a short id's) reads the same record."""
    own = "x"
    rec = _record(own, "w")
    small = compact(rec, keys.encode_id(own))
    assert small is not None
    for tail in (keys.encode_id(_v6(5)), keys.encode_id(_v6(-1)), b"\x10" * 17):
        assert expand(ormsgpack.unpackb(small), tail) == rec


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (0, [1, 2]),  # a relative parent of two fields
        (0, [1, 2**14, b"\x00" * 6]),  # a sequence difference out of range
        (0, [2**62, 0, b"\x00" * 6]),  # a parent time before the epoch
        (1, [0, [1, 2], b"\x00" * 4]),  # two counter items, one suffix
        (1, [0, [1], b"\x00" * 4]),  # a counter below zero
        (1, [5, [[1, 2]], b""]),  # an item that is not one version
        (2, {"a": 9}),  # a position past the table
        (2, {"a": -1}),  # a negative position
        (3, [1, 2, 3]),  # a checkpoint field of three items
        (4, [-1, 0, {}]),  # a source number below zero (past 3: turns of the clock sequence)
        (4, [1, "x", {}]),  # a step that is not an int
    ],
)
def test_a_damaged_compact_record_is_refused(field: int, value: Any) -> None:
    own = _v6(7)
    rec = _record(own, _v6(6))
    small = compact(rec, keys.encode_id(own))
    assert small is not None
    form = ormsgpack.unpackb(small)
    form[field] = value
    with pytest.raises(ValueError):
        expand(form, keys.encode_id(own))


def test_relative_fields_need_a_uuidv6_id() -> None:
    own = _v6(7)
    rec = _record(own, _v6(6))
    small = compact(rec, keys.encode_id(own))
    assert small is not None
    with pytest.raises(ValueError, match="UUIDv6"):
        expand(ormsgpack.unpackb(small), keys.encode_id("x"))


versions_st = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.builds(
        lambda n, s: f"{n:032}.{s.hex()}",
        st.integers(0, 10**32 - 1),
        st.binary(min_size=4, max_size=4),
    ),
    st.text(max_size=12),
)
names_st = st.text(min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    own_step=st.integers(-3, 40_000),
    parent=st.one_of(st.none(), st.just("v6"), st.just("v4"), st.text(min_size=1, max_size=20)),
    versions=st.dictionaries(names_st, versions_st, max_size=5),
    seen=st.dictionaries(names_st, st.dictionaries(names_st, versions_st, max_size=3), max_size=3),
    step=st.integers(-(2**40), 2**40),
    source=st.sampled_from(["input", "loop", "update", "fork", "other"]),
    ts_us=st.integers(-(10**12), 10**12),
    run=st.one_of(st.none(), st.just("uuid"), st.text(max_size=40)),
    tail=st.sampled_from([[], [{}, 0], [{"c": ["null", b""]}], [{"c": ["str", b"x"]}, 3]]),
)
def test_any_record_reads_back_exactly(
    own_step: int,
    parent: str | None,
    versions: dict[str, Any],
    seen: dict[str, dict[str, Any]],
    step: int,
    source: str,
    ts_us: int,
    run: str | None,
    tail: list[Any],
) -> None:
    own = _v6(own_step)
    parent_id = {"v6": _v6(own_step - 1), "v4": str(uuid.uuid4())}.get(parent or "", parent)
    when = datetime.fromtimestamp(1_700_000_000 + ts_us / 1e6, timezone.utc).isoformat()
    rec = [
        None if parent_id is None else keys.encode_id(parent_id),
        versions,
        "msgpack",
        _body(when, seen, sorted(versions)),
        "msgpack",
        _meta(source, step),
        0,
        str(uuid.uuid4()) if run == "uuid" else run,
        [],
        *tail,
    ]
    cid = keys.encode_id(own)
    small = compact(rec, cid)
    if small is not None:
        back = expand(ormsgpack.unpackb(small), cid)
        assert ormsgpack.packb(back) == ormsgpack.packb(rec)
        assert [type(v) for v in back[1].values()] == [type(v) for v in versions.values()]


def test_the_codec_frames_a_compact_record_over_its_key_only() -> None:
    codec = RecordCodec()
    own = _v6(7)
    key = keys.checkpoint_key(1, 1, keys.encode_id(own))
    raw, full = codec.encode_checkpoint(_record(own, _v6(6)), key, keys.encode_id(own))
    assert raw[0] & (KEYED | COMPACT) == KEYED | COMPACT
    assert ormsgpack.packb(codec.decode(raw, "t", key=key)) == full
    with pytest.raises(ValueError, match="over its key"):
        codec.encode_body(b"\x90", compact=True)
    # Read under another id (a key that is not its own): the CRC refuses it.
    other = keys.checkpoint_key(1, 1, keys.encode_id(_v6(7)))
    with pytest.raises(CorruptRecordError):
        codec.decode(raw, "t", key=other)
    for i in range(len(raw) - CRC_SIZE):
        flipped = raw[:i] + bytes((raw[i] ^ 0x40,)) + raw[i + 1 :]
        with pytest.raises(CorruptRecordError):
            codec.decode(flipped, "t", key=key)


def test_a_graph_stores_compact_records_and_reads_like_in_memory(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Every checkpoint of a chat (sf=5, and a time-travel fork with update_state) is
    compact; the whole history equals InMemorySaver's, and verify passes."""
    saver = make_saver()
    graph = chat_graph(5).compile(checkpointer=saver)
    reference = chat_graph(5).compile(checkpointer=InMemorySaver())
    for g in (graph, reference):
        for turn in range(12):
            g.invoke({"messages": [human(turn)]}, cfg("t"))
        past = list(g.get_state_history(cfg("t")))[7].config
        forked = g.update_state(past, {"messages": [human(99)]})
        g.invoke(None, forked)
    tags = [v[0] for _, v in saver.env.iter_db("checkpoints")]
    assert tags and all(t & COMPACT for t in tags)
    assert history(graph, cfg("t")) == history(reference, cfg("t"))
    assert saver.verify(deep=True).ok


def test_the_empty_checkpoint_and_a_string_id_through_the_saver(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Puts with LangGraph's empty checkpoint (uuid6 clock_seq -2) and a string id, a
    copy to another thread, then reads of both."""
    saver = make_saver()
    base = empty_checkpoint()
    c1 = saver.put(cfg("a"), base, {"source": "input", "step": -1, "parents": {}}, {})
    c2 = saver.put(
        c1, {**base, "id": "my-own-id"}, {"source": "loop", "step": 0, "parents": {}}, {}
    )
    saver.copy_thread("a", "b")
    for thread in ("a", "b"):
        got = saver.get_tuple(cfg(thread))
        assert got is not None and got.checkpoint["id"] == "my-own-id"
        assert got.checkpoint["ts"] == base["ts"]
        assert got.parent_config is not None
        assert got.parent_config["configurable"]["checkpoint_id"] == base["id"]
        assert got.metadata == {"source": "loop", "step": 0, "parents": {}}
        first = saver.get_tuple({"configurable": {**c1["configurable"], "thread_id": thread}})
        assert first is not None and first.metadata["step"] == -1
    assert c2["configurable"]["checkpoint_id"] == "my-own-id"


def test_float_versions_that_compare_equal_stay_apart() -> None:
    """-0.0 == 0.0, yet msgpack keeps them apart; NaN is not equal to itself."""
    own = _v6(7)
    versions = {"a": 0.0, "b": -0.0, "c": float("nan"), "d": float("nan"), "e": 0}
    rec = _record(own, _v6(6), versions=versions)
    small = compact(rec, keys.encode_id(own))
    assert small is not None
    back = expand(ormsgpack.unpackb(small), keys.encode_id(own))
    assert ormsgpack.packb(back) == ormsgpack.packb(rec)


def test_a_key_given_as_a_buffer_reads_the_same() -> None:
    """A key handed over as a writable buffer (unhashable, unlike bytes) reads the same."""
    codec = RecordCodec()
    own = _v6(7)
    key = keys.checkpoint_key(1, 1, keys.encode_id(own))
    raw, full = codec.encode_checkpoint(_record(own, _v6(6)), key, keys.encode_id(own))
    buffer = memoryview(bytearray(key))
    assert ormsgpack.packb(codec.decode(raw, "t", key=buffer)) == full  # type: ignore[arg-type]
