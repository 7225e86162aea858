"""Memory semantic search: exact cosine top-k, field paths, stale vectors dropped, embedder failures write nothing (issue 17)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deltalog.engine import DeltaLogStore
from deltalog.engine.errors import EmbeddingError, ItemValueError
from langgraph.store.base import PutOp, SearchItem, SearchOp

DIMS = 16


def embed_one(text: str) -> list[float]:
    """A deterministic local embedding: sha256 bytes of the text, centred."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(b - 127.5) / 127.5 for b in digest[:DIMS]]


class Embedder:
    """Counts the texts it embedded."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [embed_one(t) for t in texts]


@pytest.fixture
def embedder() -> Embedder:
    return Embedder()


@pytest.fixture
def store(tmp_path: Path, embedder: Embedder) -> Iterator[DeltaLogStore]:
    index: Any = {"dims": DIMS, "embed": embedder, "fields": ["text"]}
    with DeltaLogStore.from_path(tmp_path / "vec", index=index) as s:
        yield s


def cosine(a: list[float], b: list[float]) -> float:
    na = sum(x * x for x in a) ** 0.5
    nb = sum(x * x for x in b) ** 0.5
    return float(sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb))


def test_top_k_equals_brute_force(store: DeltaLogStore) -> None:
    """Top-k with filters and offsets equals brute-force cosine over the same vectors."""
    rng = random.Random(7)
    docs: dict[str, dict[str, Any]] = {
        f"d{i}": {"text": f"doc {rng.random()}", "g": i % 3} for i in range(300)
    }
    store.batch([PutOp(("docs", str(i % 4)), k, v) for i, (k, v) in enumerate(docs.items())])
    q = embed_one("what")
    for flt, offset in [(None, 0), ({"g": 1}, 0), ({"g": {"$ne": 2}}, 17), (None, 290)]:
        want = sorted(
            (
                (-cosine(embed_one(v["text"]), q), k)
                for k, v in docs.items()
                if flt is None or _passes(v, flt)
            ),
        )[offset : offset + 10]
        got = store.search(("docs",), query="what", filter=flt, limit=10, offset=offset)
        assert [i.key for i in got] == [k for _, k in want]
        for item, (neg, _) in zip(got, want, strict=True):
            assert item.score == pytest.approx(-neg, abs=1e-5)


def _passes(v: dict[str, Any], flt: dict[str, Any]) -> bool:
    cond = flt["g"]
    return bool(v["g"] != cond["$ne"]) if isinstance(cond, dict) else bool(v["g"] == cond)


def test_best_vector_per_item_and_paths(tmp_path: Path, embedder: Embedder) -> None:
    """Array paths give one vector per element; an item scores with its best one."""
    index: Any = {"dims": DIMS, "embed": embedder, "fields": ["chunks[*].t"]}
    with DeltaLogStore.from_path(tmp_path / "p", index=index) as s:
        s.put(("d",), "multi", {"chunks": [{"t": "zzz"}, {"t": "needle"}]})
        s.put(("d",), "single", {"chunks": [{"t": "hay"}]})
        assert sorted(embedder.texts) == ["hay", "needle", "zzz"]
        got = s.search(("d",), query="needle")
        assert got[0].key == "multi" and got[0].score == pytest.approx(1.0, abs=1e-5)


def test_unchanged_texts_not_reembedded(store: DeltaLogStore, embedder: Embedder) -> None:
    """A re-put embeds only the fields whose text changed."""
    store.put(("d",), "k", {"text": "one", "other": 1}, index=["text", "other"])
    embedder.texts.clear()
    store.put(("d",), "k", {"text": "one", "other": 2}, index=["text", "other"])
    assert embedder.texts == ["2"]
    embedder.texts.clear()
    store.put(("d",), "k", {"text": "one", "other": 2}, index=["text", "other"])
    assert embedder.texts == []


def test_a_reput_after_a_change_of_dims_embeds_again(tmp_path: Path) -> None:
    """A stored vector of another ``dims`` is not reused: the re-put embeds the text again."""

    def embedder_of(dims: int, texts: list[str]) -> Any:
        def embed(batch: list[str]) -> list[list[float]]:
            texts.extend(batch)
            return [embed_one(t)[:dims] for t in batch]

        return embed

    def index(dims: int, texts: list[str]) -> Any:
        return {"dims": dims, "embed": embedder_of(dims, texts), "fields": ["text"]}

    path, small = tmp_path / "dims", DIMS // 2
    with DeltaLogStore.from_path(path, index=index(DIMS, [])) as s:
        s.put(("d",), "k", {"text": "hello"})
    texts: list[str] = []
    with DeltaLogStore.from_path(path, index=index(small, texts)) as s:
        assert [i.score for i in s.search(("d",), query="hello")] == [None]
        texts.clear()
        s.put(("d",), "k", {"text": "hello"})
        assert texts == ["hello"]
        (got,) = s.search(("d",), query="hello")
        assert got.score == pytest.approx(1.0, abs=1e-5)
        texts.clear()
        s.put(("d",), "k", {"text": "hello"})  # now of this size: reused
        assert texts == []
        s.delete(("d",), "k")  # the documented way to re-index with a model of the same dims
        s.put(("d",), "k", {"text": "hello"})
        assert texts == ["hello"]
        assert s.verify() == []


@pytest.mark.parametrize("count", [5, 40])
def test_equal_vectors_score_equal_and_rank_by_the_tie_break(tmp_path: Path, count: int) -> None:
    """Items of one text score exactly alike wherever their vectors sit, rank by key,
    and keep their score in a search inside a write and after a reopen; a score is at most 1."""
    index: Any = {"dims": DIMS, "embed": Embedder(), "fields": ["text"]}
    path = tmp_path / "ties"
    keys = [f"k{i:02}" for i in range(count)]

    def ranked(s: DeltaLogStore, *ops: Any) -> list[tuple[str, float | None]]:
        found = s.batch([SearchOp(("ns",), None, 50, 0, "apple"), *ops])[0]
        assert isinstance(found, list)
        return [(i.key, i.score) for i in found if isinstance(i, SearchItem) and i.key != "other"]

    with DeltaLogStore.from_path(path, index=index) as s:
        s.put(("ns",), "other", {"text": "banana"})
        s.batch([PutOp(("ns",), k, {"text": "cherry"}) for k in keys])
        got = ranked(s)
        assert [k for k, _ in got] == keys
        assert len({score for _, score in got}) == 1
        assert ranked(s, PutOp(("x",), "z", {"t": 1})) == got  # ranked from LMDB
        (same,) = s.search(("ns",), query="banana", limit=1)
        assert same.key == "other" and same.score is not None and same.score <= 1.0
    with DeltaLogStore.from_path(path, index=index) as s:
        assert ranked(s) == got


def test_stale_vectors_dropped(store: DeltaLogStore) -> None:
    """index=False or fewer fields on a re-put drop the stale vectors."""
    store.put(("d",), "a", {"text": "alpha", "x": "beta"}, index=["text", "x"])
    store.put(("d",), "b", {"text": "gamma"})
    assert store.search(("d",), query="beta")[0].score == pytest.approx(1.0, abs=1e-5)
    store.put(("d",), "a", {"text": "alpha", "x": "beta"}, index=["text"])
    top = store.search(("d",), query="beta")
    assert all(i.score is None or i.score < 0.99 for i in top)
    store.put(("d",), "a", {"text": "alpha"}, index=False)
    got = store.search(("d",), query="alpha")
    assert [(i.key, i.score is None) for i in got] == [("b", False), ("a", True)]


def test_unindexed_items_last_and_paging(store: DeltaLogStore) -> None:
    """Items without vectors come after scored ones with score None, and page past any offset."""
    for i in range(5):
        store.put(("d",), f"v{i}", {"text": f"t{i}"})
    for i in range(5):
        store.put(("d",), f"n{i}", {"no_text": i})
    all_ = store.search(("d",), query="q", limit=100)
    assert [i.score is None for i in all_] == [False] * 5 + [True] * 5
    pages = [store.search(("d",), query="q", limit=3, offset=o) for o in range(0, 12, 3)]
    assert [i.key for p in pages for i in p] == [i.key for i in all_]


def test_fields_config_honoured(tmp_path: Path, embedder: Embedder) -> None:
    """Only the configured fields are embedded; the default is the whole value."""
    index: Any = {"dims": DIMS, "embed": embedder, "fields": ["title"]}
    with DeltaLogStore.from_path(tmp_path / "f", index=index) as s:
        s.put(("d",), "k", {"title": "T", "body": "B"})
    assert embedder.texts == ["T"]
    embedder.texts.clear()
    whole: Any = {"dims": DIMS, "embed": embedder}
    with DeltaLogStore.from_path(tmp_path / "g", index=whole) as s:
        s.put(("d",), "k", {"title": "T"})
    assert len(embedder.texts) == 1 and "T" in embedder.texts[0]


@pytest.mark.parametrize(
    "bad",
    [
        lambda texts: (_ for _ in ()).throw(RuntimeError("provider down")),
        lambda texts: [[0.0] * (DIMS - 1) for _ in texts],
        lambda texts: [],
        lambda texts: [[float("nan")] * DIMS for _ in texts],
    ],
    ids=["raises", "wrong-dims", "wrong-count", "nan"],
)
def test_bad_embedder_writes_nothing(tmp_path: Path, bad: Any) -> None:
    """An embedder that raises or returns wrong vectors fails the batch; nothing is written."""
    with DeltaLogStore.from_path(tmp_path / "b", index={"dims": DIMS, "embed": bad}) as s:
        before = s.env.env.info()["last_txnid"]
        with pytest.raises(EmbeddingError, match="nothing was written"):
            s.batch([PutOp(("d",), "plain", {"x": 1}, index=False), PutOp(("d",), "k", {"t": "x"})])
        assert s.env.env.info()["last_txnid"] == before
        assert s.get(("d",), "plain") is None


async def test_async_embedder(tmp_path: Path) -> None:
    """An async embedding function works through abatch (and aembed_query)."""

    async def aembed(texts: list[str]) -> list[list[float]]:
        return [embed_one(t) for t in texts]

    index: Any = {"dims": DIMS, "embed": aembed}
    with DeltaLogStore.from_path(tmp_path / "a", index=index) as s:
        await s.aput(("d",), "k", {"text": "hello"})
        await s.aput(("d",), "j", {"text": "other"})
        got = await s.asearch(("d",), query='{"text": "hello"}')
        assert got[0].key == "k"
        assert await s.abatch([SearchOp(("d",), query="x", limit=1)]) != [[]]


def test_vectors_are_float32_in_lmdb(store: DeltaLogStore) -> None:
    """Vectors are stored as float32 records, one per item and field path."""
    store.put(("d",), "k", {"text": "abc"})
    rows = list(store.env.iter_db("item_vectors"))
    assert len(rows) == 1
    path, _digest, raw = store.env.codec.decode(rows[0][1], "vector", key=rows[0][0])
    assert path == "text"
    assert np.frombuffer(raw, dtype=np.float32).tolist() == pytest.approx(
        embed_one("abc"), abs=1e-6
    )


def test_sqlitestore_text_fields_are_read_as_fields(tmp_path: Path, embedder: Embedder) -> None:
    """A config written for SqliteStore, which reads "text_fields" (a list or one
    path), embeds those paths; "fields" and a different "text_fields" is refused."""
    for i, text_fields in enumerate([["title"], "title"]):
        index: Any = {"dims": DIMS, "embed": embedder, "text_fields": text_fields}
        with DeltaLogStore.from_path(tmp_path / f"t{i}", index=index) as s:
            s.put(("d",), "k", {"title": "T", "body": "B"})
        assert embedder.texts == ["T"]
        embedder.texts.clear()
    same: Any = {"dims": DIMS, "embed": embedder, "fields": ["title"], "text_fields": "title"}
    with DeltaLogStore.from_path(tmp_path / "same", index=same) as s:
        s.put(("d",), "k", {"title": "T", "body": "B"})
    assert embedder.texts == ["T"]
    both: Any = {"dims": DIMS, "embed": embedder, "fields": ["title"], "text_fields": ["body"]}
    with pytest.raises(ItemValueError, match="text_fields"):
        DeltaLogStore.from_path(tmp_path / "both", index=both)
    assert not (tmp_path / "both").exists()
