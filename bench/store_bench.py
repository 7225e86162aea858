"""Memory store benchmark: DeltaLogStore against InMemoryStore, SqliteStore (and PostgresStore).

Run ``python -m deltalog.bench.store_bench --quick`` (10k items, about a
minute) or without ``--quick`` (adds vector top-10 over 100k items). Every
store gets the same workload in the same run:

* single durable puts/s: one ``put`` per call (deltalog fsyncs each commit;
  SqliteStore commits each ``put`` in WAL-less default journal mode), and
  the same from 8 threads at once: :data:`PUT_ROUNDS` rounds, the stores
  interleaved in a rotating order within each round (the fsync latency of a
  shared machine drifts over seconds), each figure the median of its rounds,
* batched puts/s: loading N items in ``batch`` calls of 100 puts, 64-dim
  vectors for the stores with an index,
* get p50/p99 over 1,000 random keys,
* filtered search over the N items (``n >= N-10``, limit 10: every item is
  read),
* vector top-10 over N items (``query=``; embedding excluded: the embedder
  looks precomputed vectors up in a dict),
* ``list_namespaces`` over the 1,000 namespaces the items live in,
* bytes on disk after the load, and (deltalog) of the same items loaded
  without an index: SqliteStore without sqlite-vec stores no vectors, so this
  row compares like with like.

SqliteStore's vector index needs the sqlite-vec extension, which this
Python's ``sqlite3`` may not load (``enable_load_extension`` missing in many
builds); then SqliteStore runs without an index and ``InMemoryStore`` is the
vector peer, as issue 17 asks. Ratios are deltalog ÷ the peer: for rates
above 1 is better for deltalog, for times and bytes below 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["StoreResult", "main", "run_store_bench"]

DIMS = 64
NAMESPACES = 1000
#: Writer threads of the concurrent-puts figure (each its own namespace).
WRITERS = 8
#: Rounds of the two durable-put figures (see the module docstring).
PUT_ROUNDS = 5


@dataclass
class StoreResult:
    """One store's figures (None: not measured / not supported)."""

    name: str
    single_puts_s: float | None = None
    concurrent_puts_s: float | None = None
    batch_puts_s: float | None = None
    get_p50_us: float | None = None
    get_p99_us: float | None = None
    filter_ms: float | None = None
    vector_ms: float | None = None
    vector_big_ms: float | None = None
    list_ns_ms: float | None = None
    bytes: int | None = None
    bytes_plain: int | None = None
    notes: list[str] = field(default_factory=list)


class Lookup:
    """An embedder that looks precomputed deterministic vectors up (embedding time excluded)."""

    def __init__(self, texts: list[str], seed: int = 17) -> None:
        rng = np.random.default_rng(seed)
        matrix = rng.standard_normal((len(texts), DIMS)).astype(np.float32)
        self.vectors = {t: [float(x) for x in row] for t, row in zip(texts, matrix, strict=True)}

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]


def _texts(n: int) -> list[str]:
    return [f"memory {i}" for i in range(n)]


def _ns(i: int) -> tuple[str, ...]:
    return ("docs", f"g{i % NAMESPACES}")


def _value(i: int) -> dict[str, Any]:
    return {"text": f"memory {i}", "n": i, "group": i % 10}


