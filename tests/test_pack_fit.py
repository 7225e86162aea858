"""How turn packs are cut to fill the ``packs`` log's pages (engine/packs.py:
``leaf_slot``, ``tail_after``, ``pack_cut``), checked against a real LMDB file."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

import lmdb
import pytest
from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.scenarios import CHAT_SCENARIOS
from deltalog.engine import DeltaLogSaver, Environment, keys, txn_base
from deltalog.engine.codec import RecordCodec, ZstdCompressor, leaf_max
from deltalog.engine.packs import (
    CHUNK_KEY_SIZE,
    PACK_KEEP,
    PACK_MAX,
    PACK_RECORD_MAX,
    SEQ_SIZE,
    TAIL_MIN,
    chunk_key,
    chunk_sizes,
    leaf_slot,
    pack_cut,
    pack_due,
    pack_room,
    packable,
    tail_after,
)
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from .checkpoints import put_values

PAGE = 4096
LEAF = leaf_max(SEQ_SIZE, PAGE)


class EchoState(TypedDict):
    text: str


def _echo_graph(saver: DeltaLogSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A one-node graph that stores its input text with a dot added."""
    builder = StateGraph(EchoState)
    builder.add_node("echo", lambda state: {"text": state["text"] + "."})
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


def _packs(saver: DeltaLogSaver) -> tuple[list[int], dict[str, int]]:
    """The stored size of each pack, and LMDB's stat of the ``packs`` database."""
    sizes = [len(v) for _, v in saver.env.iter_db("packs")]
    with saver.env.read() as r:
        stat = r.txn.stat(saver.env._dbs.packs)
    return sizes, stat


@pytest.mark.parametrize("seed", range(4))
def test_the_tail_model_counts_the_pages_lmdb_uses(tmp_path: Path, seed: int) -> None:
    """Appending values of mixed sizes under u64 keys: the pages the model starts
    are the leaf pages LMDB uses, and values over the leaf limit its overflow pages."""
    rng = random.Random(seed)
    sizes = [
        rng.choice([rng.randint(1, 700), rng.randint(600, 2100), rng.randint(2000, 9000)])
        for _ in range(400)
    ]
    env = lmdb.open(str(tmp_path / "db"), map_size=64 * 1024**2, max_dbs=2)
    db = env.open_db(b"log")
    tail, leaves, overflow = 0, 0, 0
    with env.begin(write=True) as txn:
        for seq, size in enumerate(sizes, 1):
            txn.put(seq.to_bytes(SEQ_SIZE, "big"), rng.randbytes(size), db=db, append=True)
            after = tail_after(size, tail, PAGE)
            leaves += after > tail  # a node that does not fit starts a page
            overflow += (16 - 1 + size) // PAGE + 1 if size > LEAF else 0
            tail = after
        stat = txn.stat(db)
    assert stat["psize"] == PAGE
    assert (stat["leaf_pages"], stat["overflow_pages"]) == (leaves, overflow)


def test_a_value_at_the_leaf_limit_fits_its_page_twice(tmp_path: Path) -> None:
    assert leaf_slot(LEAF) * 2 <= PAGE - 16 < leaf_slot(LEAF + 1) * 2
    assert tail_after(LEAF, 0, PAGE) == PAGE - 16 - leaf_slot(LEAF)
    assert tail_after(LEAF, tail_after(LEAF, 0, PAGE), PAGE) >= 0


def test_the_room_is_the_tail_then_half_a_page() -> None:
    assert pack_room(1000, PAGE) == 1000
    assert pack_room(TAIL_MIN - 1, PAGE) == pack_room(0, PAGE) == leaf_slot(LEAF)
    assert pack_room(PAGE - 16, PAGE) == leaf_slot(LEAF)  # never over the leaf limit


def test_a_put_packs_once_the_candidates_would_overfill_the_room() -> None:
    assert not pack_due([], 2.0, 1000)
    assert not pack_due([100] * 4, 2.0, 1000)  # 800 bytes estimated
    assert pack_due([100] * 5, 2.0, 1000)  # 1,000: its node takes 1,018
    assert pack_due([1] * PACK_MAX, 2.0, 1000)  # PACK_MAX wait


