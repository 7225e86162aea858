"""Smoke test of the memory store benchmark (``deltalog.bench.store_bench``) on a tiny size (issue 17, Performance)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from deltalog.bench import cli as bench_cli
from deltalog.bench.store_bench import Lookup, put_rounds, round_order, run_store_bench, table


def test_tiny_run_measures_every_store() -> None:
    """Every store is measured on the same workload; deltalog's table row carries ratios to SqliteStore."""
    results = run_store_bench(300, singles=5)
    assert [r.name for r in results] == ["deltalog", "memory", "sqlite"]
    for r in results:
        assert r.single_puts_s and r.batch_puts_s and r.get_p50_us and r.filter_ms
        assert r.get_p99_us is not None and r.get_p99_us >= r.get_p50_us
        assert r.list_ns_ms is not None and r.list_ns_ms > 0
    deltalog, memory, _ = results
    assert deltalog.vector_ms and memory.vector_ms  # the vector peers
    assert deltalog.bytes and deltalog.bytes > 0
    assert (
        deltalog.bytes_plain and deltalog.bytes_plain < deltalog.bytes
    )  # the same items, no vectors
    text = table(results)
    assert "| single durable puts |" in text and "| bytes on disk |" in text
    assert "| bytes on disk, no vectors |" in text
    assert text.count("met") + text.count("missed") >= 5


def test_put_rounds_time_every_store_in_every_round() -> None:
    """The durable-put figures come from interleaved rounds: every store once per round,
    starting one store later each round."""
    got = put_rounds(("deltalog", "sqlite"), 5, None, rounds=3)
    assert sorted(got) == ["deltalog", "sqlite"]
    for single, threads in got.values():
        assert len(single) == len(threads) == 3
        assert all(x > 0 for x in single + threads)
    names = ("deltalog", "memory", "sqlite")
    assert [round_order(names, r) for r in range(4)] == [
        names,
        ("memory", "sqlite", "deltalog"),
        ("sqlite", "deltalog", "memory"),
        names,
    ]


def test_lookup_embedder_is_deterministic() -> None:
    """The precomputed embedder gives the same 64-dim vectors on every run (same seed)."""
    a, b = Lookup(["x", "y"]), Lookup(["x", "y"])
    assert a(["x", "y"]) == b(["x", "y"]) and len(a(["x"])[0]) == 64
    assert a(["x"]) != a(["y"])


def test_module_runs_as_a_program() -> None:
    """``python -m deltalog.bench.store_bench --quick --items N`` prints the table."""
    out = subprocess.run(
        [sys.executable, "-m", "deltalog.bench.store_bench", "--quick", "--items", "200"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert out.stdout.startswith("| metric | deltalog | memory | sqlite |")
    assert "(200 items" in out.stderr


def test_deltalog_bench_runs_the_memory_store_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    """``deltalog bench --scenario memory-store --quick`` runs this benchmark (10k items)."""
    assert bench_cli.main(["--scenario", "memory-store", "--quick", "--no-pg"]) == 0
    out = capsys.readouterr()
    assert "| filtered search |" in out.out and "(10,000 items" in out.err
