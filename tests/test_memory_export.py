"""Export/import carry memory items (value, instants, TTL, vectors) exactly; bad item records are refused by line with nothing written (issue 17, R8, R9)."""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver, DeltaLogStore
from deltalog.engine.cli import cli
from deltalog.engine.cli_ops import decode_record, encode_record
from deltalog.engine.errors import ImportRecordError, ItemExistsError
from deltalog.engine.export import end
from deltalog.engine.import_check import EXPORT_VERSION
from langgraph.store.base import Item

from tests.graphs import cfg, chat_graph, human

DIMS = 8
NOW = time.time()  # export_records reads the real clock


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic local embedding: sha256 bytes of each text, centred."""
    out = []
    for t in texts:
        digest = hashlib.sha256(t.encode()).digest()
        out.append([(b - 127.5) / 127.5 for b in digest[:DIMS]])
    return out


def _index() -> Any:
    return {"dims": DIMS, "embed": embed, "fields": ["text", "tags[*]"]}


def _clock() -> float:
    return NOW


def _fill(path: Path) -> None:
    """Checkpoints of a real graph, and items: indexed, unindexed, with TTL, nested ns."""
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(2).compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("chat"))
        store = DeltaLogStore.from_saver(saver, index=_index(), clock=_clock)
        for i in range(30):
            store.put(
                ("users", f"u{i % 3}"),
                f"k{i}",
                {"text": f"fact number {i}", "tags": [f"t{i % 4}", "x"], "n": i},
                ttl=90.0 if i % 5 == 0 else None,
            )
        store.put(("docs",), "plain", {"text": "no vectors"}, index=False)
        store.put(("docs", "deep", "er"), "d", {"a": {"b": [1, 2.5, None, True]}})
        past = DeltaLogStore.from_saver(saver, index=_index(), clock=lambda: NOW - 3600)
        past.put(("docs",), "gone", {"text": "expired"}, ttl=1.0)


def _snapshot(store: DeltaLogStore) -> dict[str, Any]:
    """Every observable answer: get of each item, searches (filter, query, pages), namespaces."""
    found = store.search((), limit=1000)
    items: dict[Any, Item | None] = {
        (it.namespace, it.key): store.get(it.namespace, it.key, refresh_ttl=False) for it in found
    }
    return {
        "items": {k: (v.dict() if v else None) for k, v in items.items()},
        "search": [it.dict() for it in found],
        "query": [
            it.dict() for it in store.search(("users",), query="fact number 7", limit=12, offset=2)
        ],
        "filtered": [
            it.dict() for it in store.search((), filter={"n": {"$gte": 20}}, query="t1", limit=50)
        ],
        "namespaces": store.list_namespaces(),
    }


def test_round_trip_items_and_checkpoints(tmp_path: Path) -> None:
    """A store with checkpoints and items exports and imports into a fresh store unchanged."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _fill(src)
    with DeltaLogSaver.from_path(src) as saver:
        later = DeltaLogStore.from_saver(saver, index=_index(), clock=lambda: NOW + 120)
        records = list(saver.export_records())
        expected = _snapshot(later)
        history = [c.checkpoint for c in saver.list(cfg("chat"))]
    kinds = [r["kind"] for r in records]
    assert kinds.count("item") == 32  # the 1-minute item expired before the export
    assert [k for k in kinds if k == "item"] == kinds[-33:-1]  # items, then the end record
    lines = [encode_record(r) for r in records]  # through JSON, as the CLI writes it
    with DeltaLogSaver.from_path(dst) as saver:
        counts = saver.import_records(decode_record(line) for line in lines)
        assert counts["items"] == 32 and counts["threads"] == 1
        assert [c.checkpoint for c in saver.list(cfg("chat"))] == history
        # Exporting the import gives the same records again (items in the same order).
        again = [encode_record(r) for r in saver.export_records()]
        assert again[-32:] == lines[-32:] and sorted(again) == sorted(lines)
        embedder_calls: list[str] = []

        def counting(texts: list[str]) -> list[list[float]]:
            embedder_calls.extend(texts)
            return embed(texts)

        index: Any = {**_index(), "embed": counting}
        store = DeltaLogStore.from_saver(saver, index=index, clock=lambda: NOW + 120)
        assert _snapshot(store) == expected
        assert embedder_calls == ["fact number 7", "t1"]  # queries only: vectors were carried
        assert store.verify() == []
        # TTL carried as the absolute expiry: gone when the source item would be.
        ttl_items = {(("users", f"u{i % 3}"), f"k{i}") for i in range(0, 30, 5)}
        late = DeltaLogStore.from_saver(saver, clock=lambda: NOW + 200 * 60)
        assert {(i.namespace, i.key) for i in late.search((), limit=100)}.isdisjoint(ttl_items)
        assert late.sweep_ttl() == 6


