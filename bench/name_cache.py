"""Name-cache memory: heap and RSS of one long-lived process serving many distinct threads.

A server sees unbounded thread ids (and ``sub:<task uuid>`` namespaces). One
process interns ``--threads`` distinct thread ids and namespaces and looks each
up by name and by id, as the reads of a request handler do; the figure is how
much the Python heap (``tracemalloc``) and the RSS grew between the first
quarter of the threads and the end, with the store's bounded name caches and,
in the same run, with a bound so large that they never evict (what the
unbounded maps before issue 15.11 did: +69 MB from 10k to 40k threads). Run::

    python -m deltalog.bench.name_cache                 # 40,000 threads, seconds
    python -m deltalog.bench.name_cache --threads 4000  # a smoke run
    python -m deltalog.bench.name_cache --json out.json
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import resource
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine.cache import NameCache
from deltalog.engine.write_txn import WriteTxn

__all__ = ["main", "measure"]


def _rss_bytes() -> int:
    """Resident set size now (from /proc; the peak from getrusage elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _intern_all(w: WriteTxn, names: list[tuple[str, str]]) -> None:
    for thread_id, ns in names:
        w.intern(keys.KIND_THREAD, thread_id)
        w.intern(keys.KIND_NS, ns)


def measure(threads: int, folder: Path, max_entries: int | None = None) -> dict[str, Any]:
    """Intern ``threads`` distinct thread ids and ``sub:<n>`` namespaces (1,000 per write
    transaction, as many request handlers would), then look each one up by name and by id
    as a read does; return heap and RSS after the first quarter and at the end.

    ``max_entries`` replaces the name caches' bound (None: the default; a huge number
    shows what the unbounded maps cost)."""
    tracemalloc.start()
    marks: dict[str, dict[str, int]] = {}
    with DeltaLogSaver.from_path(folder / "store", durable=False) as saver:
        store = saver.env
        if max_entries is not None:
            store._name_ids = NameCache(max_entries)
            store._names = NameCache(max_entries)
        quarter = max(1, threads // 4)
        done = 0
        for stop in (quarter, threads):
            while done < stop:
                batch = range(done, min(stop, done + 1000))
                names = [(f"user-{i:08d}", f"sub:{i}") for i in batch]
                store.write(functools.partial(_intern_all, names=names))
                with store.read() as r:
                    for t, n in names:
                        tid = r.name_id(keys.KIND_THREAD, t)
                        nid = r.name_id(keys.KIND_NS, n)
                        assert tid is not None and nid is not None
                        r.name_of(keys.KIND_THREAD, tid)
                        r.name_of(keys.KIND_NS, nid)
                done = batch.stop
            gc.collect()
            marks[str(stop)] = {
                "heap_bytes": tracemalloc.get_traced_memory()[0],
                "rss_bytes": _rss_bytes(),
            }
        caches = {"name_ids": len(store._name_ids), "names": len(store._names)}
        bound = store._names.max_entries
    tracemalloc.stop()
    first, last = marks[str(quarter)], marks[str(threads)]
    return {
        "threads": threads,
        "from_threads": quarter,
        "marks": marks,
        "heap_growth_bytes": last["heap_bytes"] - first["heap_bytes"],
        "rss_growth_bytes": last["rss_bytes"] - first["rss_bytes"],
        "name_cache_entries": caches,
        "name_cache_bound": bound,
    }


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=40_000, help="distinct threads")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    results = []
    for label, bound in (("bounded (default)", None), ("unbounded (before)", 2**62)):
        with tempfile.TemporaryDirectory() as tmp:
            result = measure(args.threads, Path(tmp), bound)
        result["cache"] = label
        results.append(result)
        mib = 1024**2
        print(
            f"{label:>19}: {result['from_threads']:,} -> {result['threads']:,} distinct threads: "
            f"heap +{result['heap_growth_bytes'] / mib:.1f} MiB, RSS "
            f"+{result['rss_growth_bytes'] / mib:.1f} MiB; cache entries "
            f"{result['name_cache_entries']['names']:,}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
