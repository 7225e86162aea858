"""The bytes of a framed record follow docs/storage-format.md exactly: tag byte (with
the KEYED bit when framed over its key), body, CRC-32 over tag and body seeded with
the key's CRC, then the prefix. Every encoder path builds them the same way, so a
store written by any version reads the same."""

from __future__ import annotations

import zlib

import pytest
from deltalog.engine import codec
from deltalog.engine.codec import KEYED, TAG_PLAIN, TAG_ZSTD, RecordCodec
from deltalog.engine.errors import CorruptRecordError
from hypothesis import given, settings
from hypothesis import strategies as st


def _documented(tag: int, body: bytes, key: bytes | None, prefix: bytes) -> bytes:
    head = bytes((tag | (KEYED if key is not None else 0),))
    seed = zlib.crc32(prefix, zlib.crc32(key) if key is not None else 0)
    return head + body + zlib.crc32(head + body, seed).to_bytes(4, "big")


@settings(max_examples=300, deadline=None)
@given(
    tag=st.sampled_from([TAG_PLAIN, TAG_ZSTD]),
    body=st.binary(max_size=3000),
    key=st.none() | st.binary(min_size=1, max_size=64),
    prefix=st.binary(max_size=8),
)
def test_sealed_frames_follow_the_documented_layout(
    tag: int, body: bytes, key: bytes | None, prefix: bytes
) -> None:
    assert codec._seal_body(tag, body, key, prefix) == _documented(tag, body, key, prefix)
    assert codec._seal(bytes((tag,)) + body, key, prefix) == _documented(tag, body, key, prefix)


@settings(max_examples=100, deadline=None)
@given(
    body=st.binary(max_size=3000) | st.text(max_size=1500).map(lambda t: (t * 3).encode()),
    key=st.none() | st.binary(min_size=1, max_size=64),
    fast=st.booleans(),
)
def test_encoded_bodies_are_framed_as_documented_and_decode(
    body: bytes, key: bytes | None, fast: bool
) -> None:
    rc = RecordCodec()
    framed = rc.encode_body(body, key=key, compress_from=96, fast=fast)
    tag = framed[0] & ~KEYED
    payload = framed[1:-4]
    assert tag in (TAG_PLAIN, TAG_ZSTD)
    assert framed == _documented(tag, payload, key, b"")
    inner = payload if tag == TAG_PLAIN else rc.compressor.decompress(payload)
    assert inner == body


@settings(max_examples=60, deadline=None)
@given(
    body=st.binary(max_size=3000) | st.text(max_size=1500).map(lambda t: (t * 3).encode()),
    key=st.binary(min_size=1, max_size=64),
    prefix=st.binary(max_size=8),
    compact=st.booleans(),
)
def test_body_gives_back_what_was_compressed_and_checks_the_crc(
    body: bytes, key: bytes, prefix: bytes, compact: bool
) -> None:
    """``RecordCodec.body``: the bytes ``encode_body`` framed (plain or compressed,
    a compact record not expanded), checked against key and prefix; a flipped bit
    anywhere, or the wrong key or prefix, is a CorruptRecordError."""
    rc = RecordCodec()
    framed = rc.encode_body(body, key=key, prefix=prefix, compress_from=96, compact=compact)
    assert rc.body(framed, "t", key=key, prefix=prefix) == body
    with pytest.raises(CorruptRecordError, match="record t cannot be decoded"):
        rc.body(framed, "t", key=key + b"x", prefix=prefix)
    with pytest.raises(CorruptRecordError):
        rc.body(framed, "t", key=key, prefix=prefix + b"x")
    damaged = bytearray(framed)
    damaged[len(damaged) // 2] ^= 0x10
    with pytest.raises(CorruptRecordError):
        rc.body(bytes(damaged), "t", key=key, prefix=prefix)


def test_body_of_a_delta_is_none() -> None:
    rc = RecordCodec()
    base = bytes(range(256)) * 40
    record = rc.encode_delta(("msgpack", base + b"more"), base, b"\x01ref", 1, key=b"k")
    assert record is not None and record[0] & ~KEYED in codec.DELTA_TAGS
    assert rc.body(record, "t", key=b"k") is None
