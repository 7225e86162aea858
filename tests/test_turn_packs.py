"""Turn packs (format 14): a store that packs the records behind each thread's head
reads, changes and exports exactly as one that does not (docs/design.md, "Turn packs").

Every test runs real LangGraph chats on two stores side by side: one with the
default packing, one with ``Environment(pack_turns=False)``, and compares what
LangGraph and the saver give back.
"""

from __future__ import annotations

import copy
import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.scenarios import CHAT_SCENARIOS
from deltalog.engine import CorruptRecordError, DeltaLogSaver, Environment, txn_base
from deltalog.engine.packs import CHUNK_KEY_SIZE, PACK_KEEP, PACK_MAX, PACK_RECORD_MAX, SEQ_SIZE
from langgraph.graph.state import CompiledStateGraph

from .checkpoints import at, new_checkpoint

SCENARIOS = {s.name: s for s in CHAT_SCENARIOS}


def _saver(path: Path, *, packs: bool) -> DeltaLogSaver:
    return DeltaLogSaver(Environment(path, pack_turns=packs))


def _chat(
    saver: DeltaLogSaver, name: str, thread: str, turns: int, start: int = 0
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Turns ``start`` … ``turns - 1`` of the scenario's chat on ``thread``."""
    scenario = SCENARIOS[name].with_turns(turns)
    graph = build_graph(scenario, saver)
    for turn in range(start, turns):
        graph.invoke({MESSAGES: [human_message(scenario, turn)]}, thread_config(thread))
    return graph


# What differs between two runs of the same chat: uuids (checkpoint, task and run
# ids), LangGraph's channel versions (a counter and a random part) and timestamps.
RANDOM = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d{32}\..+)$")


