"""Where a chat turn's bytes go: per database, entries, key and value bytes and pages (issue 18.1).

``python -m deltalog.bench.breakdown`` runs one benchmark chat scenario on a
``DeltaLogSaver`` in this process and reads every database of the store at two
points, ``--window`` turns before the end and at the end; it prints, per turn
over that window:

* per database: entries added, key bytes, value bytes and B-tree pages
  (leaf + branch + overflow, ``mdb_stat``) in bytes;
* **logical bytes**: keys + values + LMDB's 10 bytes per entry (8-byte node
  header, 2-byte slot) summed over the databases — what the records cost
  before page fill;
* **pages**: the databases' pages, and **used**: the file's used pages
  (``last_pgno``, what ``deltalog bench`` counts, free pages included);
* **fill** per database: its logical bytes over its pages;
* the content floor (:func:`deltalog.bench.graphs.content_floor`) and each
  figure's ratio to it.

Logical bytes over pages is LMDB's page fill: a B-tree page that splits
where keys are inserted in its middle (the end of one thread's or channel's
range, not of the database) keeps half its entries on each side, and the
left half never fills again; a value over ~2 KB goes to overflow pages, whole
4 KiB pages.

``--threads N`` runs N chat threads instead of one, interleaved turn by turn
(each with its own text: the scenario's seed plus the thread's number), the
way a server holding many conversations writes them; the figures are then per
turn of any thread. Every thread's new records then go into the middle of
each database, at the end of its own key range, so the fill falls
(checkpoints and writes 0.55-0.7 with 8 threads, against 0.9-0.95 with one;
blobs, keyed version first since format 10, stay near 0.9: docs/benchmarks.md,
"Stop 37" and "Stop 38").

``--pack`` also says what a turn would take stored as **one packed entry**
(the turn pack of docs/benchmarks.md, "Stop 37" and "Stop 43"): each turn's
new checkpoint, write and blob records of a thread, their keys after the
thread and namespace and their bodies before compression
(:meth:`~deltalog.engine.codec.RecordCodec.body`; a blob delta as stored),
packed into one msgpack list and compressed as one zstd frame with a 32 KiB
dictionary trained on the window's first half, at level 3 and 19; the
figures are over the window's second half, plus one LMDB entry a turn (a
21-byte checkpoint key, the entry's 10 bytes, a tag and a CRC). It also
writes the level-3 packs into a scratch LMDB file, one transaction a turn in
the order they were made, keyed by thread (a database keyed by thread, ns
and the pack's last checkpoint id) and logged (appended under a sequence
number, with an index entry from that key), and reports the B-tree pages a
turn of each: with interleaved threads the first fills its pages as today's
databases do. Nothing is stored that way in the store: it is the estimate a
pack layout is measured against.

``--links`` also lists the store's delta blobs by how far back their base is
(the version's index since its channel's last full record less its base's:
1 for a delta of the version before, 4, 16 … for the skip-delta lattice's
longer links, ``core.skip_base``), each span's count and mean stored bytes,
over the whole store at the end. A ``DeltaChannel`` seed is stored that way,
and a plain ``add_messages`` list at every step; a link costs more the farther
back its base is (docs/benchmarks.md, "Stop 47").

``--no-pack-turns`` opens the store with ``pack_turns=False``: records stored
one by one, as before format 14's turn packs (with packs, a turn's records
are the ``packs`` and ``pack_index`` rows).

The used pages move by a few pages between runs of the same code
(random ids, which pages the free list hands out), so compare windows of a few
hundred turns. The numbers in docs/benchmarks.md ("Stop 26") were made with it.

Example::

    python -m deltalog.bench.breakdown --scenario chat-delta-sf100 --turns 1000 --window 500
    python -m deltalog.bench.breakdown --turns 300 --window 200 --threads 8
    python -m deltalog.bench.breakdown --turns 600 --window 300 --pack
    python -m deltalog.bench.breakdown --turns 3000 --window 1000 --links
"""