def test_the_cut_is_the_longest_run_that_fits() -> None:
    sizes = [200] * PACK_MAX  # estimated at 160 bytes a checkpoint
    assert pack_cut(sizes, 0.8, 1000) == 6
    assert leaf_slot(960) <= 1000 < leaf_slot(160 * 7)
    assert pack_cut(sizes, 0.8, leaf_slot(LEAF)) == LEAF // 160
    assert pack_cut([10] * PACK_MAX, 0.8, leaf_slot(LEAF)) == PACK_MAX
    assert pack_cut([0, 0, 200, 0], 0.8, 150) == 2  # records left plain count nothing
    assert pack_cut([5000] * 3, 0.8, 3000) == 1  # one too large still packs, alone


def test_a_chat_packs_into_full_leaf_pages(tmp_path: Path) -> None:
    """The sf=100 chat's packs hold more than the six checkpoints each a fixed count
    gave (up to the leaf limit, two to a page, or what fills a page's tail;
    docs/benchmarks.md stop 44), fill their pages and take no overflow page."""
    scenario = {s.name: s for s in CHAT_SCENARIOS}["chat-delta-sf100"].with_turns(120)
    with DeltaLogSaver(Environment(tmp_path / "s")) as saver:
        graph = build_graph(scenario, saver)
        for turn in range(120):
            graph.invoke({MESSAGES: [human_message(scenario, turn)]}, thread_config("t"))
        sizes, stat = _packs(saver)
        plain = saver.env.stats()["checkpoints"]["entries"]
    assert stat["overflow_pages"] == 0 and len(sizes) > 10
    per_pack = (3 * 120 - plain) / len(sizes)
    fill = sum(leaf_slot(s) for s in sizes) / (stat["leaf_pages"] * (PAGE - 16))
    assert per_pack > 7.5 and fill > 0.9


@pytest.mark.parametrize(("ratio", "value"), [("pack_ratio", 0.05), ("pack_dense_ratio", 0.3)])
def test_a_pack_larger_than_estimated_is_cut_shorter(
    tmp_path: Path, ratio: str, value: float
) -> None:
    """Estimates far too small before every turn (from the records' stored sizes, or
    the dense pack's from its level-3 trial) make the cut take too many; the pack
    is then cut again until it fits its leaf."""
    scenario = {s.name: s for s in CHAT_SCENARIOS}["chat-delta-sf100"].with_turns(60)
    with DeltaLogSaver(Environment(tmp_path / "s")) as saver:
        graph = build_graph(scenario, saver)
        for turn in range(60):
            setattr(saver.env, ratio, value)
            graph.invoke({MESSAGES: [human_message(scenario, turn)]}, thread_config("t"))
        sizes, stat = _packs(saver)
        assert saver.verify(deep=True).ok
    assert len(sizes) > 5 and max(sizes) <= LEAF and stat["overflow_pages"] == 0


def test_records_too_large_to_pack_follow_their_pack_in_chunks(tmp_path: Path) -> None:
    """Turns with records over PACK_RECORD_MAX (random text) amid small ones: those
    records are not compressed into a pack (none takes an overflow page) and count
    for nothing in the cut; the pack carries them as stored, in chunks after it
    (format 16), and every turn reads back as written."""
    rng = random.Random(7)
    sent = []
    with DeltaLogSaver(Environment(tmp_path / "s")) as saver:
        graph = _echo_graph(saver)
        config = thread_config("t")
        for turn in range(80):
            sent.append(rng.randbytes(3000 if turn % 10 == 3 else 20).hex())
            graph.invoke({"text": sent[-1]}, config)
        assert saver.verify(deep=True).ok
        texts = [s.values["text"] for s in graph.get_state_history(config) if s.next == ()]
        packs, stat = _packs(saver)
        chunks = [k for k, _ in saver.env.iter_db("packs") if len(k) == CHUNK_KEY_SIZE]
        large = [v for _, v in saver.env.iter_db("writes") if len(v) > PACK_RECORD_MAX]
    assert len(packs) > 5 and max(packs) <= LEAF and stat["overflow_pages"] == 0
    assert len(chunks) >= 14 and len(large) <= 1  # 8 large writes; the newest stays plain
    assert texts == [text + "." for text in reversed(sent)]