def _norm(obj: Any, seen: dict[str, str]) -> Any:
    """``obj`` with each random string replaced by its order of first appearance
    and timestamps left out: equal for two runs of the same chat."""
    if isinstance(obj, str) and RANDOM.match(obj):
        return seen.setdefault(obj, f"#{len(seen)}")
    if isinstance(obj, dict):
        return {_norm(k, seen): _norm(v, seen) for k, v in obj.items() if k != "ts"}
    if isinstance(obj, (list, tuple)):
        items = [_norm(v, seen) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return obj


def _view(saver: DeltaLogSaver, graph: CompiledStateGraph[Any, Any, Any, Any], thread: str) -> Any:
    """What LangGraph and the saver give back for a thread: its state, its whole
    history and the raw checkpoint tuples (random ids and times normalized)."""
    config = thread_config(thread)
    history = [
        (s.config, s.values, s.next, s.metadata, s.parent_config, [t.id for t in s.tasks])
        for s in graph.get_state_history(config)
    ]
    tuples = [
        (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
        for t in saver.list(config)
    ]
    return _norm((graph.get_state(config).values, history, tuples), {})


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[DeltaLogSaver, DeltaLogSaver]]:
    packed, plain = _saver(tmp_path / "packed", packs=True), _saver(tmp_path / "plain", packs=False)
    try:
        yield packed, plain
    finally:
        packed.close()
        plain.close()


def _packs(saver: DeltaLogSaver) -> int:
    return int(saver.env.stats()["packs"]["entries"])


def _chunks(saver: DeltaLogSaver) -> int:
    """How many chunks (format 16: large records a pack carries) the log holds."""
    return sum(len(key) == CHUNK_KEY_SIZE for key, _ in saver.env.iter_db("packs"))


@pytest.mark.parametrize(
    "scenario", ["chat-delta-sf100", "chat-add_messages", "chat-delta-sf10", "agent-add_messages"]
)
def test_a_packed_chat_reads_as_a_plain_one(
    twins: tuple[DeltaLogSaver, DeltaLogSaver], scenario: str
) -> None:
    """The agent's tool results (8,000 characters, ~1.8-2.4 KB stored) are larger
    than PACK_RECORD_MAX: its packs carry them in chunks."""
    packed, plain = twins
    graphs = [_chat(s, scenario, "t", 25) for s in twins]
    assert (_chunks(packed) > 0) == scenario.startswith("agent")
    # 25 turns, three checkpoints each: all but the newest few are packed, at most
    # PACK_MAX a pack.
    assert _packs(packed) >= (75 - PACK_KEEP - PACK_MAX) // PACK_MAX and _packs(plain) == 0
    assert packed.env.stats()["checkpoints"]["entries"] < PACK_MAX + PACK_KEEP
    assert _view(packed, graphs[0], "t") == _view(plain, graphs[1], "t")
    assert packed.verify(deep=True).ok


def test_a_store_whose_packs_are_all_deleted_reads_as_a_plain_one(
    twins: tuple[DeltaLogSaver, DeltaLogSaver],
) -> None:
    """Once a process has seen a pack it reads every later snapshot through the
    pack index (TxnBase.packs_on); with every pack deleted, that index is empty
    and the store still reads and forks as one that never packed."""
    packed, plain = twins
    for saver in twins:
        _chat(saver, "chat-delta-sf100", "old", 25)
    assert _packs(packed) > 0 and packed.env.packs_seen
    packed.delete_thread("old")
    plain.delete_thread("old")
    assert _packs(packed) == 0
    graphs = [_chat(s, "chat-delta-sf100", "t", 3) for s in twins]
    assert _packs(packed) == 0
    assert _view(packed, graphs[0], "t") == _view(plain, graphs[1], "t")
    assert packed.verify(deep=True).ok


def test_packs_shrink_what_a_turn_adds(twins: tuple[DeltaLogSaver, DeltaLogSaver]) -> None:
    """Turns 150-250 of the sf=100 chat (the store's dictionary trained): the packed
    store grows by ~0.65x what the plain one does (docs/benchmarks.md, stop 43)."""
    grown = []
    for saver in twins:
        _chat(saver, "chat-delta-sf100", "t", 150)
        before = saver.env.used_bytes()
        _chat(saver, "chat-delta-sf100", "t", 250, start=150)
        grown.append(saver.env.used_bytes() - before)
    assert grown[0] < 0.85 * grown[1]


@pytest.mark.parametrize("scenario", ["chat-delta-sf100", "agent-add_messages"])
def test_changes_under_packed_checkpoints_match(
    twins: tuple[DeltaLogSaver, DeltaLogSaver], scenario: str
) -> None:
    """A fork from an old (packed) checkpoint, writes under it, a copy, a prune of
    another thread and a thread's deletion: the same results on both stores (the
    agent's packs carry chunks, which the fork unpacks and the deletion deletes)."""
    graphs = {}
    for saver in twins:
        graphs[id(saver)] = _chat(saver, scenario, "a", 20)
        _chat(saver, scenario, "b", 12)
        _chat(saver, scenario, "c", 12)
    packed = twins[0]
    chunks = _chunks(packed)
    views = []
    for saver in twins:
        graph = graphs[id(saver)]
        old = list(graph.get_state_history(thread_config("a")))[30]
        forked = graph.update_state(old.config, {MESSAGES: []})
        graph.invoke(None, forked)
        assert saver.copy_thread("a", "a2").checkpoints > 0
        saver.prune(["b"], keep_last=4, reducers=graph)
        saver.delete_thread("c")
        views.append(
            [_view(saver, graph, t) for t in ("a", "a2", "b")]
            + [list(saver.list(thread_config("c")))]
        )
        assert saver.verify(deep=True).ok
    assert views[0] == views[1]
    assert _packs(packed) > 0
    if scenario.startswith("agent"):
        assert 0 < _chunks(packed) < chunks  # thread c's went with it


def test_a_write_under_a_packed_checkpoint_unpacks_its_chunks(
    twins: tuple[DeltaLogSaver, DeltaLogSaver],
) -> None:
    """A write under an old checkpoint of a pack that carries chunks turns the pack
    back into plain records, the chunked ones as they were stored: both stores
    read the same, and the chunks are gone with their pack."""
    packed = twins[0]
    views = []
    for saver in twins:
        graph = _chat(saver, "agent-add_messages", "t", 12)
        chunks = _chunks(saver)
        # The oldest checkpoint with a tool's result among its writes (a chunked record).
        old = next(
            t
            for t in reversed(list(saver.list(thread_config("t"))))
            if any(
                getattr(m, "type", "") == "tool"
                for _, _, v in t.pending_writes
                if isinstance(v, list)
                for m in v
            )
        )
        saver.put_writes(old.config, [("note", "x")], task_id=str(uuid.uuid4()))
        assert _chunks(saver) < chunks or saver is not packed
        views.append(_view(saver, graph, "t"))
        assert saver.verify(deep=True).ok
    assert views[0] == views[1]


def test_a_pack_carries_at_most_carry_max_bytes_of_large_records(
    twins: tuple[DeltaLogSaver, DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past CARRY_MAX bytes of large records (thousands of tasks' results under the
    checkpoints of one pack), the rest stay plain, as before format 16: a pack's
    chunks never outgrow their u16 numbers, and both stores read the same."""
    monkeypatch.setattr(txn_base, "CARRY_MAX", 2500)  # one tool result a pack
    packed = twins[0]
    graphs = [_chat(saver, "agent-add_messages", "t", 30) for saver in twins]
    assert _view(packed, graphs[0], "t") == _view(twins[1], graphs[1], "t")
    carried: dict[bytes, int] = {}
    for key, value in packed.env.iter_db("packs"):
        if len(key) > SEQ_SIZE:
            carried[key[:SEQ_SIZE]] = carried.get(key[:SEQ_SIZE], 0) + len(value)
    assert carried and max(carried.values()) <= 2500
    large = [v for _, v in packed.env.iter_db("writes") if len(v) > PACK_RECORD_MAX]
    assert len(large) > 2  # more than the newest checkpoints hold
    assert packed.verify(deep=True).ok


def test_runs_deleted_from_packs_match(twins: tuple[DeltaLogSaver, DeltaLogSaver]) -> None:
    """Runs 3-5 of 15 (their checkpoints long packed) deleted with re-seeding: the
    same thread on both stores, and their records are gone."""
    views = []
    scenario = SCENARIOS["chat-delta-sf100"].with_turns(15)
    for saver in twins:
        graph = build_graph(scenario, saver)
        runs = [str(uuid.uuid4()) for _ in range(15)]
        for turn, run_id in enumerate(runs):
            # LangGraph records metadata.run_id from config["metadata"], as the server does.
            config: Any = {**thread_config("r"), "metadata": {"run_id": run_id}}
            graph.invoke({MESSAGES: [human_message(scenario, turn)]}, config)
        report = saver.delete_for_runs(runs[3:6], reducers=graph)
        assert report.checkpoints == 9
        left = {t.metadata.get("run_id") for t in saver.list(thread_config("r"))}
        assert left == set(runs) - set(runs[3:6])
        views.append(_view(saver, graph, "r"))
    assert views[0] == views[1]


def test_a_packed_store_reopens_and_reads_read_only(tmp_path: Path) -> None:
    with _saver(tmp_path / "s", packs=True) as saver:
        graph = _chat(saver, "chat-delta-sf100", "t", 12)
        want = _view(saver, graph, "t")
    with DeltaLogSaver(Environment(tmp_path / "s", readonly=True)) as reader:
        assert _view(reader, build_graph(SCENARIOS["chat-delta-sf100"], reader), "t") == want
    with _saver(tmp_path / "s", packs=False) as again:
        assert _view(again, build_graph(SCENARIOS["chat-delta-sf100"], again), "t") == want


def test_a_damaged_pack_is_an_error_not_another_value(tmp_path: Path) -> None:
    with _saver(tmp_path / "s", packs=True) as saver:
        graph = _chat(saver, "chat-delta-sf100", "t", 12)
        seq, raw = next(iter(saver.env.iter_db("packs")))
        damaged = bytearray(raw)
        damaged[len(damaged) // 2] ^= 0x04
        saver.env.write(lambda w: w.put_raw(saver.env.db("packs"), seq, bytes(damaged)))
        saver.env.pack_cache.clear()
        with pytest.raises(CorruptRecordError):
            list(graph.get_state_history(thread_config("t")))
        report = saver.verify()
        assert not report.ok
        assert [p.kind for p in report.problems if "pack" in p.kind] == ["damaged_pack"]


@pytest.mark.parametrize(
    ("damage", "error"), [("missing", "bytes of chunks"), ("flipped", "fail their CRC")]
)
def test_a_damaged_or_orphaned_chunk_is_damage(tmp_path: Path, damage: str, error: str) -> None:
    """A chunk deleted from under its pack, or one bit of it flipped: reading the pack
    is CorruptRecordError and verify reports the damaged pack; a chunk no pack owns
    is an orphan."""
    with _saver(tmp_path / "s", packs=True) as saver:
        graph = _chat(saver, "agent-add_messages", "t", 15)
        assert saver.verify(deep=True).ok
        chunk, value = next((k, v) for k, v in saver.env.iter_db("packs") if len(k) > SEQ_SIZE)
        orphan = (1 << 62).to_bytes(SEQ_SIZE, "big") + chunk[SEQ_SIZE:]
        packs = saver.env.db("packs")
        if damage == "missing":
            saver.env.write(lambda w: w.txn.delete(chunk, db=packs))
        else:
            flipped = value[:-1] + bytes([value[-1] ^ 0x10])
            saver.env.write(lambda w: w.put_raw(packs, chunk, flipped))
        saver.env.write(lambda w: w.put_raw(packs, orphan, b"x"))
        saver.env.pack_cache.clear()
        with pytest.raises(CorruptRecordError, match=error):
            list(graph.get_state_history(thread_config("t")))
        report = saver.verify()
        kinds = sorted(p.kind for p in report.problems if "pack" in p.kind)
        assert kinds == ["damaged_pack", "orphan_pack"]


@pytest.mark.parametrize("into_packs", [False, True])
@pytest.mark.parametrize(
    ("scenario", "checkpoints"), [("chat-delta-sf100", 45), ("agent-add_messages", 55)]
)
def test_a_packed_thread_exports_and_imports_the_same(
    tmp_path: Path, scenario: str, checkpoints: int, into_packs: bool
) -> None:
    """The export of a packed thread (the agent's with chunks), imported into a
    store that packs and into one that does not, reads back the same (ids
    included: no normalizing)."""
    with (
        _saver(tmp_path / "s", packs=True) as saver,
        _saver(tmp_path / "i", packs=into_packs) as other,
    ):
        graph = _chat(saver, scenario, "t", 15)
        assert _packs(saver) > 0
        assert (_chunks(saver) > 0) == scenario.startswith("agent")
        other.import_records(list(saver.export_records(["t"])))
        config = thread_config("t")
        mine = [(t.config, t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(config)]
        theirs = [
            (t.config, t.checkpoint, t.metadata, t.pending_writes) for t in other.list(config)
        ]
        assert mine == theirs and len(mine) == checkpoints
        assert (
            graph.get_state(config).values
            == build_graph(SCENARIOS[scenario], other).get_state(config).values
        )
        assert other.verify(deep=True).ok


def _pages(saver: DeltaLogSaver) -> int:
    """LMDB pages the store's databases hold."""
    return sum(
        int(v["pages"]) for v in saver.env.stats().values() if isinstance(v, dict) and "pages" in v
    )


@pytest.mark.parametrize(
    ("scenario", "turns"), [("chat-delta-sf100", 300), ("agent-add_messages", 150)]
)
def test_an_imported_thread_is_stored_as_the_saver_stores_it(
    tmp_path: Path, scenario: str, turns: int
) -> None:
    """An import stores each checkpoint with its small values and its run input
    inside its record, then that checkpoint's writes (the input task's refer to
    the input; a later seed is encoded against them), then turn packs, all
    compressed with the record dictionary a dry run of the import trained
    first: the same blobs as the thread it came from and no more pages
    (before: 3.9-4.9x the pages, every value a blob, no pack, no dictionary;
    without the dry run 1.3-1.6x)."""
    with _saver(tmp_path / "s", packs=True) as saver, _saver(tmp_path / "i", packs=True) as other:
        _chat(saver, scenario, "t", turns)
        other.import_records(list(saver.export_records(["t"])))
        assert other.env.stats()["blobs"]["entries"] == saver.env.stats()["blobs"]["entries"]
        assert _packs(other) > 0
        assert _pages(other) <= 1.1 * _pages(saver), (_pages(other), _pages(saver))
        config = thread_config("t")
        assert [(t.config, t.checkpoint, t.pending_writes) for t in other.list(config)] == [
            (t.config, t.checkpoint, t.pending_writes) for t in saver.list(config)
        ]
        assert other.verify(deep=True).ok


@pytest.mark.parametrize(("compress", "writes"), [(True, 3), (False, 1)])
def test_an_import_trains_the_dictionary_on_a_dry_run_only_where_it_compresses(
    tmp_path: Path, compress: bool, writes: int
) -> None:
    """Into a fresh store that compresses: a dry run (dropped), the commit after
    which the store trains its dictionary, then the import; the dictionary is
    stored. Into one that compresses nothing: the import alone (a dry run would
    sample nothing and double the import's time)."""
    with _saver(tmp_path / "s", packs=True) as saver:
        _chat(saver, "chat-delta-sf100", "t", 300)
        records = list(saver.export_records(["t"]))
    other = DeltaLogSaver.from_path(tmp_path / "i", compress_threshold=512 if compress else None)
    with other:
        calls: list[object] = []
        write = other.env.write

        def counted(op: Any, **kwargs: Any) -> Any:
            calls.append(op)
            return write(op, **kwargs)

        other.env.write = counted  # type: ignore[method-assign]
        other.import_records(records)
        assert len(calls) == writes
        assert other.env.codec.has_final_dictionary == compress
        assert len(list(other.list(thread_config("t")))) == 900


def test_thread_summaries_count_packed_records_and_stored_bytes(
    twins: tuple[DeltaLogSaver, DeltaLogSaver],
) -> None:
    """``threads()`` (the CLI's ``threads``) counts packed checkpoints and writes as
    the plain store does, and its bytes are those stored: the packs, not the records
    they stand for."""
    for saver in twins:
        _chat(saver, "chat-delta-sf100", "t", 40)
    packed, plain = (saver.threads()[0] for saver in twins)
    assert (packed.checkpoints, packed.writes, packed.blobs) == (
        plain.checkpoints,
        plain.writes,
        plain.blobs,
    )
    assert packed.checkpoints == 120
    assert 0.3 * plain.bytes < packed.bytes < 0.95 * plain.bytes


@pytest.mark.parametrize(
    "body",
    [
        [],
        [[], []],
        [[[b"\x10" + bytes(16), False, b"\xc0"]], [[b"x", b"", b"\xc0"]]],
        [[[1, False, b"\xc0"]], []],
        [[[b"\x10" + bytes(16), False, b"\xc0"], [b"\x10" + bytes(16), False, b"\xc0"]], []],
        [[[b"\x10" + bytes(16), False, 5]], []],
        [[[b"\x10" + bytes(16), False, b"\xc0"]], [], 7],
        [[[b"\x0f" + bytes(16), False, -1], [b"\x10" + bytes(16), False, 1]], [], 0],
        [[[b"\x10" + bytes(16), False, 5]], [], 0],
    ],
    ids=[
        "not-a-pair",
        "empty",
        "write-without-channel",
        "bad-suffix",
        "twice-the-same-key",
        "chunked-without-crc",
        "crc-without-chunks",
        "length-below-1",
        "chunks-missing",
    ],
)
def test_a_pack_that_passes_its_crc_but_is_not_a_pack_is_damage(body: list[Any]) -> None:
    """A well-framed record whose body is no pack (a writer's bug, not a flipped bit):
    CorruptRecordError, never another exception or a value."""
    import ormsgpack
    from deltalog.engine.codec import RecordCodec
    from deltalog.engine.packs import decode_pack

    codec = RecordCodec()
    index_key = b"\x01\x01\x01\x02\x10" + bytes(16)
    raw = codec.encode_body(ormsgpack.packb(body), key=index_key)
    with pytest.raises(CorruptRecordError):
        decode_pack(codec, index_key, raw, "packs/test")


def _tuples(saver: DeltaLogSaver, threads: list[str]) -> dict[str, list[Any]]:
    """Every checkpoint tuple of each thread: id, values, pending writes, parent."""
    out: dict[str, list[Any]] = {}
    for thread in threads:
        out[thread] = [
            (
                t.config["configurable"]["checkpoint_id"],
                t.checkpoint["channel_values"],
                sorted(map(repr, t.pending_writes or [])),
                (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            )
            for t in saver.list(thread_config(thread))
        ]
    return out


@pytest.mark.parametrize("seed", [4, 7, 13])
def test_random_changes_read_the_same_packed_and_plain(
    twins: tuple[DeltaLogSaver, DeltaLogSaver], seed: int
) -> None:
    """Random puts (mostly in a line, some forks), writes of 10 bytes to 40 KB (text and
    random hex: small records, chunked ones and ones too large for chunks) under recent
    and old checkpoints (unpacking their packs), thread deletions and copies, on a
    packed and a plain store: every thread reads the same on both, every 20 steps.
    The seeds are ones whose packs carry chunks (26-55 of them)."""
    rng = random.Random(seed)
    packed, plain = twins
    threads = ["t0", "t1", "t2"]
    ids: dict[str, list[str]] = {t: [] for t in threads}
    for step in range(250):
        thread = rng.choice(threads)
        roll = rng.random()
        size = rng.choice([10, 10, 10, 700, 1500, 3000, 9000, 20000, 40000])
        if rng.random() < 0.5:
            payload = rng.randbytes(size // 2).hex()
        else:
            payload = f"word{rng.randrange(99)} " * (size // 6 + 1)
        if roll < 0.5 or not ids[thread]:
            checkpoint, versions = new_checkpoint(packed, {"v": step})
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            if ids[thread] and rng.random() < 0.9:
                parent = ids[thread][-1] if rng.random() < 0.9 else rng.choice(ids[thread])
                config["configurable"]["checkpoint_id"] = parent
            for saver in twins:
                metadata: Any = {"source": "loop", "step": step}
                saver.put(copy.deepcopy(config), copy.deepcopy(checkpoint), metadata, versions)
            ids[thread].append(checkpoint["id"])
        elif roll < 0.88:
            old = ids[thread][-30:] if rng.random() < 0.7 else ids[thread]
            target = rng.choice(old)
            task = str(uuid.UUID(int=rng.getrandbits(128)))
            channel = rng.choice(["messages", "tool", "tool", "__error__"])
            writes = [(channel, payload)] * rng.randrange(1, 3)
            for saver in twins:
                saver.put_writes(at(thread, target), writes, task_id=task)
        elif roll < 0.92:
            for saver in twins:
                saver.delete_thread(thread)
            ids[thread] = []
        elif not ids.get(thread + "c"):
            for saver in twins:
                saver.copy_thread(thread, thread + "c")
            threads += [] if thread + "c" in threads else [thread + "c"]
            ids[thread + "c"] = list(ids[thread])
        if step % 20 == 0:
            assert _tuples(packed, threads) == _tuples(plain, threads), step
    assert _tuples(packed, threads) == _tuples(plain, threads)
    assert _chunks(packed) > 0
    assert packed.verify(deep=True).ok and plain.verify(deep=True).ok
