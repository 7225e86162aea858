"""Key codec: byte order equals logical order, decoding round-trips, keys fit LMDB (R1, R4, R5)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from deltalog.engine import keys
from deltalog.engine.errors import CorruptRecordError, DamagedKeyError, KeyTooLongError
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base.id import uuid6
from ulid import ULID

texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
task_paths = st.one_of(texts, st.sampled_from(["", "~__pregel_pull, model", "~__pregel_push, 0"]))
idxs = st.integers(min_value=-4, max_value=2**20)


task_ids = st.one_of(texts, st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()))


def _family(task_id: str) -> int:
    """0 for a canonical (lowercase) UUID string, held in 16 bytes; 1 for any other."""
    return 0 if re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", task_id) else 1


@given(st.lists(st.tuples(task_ids, idxs), min_size=2, max_size=30))
def test_write_keys_sort_by_task_id_then_idx(items: list[tuple[str, int]]) -> None:
    """R1 (format 7): sorted(encode(k)) == encode(sorted(k)) for (task_id, idx), idx signed,
    UUID task ids (16 bytes) before the others; reads sort by writes_sort_key themselves."""
    cid = keys.encode_id(str(uuid6()))
    encoded = {keys.write_key(1, 2, cid, t, i): (t, i) for t, i in items}
    assert [encoded[k] for k in sorted(encoded)] == sorted(
        set(items), key=lambda x: (_family(x[0]), x[0], x[1])
    )


@given(st.lists(st.tuples(task_paths, texts, idxs), min_size=2, max_size=30))
def test_legacy_write_keys_sort_like_writes_sort_key(items: list[tuple[str, str, int]]) -> None:
    """R1 (formats 1-6, read by read-only opens and the 6 → 7 step): sorted(encode(k)) ==
    encode(sorted(k)) for (task_path, task_id, idx)."""
    cid = keys.encode_id(str(uuid6()))
    encoded = {keys.legacy_write_key(1, 2, cid, p, t, i): (p, t, i) for p, t, i in items}
    assert [encoded[k] for k in sorted(encoded)] == sorted(set(items))


@given(task_ids, idxs)
def test_write_key_round_trip(task_id: str, idx: int) -> None:
    """Decoding a write key gives back every component exactly (NUL and unicode included);
    a canonical UUID task id takes 16 bytes."""
    cid_str = str(uuid6())
    key = keys.write_key(7, 9, keys.encode_id(cid_str), task_id, idx)
    assert keys.decode_write_key(key) == (7, 9, cid_str, task_id, idx)
    assert len(keys.encode_task_id(task_id)) == (
        17 if _family(task_id) == 0 else 1 + len(keys.encode_str(task_id))
    )


@given(task_paths, texts, idxs)
def test_legacy_write_key_round_trip(task_path: str, task_id: str, idx: int) -> None:
    """Decoding a formats 1-6 write key gives back every component exactly."""
    cid_str = str(uuid6())
    key = keys.legacy_write_key(7, 9, keys.encode_id(cid_str), task_path, task_id, idx)
    assert keys.decode_legacy_write_key(key) == (7, 9, cid_str, task_path, task_id, idx)


def test_a_uuid_task_id_has_one_spelling() -> None:
    """A canonical UUID task id spelled as a str field is a damaged key (its second
    spelling), not a second write of the same task."""
    cid = keys.encode_id(str(uuid6()))
    task_id = "1bb50c02-1071-7c23-a1d4-0f0b2c0e4d11"
    good = keys.write_key(1, 1, cid, task_id, 0)
    second = (
        keys.uid(1) + keys.uid(1) + cid + b"\x30" + keys.encode_str(task_id) + keys.encode_idx(0)
    )
    assert good != second and keys.decode_write_key(good)[3] == task_id
    with pytest.raises(DamagedKeyError, match="canonical form"):
        keys.decode_write_key(second)


@given(st.lists(texts, min_size=2, max_size=30))
def test_string_encoding_is_order_preserving(values: list[str]) -> None:
    """The escaped string encoding sorts exactly like Python strings, NUL included."""
    encoded = {keys.encode_str(v): v for v in values}
    assert [encoded[k] for k in sorted(encoded)] == sorted(set(values))
    for v in values:
        assert keys.decode_str(keys.encode_str(v) + b"tail", 0) == (v, len(keys.encode_str(v)))


def test_nul_does_not_alias() -> None:
    """R5: ("a\\x00", "b") and ("a", "\\x00b") — the NUL-join trap — encode differently."""
    cid = keys.encode_id(str(uuid6()))
    assert keys.legacy_write_key(1, 1, cid, "a\x00", "b", 0) != keys.legacy_write_key(
        1, 1, cid, "a", "\x00b", 0
    )
    assert keys.write_key(1, 1, cid, "a\x00", 0) != keys.write_key(1, 1, cid, "a", 0)


@given(st.lists(st.uuids().map(str), min_size=2, max_size=20, unique=True))
def test_uuid_ids_sort_and_round_trip(ids: list[str]) -> None:
    """R4: canonical uuid ids (uuid6 included) are 17 bytes, sort like their strings, come back exactly."""
    encoded = {keys.encode_id(i): i for i in ids}
    assert all(len(k) == 17 for k in encoded)
    assert [encoded[k] for k in sorted(encoded)] == sorted(ids)
    assert all(keys.decode_id(k, 0)[0] == i for k, i in encoded.items())


@given(
    st.lists(
        st.binary(min_size=16, max_size=16).map(lambda b: str(ULID.from_bytes(b))),
        min_size=2,
        max_size=20,
        unique=True,
    )
)
def test_ulid_ids_sort_and_round_trip(ids: list[str]) -> None:
    """R4: ULIDs are 17 bytes, sort like their strings and come back exactly."""
    encoded = {keys.encode_id(i): i for i in ids}
    assert all(len(k) == 17 for k in encoded)
    assert [encoded[k] for k in sorted(encoded)] == sorted(ids)
    assert all(keys.decode_id(k, 0)[0] == i for k, i in encoded.items())


@given(texts)
def test_other_string_ids_round_trip(value: str) -> None:
    """R4: ids that are not uuid/ULID strings are kept verbatim (uppercase uuids too)."""
    assert keys.decode_id(keys.encode_id(value), 0)[0] == value


@given(
    st.one_of(
        st.uuids().map(str),
        st.binary(min_size=16, max_size=16).map(lambda b: str(ULID.from_bytes(b))),
        texts,
    ),
    st.binary(max_size=8),
)
def test_id_end_is_where_decode_id_stops(value: str, tail: bytes) -> None:
    """id_end finds the end of every kind of id without building it, as decode_id does."""
    buf = b"\x05" + keys.encode_id(value) + tail
    assert keys.id_end(buf, 1) == keys.decode_id(buf, 1)[1] == len(buf) - len(tail)


def test_id_end_refuses_a_cut_short_or_unknown_id() -> None:
    """A uuid cut short, or an unknown tag, is a damaged key, as for decode_id."""
    encoded = keys.encode_id(str(uuid6()))
    with pytest.raises(DamagedKeyError, match="cut short"):
        keys.id_end(encoded[:10], 0)
    with pytest.raises(DamagedKeyError, match="unknown id tag"):
        keys.id_end(b"\xee" + encoded[1:], 0)


def test_uppercase_uuid_is_returned_verbatim() -> None:
    """A non-canonical uuid string is stored as a string, so it is returned exactly as given."""
    raw = str(uuid.uuid4()).upper()
    assert keys.decode_id(keys.encode_id(raw), 0)[0] == raw


@given(st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), texts))
def test_version_round_trip(version: int | float | str) -> None:
    """Channel versions of every type decode to themselves."""
    decoded, _ = keys.decode_version(keys.encode_version(version), 0)
    assert decoded == version and type(decoded) is type(version)


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, unique=True))
def test_int_versions_sort(values: list[int]) -> None:
    """Integer versions sort numerically in byte order (blob keys of one channel in version order)."""
    encoded = {keys.encode_version(v): v for v in values}
    assert [encoded[k] for k in sorted(encoded)] == sorted(values)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=True), min_size=2, unique=True))
def test_float_versions_sort(values: list[float]) -> None:
    """Float versions sort numerically in byte order."""
    encoded = {keys.encode_version(v): v for v in values if v != 0.0 or str(v) == "0.0"}
    assert [encoded[k] for k in sorted(encoded)] == sorted(encoded.values())


@settings(max_examples=25)
@given(st.text(min_size=401, max_size=10_000))
def test_long_names_are_hashed_under_the_key_limit(name: str) -> None:
    """R5: a 10 KB thread_id still makes a names key under 511 bytes."""
    assert len(keys.name_key(keys.KIND_THREAD, name)) <= keys.MAX_KEY


def test_long_task_id_raises_key_too_long() -> None:
    """R9: a write key over 511 bytes raises KeyTooLongError naming the fix (a task path
    of any length is fine: it is in the record since format 7)."""
    cid = keys.encode_id(str(uuid6()))
    with pytest.raises(KeyTooLongError, match="LMDB's limit"):
        keys.write_key(1, 1, cid, "x" * 600, 0)


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize(
    "version", ["00000000000000000000000000000003.0.123", 7, -2.5, "v\x00x", "a" * 150]
)
def test_blob_key_round_trip(legacy: bool, version: str | int | float) -> None:
    """Blob keys decode to (thread, ns, channel, version) in both layouts, and their
    parts (channel, version bytes, another version's key) split out without decoding."""
    key = keys.blob_key(3, 4, 300, version, legacy=legacy)
    assert keys.decode_blob_key(key, legacy=legacy) == (3, 4, 300, version)
    assert keys.blob_channel(key, legacy=legacy) == keys.uid(300)
    assert keys.blob_version_bytes(key, legacy=legacy) == keys.encode_version(version)
    other = keys.encode_version(9)
    assert keys.blob_base_key(key, other, legacy=legacy) == keys.blob_key(
        3, 4, 300, 9, legacy=legacy
    )
    assert keys.version_end(key, 4 if not legacy else 7) == len(key) - (0 if legacy else 3)


def test_blob_keys_are_version_major() -> None:
    """Format 10: a (thread, ns)'s blobs sort by version, then channel, so a step's new
    blobs (one version for every channel it wrote) follow every older one; formats 1-9
    sorted by channel first."""
    v1, v2 = "00000000000000000000000000000001.ab", "00000000000000000000000000000002.cd"
    new = sorted(keys.blob_key(1, 1, c, v) for c in (2, 9) for v in (v1, v2))
    assert [keys.decode_blob_key(k)[2:] for k in new] == [(2, v1), (9, v1), (2, v2), (9, v2)]
    old = sorted(keys.blob_key(1, 1, c, v, legacy=True) for c in (2, 9) for v in (v1, v2))
    assert [keys.decode_blob_key(k, legacy=True)[2:] for k in old] == [
        (2, v1),
        (2, v2),
        (9, v1),
        (9, v2),
    ]
    # This key of the old layout does not decode as one of the new.
    with pytest.raises(DamagedKeyError):
        keys.decode_blob_key(keys.blob_key(1, 1, 2, v1, legacy=True))


@given(st.one_of(st.uuids().map(str), texts, st.text(min_size=401, max_size=2000)))
def test_run_key_round_trip(run_id: str) -> None:
    """The run index key gives back (thread, ns, checkpoint_id) for any run id."""
    cid = str(uuid6())
    key = keys.run_key(keys.encode_run(run_id), 11, 12, keys.encode_id(cid))
    assert keys.decode_run_key(key) == (11, 12, cid)
    assert len(key) <= keys.MAX_KEY


@given(st.integers(0, 2**64 - 1), st.text(alphabet="0123456789abcdef.", max_size=20))
def test_counter_versions_are_compact_and_exact(counter: int, rest: str) -> None:
    """Savers' "<32-digit counter>.<random>" versions take 9 bytes + rest and decode exactly."""
    version = f"{counter:032}.{rest}"
    encoded = keys.encode_version(version)
    assert len(encoded) == 9 + len(keys.encode_str(rest))
    assert keys.decode_version(encoded, 0) == (version, len(encoded))


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.text(alphabet="0123456789abcdef", max_size=8)),
        min_size=2,
        unique=True,
    )
)
def test_counter_versions_sort_like_strings(items: list[tuple[int, str]]) -> None:
    """Compact counter versions keep string order (the delta base is the previous version)."""
    versions = [f"{c:032}.{r}" for c, r in items]
    encoded = {keys.encode_version(v): v for v in versions}
    assert [encoded[k] for k in sorted(encoded)] == sorted(versions)