from __future__ import annotations

import argparse
import json
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import lmdb
import ormsgpack
import zstandard
from deltalog.bench.graphs import (
    MESSAGES,
    build_graph,
    content_floor,
    expected_messages,
    human_message,
    thread_config,
)
from deltalog.bench.scenarios import CHAT_SCENARIOS
from deltalog.engine import DeltaLogSaver, codec, keys
from deltalog.engine.packs import prefix_of

# LMDB's cost of one leaf entry beyond its key and value: the node header (8 bytes)
# and the page's slot pointer (2 bytes).
ENTRY_OVERHEAD = 10
#: The most chat threads ``--threads`` runs (each is a compiled graph and a chat).
MAX_THREADS = 64
#: The databases a turn pack holds, in the order of their number in a packed entry.
PACKED = ("checkpoints", "writes", "blobs")
#: The zstd levels ``--pack`` compresses at: the store's own, and about the densest.
PACK_LEVELS = (3, 19)
#: One packed entry's bytes around its frame: a checkpoint key (2-byte thread and
#: namespace uids, a 17-byte id), LMDB's entry overhead, a tag byte and a CRC.
PACK_ENTRY = 21 + ENTRY_OVERHEAD + 1 + 4
#: The fewest window turns ``--pack`` accepts: half train the dictionary.
PACK_MIN_WINDOW = 20


@dataclass(frozen=True)
class DbFigures:
    """One database's totals at one point: entries, key and value bytes, pages."""

    entries: int
    key_bytes: int
    value_bytes: int
    pages: int


@dataclass(frozen=True)
class Breakdown:
    """Per-turn growth over the window (see the module docstring)."""

    scenario: str
    turns: int
    window: int
    threads: int
    floor: float
    logical: float
    pages: float
    used: float
    databases: dict[str, dict[str, float]]
    #: ``--pack``: B/turn of the packed frame at each of :data:`PACK_LEVELS`
    #: ("level 3", "level 19") over the window's second half, and "entry", the
    #: bytes of one LMDB entry around it; None without ``--pack``.
    pack: dict[str, float] | None = None
    #: ``--links``: per link span (versions back, as a string for JSON), the count
    #: of delta blobs and their mean stored bytes; None without ``--links``.
    links: dict[str, dict[str, float]] | None = None

    def table(self) -> str:
        """The figures as text."""
        threads = f" x {self.threads} interleaved threads" if self.threads > 1 else ""
        lines = [
            f"{self.scenario}: {self.turns} turns{threads}, per turn over the last "
            f"{self.window}; content floor {self.floor:.0f} B",
            f"  logical {self.logical:7.0f} B ({self.logical / self.floor:.2f}x)   pages "
            f"{self.pages:7.0f} B ({self.pages / self.floor:.2f}x)   used {self.used:7.0f} B "
            f"({self.used / self.floor:.2f}x)",
            f"  {'database':14} {'entries':>8} {'key B':>8} {'value B':>8} {'pages B':>8} "
            f"{'fill':>5}",
        ]
        for name, row in sorted(self.databases.items()):
            lines.append(
                f"  {name:14} {row['entries']:8.2f} {row['key_bytes']:8.1f} "
                f"{row['value_bytes']:8.1f} {row['pages']:8.1f} {row['fill']:5.2f}"
            )
        if self.pack is not None:
            entry = self.pack["entry"]
            frames = ", ".join(
                f"level {level}: {self.pack[f'level {level}'] + entry:.0f} B "
                f"({(self.pack[f'level {level}'] + entry) / self.floor:.2f}x)"
                for level in PACK_LEVELS
            )
            lines.append(
                f"  packed, one zstd frame and one {entry:.0f}-byte entry a turn "
                f"(window's second half): {frames}"
            )
            lines.append(
                f"  packed at level 3, B-tree pages a turn (whole window): keyed by thread "
                f"{self.pack['pages keyed']:.0f} B "
                f"({self.pack['pages keyed'] / self.floor:.2f}x), in a log with an index "
                f"{self.pack['pages logged']:.0f} B ({self.pack['pages logged'] / self.floor:.2f}x)"
            )
        if self.links is not None:
            spans = ", ".join(
                f"{span} back: {row['count']:.0f} x {row['mean_bytes']:,.0f} B"
                for span, row in self.links.items()
            )
            lines.append(f"  delta blobs by link (whole store): {spans or 'none'}")
        return "\n".join(lines)