@pytest.mark.parametrize("seed", range(3))
def test_the_chunk_cut_fills_the_pages_lmdb_uses(tmp_path: Path, seed: int) -> None:
    """Packs and their chunks appended as pack_behind cuts them: the pages the
    model starts are the leaf pages LMDB uses, no chunk takes an overflow page,
    and the chunks fill their pages but for the last."""
    rng = random.Random(seed)
    env = lmdb.open(str(tmp_path / "db"), map_size=64 * 1024**2, max_dbs=2)
    db = env.open_db(b"log")
    tail, leaves, chunked = 0, 0, 0
    with env.begin(write=True) as txn:
        for seq in range(1, 120):
            size = rng.randint(100, LEAF)
            key = seq.to_bytes(SEQ_SIZE, "big")
            txn.put(key, rng.randbytes(size), db=db, append=True)
            after = tail_after(size, tail, PAGE)
            leaves += after > tail
            tail = after
            total = rng.choice([0, rng.randint(1025, 3000), rng.randint(3000, 16384)])
            sizes, after = chunk_sizes(total, tail, PAGE)
            assert sum(sizes) == total and max(sizes, default=0) <= leaf_max(CHUNK_KEY_SIZE, PAGE)
            for number, size in enumerate(sizes, 1):
                txn.put(chunk_key(key, number), rng.randbytes(size), db=db, append=True)
                moved = tail - leaf_slot(size, CHUNK_KEY_SIZE)
                leaves += moved < 0
                tail = moved if moved >= 0 else PAGE - 16 - leaf_slot(size, CHUNK_KEY_SIZE)
            assert tail == after
            chunked += sum(leaf_slot(size, CHUNK_KEY_SIZE) for size in sizes)
        stat = txn.stat(db)
    assert (stat["leaf_pages"], stat["overflow_pages"]) == (leaves, 0)
    assert chunk_sizes(2 * leaf_max(CHUNK_KEY_SIZE, PAGE), PAGE - 16, PAGE) == ([2020, 2020], 0)
    assert chunk_sizes(300, 200, PAGE)[0] == [300]  # too few bytes left: a page of its own


def test_the_newest_checkpoints_are_never_packed(tmp_path: Path) -> None:
    """Even when any candidate would be due (a ratio of 100 makes every estimate
    overfill its room), a namespace's newest PACK_KEEP checkpoints stay plain."""
    with DeltaLogSaver(Environment(tmp_path / "s")) as saver:
        saver.env.pack_checkpoint_ratio = 100.0
        graph = _echo_graph(saver)
        for turn in range(3):
            graph.invoke({"text": f"turn {turn}"}, thread_config(f"t{turn}"))
            assert saver.env.stats()["packs"]["entries"] == 0
        graph.invoke({"text": "again"}, thread_config("t0"))
        stats = saver.env.stats()
    # t0 has six checkpoints now: the oldest two packed (one at a time), the
    # newest four plain; t1 and t2 keep their three each.
    assert stats["packs"]["entries"] >= 1
    assert stats["checkpoints"]["entries"] == PACK_KEEP + 2 * 3


class _Counting(ZstdCompressor):
    """The codec's compressor, counting what it compresses at level 3 and densely."""

    def __init__(self) -> None:
        super().__init__()
        self.level3: Counter[bytes] = Counter()
        self.dense: Counter[bytes] = Counter()

    def compress(self, data: bytes) -> bytes:
        self.level3[data] += 1
        return super().compress(data)

    def compress_with_dict(self, data: bytes, dict_id: int, dictionary: bytes) -> bytes:
        self.level3[data] += 1
        return super().compress_with_dict(data, dict_id, dictionary)

    def compress_dense(self, data: bytes, dict_id: int | None, dictionary: bytes) -> bytes:
        self.dense[data] += 1
        return super().compress_dense(data, dict_id, dictionary)


def _pack_bodies(saver: DeltaLogSaver) -> list[bytes]:
    """The msgpack body of every pack in the store."""
    index = {seq: key for key, seq in saver.env.iter_db("pack_index")}
    codec: RecordCodec = saver.env.codec
    found = [codec.body(raw, "packs", key=index[seq]) for seq, raw in saver.env.iter_db("packs")]
    return [body for body in found if body is not None]


