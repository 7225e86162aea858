"""`deltalog migrate` copies memory items (value, remaining TTL) to and from real SqliteStore and PostgresStore, with the checkpoints (issue 17)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver, DeltaLogStore
from deltalog.engine.cli import cli
from deltalog.engine.errors import MigrationError
from deltalog.engine.migrate_items import copy_items, open_store_uri, source_items
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import BaseStore
from langgraph.store.sqlite import SqliteStore

from tests.graphs import cfg, chat_graph, human
from tests.test_migrate import fresh_database, postgres

__all__ = ["postgres"]  # the module-scoped server fixture, shared with test_migrate

DIMS = 8


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic local embedding: sha256 bytes of each text, centred."""
    return [
        [(b - 127.5) / 127.5 for b in hashlib.sha256(t.encode()).digest()[:DIMS]] for t in texts
    ]


def _fill(path: Path) -> dict[tuple[tuple[str, ...], str], dict[str, Any]]:
    """A real graph's checkpoints and 150 items (some with TTL, vectors, nested namespaces)."""
    values: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {}
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(2).compile(checkpointer=saver)
        for turn in range(2):
            graph.invoke({"messages": [human(turn)]}, cfg("chat"))
        index: Any = {"dims": DIMS, "embed": embed}
        store = DeltaLogStore.from_saver(saver, index=index)
        for i in range(150):
            ns = ("users", f"u{i % 4}") if i % 7 else ("users", f"u{i % 4}", "deep")
            value = {"text": f"fact {i}", "n": i, "nested": {"ok": i % 2 == 0, "f": i / 3}}
            store.put(ns, f"k{i}", value, ttl=60.0 if i % 10 == 0 else None)
            values[(ns, f"k{i}")] = value
        store.put(("docs",), "gone", {"x": 1}, ttl=60.0)
        store.delete(("docs",), "gone")
    return values


def _items(store: BaseStore) -> dict[tuple[tuple[str, ...], str], tuple[Any, float | None]]:
    return {(i.namespace, i.key): (i.value, i.ttl_minutes) for i in source_items(store)}


def _check(
    got: dict[tuple[tuple[str, ...], str], tuple[Any, float | None]],
    values: dict[tuple[tuple[str, ...], str], dict[str, Any]],
) -> None:
    assert {k: v for k, (v, _) in got.items()} == values
    for (_, key), (_, ttl) in got.items():
        if int(key[1:]) % 10 == 0:
            assert ttl is not None and 55 < ttl <= 60, (key, ttl)
        else:
            assert ttl is None, (key, ttl)


def test_migrate_items_to_sqlite_and_back(tmp_path: Path) -> None:
    """Items go to a real SqliteStore in the target file and come back equal, TTLs as remaining minutes."""
    values = _fill(tmp_path / "src")
    db = tmp_path / "chat.sqlite"
    runner = CliRunner()
    res = runner.invoke(cli, ["migrate", str(tmp_path / "src"), "--to", f"sqlite:{db}", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["items"] == 150 and report["items_skipped"] == 0 and report["verified"]
    conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    try:
        sqlite_store = SqliteStore(conn)
        _check(_items(sqlite_store), values)
        assert sqlite_store.get(("users", "u0", "deep"), "k28") is not None
        assert sqlite_store.get(("docs",), "gone") is None
        with conn:
            assert SqliteSaver(conn).get_tuple(cfg("chat")) is not None
    finally:
        conn.close()
    again = runner.invoke(cli, ["migrate", str(tmp_path / "src"), "--to", f"sqlite:{db}", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["items_skipped"] == 150  # resumable: nothing re-written
    back = runner.invoke(cli, ["migrate", str(tmp_path / "back"), "--from", f"sqlite:{db}"])
    assert back.exit_code == 0, back.output
    assert "150 memory items copied" in back.output
    with DeltaLogStore.from_path(tmp_path / "back") as store:
        _check(_items(store), values)
        assert store.verify() == []


def test_no_items_and_conflicts(tmp_path: Path) -> None:
    """--no-items copies checkpoints only; a target item with another value stops the copy unwritten."""
    _fill(tmp_path / "src")
    db = tmp_path / "t.sqlite"
    runner = CliRunner()
    res = runner.invoke(
        cli, ["migrate", str(tmp_path / "src"), "--to", f"sqlite:{db}", "--no-items"]
    )
    assert res.exit_code == 0, res.output
    with open_store_uri(f"sqlite:{db}") as target:
        assert target.list_namespaces() == []
        target.put(("users", "u3"), "k3", {"mine": True})
        with (
            DeltaLogStore.from_path(tmp_path / "src") as src,
            pytest.raises(MigrationError, match="another value"),
        ):
            copy_items(src, target)
        assert [(i.namespace, i.key) for i in target.search((), limit=500)] == [
            (("users", "u3"), "k3")
        ]


def test_expired_items_are_not_copied(tmp_path: Path) -> None:
    """An item whose TTL ran out in the source is not carried (the upstream store reads expiry)."""
    db = tmp_path / "x.sqlite"
    with open_store_uri(f"sqlite:{db}") as src, DeltaLogStore.from_path(tmp_path / "dst") as dst:
        src.put(("a",), "short", {"v": 1}, ttl=1.0)
        src.put(("a",), "long", {"v": 2}, ttl=30.0)
        assert copy_items(src, dst, now=time.time() + 120).items == 1
        assert dst.get(("a",), "short") is None
        assert dst.get(("a",), "long") is not None


@pytest.mark.postgres
def test_migrate_items_to_postgres_and_back(postgres: str, tmp_path: Path) -> None:
    """Items go to a real PostgresStore and come back equal, TTLs as remaining minutes."""
    values = _fill(tmp_path / "src")
    dsn = fresh_database(postgres, "items")
    runner = CliRunner()
    res = runner.invoke(cli, ["migrate", str(tmp_path / "src"), "--to", dsn, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["items"] == 150
    with open_store_uri(dsn) as pg:
        _check(_items(pg), values)
    back = runner.invoke(cli, ["migrate", str(tmp_path / "back"), "--from", dsn, "--json"])
    assert back.exit_code == 0, back.output
    assert json.loads(back.output)["items"] == 150
    with DeltaLogStore.from_path(tmp_path / "back") as store:
        _check(_items(store), values)


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_a_new_sqlite_store_file_is_owner_only(tmp_path: Path, umask: int) -> None:
    """The store side of `migrate --to sqlite:FILE` creates FILE 0600 whatever the umask
    (issue 15.10), as the saver side does."""
    from deltalog.engine.migrate_items import open_store_uri

    db = tmp_path / "items.sqlite"
    old = os.umask(umask)
    try:
        with open_store_uri(f"sqlite:{db}") as store:
            store.put(("ns",), "k", {"v": 1})
    finally:
        os.umask(old)
    assert db.stat().st_mode & 0o777 == 0o600