def _snapshot(saver: DeltaLogSaver) -> tuple[dict[str, DbFigures], int, int]:
    """Every database's figures, the file's used pages and the page size."""
    env = saver.env.env
    out: dict[str, DbFigures] = {}
    with env.begin() as txn:
        names = [bytes(k) for k, _ in txn.cursor()]
        for name in names:
            db = env.open_db(name, txn=txn, create=False)
            stat = txn.stat(db)
            entries = key_bytes = value_bytes = 0
            for key, value in txn.cursor(db=db):
                entries += 1
                key_bytes += len(key)
                value_bytes += len(value)
            pages = stat["leaf_pages"] + stat["branch_pages"] + stat["overflow_pages"]
            out[name.decode()] = DbFigures(entries, key_bytes, value_bytes, pages)
    return out, int(env.info()["last_pgno"]) + 1, int(env.stat()["psize"])


def _new_records(
    saver: DeltaLogSaver, seen: set[tuple[int, bytes]]
) -> dict[bytes, list[tuple[int, bytes, bytes]]]:
    """The records of :data:`PACKED` not in ``seen`` (which gains them), per thread and
    namespace prefix: ``(database number, key after the prefix, body)``, the body as
    :meth:`~deltalog.engine.codec.RecordCodec.body` gives it (a blob delta as stored,
    CRC left out; a write's body after its channel uid)."""
    env = saver.env
    out: dict[bytes, list[tuple[int, bytes, bytes]]] = {}
    with env.read() as r:
        for number, name in enumerate(PACKED):
            # Checkpoints and writes through the store's own cursors: those the
            # store packed read as plain records.
            if name == "checkpoints":
                cur = r.checkpoint_cursor()
            elif name == "writes":
                cur = r.write_cursor()
            else:
                cur = r.txn.cursor(db=env.db(name))
            for raw_key in cur.iternext(keys=True, values=False):
                key = bytes(raw_key)
                if (number, key) in seen:
                    continue
                seen.add((number, key))
                value = bytes(cur.value())
                channel = value[: 1 + value[0]] if name == "writes" else b""
                record = value[len(channel) :]
                what = f"{name}/{key.hex()}"
                body = env.codec.body(record, what, prefix=channel, key=key)
                prefix = prefix_of(key)
                out.setdefault(prefix, []).append(
                    (number, key[len(prefix) :], channel + (record[:-4] if body is None else body))
                )
    return out


def link_sizes(saver: DeltaLogSaver) -> dict[str, dict[str, float]]:
    """The store's delta blobs that have a base, by how many versions back it is
    (their index less the base's): ``{span: {"count", "mean_bytes"}}``, spans
    ascending, stored bytes with the CRC."""
    env = saver.env
    found: dict[bytes, tuple[bytes, int, int]] = {}  # key: base ref, index, stored bytes
    with env.read() as r:
        for raw_key, raw in r.txn.cursor(db=env.db("blobs")):
            key, value = bytes(raw_key), bytes(raw)
            info = env.codec.delta_info(value, f"blobs/{key.hex()}", key=key)
            if info is not None:
                found[key] = (*info, len(value))
    sizes: dict[int, list[int]] = {}
    for key, (ref, seq, size) in found.items():
        base = found.get(keys.blob_base_key(key, ref)) if ref else None
        if base is not None:
            sizes.setdefault(seq - base[1], []).append(size)
    return {
        str(span): {"count": float(len(got)), "mean_bytes": sum(got) / len(got)}
        for span, got in sorted(sizes.items())
    }


