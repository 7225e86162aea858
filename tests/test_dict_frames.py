"""Format 9: a record compressed with the trained dictionary is framed as ``0x04 · u8
dictionary id · the zstd frame without its magic number and without a dictionary id ·
CRC-32``, 11 bytes less than format 8's ``0x03 · u32 id · frame · CRC-32``; records
framed the format-8 way (every store written before) still read, in the codec and
through a store."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
import zstandard
from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.scenarios import CHAT_SCENARIOS
from deltalog.engine import DeltaLogSaver, checkpoint_form
from deltalog.engine.codec import (
    COMPACT,
    CRC_SIZE,
    ID_TAIL,
    KEYED,
    TAG_DICT,
    TAG_DICT_COMPACT,
    ZSTD_MAGIC,
    RecordCodec,
)
from deltalog.engine.errors import CorruptRecordError


def _body(i: int) -> bytes:
    """A checkpoint-like envelope: the same field names and shapes, changing numbers."""
    return ormsgpack.packb(
        [
            f"parent-{i:08d}".encode(),
            {"messages": f"{i:032d}.{i * 7919 % 65536:08x}", "__start__": f"{i:032d}.00"},
            "msgpack",
            {"v": 4, "ts": f"2026-12-04T18:{i % 60:02d}:00.{i:06d}+00:00", "step": i},
            {"source": "loop", "step": i, "parents": {}},
        ]
    )


def _trained() -> RecordCodec:
    """A codec with both dictionaries, the final one (id 1) active."""
    codec = RecordCodec()
    i = 0
    while codec.active_dictionary != 1:
        while not codec.wants_training:
            codec.encode_body(_body(i))
            i += 1
        codec.install(*codec.train(), activate=True)
    return codec


def _format_8(codec: RecordCodec, body: bytes, key: bytes, prefix: bytes = b"") -> bytes:
    """``body`` framed as format 8 framed it: tag 0x03, a four-byte dictionary id and
    zstd's own frame, dictionary id included (docs/storage-format.md, format 8)."""
    dictionary = zstandard.ZstdCompressionDict(codec.dictionaries[1])
    frame = zstandard.ZstdCompressor(level=3, dict_data=dictionary).compress(body)
    assert zstandard.get_frame_parameters(frame).dict_id != 0
    framed = bytes((TAG_DICT | KEYED,)) + (1).to_bytes(4, "big") + frame
    crc = zlib.crc32(framed, zlib.crc32(prefix, zlib.crc32(key)))
    return framed + crc.to_bytes(CRC_SIZE, "big")


def test_a_dictionary_record_is_eleven_bytes_shorter_and_decodes() -> None:
    codec = _trained()
    key = b"k" * 21
    for i in range(1000, 1040):
        body = _body(i)
        framed = codec.encode_body(body, key=key)
        assert framed[0] == TAG_DICT_COMPACT | KEYED
        assert framed[1] == 1  # the dictionary id, one byte
        frame = ZSTD_MAGIC + framed[2:-CRC_SIZE]
        params = zstandard.get_frame_parameters(frame)
        assert params.dict_id == 0 and params.content_size == len(body)
        assert codec.decode(framed, "test", key=key) == ormsgpack.unpackb(body)
        assert codec.raw_size(framed, "test", key=key) == len(body) + 1
        old = _format_8(codec, body, key)
        assert len(old) - len(framed) == 11
        assert codec.decode(old, "test", key=key) == ormsgpack.unpackb(body)
        assert codec.raw_size(old, "test", key=key) == len(body) + 1


def test_a_dictionary_id_above_255_keeps_the_four_byte_frame() -> None:
    codec = _trained()
    codec.install(300, codec.dictionaries[1], activate=True)
    body = _body(2000)
    framed = codec.encode_body(body, key=b"k")
    assert framed[0] == TAG_DICT | KEYED
    assert int.from_bytes(framed[1:5], "big") == 300
    assert zstandard.get_frame_parameters(framed[5:-CRC_SIZE]).content_size == len(body)
    assert codec.decode(framed, "test", key=b"k") == ormsgpack.unpackb(body)


def test_a_damaged_compact_frame_is_damage_not_data() -> None:
    codec = _trained()
    framed = bytearray(codec.encode_body(_body(3000), key=b"k"))
    for pos in (1, 2, len(framed) // 2, len(framed) - 1):
        damaged = bytearray(framed)
        damaged[pos] ^= 0x10
        with pytest.raises(CorruptRecordError, match="checksum mismatch"):
            codec.decode(bytes(damaged), "test", key=b"k")
    # A frame whose CRC was recomputed over garbage still fails in zstd, as damage.
    garbage = bytes(framed[:2]) + b"\xff" * 12
    garbage += zlib.crc32(garbage, zlib.crc32(b"k")).to_bytes(CRC_SIZE, "big")
    with pytest.raises(CorruptRecordError, match="cannot be decoded"):
        codec.decode(garbage, "test", key=b"k")
    # A record naming a dictionary the store does not have.
    other = bytes((TAG_DICT_COMPACT | KEYED, 2)) + bytes(framed[2:-CRC_SIZE])
    other += zlib.crc32(other, zlib.crc32(b"k")).to_bytes(CRC_SIZE, "big")
    with pytest.raises(CorruptRecordError, match="dictionary 2 is not in this store"):
        codec.decode(other, "test", key=b"k")


def _put_raw(saver: DeltaLogSaver, handle: Any, key: bytes, value: bytes) -> None:
    saver.env.write(lambda w: w.put_raw(handle, key, value))


def test_format_8_dictionary_records_in_a_store_still_read(tmp_path: Path) -> None:
    """Every compact checkpoint record and write of a chat re-framed the format-8 way
    (what a store written before format 9 holds): the states read back the same, from
    a fresh open, and ``verify`` finds nothing wrong."""
    # 180 turns: the final dictionary is trained from ~256 KiB of records (turn ~125).
    scenario = next(s for s in CHAT_SCENARIOS if s.name == "chat-delta-sf100").with_turns(180)
    path = tmp_path / "store"
    config = thread_config("t")
    with DeltaLogSaver.from_path(path, pack_turns=False) as saver:  # plain records
        graph = build_graph(scenario, saver)
        for turn in range(scenario.turns):
            graph.invoke({MESSAGES: [human_message(scenario, turn)]}, config)
        before = [s.values for s in graph.get_state_history(config, limit=40)]
        codec = saver.env.codec
        reframed = 0
        for name in ("checkpoints", "writes"):
            handle = saver.env.db(name)
            for key, raw in list(saver.env.iter_db(name)):
                prefix = raw[: 1 + raw[0]] if name == "writes" else b""
                record = raw[len(prefix) :]
                if record[0] & ~(KEYED | COMPACT) != TAG_DICT_COMPACT or record[1] != 1:
                    continue  # format 8 had only dictionary 1 (no early one)
                body = codec.compressor.decompress_with_dict(
                    ZSTD_MAGIC + record[2:-CRC_SIZE], 1, codec.dictionaries[1]
                )
                if record[0] & COMPACT:  # format 12's form: format 8 held the full record
                    full = checkpoint_form.expand(ormsgpack.unpackb(body), key[-ID_TAIL:])
                    body = ormsgpack.packb(full)
                old = prefix + _format_8(codec, body, key, prefix)
                _put_raw(saver, handle, key, old)
                reframed += 1
    assert reframed > 100
    with DeltaLogSaver.from_path(path, pack_turns=False) as saver:  # plain records
        graph = build_graph(scenario, saver)
        assert [s.values for s in graph.get_state_history(config, limit=40)] == before
        assert saver.verify(deep=True).ok