def test_a_pack_is_compressed_at_level_3_once(tmp_path: Path) -> None:
    """The level-3 trial that decides the cut is the frame the dense pack starts
    from: each pack body is compressed at level 3 once and densely at most once.
    While the final dictionary is not trained, a pack body is offered to its
    samples twice (the trial, then the pack as written), as before stop 46: once
    made the final dictionary come ~30 turns later (docs/benchmarks.md)."""
    scenario = {s.name: s for s in CHAT_SCENARIOS}["chat-delta-sf100"].with_turns(60)
    with DeltaLogSaver(Environment(tmp_path / "s")) as saver:
        codec = saver.env.codec
        counting = codec.compressor = _Counting()
        sampled: Counter[bytes] = Counter()
        sample = codec._sample

        def recording(body: bytes) -> None:
            sampled[body] += 1
            sample(body)

        codec._sample = recording  # type: ignore[method-assign]
        graph = build_graph(scenario, saver)
        for turn in range(60):
            graph.invoke({MESSAGES: [human_message(scenario, turn)]}, thread_config("t"))
        bodies = _pack_bodies(saver)
    assert len(bodies) > 5
    assert [counting.level3[b] for b in bodies] == [1] * len(bodies)
    assert max(counting.dense[b] for b in bodies) == 1
    # Packs before the final dictionary: 2 (a pack cut again after its dense
    # frame did not fit is made without a trial: 1); after it, 0.
    times = {sampled[b] for b in bodies}
    assert 2 in times and 0 in times and times <= {0, 1, 2}