def pack_sizes(frames: Sequence[tuple[bytes, bytes]], workdir: Path) -> dict[str, float]:
    """B/turn of ``frames`` (``(pack key, packed turn)`` in the order the turns were
    written) over their second half, compressed with a 32 KiB dictionary trained on
    the first half at each of :data:`PACK_LEVELS`; "entry" is :data:`PACK_ENTRY`.
    zstd's magic number is left out, as a stored record leaves it out.

    Also the B-tree pages the level-3 packs of the whole window take, written one
    transaction a turn into a scratch LMDB file in two layouts: "pages keyed",
    one database keyed by the pack key (thread, ns, last checkpoint id), and
    "pages logged", each pack appended to a log under a sequence number plus an
    index entry (pack key → number). Interleaved threads insert into the middle
    of the first, which LMDB leaves half full; the log is only appended to."""
    bodies: list[bytes | bytearray | memoryview] = [body for _, body in frames]
    half = len(frames) // 2
    dictionary = zstandard.train_dictionary(codec.DICT_SIZE, bodies[:half])
    sizes: dict[str, float] = {"entry": float(PACK_ENTRY)}
    stored: list[bytes] = []
    for level in PACK_LEVELS:
        zc = zstandard.ZstdCompressor(
            level=level,
            dict_data=dictionary,
            write_checksum=False,
            write_content_size=False,
            write_dict_id=False,
        )
        packed = [zc.compress(body)[len(codec.ZSTD_MAGIC) :] for body in bodies]
        sizes[f"level {level}"] = sum(map(len, packed[half:])) / (len(frames) - half)
        stored = stored or packed
    env = lmdb.open(str(workdir / "packs"), max_dbs=3, map_size=1 << 30, sync=False)
    try:
        keyed, log, index = (env.open_db(name) for name in (b"keyed", b"log", b"index"))
        for seq, ((key, _), frame) in enumerate(zip(frames, stored, strict=True)):
            value = b"\x00" + frame + zlib.crc32(frame).to_bytes(4, "big")
            with env.begin(write=True) as txn:
                txn.put(key, value, db=keyed)
                txn.put(seq.to_bytes(8, "big"), value, db=log, append=True)
                txn.put(key, seq.to_bytes(8, "big"), db=index)
        psize = int(env.stat()["psize"])
        with env.begin() as txn:

            def pages(db: Any) -> int:
                st = txn.stat(db)
                return int(st["leaf_pages"] + st["branch_pages"] + st["overflow_pages"])

            sizes["pages keyed"] = pages(keyed) * psize / len(frames)
            sizes["pages logged"] = (pages(log) + pages(index)) * psize / len(frames)
    finally:
        env.close()
    return sizes