def test_cli_round_trip_and_no_items(tmp_path: Path) -> None:
    """`deltalog export` writes item records (unless --no-items); `deltalog import` loads them."""
    src = tmp_path / "src"
    _fill(src)
    runner = CliRunner()
    out = runner.invoke(cli, ["export", str(src), "-o", str(tmp_path / "all.jsonl")])
    assert out.exit_code == 0, out.output
    assert "32 item" in out.output
    res = runner.invoke(cli, ["import", str(tmp_path / "dst"), str(tmp_path / "all.jsonl")])
    assert res.exit_code == 0, res.output
    assert "32 items" in res.output
    with DeltaLogStore.from_path(tmp_path / "dst") as store:
        assert store.get(("docs", "deep", "er"), "d") is not None
    bare = runner.invoke(cli, ["export", str(src), "--no-items"])
    assert bare.exit_code == 0
    assert '"kind":"item"' not in bare.output and '"kind":"checkpoint"' in bare.output
    one = runner.invoke(cli, ["export", str(src), "chat"])
    assert '"kind":"item"' not in one.output
    with_items = runner.invoke(cli, ["export", str(src), "chat", "--items"])
    assert '"kind":"item"' in with_items.output


def test_old_streams_import_and_version_unchanged(tmp_path: Path) -> None:
    """A stream without item records (all version-1 streams) still imports; the version stays 1.

    An old reader meets ``item`` as an unknown kind and refuses the stream by
    line instead of misreading it, so no version bump is needed.
    """
    src = tmp_path / "src"
    _fill(src)
    with DeltaLogSaver.from_path(src) as saver:
        records = list(saver.export_records(items=False))
    assert records[0]["version"] == EXPORT_VERSION == 2
    assert records[-1] == {"kind": "end", "records": len(records) - 2}
    assert all(r["kind"] != "item" for r in records)
    with DeltaLogSaver.from_path(tmp_path / "dst") as saver:
        counts = saver.import_records(records)
        assert "items" not in counts and counts["threads"] == 1


Mutation = Callable[[dict[str, Any]], None]


def _set(field: str, value: Any) -> Mutation:
    def mutate(rec: dict[str, Any]) -> None:
        rec[field] = value

    return mutate


def _vec(field: str, value: Any) -> Mutation:
    def mutate(rec: dict[str, Any]) -> None:
        rec["vectors"][0][field] = value

    return mutate


def _drop(field: str) -> Mutation:
    def mutate(rec: dict[str, Any]) -> None:
        del rec[field]

    return mutate


