"""Page-aware compression: a record near an LMDB page boundary is compressed
again at a denser zstd level so that it takes fewer pages (codec.DENSE_LEVEL).

The limits come from LMDB itself, so they are checked against a real
environment; the records are real zstd frames that decode to what was encoded.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lmdb
import pytest
import zstandard
from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.scenarios import CHAT_SCENARIOS
from deltalog.engine import DeltaLogSaver
from deltalog.engine.codec import (
    CRC_SIZE,
    DENSE_MIN,
    FINAL_DICT,
    KEYED,
    TAG_DICT_COMPACT,
    TAG_ZSTD,
    ZSTD_MAGIC,
    RecordCodec,
    fewer_pages_below,
    leaf_max,
)
from deltalog.engine.envelope import split_write_value
from langchain_core.runnables import RunnableConfig

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_WORDS = ["".join(random.Random(i).choice(_LETTERS) for _ in range(3 + i % 7)) for i in range(300)]


def _prose(n_bytes: int, seed: int = 5) -> bytes:
    """Text of ``n_bytes`` that zstd level 3 compresses ~3.7x and level 15 ~14 % further."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n_bytes // 4)).encode()[:n_bytes]


def _overflow_pages(value_size: int, key_size: int, tmp_path: Path) -> int:
    env = lmdb.open(str(tmp_path / f"k{key_size}v{value_size}"), map_size=2**24, max_dbs=1)
    try:
        db = env.open_db(b"x")
        with env.begin(write=True) as txn:
            txn.put(b"k" * key_size, b"v" * value_size, db=db)
            return int(txn.stat(db)["overflow_pages"])
    finally:
        env.close()


@pytest.mark.parametrize("key_size", [21, 42, 100])
def test_leaf_max_is_where_lmdb_starts_an_overflow_page(key_size: int, tmp_path: Path) -> None:
    limit = leaf_max(key_size, 4096)
    assert _overflow_pages(limit, key_size, tmp_path) == 0
    assert _overflow_pages(limit + 1, key_size, tmp_path) == 1


@pytest.mark.parametrize("size", [1989, 4080, 4081, 8176, 8177, 12000])
def test_fewer_pages_below_counts_overflow_pages_as_lmdb_does(size: int, tmp_path: Path) -> None:
    pages = _overflow_pages(size, 42, tmp_path)
    target = fewer_pages_below(size, 42, 4096)
    assert target is not None and target < size
    fewer = _overflow_pages(target, 42, tmp_path)
    assert fewer == pages - 1  # one page less (a leaf slot counts as none)
    if target + 1 < size:
        assert _overflow_pages(target + 1, 42, tmp_path) == pages
    assert fewer_pages_below(leaf_max(42, 4096), 42, 4096) is None


def test_a_record_just_over_the_leaf_limit_is_compressed_into_it() -> None:
    body = _prose(8000)
    key = b"k" * 42
    level3 = len(zstandard.ZstdCompressor(level=3).compress(body)) + 1 + CRC_SIZE
    assert leaf_max(42, 4096) < level3  # at level 3 it would take an overflow page
    codec = RecordCodec()
    framed = codec.encode_body(body, key=key)
    assert framed[0] == TAG_ZSTD | KEYED
    assert len(framed) <= leaf_max(42, 4096)
    assert codec.compressor.decompress(framed[1:-CRC_SIZE]) == body
    assert framed == codec.encode_body(body, key=key)  # the same bytes every time


def test_a_prefix_stored_in_front_counts_toward_the_limit() -> None:
    """Write records are stored behind their channel id: the limit applies to both."""
    body = _prose(8000)
    prefix = b"\x01\x04"
    framed = RecordCodec().encode_body(body, key=b"k" * 42, prefix=prefix)
    assert len(prefix) + len(framed) <= leaf_max(42, 4096)


def test_a_large_record_in_a_leaf_is_packed_densely() -> None:
    body = _prose(5000)
    level3 = zstandard.ZstdCompressor(level=3).compress(body)
    assert DENSE_MIN <= len(level3) + 1 + CRC_SIZE <= leaf_max(42, 4096)
    codec = RecordCodec()
    framed = codec.encode_body(body, key=b"k" * 42)
    assert len(framed) < len(level3) + 1 + CRC_SIZE
    assert codec.compressor.decompress(framed[1:-CRC_SIZE]) == body


