"""A read transaction decodes each write of its delta blobs' dictionaries once.

A delta blob's dictionary holds about twice its link's growth of the channel's
writes (``blobs.WRITE_DICT_MIN``), so the links of one chain overlap: a cold read
of a 10,000-turn thread's seed decoded 36,752 writes, 20,000 of them distinct.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogSaver, blobs
from deltalog.engine.blobs import BlobReads
from deltalog.engine.store_rows import Typed
from deltalog.engine.write_txn import WriteTxn

from .graphs import cfg, chat_graph, human


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 30-turn plain ``add_messages`` chat: every version of ``messages`` is a
    delta blob whose dictionary holds the writes since its base."""
    path = tmp_path_factory.mktemp("memo") / "store"
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(None).compile(checkpointer=saver)
        for turn in range(30):
            graph.invoke({"messages": [human(turn)]}, cfg("t"))
    return path


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[bytes]]:
    """How many times each write key was decoded for a write dictionary."""
    seen: Counter[bytes] = Counter()
    original = BlobReads._write_payload

    def spy(
        self: BlobReads, key: bytes, cid_end: int, raw: bytes, cbytes: bytes
    ) -> tuple[tuple[str, str, int], bytes] | None:
        found = original(self, key, cid_end, raw, cbytes)
        if found is not None:
            seen[key] += 1
        return found

    monkeypatch.setattr(BlobReads, "_write_payload", spy)
    yield seen


def resolve_all(path: Path) -> dict[bytes, Typed]:
    """Every blob of the store resolved in one read transaction of a cold saver."""
    with DeltaLogSaver.from_path(path) as saver, saver.env.read() as r:
        return {key: r.blob_typed(key, raw) for key, raw in saver.env.iter_db("blobs")}


def test_overlapping_dictionaries_decode_each_write_once(
    store: Path, decodes: Counter[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within one read transaction each write is decoded once, though the
    dictionaries of consecutive links overlap; without the memo the same reads
    decode some writes twice or more, and both give the same values."""
    with_memo = resolve_all(store)
    assert decodes and max(decodes.values()) == 1
    distinct = len(decodes)
    decodes.clear()
    monkeypatch.setattr(blobs, "WRITE_MEMO_MAX", 0)
    assert resolve_all(store) == with_memo
    assert len(decodes) == distinct and max(decodes.values()) > 1


def test_the_memo_stops_growing_at_its_budget(
    store: Path, decodes: Counter[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past WRITE_MEMO_MAX bytes no write is added (the ones kept still serve), and
    the values are the same."""
    expected = resolve_all(store)
    monkeypatch.setattr(blobs, "WRITE_MEMO_MAX", 3000)
    with DeltaLogSaver.from_path(store) as saver, saver.env.read() as r:
        got = {key: r.blob_typed(key, raw) for key, raw in saver.env.iter_db("blobs")}
        memo = r._writes_memo()
        assert memo is not None and 3000 <= memo.size < 3000 + 4096
        assert 0 < len(memo.parts) < len(decodes)
    assert got == expected


def test_a_write_transaction_keeps_no_memo(
    make_saver: Callable[..., DeltaLogSaver], store: Path
) -> None:
    """A write transaction sees its own changes, which may replace a write: it
    decodes every time."""
    saver = make_saver(store)

    def memo_of(w: WriteTxn) -> object:
        return w._writes_memo()

    assert saver.env.write(memo_of) is None
    with saver.env.read() as r:
        assert r._writes_memo() is not None