def _dir_bytes(path: Path) -> int:
    if path.is_file():
        return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if os.path.exists(p))
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@contextlib.contextmanager
def _open(name: str, folder: Path, embed: Lookup | None, dsn: str | None) -> Iterator[Any]:
    index: Any = None if embed is None else {"dims": DIMS, "embed": embed, "fields": ["text"]}
    if name == "deltalog":
        from deltalog.engine import DeltaLogStore

        with DeltaLogStore.from_path(folder / "store.lmdb", index=index) as store:
            yield store
    elif name == "memory":
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore(index=index)
    elif name == "sqlite":
        from langgraph.store.sqlite import SqliteStore

        conn = sqlite3.connect(
            folder / "store.sqlite", check_same_thread=False, isolation_level=None
        )
        try:
            sqlite_store = SqliteStore(conn, index=index)
            sqlite_store.setup()
            yield sqlite_store
        finally:
            conn.close()
    elif name == "postgres":
        from langgraph.store.postgres import PostgresStore

        if dsn is None:
            raise ValueError("the postgres store needs a DSN (--postgres)")
        with PostgresStore.from_conn_string(dsn) as pg:
            pg.setup()
            with pg._cursor() as cur:
                cur.execute("TRUNCATE store")
            yield pg
    else:
        raise ValueError(name)


def sqlite_vectors_available() -> bool:
    """Whether this Python's sqlite3 can load sqlite-vec (SqliteStore's vector index)."""
    return hasattr(sqlite3.connect(":memory:"), "enable_load_extension")


def _bytes(name: str, store: Any, folder: Path) -> int | None:
    if name == "deltalog":
        return _dir_bytes(folder / "store.lmdb")
    if name == "sqlite":
        return _dir_bytes(folder / "store.sqlite")
    if name == "postgres":
        with store._cursor() as cur:
            cur.execute(
                "SELECT pg_total_relation_size('store')"
                " + coalesce(pg_total_relation_size(to_regclass('store_vectors')), 0) AS n"
            )
            row = cur.fetchone()
            return int(row["n"]) if row else None
    return None