GOOD_WRITE_KEY = keys.write_key(3, 1, keys.encode_id(str(uuid6())), "task", 2)
GOOD_BLOB_KEY = keys.blob_key(3, 1, 7, "00000000000000000000000000000002.0.5")


@pytest.mark.parametrize(
    ("decode", "key"),
    [
        (keys.decode_checkpoint_key, b""),
        (keys.decode_checkpoint_key, b"\x20" + bytes(40)),  # uid length byte flipped
        (keys.decode_checkpoint_key, keys.uid(3) + keys.uid(1) + b"\x10" + bytes(5)),
        (keys.decode_checkpoint_key, keys.uid(3) + keys.uid(1) + b"\x7f" + bytes(16)),
        (keys.decode_checkpoint_key, keys.uid(3) + keys.uid(1) + b"\x30abc"),  # no terminator
        (keys.decode_checkpoint_key, keys.uid(3) + keys.uid(1) + b"\x30\xff\xfe\x00\x00"),
        (keys.decode_checkpoint_key, keys.uid(3) + keys.uid(1) + b"\x30a\x00\x07"),
        (keys.decode_write_key, GOOD_WRITE_KEY[:-1]),
        (keys.decode_write_key, GOOD_WRITE_KEY + b"\x00"),
        (keys.write_idx, b"\x01"),
        (keys.decode_blob_key, GOOD_BLOB_KEY[:-30]),
        (keys.decode_blob_key, GOOD_BLOB_KEY[:9] + b"\x09"),
        (keys.decode_run_key, b""),
        (keys.decode_run_key, b"\x99" + bytes(20)),
    ],
)
def test_damaged_keys_raise_a_named_corrupt_record_error(decode: Any, key: bytes) -> None:
    """LMDB keeps no checksum of keys: undecodable key bytes raise DamagedKeyError (a
    CorruptRecordError, and still a ValueError) naming the key, never IndexError,
    struct.error or UnicodeDecodeError."""
    with pytest.raises(DamagedKeyError, match="deltalog verify") as info:
        decode(key)
    assert isinstance(info.value, CorruptRecordError) and isinstance(info.value, ValueError)


def test_the_undamaged_keys_of_those_cases_decode() -> None:
    assert keys.decode_write_key(GOOD_WRITE_KEY)[3:] == ("task", 2)
    assert keys.write_idx(GOOD_WRITE_KEY) == 2
    assert keys.decode_blob_key(GOOD_BLOB_KEY) == (3, 1, 7, "00000000000000000000000000000002.0.5")
