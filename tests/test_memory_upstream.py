"""Scenarios of LangGraph's own store tests give the same answers on DeltaLogStore as on InMemoryStore (issue 17)."""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogStore
from langchain_core.embeddings import Embeddings
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore


class CharacterEmbeddings(Embeddings):
    """Character frequencies through fixed random projections (as upstream's test helper)."""

    def __init__(self, dims: int = 64, seed: int = 42) -> None:
        rng = random.Random(seed)
        self.dims = dims
        self._proj: dict[str, list[float]] = defaultdict(
            lambda: [rng.gauss(0, 1 / math.sqrt(dims)) for _ in range(dims)]
        )

    def _one(self, text: str) -> list[float]:
        counts = Counter(text)
        total = sum(counts.values()) or 1
        out = [0.0] * self.dims
        for char in sorted(counts):
            for i, p in enumerate(self._proj[char]):
                out[i] += counts[char] / total * p
        norm = math.sqrt(sum(x * x for x in out))
        return [x / norm for x in out] if norm else out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


@pytest.fixture(params=["deltalog", "inmemory"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: list[DeltaLogStore] = []

    def factory(fields: list[str] | None = None, embed: Embeddings | None = None) -> BaseStore:
        index: Any = {"dims": 64, "embed": embed or CharacterEmbeddings(), "fields": fields}
        if request.param == "inmemory":
            return InMemoryStore(index=index)
        store = DeltaLogStore.from_path(tmp_path / f"s{len(made)}", index=index)
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()


def test_vector_update_and_index_false(make: Any) -> None:
    """A re-put moves the item's score; an index=False item is not among the scored top 3."""
    store = make(["text"])
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    first = store.search(("test",), query="Zany Xerxes")
    assert first[0].key == "doc1"
    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = next(r.score for r in store.search(("test",), query="Zany Xerxes") if r.key == "doc1")
    assert after < first[0].score
    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    assert not any(
        r.key == "doc4" for r in store.search(("test",), query="new text about dogs", limit=3)
    )


def test_vector_search_with_filters(make: Any) -> None:
    """Filters narrow a query search; the best match comes first."""
    store = make(["text"])
    docs = {
        "doc1": {"text": "red apple", "color": "red", "score": 4.5},
        "doc2": {"text": "red car", "color": "red", "score": 3.0},
        "doc3": {"text": "green apple", "color": "green", "score": 4.0},
        "doc4": {"text": "blue car", "color": "blue", "score": 3.5},
    }
    for key, value in docs.items():
        store.put(("test",), key, value)
    got = store.search(("test",), query="apple", filter={"color": "red"})
    assert [r.key for r in got][:1] == ["doc1"] and len(got) == 2
    got = store.search(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}})
    assert len(got) == 3 and got[0].key == "doc4"
    got = store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [r.key for r in got] == ["doc3"]


def test_embed_with_paths_and_scores(make: Any) -> None:
    """Per-put field lists pick the vectors; scores equal plain cosine."""
    emb = CharacterEmbeddings()
    store = make(["key17"], emb)
    store.put(
        ("test",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc"}, index=["key0", "key1"]
    )
    store.put(
        ("test",), "doc4", {"key0": "eee", "key1": "bbb", "key3": "ggg"}, index=["key1", "key3"]
    )
    assert store.search(("test",), query="aaa")[0].key == "doc3"
    assert store.search(("test",), query="ggg")[0].key == "doc4"
    bbb = store.search(("test",), query="bbb")
    assert abs(bbb[0].score - bbb[1].score) < 1e-6
    q = emb.embed_query("abcd")

    def cos(text: str) -> float:
        v = emb.embed_query(text)
        return float(sum(a * b for a, b in zip(q, v, strict=True)))

    got = {r.key: r.score for r in store.search((), query="abcd")}
    assert got["doc3"] == pytest.approx(max(cos("aaa"), cos("bbb")), abs=1e-4)
    assert got["doc4"] == pytest.approx(max(cos("bbb"), cos("ggg")), abs=1e-4)
    store.put(("test",), "doc5", {"key0": "hhh"}, index=False)
    assert len(store.search(("test",))) == 3


def test_search_edge_cases(make: Any) -> None:
    """Empty, missing, long and odd queries all return the one item."""
    store = make(["text"])
    store.put(("test",), "doc1", {"text": "test document"})
    for query in ["", None, "test " * 100, "test!@#$%^&*()"]:
        assert len(store.search(("test",), query=query)) == 1