def measure(
    name: str, n: int, *, big: int = 0, singles: int = 200, dsn: str | None = None
) -> StoreResult:
    """All figures of one store, in a fresh temporary folder."""
    from langgraph.store.base import PutOp

    result = StoreResult(name)
    vectors = name != "postgres" and (name != "sqlite" or sqlite_vectors_available())
    if not vectors:
        result.notes.append("no vector index" + (" (no sqlite-vec)" if name == "sqlite" else ""))
    embed = Lookup([*_texts(n), "query"]) if vectors else None
    folder = Path(tempfile.mkdtemp(prefix=f"store-bench-{name}-"))
    try:
        with _open(name, folder, embed, dsn) as store:
            # The items of the timed single puts (put_rounds), for the bytes.
            store.batch(
                [PutOp(("single",), f"s{i}", {"n": i}, index=False) for i in range(singles)]
            )
            start = time.perf_counter()
            for lo in range(0, n, 100):
                store.batch(
                    [PutOp(_ns(i), f"k{i}", _value(i)) for i in range(lo, min(n, lo + 100))]
                )
            result.batch_puts_s = n / (time.perf_counter() - start)
            rng = random.Random(3)
            gets = []
            for _ in range(1000):
                i = rng.randrange(n)
                t0 = time.perf_counter()
                got = store.get(_ns(i), f"k{i}")
                gets.append((time.perf_counter() - t0) * 1e6)
                if got is None:
                    raise RuntimeError(f"{name}: item k{i} missing")
            gets.sort()
            result.get_p50_us = gets[len(gets) // 2]
            result.get_p99_us = gets[int(len(gets) * 0.99)]
            flt = {"n": {"$gte": n - 10}}
            result.filter_ms = _median_ms(lambda: store.search(("docs",), filter=flt, limit=10), 5)
            if vectors:
                result.vector_ms = _median_ms(
                    lambda: store.search(("docs",), query="query", limit=10), 5
                )
            result.list_ns_ms = _median_ms(
                lambda: store.list_namespaces(prefix=("docs",), limit=NAMESPACES * 2), 5
            )
            result.bytes = _bytes(name, store, folder)
        if name == "deltalog" and vectors:
            result.bytes_plain = _plain_bytes(n, singles, folder)
        elif name != "memory":
            result.bytes_plain = result.bytes  # no vectors stored
        if big and vectors and name != "sqlite":
            result.vector_big_ms = _vector_only(name, big, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def round_order(names: tuple[str, ...], r: int) -> tuple[str, ...]:
    """The stores in the order round ``r`` times them: one later each round."""
    k = r % len(names)
    return names[k:] + names[:k]


def put_rounds(
    names: tuple[str, ...], singles: int, dsn: str | None, rounds: int = PUT_ROUNDS
) -> dict[str, tuple[list[float], list[float]]]:
    """Each store's (single puts/s, puts/s from :data:`WRITERS` threads), one per round.

    Every store is open at once, on a fresh file; each round times ``singles``
    single puts, then ``singles // 4`` puts from each thread, store after
    store in :func:`round_order`.
    """
    singles_s: dict[str, list[float]] = {name: [] for name in names}
    threads_s: dict[str, list[float]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        stores = {}
        for name in names:
            folder = Path(tempfile.mkdtemp(prefix=f"store-bench-puts-{name}-"))
            stack.callback(shutil.rmtree, folder, True)
            stores[name] = stack.enter_context(_open(name, folder, None, dsn))
        for r in range(rounds):
            for name in round_order(names, r):
                store = stores[name]
                start = time.perf_counter()
                for i in range(singles):
                    store.put(("single",), f"r{r}-s{i}", {"n": i}, index=False)
                singles_s[name].append(singles / (time.perf_counter() - start))
                each = max(10, singles // 4)
                threads_s[name].append(_concurrent_puts(store, WRITERS, each, tag=f"r{r}-"))
    return {name: (singles_s[name], threads_s[name]) for name in names}


def _concurrent_puts(store: Any, writers: int, each: int, tag: str = "") -> float:
    """Single durable puts per second with ``writers`` threads putting at once."""
    barrier = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        barrier.wait()
        try:
            for i in range(each):
                store.put(("concurrent", f"w{n}"), f"{tag}c{i}", {"n": i}, index=False)
        except BaseException as exc:  # reported below: a failed put fails the figure
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"a concurrent put failed: {errors[0]!r}") from errors[0]
    return writers * each / elapsed


def _plain_bytes(n: int, singles: int, folder: Path) -> int | None:
    """Bytes of deltalog holding the same items without an index (no vectors)."""
    from langgraph.store.base import PutOp

    sub = folder / "plain"
    sub.mkdir()
    with _open("deltalog", sub, None, None) as store:
        store.batch([PutOp(("single",), f"s{i}", {"n": i}, index=False) for i in range(singles)])
        for lo in range(0, n, 100):
            store.batch([PutOp(_ns(i), f"k{i}", _value(i)) for i in range(lo, min(n, lo + 100))])
        return _bytes("deltalog", store, sub)


def _vector_only(name: str, n: int, folder: Path) -> float:
    """Vector top-10 over ``n`` items (loaded in batches of 1,000)."""
    from langgraph.store.base import PutOp

    embed = Lookup([*_texts(n), "query"], seed=5)
    sub = folder / "big"
    sub.mkdir()
    with _open(name, sub, embed, None) as store:
        for lo in range(0, n, 1000):
            store.batch([PutOp(_ns(i), f"k{i}", _value(i)) for i in range(lo, min(n, lo + 1000))])
        return _median_ms(lambda: store.search(("docs",), query="query", limit=10), 3)


def run_store_bench(
    n: int,
    *,
    big: int = 0,
    singles: int = 200,
    stores: tuple[str, ...] = (),
    dsn: str | None = None,
) -> list[StoreResult]:
    """Measure every store (deltalog first); PostgresStore only with ``dsn``."""
    names = stores or ("deltalog", "memory", "sqlite") + (("postgres",) if dsn else ())
    puts = put_rounds(names, singles, dsn)
    results = [measure(s, n, big=big, singles=singles, dsn=dsn) for s in names]
    for result in results:
        single, threads = puts[result.name]
        result.single_puts_s = statistics.median(single)
        result.concurrent_puts_s = statistics.median(threads)
    return results


_ROWS: list[tuple[str, str, bool, float | None, str]] = [
    # label, attribute, higher is better, target ratio vs SqliteStore, unit
    ("single durable puts", "single_puts_s", True, 2.0, "/s"),
    (f"durable puts, {WRITERS} threads", "concurrent_puts_s", True, 5.0, "/s"),
    ("batched puts", "batch_puts_s", True, None, "/s"),
    ("get p50", "get_p50_us", False, 0.5, " µs"),
    ("get p99", "get_p99_us", False, None, " µs"),
    ("filtered search", "filter_ms", False, 1.0, " ms"),
    ("vector top-10", "vector_ms", False, None, " ms"),
    ("vector top-10, 100k", "vector_big_ms", False, 0.1, " ms"),
    ("list_namespaces", "list_ns_ms", False, 0.5, " ms"),
    ("bytes on disk", "bytes", False, 0.7, " B"),
    ("bytes on disk, no vectors", "bytes_plain", False, 0.7, " B"),
]


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == " B":
        return f"{v / 1024**2:.1f} MiB"
    return f"{v:,.0f}{unit}" if v >= 100 else f"{v:.2f}{unit}"


def table(results: list[StoreResult]) -> str:
    """A Markdown table: every store's figures and deltalog's ratio to SqliteStore."""
    by = {r.name: r for r in results}
    names = [r.name for r in results]
    head = "| metric | " + " | ".join(names) + " | deltalog vs sqlite | target | met |"
    lines = [head, "|" + "---|" * (len(names) + 4)]
    for label, attr, higher, target, unit in _ROWS:
        values = [getattr(by[nm], attr) for nm in names]
        if all(v is None for v in values):
            continue
        mine = getattr(by["deltalog"], attr) if "deltalog" in by else None
        peer_name = "sqlite"
        peer = getattr(by["sqlite"], attr) if "sqlite" in by else None
        if peer is None and attr.startswith("vector") and "memory" in by:
            peer_name, peer = "memory", getattr(by["memory"], attr)
        ratio = None
        if mine and peer:
            ratio = mine / peer
        shown = (
            "n/a"
            if ratio is None
            else f"{ratio:.2f}×" + ("" if peer_name == "sqlite" else f" ({peer_name})")
        )
        goal, met = "", ""
        if target is not None and ratio is not None:
            goal = f"{'≥' if higher else '≤'} {target}×"
            met = "met" if (ratio >= target if higher else ratio <= target) else "missed"
        cells = " | ".join(_fmt(v, unit) for v in values)
        lines.append(f"| {label} | {cells} | {shown} | {goal} | {met} |")
    notes = [f"{r.name}: {', '.join(r.notes)}" for r in results if r.notes]
    return "\n".join(lines) + ("\n\n" + "; ".join(notes) if notes else "")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m deltalog.bench.store_bench [--quick] [--items N] [--postgres]``."""
    parser = argparse.ArgumentParser(prog="python -m deltalog.bench.store_bench")
    parser.add_argument("--quick", action="store_true", help="10k items, no 100k vector run")
    parser.add_argument("--items", type=int, default=10_000, help="items loaded (default 10k)")
    parser.add_argument(
        "--singles", type=int, default=200, help="single puts timed per round (and from threads)"
    )
    parser.add_argument(
        "--postgres",
        nargs="?",
        const="local",
        default=None,
        help="also PostgresStore: a DSN, or nothing to start a throwaway local server",
    )
    args = parser.parse_args(argv)
    big = 0 if args.quick else 100_000
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        dsn = args.postgres
        if dsn == "local":
            from deltalog.bench.pgserver import local_postgres

            dsn = stack.enter_context(local_postgres())
        results = run_store_bench(args.items, big=big, singles=args.singles, dsn=dsn)
    print(table(results))
    print(f"\n({args.items:,} items, {time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