def test_the_cut_counts_the_records_a_pack_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut's estimate of each checkpoint counts the stored bytes of exactly the
    records the pack takes from it, even a write whose record is within
    PACK_RECORD_MAX and whose stored value, with its channel uid, is not."""
    events: list[tuple[Any, ...]] = []
    cut, body_of = txn_base.pack_cut, txn_base.body_of  # type: ignore[attr-defined]

    def recording_cut(sizes: list[int], ratio: float, room: int) -> int:
        m = cut(sizes, ratio, room)
        events.append(("cut", list(sizes[:m])))
        return m

    def recording_body(codec: RecordCodec, key: bytes, raw: bytes, channel: bytes = b"") -> Any:
        found = body_of(codec, key, raw, channel)
        events.append(("record", bool(channel), len(channel) + len(raw), found is not None))
        return found

    monkeypatch.setattr(txn_base, "pack_cut", recording_cut)
    monkeypatch.setattr(txn_base, "body_of", recording_body)
    # Records stored uncompressed, so a character more is a byte more: the texts'
    # lengths step across PACK_RECORD_MAX, each record size a few times.
    with DeltaLogSaver.from_path(tmp_path / "s", compress_threshold=None) as saver:
        graph = _echo_graph(saver)
        for turn in range(120):
            text = "x" * (960 + turn)
            graph.invoke({"text": text}, thread_config("t"))
        assert saver.verify(deep=True).ok
    estimated: list[list[int]] = []
    taken: list[list[int]] = []
    on_edge = 0
    for event in events:
        if event[0] == "cut":
            estimated.append(event[1])
            taken.append([])
        elif not event[1]:  # a checkpoint: its group starts
            taken[-1].append(event[2] if event[3] else 0)
        else:
            taken[-1][-1] += event[2] if event[3] else 0
            on_edge += event[3] and event[2] > PACK_RECORD_MAX
    assert len(estimated) > 5 and on_edge > 0
    assert taken == estimated


def _waiting_sizes(w: Any, t: int, n: int) -> list[int]:
    """What a full look finds waiting in (thread, ns) inside write transaction ``w``:
    the packable stored sizes of the plain checkpoints after the namespace's last
    pack, less the newest PACK_KEEP."""
    prefix = keys.ns_prefix(t, n)
    start = prefix
    icur = w.txn.cursor(db=w.dbs.pack_index)
    ok = icur.prev() if icur.set_range(txn_base.prefix_end(prefix)) else icur.last()
    if ok and bytes(icur.key()).startswith(prefix):
        start = bytes(icur.key()) + b"\x00"
    cur = w.txn.cursor(db=w.dbs.checkpoints)
    sizes = []
    ok = cur.set_range(start)
    while ok and bytes(cur.key()).startswith(prefix):
        raw = bytes(cur.value())
        sizes.append(len(raw) if packable(raw) else 0)
        ok = cur.next()
    return sizes[: max(0, len(sizes) - PACK_KEEP)]


@pytest.mark.parametrize("stale", [False, True])
def test_a_put_that_does_not_pack_is_one_a_full_look_would_not_pack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale: bool
) -> None:
    """The pack check decides from this process's remembered tail of the namespace
    (when it ends just below the new record) instead of reading the plain records
    again; whenever a put does not pack, a full look at the store agrees that
    nothing is due. With ``stale``, every remembered tail is made to end at a key
    no record has before each turn (as when another process wrote): the check
    falls back to the full look."""
    decided_by_tail = stale_checks = 0
    fakes: set[bytes] = set()
    behind, sized = txn_base.WriteBase.pack_behind, txn_base.cut_size  # type: ignore[attr-defined]
    looked = [0]

    def counting(raw: bytes) -> int:
        looked[0] += 1
        return int(sized(raw))

    def checked(w: Any, t: int, n: int, key: bytes | None = None, raw: bytes = b"") -> bool:
        nonlocal decided_by_tail, stale_checks
        before = w.env.pack_tails.get(keys.ns_prefix(t, n))
        looked[0] = 0
        packed = behind(w, t, n, key, raw)
        # The tail decided when only the new record was sized.
        if looked[0] == 1 and not packed:
            decided_by_tail += 1
        if before is not None and before[0] in fakes:
            stale_checks += 1
            assert looked[0] > 1  # a stale tail is dropped: the put looked
        if not packed:
            waiting = _waiting_sizes(w, t, n)
            room = pack_room(w.env.pack_tail_free, w.codec.page_size)
            assert not pack_due(waiting, w.env.pack_checkpoint_ratio, room)
        return packed

    monkeypatch.setattr(txn_base, "cut_size", counting)
    monkeypatch.setattr(txn_base.WriteBase, "pack_behind", checked)
    scenario = {s.name: s for s in CHAT_SCENARIOS}["chat-delta-sf100"].with_turns(40)
    with DeltaLogSaver(Environment(tmp_path / "s")) as saver:
        graph = build_graph(scenario, saver)
        for turn in range(40):
            for thread in ("a", "b", "c"):
                if stale:
                    tails = saver.env.pack_tails
                    for prefix, (last, sizes) in list(tails.items()):
                        fake = last[:-1] + bytes([last[-1] ^ 1])
                        fakes.add(fake)
                        tails[prefix] = (fake, list(sizes))
                graph.invoke({MESSAGES: [human_message(scenario, turn)]}, thread_config(thread))
        assert saver.env.stats()["packs"]["entries"] > 10
        assert saver.verify(deep=True).ok
    assert decided_by_tail > (150 if stale else 250)  # of 360 puts
    assert stale_checks >= (100 if stale else 0)


def test_records_too_large_for_a_pack_are_appended_two_to_a_page(tmp_path: Path) -> None:
    """A write of 1-2 KiB (a tool's result, a long answer) is stored plain (a pack
    takes it later, in chunks). Put in key order at the end of ``writes`` without
    ``MDB_APPEND``, LMDB split the last page in the middle and each such record
    kept a page of its own (1.01 pages a write here); appended, two share a page.
    Blobs go the same way, and a key that is not the greatest (an older thread's)
    is put as before. Without turn packs, so that the records stay plain."""
    with DeltaLogSaver.from_path(tmp_path / "s", pack_turns=False) as saver:
        rng = random.Random(5)
        older = put_values(saver, "older", {"turn": 0})  # interned first: its keys sort first
        config = None
        for i in range(80):
            config = put_values(saver, "t", {"turn": i}, parent=config)
            saver.put_writes(config, [("tool", rng.randbytes(1_600))], task_id=f"task-{i}")
        writes = saver.env.stats()["writes"]
        assert writes["entries"] >= 80
        assert writes["pages"] <= 0.6 * writes["entries"], writes
        late = rng.randbytes(1_600)
        saver.put_writes(older, [("tool", late)], task_id="task-older")
        got = saver.get_tuple(older)
        assert got is not None and got.pending_writes == [("task-older", "tool", late)]
        assert saver.verify(deep=True).ok