BAD: dict[str, tuple[Mutation, str]] = {
    "ns-str": (_set("namespace", "users"), "namespace"),
    "ns-dot": (_set("namespace", ["a.b"]), "period"),
    "ns-empty-label": (_set("namespace", ["a", ""]), "empty"),
    "key-int": (_set("key", 5), "key 5 is a int"),
    "key-surrogate": (_set("key", "\udc80"), "key"),
    "value-list": (_set("value", [1, 2]), "value"),
    "value-nan": (_set("value", {"x": float("nan")}), "not a JSON number"),
    "no-created": (_drop("created_us"), "no 'created_us' field"),
    "created-neg": (_set("created_us", -1), "created_us -1"),
    "updated-float": (_set("updated_us", 1.5), "updated_us 1.5"),
    "expires-huge": (_set("expires_ms", 2**64), "expires_ms"),
    "ttl-zero": (_set("ttl_minutes", 0), "not positive"),
    "ttl-without-expiry": (_set("expires_ms", None), "disagree"),
    "vectors-not-list": (_set("vectors", {"a": 1}), "vectors"),
    "vector-odd-bytes": (_vec("vector", b"\x00\x00\x80"), "float32"),
    "vector-nan": (_vec("vector", b"\x00\x00\xc0\x7f"), "NaN"),
    "vector-digest": (_vec("digest", b"short"), "16 bytes"),
    "vector-path": (_vec("path", ""), "path"),
}


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    path = tmp_path_factory.mktemp("bad") / "src"
    _fill(path)
    with DeltaLogSaver.from_path(path) as saver:
        return list(saver.export_records())


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_item_record_refused_nothing_written(
    tmp_path: Path, stream: list[dict[str, Any]], case: str
) -> None:
    """A crafted item record is refused naming its line, and the store stays empty."""
    records = copy.deepcopy(stream)
    line = next(
        i
        for i, r in enumerate(records, 1)
        if r["kind"] == "item" and r["vectors"] and r["ttl_minutes"] is not None
    )
    mutate, words = BAD[case]
    mutate(records[line - 1])
    with DeltaLogSaver.from_path(tmp_path / "dst") as saver:
        with pytest.raises(ImportRecordError) as err:
            saver.import_records(records)
        assert err.value.line == line
        assert words in err.value.reason
        assert saver.threads() == []
        store = DeltaLogStore.from_saver(saver)
        assert store.search((), limit=10) == [] and store.list_namespaces() == []


def test_duplicate_and_existing_items_refused(tmp_path: Path, stream: list[dict[str, Any]]) -> None:
    """A stream naming one item twice, or an item live in the target, writes nothing."""
    items = [i for i, r in enumerate(stream, 1) if r["kind"] == "item"]
    # The item again before the end record, which then counts one more.
    twice = [*copy.deepcopy(stream[:-1]), copy.deepcopy(stream[items[3] - 1]), end(len(stream) - 1)]
    with DeltaLogSaver.from_path(tmp_path / "dst") as saver:
        with pytest.raises(ImportRecordError, match=f"first on line {items[3]}"):
            saver.import_records(twice)
        store = DeltaLogStore.from_saver(saver)
        rec = stream[items[3] - 1]
        store.put(tuple(rec["namespace"]), rec["key"], {"mine": True})
        with pytest.raises(ItemExistsError, match=f"line {items[3]} of the import stream"):
            saver.import_records(stream)
        assert saver.threads() == []
        assert [i.value for i in store.search((), limit=10)] == [{"mine": True}]


def test_cli_refuses_bad_item_with_its_line(tmp_path: Path, stream: list[dict[str, Any]]) -> None:
    """`deltalog import` names the file line of a bad item record and creates no store."""
    records = copy.deepcopy(stream)
    line = next(i for i, r in enumerate(records, 1) if r["kind"] == "item")
    records[line - 1]["value"] = "not an object"
    text = "\n".join(encode_record(r) for r in records) + "\n"
    (tmp_path / "bad.jsonl").write_text(text)
    res = CliRunner().invoke(cli, ["import", str(tmp_path / "dst"), str(tmp_path / "bad.jsonl")])
    assert res.exit_code == 1
    assert f"line {line} of the import stream" in res.output
    assert not (tmp_path / "dst").exists()
    assert json.loads(text.splitlines()[line - 1])["kind"] == "item"