@pytest.mark.parametrize(
    ("n_bytes", "key"),
    [
        (3000, b"k" * 42),  # below DENSE_MIN compressed: not worth the CPU
        (9000, b"k" * 42),  # an overflow page whose boundary is out of reach
        (8000, None),  # no key: where it is stored is not known
    ],
)
def test_records_that_cannot_save_a_page_keep_the_level_3_frame(
    n_bytes: int, key: bytes | None
) -> None:
    body = _prose(n_bytes)
    framed = RecordCodec().encode_body(body, key=key)
    assert framed[1:-CRC_SIZE] == zstandard.ZstdCompressor(level=3).compress(body)


def test_a_frame_the_denser_level_cannot_shrink_is_kept() -> None:
    """Random bytes do not compress: the record stays plain, no denser attempt changes it."""
    body = random.Random(3).randbytes(1900)
    framed = RecordCodec().encode_body(body, key=b"k" * 42)
    assert framed[1:-CRC_SIZE] == body


def test_the_large_message_chat_stores_its_answers_in_leaf_pages(tmp_path: Path) -> None:
    """The shape of LangGraph's DeltaChannel benchmark (~8 KB answers): once the store
    has a dictionary, every answer whose level-3 record would take an overflow page
    of its own fits a leaf page instead, and the graph reads back what it wrote.
    The records as stored, plain or carried in a turn pack's chunks (format 16)."""
    scenario = {s.name: s for s in CHAT_SCENARIOS}["chat-large-sf10"].with_turns(130)
    saver = DeltaLogSaver.from_path(tmp_path / "large.lmdb")
    try:
        graph = build_graph(scenario, saver)
        config = thread_config("t")
        for turn in range(scenario.turns):
            graph.invoke({MESSAGES: [human_message(scenario, turn)]}, config)
        assert len(graph.get_state(config).values[MESSAGES]) == 2 * scenario.turns
        env = saver.env
        codec = env.codec
        limit = codec.page_size
        assert limit == 4096
        moved = 0
        with env.read() as r:
            cur = r.write_cursor()
            stored = list(cur.iternext()) if cur.first() else []
        assert env.stats()["writes"]["entries"] < len(stored) / 4  # the rest in packs
        for key, value in stored:
            cbytes, _, record = split_write_value(value)  # behind the write's channel id
            if record[0] & ~KEYED != TAG_DICT_COMPACT or record[1] != FINAL_DICT:
                continue  # records of the first turns: no dictionary, or the early one
            dict_id = record[1]  # format 9: a one-byte id, the frame without its magic
            body = codec.compressor.decompress_with_dict(
                ZSTD_MAGIC + record[2:-CRC_SIZE], dict_id, codec.dictionaries[dict_id]
            )
            level3 = codec.compressor.compress_with_dict(body, dict_id, codec.dictionaries[dict_id])
            if len(cbytes) + 2 + len(level3) - 4 + CRC_SIZE > leaf_max(len(key), limit):
                assert len(value) <= leaf_max(len(key), limit), key
                moved += 1
        assert moved >= 10, f"only {moved} answers were near the leaf limit"
    finally:
        saver.close()


def _trained_codec() -> RecordCodec:
    codec = RecordCodec()
    samples: list[bytes | bytearray | memoryview] = [_prose(3000, seed) for seed in range(120)]
    codec.install(1, zstandard.train_dictionary(32 * 1024, samples).as_bytes(), activate=True)
    return codec


@pytest.mark.parametrize("n_bytes", [200, 3000, 5000, 8000, 9000, 40000])
@pytest.mark.parametrize("trained", [False, True])
def test_a_body_compressed_ahead_is_stored_as_the_transaction_would_store_it(
    n_bytes: int, trained: bool
) -> None:
    codec = _trained_codec() if trained else RecordCodec()
    body = _prose(n_bytes, seed=n_bytes)
    key, prefix = b"k" * 42, b"\x01\x04"
    ahead = codec.compress_ahead(body, len(key), len(prefix))
    assert codec.encode_body(body, key=key, prefix=prefix, ahead=ahead) == codec.encode_body(
        body, key=key, prefix=prefix
    )


def test_an_ahead_of_another_body_is_not_used() -> None:
    codec = RecordCodec()
    ahead = codec.compress_ahead(_prose(8000, seed=1), 42, 0)
    body = _prose(8000, seed=2)
    framed = codec.encode_body(body, key=b"k" * 42, ahead=ahead)
    assert codec.compressor.decompress(framed[1:-CRC_SIZE]) == body


