"""verify() finds damaged memory records, a broken TTL index and orphan vectors, and nothing in a sound store (issue 17)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogStore
from deltalog.engine.codec import rekey


def embed(texts: list[str]) -> list[list[float]]:
    return [[float(len(t)), 1.0] for t in texts]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DeltaLogStore]:
    index: Any = {"dims": 2, "embed": embed, "fields": ["t"]}
    with DeltaLogStore.from_path(tmp_path / "v", index=index) as s:
        for i in range(20):
            s.put(("a", str(i % 3)), f"k{i}", {"t": "x" * i}, ttl=5 if i % 2 else None)
        s.put(("a", "0"), "k0", {"t": "changed"}, index=False)
        s.delete(("a", "1"), "k1")
        s.get(("a", "1"), "k3")  # a TTL refresh
        yield s


def _raw(store: DeltaLogStore, db: str) -> list[tuple[bytes, bytes]]:
    return list(store.env.iter_db(db))


def test_sound_store_has_no_problems(store: DeltaLogStore) -> None:
    """Puts, re-puts, deletes, refreshes and sweeps leave no inconsistency."""
    assert store.verify() == []
    store.sweep_ttl()
    assert store.verify() == []


def test_damaged_item_record_found(store: DeltaLogStore) -> None:
    """A flipped byte in an item record is reported with its key."""
    key, value = _raw(store, "items")[1]  # the chunk of ("a", "1")
    bad = value[:5] + bytes([value[5] ^ 0x40]) + value[6:]
    store.env.write(lambda w: w.txn.put(key, bad, db=w.env.db("items")))
    problems = store.verify()
    assert len(problems) == 1 and key.hex() in problems[0]


def test_broken_ttl_index_found(store: DeltaLogStore) -> None:
    """A lost TTL entry and a stray one are both reported."""
    key, _ = _raw(store, "item_ttl")[0]
    store.env.write(lambda w: w.txn.delete(key, db=w.env.db("item_ttl")))
    stray = b"\x00" * 8 + b"\x01\x09\x00zz\x00\x00"
    store.env.write(lambda w: w.txn.put(stray, b"", db=w.env.db("item_ttl")))
    problems = store.verify()
    assert any("lacks" in p and key.hex() in p for p in problems)
    assert any(stray.hex() in p for p in problems)


def test_orphan_vector_found(store: DeltaLogStore) -> None:
    """A vector whose item is gone is reported."""
    key, value = _raw(store, "item_vectors")[0]
    orphan = key[:-4] + b"zz" + key[-2:]
    value = rekey(value, key, orphan, "test")  # a sound record under its own key
    store.env.write(lambda w: w.txn.put(orphan, value, db=w.env.db("item_vectors")))
    problems = store.verify()
    assert any(orphan.hex() in p and "no item" in p for p in problems)


def test_saver_verify_and_cli_report_memory_problems(store: DeltaLogStore, tmp_path: Path) -> None:
    """saver.verify() and `deltalog verify PATH` include the memory records (exit 1 on damage)."""
    import subprocess
    import sys

    from deltalog.engine import DeltaLogSaver

    def cli_verify() -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "deltalog.engine", "verify", str(tmp_path / "v"), "--json"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    saver = DeltaLogSaver(store.env)
    assert saver.verify().ok
    assert cli_verify().returncode == 0
    key, value = _raw(store, "items")[1]  # the chunk of ("a", "1")
    bad = value[:5] + bytes([value[5] ^ 0x40]) + value[6:]
    store.env.write(lambda w: w.txn.put(key, bad, db=w.env.db("items")))
    report = saver.verify()
    assert not report.ok
    found = [p for p in report.problems if p.kind == "memory_record"]
    assert len(found) == 1 and key.hex() in found[0].detail
    out = cli_verify()
    assert out.returncode == 1 and key.hex() in out.stdout and "memory_record" in out.stdout