def measure(
    scenario_name: str,
    turns: int,
    window: int,
    workdir: Path,
    threads: int = 1,
    *,
    pack: bool = False,
    pack_turns: bool = True,
    links: bool = False,
) -> Breakdown:
    """Run ``turns`` turns of the scenario (on each of ``threads`` interleaved threads)
    and break down the last ``window``; ``pack``: also estimate a packed turn;
    ``pack_turns``: the store's own option (False: no turn packs, as before format 14);
    ``links``: also list the delta blobs by link span (:func:`link_sizes`)."""
    scenarios = {s.name: s for s in CHAT_SCENARIOS}
    if scenario_name not in scenarios:
        raise SystemExit(f"unknown scenario {scenario_name!r}; one of {sorted(scenarios)}")
    if not 1 <= window <= turns:
        raise SystemExit(f"--window {window} must be between 1 and --turns ({turns})")
    if not 1 <= threads <= MAX_THREADS:
        raise SystemExit(f"--threads {threads} must be between 1 and {MAX_THREADS}")
    if pack and window < PACK_MIN_WINDOW:
        raise SystemExit(
            f"--pack needs a --window of at least {PACK_MIN_WINDOW} turns (got {window}): "
            "its first half trains the dictionary"
        )
    base = scenarios[scenario_name].with_turns(turns)
    # Thread 0 is the scenario itself, so --threads 1 measures what it always did.
    chats = [replace(base, seed=base.seed + k) for k in range(threads)]
    with DeltaLogSaver.from_path(workdir / "store", pack_turns=pack_turns) as saver:
        graphs = [build_graph(chat, saver) for chat in chats]
        configs = [
            thread_config("breakdown" if k == 0 else f"breakdown-{k}") for k in range(threads)
        ]
        before: tuple[dict[str, DbFigures], int, int] | None = None
        seen: set[tuple[int, bytes]] = set()
        frames: list[tuple[bytes, bytes]] = []
        for turn in range(turns):
            if turn == turns - window:
                before = _snapshot(saver)
                if pack:
                    _new_records(saver, seen)
            for chat, graph, config in zip(chats, graphs, configs, strict=True):
                graph.invoke({MESSAGES: [human_message(chat, turn)]}, config)
            if pack and turn >= turns - window:
                for prefix, records in _new_records(saver, seen).items():
                    records.sort()
                    newest = max((key for number, key, _ in records if number == 0), default=b"")
                    frames.append((prefix + newest, ormsgpack.packb(records)))
        after = _snapshot(saver)
        by_link = link_sizes(saver) if links else None
    first, used0, psize = before if before is not None else ({}, 0, after[2])
    last, used1, _ = after
    empty = DbFigures(0, 0, 0, 0)
    rows: dict[str, dict[str, float]] = {}
    logical = pages = 0
    count = window * threads
    for name, end in last.items():
        start = first.get(name, empty)
        grown = DbFigures(
            *(b - a for a, b in zip(asdict(start).values(), asdict(end).values(), strict=True))
        )
        grown_logical = grown.key_bytes + grown.value_bytes + ENTRY_OVERHEAD * grown.entries
        logical += grown_logical
        pages += grown.pages * psize
        if grown.entries or grown.pages or grown.key_bytes or grown.value_bytes:
            rows[name] = {
                "entries": grown.entries / count,
                "key_bytes": grown.key_bytes / count,
                "value_bytes": grown.value_bytes / count,
                "pages": grown.pages * psize / count,
                "fill": grown_logical / (grown.pages * psize) if grown.pages > 0 else 0.0,
            }
    floor = sum(sum(content_floor(c, expected_messages(c))[-window:]) for c in chats)
    return Breakdown(
        scenario=scenario_name,
        turns=turns,
        window=window,
        threads=threads,
        floor=floor / count,
        logical=logical / count,
        pages=pages / count,
        used=(used1 - used0) * psize / count,
        databases=rows,
        pack=pack_sizes(frames, workdir) if pack else None,
        links=by_link,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m deltalog.bench.breakdown")
    parser.add_argument("--scenario", default="chat-delta-sf100")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument(
        "--threads", type=int, default=1, help="chat threads, interleaved turn by turn"
    )
    parser.add_argument(
        "--pack", action="store_true", help="also estimate a turn stored as one packed entry"
    )
    parser.add_argument(
        "--no-pack-turns",
        action="store_true",
        help="open the store with pack_turns=False (no turn packs, as before format 14)",
    )
    parser.add_argument(
        "--links",
        action="store_true",
        help="also list the delta blobs by how far back their base is, with their mean bytes",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(
            args.scenario,
            args.turns,
            args.window,
            Path(tmp),
            args.threads,
            pack=args.pack,
            pack_turns=not args.no_pack_turns,
            links=args.links,
        )
    print(result.table())
    if args.json is not None:
        payload: dict[str, Any] = asdict(result)
        args.json.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