def test_an_ahead_made_before_the_dictionary_arrived_is_not_used() -> None:
    codec = RecordCodec()
    body = _prose(8000)
    ahead = codec.compress_ahead(body, 42, 0)
    assert ahead.tag == TAG_ZSTD
    trained = _trained_codec()
    codec.install(1, trained.dictionaries[1], activate=True)
    framed = codec.encode_body(body, key=b"k" * 42, ahead=ahead)
    assert framed[0] & ~KEYED == TAG_DICT_COMPACT
    assert framed == codec.encode_body(body, key=b"k" * 42)


def test_a_body_written_with_its_ahead_is_still_sampled_for_the_dictionary() -> None:
    codec = RecordCodec()
    body = _prose(3000)
    codec.encode_body(body, key=b"k" * 42, ahead=codec.compress_ahead(body, 42, 0))
    assert codec._samples == [body]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_long_message_write_is_stored_in_a_leaf_page(use_async: bool, tmp_path: Path) -> None:
    """Through the saver: put_writes compresses the record before its transaction,
    aput_writes too, in a worker thread; both fit the leaf."""
    import asyncio

    from langchain_core.messages import AIMessage

    saver = DeltaLogSaver.from_path(tmp_path / "s.lmdb")
    try:
        config: RunnableConfig = {
            "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}
        }
        message = AIMessage(content=_prose(7500).decode(), id="a1")
        writes = [("messages", message)]
        if use_async:
            asyncio.run(saver.aput_writes(config, writes, "task-1", "model"))
        else:
            saver.put_writes(config, writes, "task-1", "model")
        rows = list(saver.env.iter_db("writes"))
        assert len(rows) == 1
        key, value = rows[0]
        _, _, record = split_write_value(value)
        level3 = zstandard.ZstdCompressor(level=3).compress(
            saver.env.codec.compressor.decompress(record[1:-CRC_SIZE])
        )
        assert len(value) - len(record) + 1 + len(level3) + CRC_SIZE > leaf_max(len(key), 4096)
        assert len(value) <= leaf_max(len(key), 4096)
        tup = saver.get_tuple(config)
        assert tup is None  # writes without their checkpoint: nothing to read yet
    finally:
        saver.close()


def test_prepared_writes_compress_only_large_values_of_tasks_that_are_not_the_input() -> None:
    from deltalog.engine.prepare import prepare_writes
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    config: RunnableConfig = {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}
    }
    large = AIMessage(content=_prose(7500).decode(), id="a1")
    writes = [("messages", large), ("branch:to:model", None)]
    op = prepare_writes(serde, config, writes, "task-1", "model")
    assert op.wants_ahead and op.aheads is None
    codec = RecordCodec()
    op.compress_ahead(codec)
    assert op.aheads is not None
    first, second = op.aheads
    assert first is not None and first.dense is not None and second is None
    start = prepare_writes(serde, config, writes, "task-2", "~__pregel_pull, __start__")
    start.compress_ahead(codec)
    assert not start.wants_ahead and start.aheads is None  # may become input references
    small = prepare_writes(serde, config, [("messages", None)], "task-3", "model")
    assert not small.wants_ahead


def test_aput_writes_compresses_a_large_value_off_the_event_loop(tmp_path: Path) -> None:
    import asyncio
    import threading

    from langchain_core.messages import AIMessage

    saver = DeltaLogSaver.from_path(tmp_path / "s.lmdb")
    codec = saver.env.codec
    threads: list[threading.Thread] = []
    compress_ahead = codec.compress_ahead

    def recording(
        body: bytes, key_size: int, prefix_size: int, *, dense: bool = True, sample: bool = False
    ) -> Any:
        threads.append(threading.current_thread())
        return compress_ahead(body, key_size, prefix_size, dense=dense, sample=sample)

    codec.compress_ahead = recording  # type: ignore[method-assign]
    config: RunnableConfig = {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}
    }

    async def write() -> threading.Thread:
        message = AIMessage(content=_prose(7500).decode(), id="a1")
        await saver.aput_writes(config, [("messages", message)], "task-1", "model")
        return threading.current_thread()

    try:
        loop_thread = asyncio.run(write())
        assert len(threads) == 1 and threads[0] is not loop_thread
    finally:
        saver.close()
