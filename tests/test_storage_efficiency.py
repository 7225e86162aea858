"""Delta-compressed blobs and the decoded-value cache: smaller, faster, never different (R3, R7)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.scenarios import CHAT_SCENARIOS
from deltalog.engine import DeltaLogSaver, core
from deltalog.engine.blobs import DELTA_MIN
from deltalog.engine.cache import DecodedCache
from deltalog.engine.codec import COMPACT, KEYED, TAG_DELTA_COMPACT, RecordCodec
from deltalog.engine.core import SKIP_RADIX
from deltalog.engine.envelope import INPUT_CHANNEL, CheckpointEnvelope
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from .graphs import cfg, chat_graph, history, human, observe


def run(saver: Any, turns: int, sf: int | None, thread_id: str = "t") -> Any:
    graph = chat_graph(sf).compile(checkpointer=saver)
    for turn in range(turns):
        graph.invoke({"messages": [human(turn)]}, cfg(thread_id))
    return graph


def chain_length(saver: DeltaLogSaver, key: bytes, raw: bytes) -> int:
    """Links a read of this blob resolves before reaching a full record."""
    from deltalog.engine import keys

    links = 0
    with saver.env.read() as r:
        while (info := saver.env.codec.delta_info(raw, "test", key=key)) is not None:
            key = keys.blob_base_key(key, info[0])
            raw = r.txn.get(key, db=saver.env.db("blobs"))
            links += 1
    return links


def test_growing_values_are_stored_as_skip_deltas(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """R3: large successive versions of a growing list are deltas, and no chain exceeds
    3 links per base-4 digit of their number (skip deltas, core.SKIP_RADIX)."""
    saver = make_saver()
    run(saver, 40, None)
    large: list[tuple[bytes, bytes]] = []
    with saver.env.read() as r:
        for key, raw in saver.env.iter_db("blobs"):
            if len(r.blob_typed(key, raw)[1]) >= DELTA_MIN:
                large.append((key, raw))
    deltas = [raw for _, raw in large if raw[0] & ~KEYED == TAG_DELTA_COMPACT]  # format 11
    assert len(deltas) >= len(large) - 2
    digits = 1
    while SKIP_RADIX**digits <= len(large):
        digits += 1
    bound = (SKIP_RADIX - 1) * digits
    assert max(chain_length(saver, key, raw) for key, raw in large) <= bound


def test_radix_2_chains_continued_in_radix_4_read_back(
    make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written before stop 45 (skip-delta bases in base 2), continued with
    base-4 bases: the new versions' bases are chosen from the same indices, and
    every version reads back as InMemorySaver gives it."""
    saver = make_saver()
    monkeypatch.setattr(core, "SKIP_RADIX", 2)
    run(saver, 30, None)
    monkeypatch.setattr(core, "SKIP_RADIX", 4)
    graph = run(saver, 30, None)
    reference = InMemorySaver()
    run(reference, 30, None)
    want = run(reference, 30, None)
    assert history(graph, cfg("t")) == history(want, cfg("t"))
    assert saver.verify(deep=True).ok
    with saver.env.read() as r:
        large = [
            (key, raw)
            for key, raw in saver.env.iter_db("blobs")
            if len(r.blob_typed(key, raw)[1]) >= DELTA_MIN
        ]
    assert len(large) > 64
    assert max(chain_length(saver, key, raw) for key, raw in large) <= 12


def delta_links(saver: DeltaLogSaver) -> list[tuple[int, int, int]]:
    """(versions back, payload growth, payload size) of every delta blob over a base."""
    from deltalog.engine import keys

    codec, found = saver.env.codec, []
    with saver.env.read() as r:
        for key, raw in saver.env.iter_db("blobs"):
            info = codec.delta_info(raw, "test", key=key)
            if info is None or not info[0]:
                continue
            base_key = keys.blob_base_key(key, info[0])
            base_raw = r.txn.get(base_key, db=saver.env.db("blobs"))
            assert base_raw is not None
            base_info = codec.delta_info(base_raw, "test", key=base_key)
            size, base_size = (
                len(r.blob_typed(key, raw)[1]),
                len(r.blob_typed(base_key, base_raw)[1]),
            )
            found.append(
                (info[1] - (0 if base_info is None else base_info[1]), size - base_size, size)
            )
    return found


def test_a_link_that_grew_too_much_takes_a_nearer_base(
    make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A skip-delta link over more than LINK_GROWTH bytes of growth is split (zstd
    misses new messages among ~4 MB of writes): with the limit lowered to a few
    turns' growth, every link over more than one version stays within it, the
    far bases are nearer than skip deltas put them, and the states are the same."""
    from deltalog.engine import blobs

    limit = 6 * 1024
    monkeypatch.setattr(blobs, "LINK_GROWTH", limit)
    saver = make_saver()
    graph = run(saver, 40, None)
    links = delta_links(saver)
    assert len(links) >= 60
    assert all(back == 1 or growth <= limit for back, growth, _ in links), links
    assert max(back for back, _, _ in links) < 16  # skip deltas alone reach 32 and 64
    expected = run(InMemorySaver(), 40, None)
    assert history(graph, cfg("t")) == history(expected, cfg("t"))
    monkeypatch.undo()  # the real limit: these values are far below it
    plain = make_saver()
    run(plain, 40, None)
    assert max(back for back, _, _ in delta_links(plain)) >= 32


@pytest.mark.parametrize("messages", [300, 2500])
def test_a_list_grown_by_one_message_costs_about_that_message(messages: int) -> None:
    """A delta of a growing message list over its previous version (no writes in the
    dictionary) costs about the new message, also over a base above a MiB, where zstd
    level 3's match finder misses most of it (~7 KB here; see DELTA_LEVEL)."""
    serde = JsonPlusSerializer()
    msgs = [
        (HumanMessage if i % 2 == 0 else AIMessage)(content=f"{i} " + "word " * 100, id=f"m{i}")
        for i in range(messages + 1)
    ]
    base = serde.dumps_typed(msgs[:-1])[1]
    typed = serde.dumps_typed(msgs)
    assert len(base) < 256 * 1024 if messages == 300 else len(base) > 1024 * 1024
    codec = RecordCodec()
    record = codec.encode_delta(typed, base, b"base", 1)
    assert record is not None and len(record) < 2048, len(record or b"")
    head = codec.delta_header(record, "test")
    assert head is not None
    assert codec.decode_delta(head, base, "test") == [typed[0], typed[1]]


def test_delta_blobs_shrink_storage_and_keep_states(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """The same program stores far fewer bytes with delta blobs and reads identical history."""
    with_deltas = make_saver()
    graph = run(with_deltas, 25, None)
    from deltalog.engine.env import Environment

    plain_store = Environment(with_deltas.env.path + "-plain", delta_blobs=False)
    plain = DeltaLogSaver(plain_store)
    try:
        plain_graph = run(plain, 25, None)
        assert history(graph, cfg("t")) == history(plain_graph, cfg("t"))
        stored = [sum(len(v) for _, v in x.env.iter_db("blobs")) for x in (with_deltas, plain)]
        assert stored[0] * 2 < stored[1], stored
    finally:
        plain.close()
    reference = run(InMemorySaver(), 25, None)
    assert history(graph, cfg("t")) == history(reference, cfg("t"))


def test_cold_reads_resolve_every_chain(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """A fresh process (empty caches) reads every version exactly through its delta chain."""
    saver = make_saver()
    graph = run(saver, 30, None)
    before = history(graph, cfg("t"))
    path = saver.env.path
    saver.close()
    with DeltaLogSaver.from_path(path) as fresh:
        assert history(chat_graph(None).compile(checkpointer=fresh), cfg("t")) == before
        assert fresh.verify(deep=True).ok


@pytest.mark.parametrize("sf", [None, 3])
def test_prune_rebases_deltas_whose_base_goes(
    sf: int | None, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """R7: pruning deletes delta bases; survivors are rewritten so every kept state reads the same."""
    saver = make_saver()
    graph = run(saver, 20, sf)
    latest = observe(graph.get_state(cfg("t")))
    saver.prune(["t"], reducers=graph if sf else None)
    assert saver.verify().ok
    path = saver.env.path
    saver.close()
    with DeltaLogSaver.from_path(path) as fresh:
        fresh_graph = chat_graph(sf).compile(checkpointer=fresh)
        after = observe(fresh_graph.get_state(cfg("t")))
        assert (after["values"], after["next"]) == (latest["values"], latest["next"])
        assert fresh.verify(deep=True).ok


def test_mutating_a_returned_state_does_not_change_the_next_read(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """The decoded-value cache hands out copies: mutating one returned state cannot leak."""
    saver = make_saver()
    graph = run(saver, 12, 3)
    graph.get_state(cfg("t"))  # the cache keeps a value from its second decode on
    first = graph.get_state(cfg("t")).values["messages"]
    expected = [(m.id, m.content) for m in first]
    first[0].content = "MUTATED"
    first.append(AIMessage(content="injected", id="x"))
    first[1].additional_kwargs["leak"] = True
    hits = saver.cache.hits
    again = graph.get_state(cfg("t")).values["messages"]
    assert [(m.id, m.content) for m in again] == expected
    assert "leak" not in again[1].additional_kwargs
    assert saver.cache.hits > hits, "the read after the mutation should be a cache hit"
    tup = saver.get_tuple(cfg("t"))
    assert tup is not None
    seeds = [v for v in tup.checkpoint["channel_values"].values() if hasattr(v, "value")]
    for seed in seeds:
        seed.value.clear()
    tup2 = saver.get_tuple(cfg("t"))
    assert tup2 is not None
    assert all(v.value for v in tup2.checkpoint["channel_values"].values() if hasattr(v, "value"))


def test_the_cache_keeps_a_value_from_its_second_decode() -> None:
    """A record decoded once is not pickled (plain add_messages versions are read once);
    its second decode caches it and the third read is a hit, a private copy."""
    cache = DecodedCache(min_record=0)
    decoded: list[bytes] = []

    def decode(record: bytes) -> list[bytes]:
        decoded.append(record)
        return [record]

    record = b"a stored record"
    assert cache.load(record, decode) == [record] and cache.size == 0
    assert cache.load(record, decode) == [record] and cache.size > 0
    third = cache.load(record, decode)
    assert third == [record] and len(decoded) == 2 and cache.hits == 1
    third.append(b"mutated")
    assert cache.load(record, decode) == [record]
    other = DecodedCache(min_record=0, seen_max=1)  # forgets a record seen once
    other.load(b"one", decode)
    other.load(b"two", decode)
    other.load(b"one", decode)
    assert other.size == 0


def test_a_value_said_to_be_reused_is_cached_at_its_first_decode() -> None:
    """reused=True (a delta seed) skips the decoded-once rule: the first decode
    is cached and the next read is a hit."""
    cache = DecodedCache(min_record=0)
    decoded: list[bytes] = []

    def decode(record: bytes) -> list[bytes]:
        decoded.append(record)
        return [record]

    assert cache.load(b"a seed", decode, reused=True) == [b"a seed"] and cache.size > 0
    assert cache.load(b"a seed", decode) == [b"a seed"]
    assert len(decoded) == 1 and cache.hits == 1


@pytest.mark.parametrize("sf", [3, None])
def test_a_seed_read_from_a_checkpoint_is_cached_at_once(
    make_saver: Callable[..., DeltaLogSaver], sf: int | None
) -> None:
    """The latest checkpoint of a delta chat that holds its seed is cached by the
    first get_tuple (every following turn replays from it); a plain add_messages
    version, read once per turn, is not (the decoded-once rule)."""
    saver = make_saver()
    graph = chat_graph(sf).compile(checkpointer=saver)
    for turn in range(40):
        graph.invoke({"messages": [human(turn)]}, cfg("t"))
        latest = saver.get_tuple(cfg("t"))
        assert latest is not None
        values = latest.checkpoint["channel_values"].get("messages")
        if sf is None or hasattr(values, "value"):
            break
    else:
        pytest.fail("no checkpoint holding a seed in 40 turns")
    saver.cache.clear()
    hits = saver.cache.hits
    saver.get_tuple(cfg("t"))
    saver.get_tuple(cfg("t"))
    assert saver.cache.hits == hits + (1 if sf is not None else 0)


def test_cache_disabled_gives_same_results(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """cache_bytes=0 turns the cache off and changes no result."""
    cached, uncached = make_saver(), make_saver(cache_bytes=0)
    assert history(run(cached, 8, 3), cfg("t")) == history(run(uncached, 8, 3), cfg("t"))
    assert uncached.cache.hits == 0


def test_allowlist_clone_has_its_own_cache(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """with_allowlist gives the clone a separate cache (values must pass its own allowlist)."""
    saver = make_saver()
    clone = saver.with_allowlist([("some", "module", "Type")])
    assert clone is saver or clone.cache is not saver.cache


def test_record_dictionary_is_trained_stored_and_shared(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """After enough records zstd dictionaries are trained, stored in meta and used (the
    early one from the first 32 KiB of records, then the final one); another opener
    reads both."""
    from deltalog.engine.codec import TAG_DICT_COMPACT

    saver = make_saver(pack_turns=False)  # plain records: the layout read here
    graph = run(saver, 200, 100)  # the final dictionary comes at ~turn 125
    assert saver.env.codec.active_dictionary == 1
    with saver.env.read() as r:
        assert [i for i, _ in r.dictionaries()] == [0, 1]
    records = [raw for _, raw in saver.env.iter_db("checkpoints")]
    named = [raw[1] for raw in records if raw[0] & ~(KEYED | COMPACT) == TAG_DICT_COMPACT]
    assert named.count(0) > 10 and named.count(1) > len(records) // 4
    before = history(graph, cfg("t"))
    # A second saver on the same path (as another process would) decodes dictionary records.
    other = DeltaLogSaver.from_path(saver.env.path, pack_turns=False)  # plain records
    try:
        assert history(chat_graph(100).compile(checkpointer=other), cfg("t")) == before
        assert other.verify(deep=True).ok
    finally:
        other.close()


def test_a_workload_of_large_records_gets_a_dictionary_too() -> None:
    """Records of ~4 KB (a large-message chat's) fill the sample bytes in fewer records than
    training asks for; sampling goes on and a dictionary is trained, and records of the
    same shape then compress with it."""
    import random

    from deltalog.engine.codec import TAG_DICT_COMPACT, TRAIN_BYTES

    words = ["checkpoint", "thread", "channel", "delta", "the", "of", "replay", "store"]
    rng = random.Random(7)

    def body() -> bytes:
        text = " ".join(rng.choice(words) for _ in range(600))
        return b"\x92\xa7message" + text.encode()[:4000]

    codec = RecordCodec()
    seen = 0
    trained = []
    while codec.active_dictionary != 1:
        while not codec.wants_training:
            codec.encode_body(body())
            seen += 1
            assert seen < 400, "sampling never asked for training"
        dict_id, dictionary = codec.train()
        trained.append(dict_id)
        codec.install(dict_id, dictionary, activate=True)
        assert codec.encode_body(body())[:2] == bytes((TAG_DICT_COMPACT, dict_id))
    # The early dictionary after 32 records, then sampling went on to the final one.
    assert trained == [0, 1]
    assert seen * 4000 > TRAIN_BYTES


def _checkpoint_bytes(saver: DeltaLogSaver, first: int) -> tuple[int, int]:
    """Value bytes of the checkpoint records after the ``first`` ones (key order): those
    that hold their run's input (a human message), and the others."""
    with_input = without = 0
    for key, raw in list(saver.env.iter_db("checkpoints"))[first:]:
        env = CheckpointEnvelope.unpack(saver.env.codec.decode(raw, "test", key=key), "test")
        if INPUT_CHANNEL in env.inline:
            with_input += len(raw)
        else:
            without += len(raw)
    return with_input, without


def test_a_young_store_compresses_with_the_early_dictionary(
    make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 9: the first 32 KiB of records train a small dictionary, so a short chat's
    records are compressed with one long before the final dictionary (256 KiB of
    records); without it they were stored as they are (under compress_threshold)."""
    from deltalog.engine import codec

    early = make_saver(pack_turns=False)  # plain records: the layout read here
    run(early, 40, 100)
    assert early.env.codec.active_dictionary == codec.EARLY_DICT
    monkeypatch.setattr(codec, "EARLY_RECORDS", 10**9)  # as before format 9
    late = make_saver(pack_turns=False)  # plain records: the layout read here
    run(late, 40, 100)
    assert late.env.codec.active_dictionary is None
    # Turns 20-40 (three checkpoint records a turn): a third of the bytes or less. The
    # record that holds the turn's input (~450 bytes of message) compresses less, as
    # text does: 2.59-2.66x in nine runs, against 3.14-3.45x for the other two.
    early_input, early_rest = _checkpoint_bytes(early, 60)
    late_input, late_rest = _checkpoint_bytes(late, 60)
    assert early_input and late_input
    assert early_rest * 3 < late_rest
    assert early_input * 2.2 < late_input
    assert history(chat_graph(100).compile(checkpointer=early), cfg("t")) == history(
        chat_graph(100).compile(checkpointer=late), cfg("t")
    )


_WRITER = """
import sys
from deltalog.engine import DeltaLogSaver
from tests.graphs import cfg, chat_graph, human
with DeltaLogSaver.from_path(sys.argv[1], pack_turns=False) as saver:  # plain records
    graph = chat_graph(100).compile(checkpointer=saver)
    for turn in range(int(sys.argv[3])):
        graph.invoke({"messages": [human(turn)]}, cfg(sys.argv[2]))
    assert saver.env.codec.active_dictionary == int(sys.argv[4])
"""


def test_a_process_picks_up_each_dictionary_another_one_stored(tmp_path: Path) -> None:
    """A process open before other processes stored the early dictionary, then the
    final one, reads the records naming each (it learns of the final one after it
    knew the early one) and compresses its own records with the final one."""
    path = tmp_path / "s"
    root = Path(__file__).resolve().parent.parent

    def write(thread_id: str, turns: int, active: int) -> None:
        argv = [sys.executable, "-c", _WRITER, str(path), thread_id, str(turns), str(active)]
        subprocess.run(argv, cwd=root, check=True)

    reader = DeltaLogSaver.from_path(path)
    try:
        graph = chat_graph(100).compile(checkpointer=reader)
        write("a", 30, 0)  # another process: the early dictionary
        messages = graph.get_state(cfg("a")).values["messages"]
        assert [m.content for m in messages][::2] == [human(t).content for t in range(30)]
        assert reader.env.codec.dictionaries.keys() == {0}
        write("c", 130, 1)  # another one: the final dictionary beside it
        messages = graph.get_state(cfg("c")).values["messages"]
        assert [m.content for m in messages][::2] == [human(t).content for t in range(130)]
        assert reader.env.codec.dictionaries.keys() == {0, 1}
        assert reader.env.codec.active_dictionary == 1
        graph.invoke({"messages": [human(0)]}, cfg("b"))
        with reader.env.read() as r:
            assert [i for i, _ in r.dictionaries()] == [0, 1]
        assert reader.verify(deep=True).ok
    finally:
        reader.close()


def test_a_process_adopts_the_early_dictionary_another_one_trained(tmp_path: Path) -> None:
    """A process open before another one stored the early dictionary reads the records
    that name it, compresses its own with it, and then trains and stores the final one
    beside it; a later opener reads both."""
    path = tmp_path / "s"
    reader = DeltaLogSaver.from_path(path)
    try:
        root = Path(__file__).resolve().parent.parent
        argv = [sys.executable, "-c", _WRITER, str(path), "a", "30", "0"]
        subprocess.run(argv, cwd=root, check=True)
        graph = chat_graph(100).compile(checkpointer=reader)
        messages = graph.get_state(cfg("a")).values["messages"]
        assert [m.content for m in messages][::2] == [human(t).content for t in range(30)]
        assert reader.env.codec.dictionaries.keys() == {0}
        for turn in range(130):
            graph.invoke({"messages": [human(turn)]}, cfg("b"))
        assert reader.env.codec.active_dictionary == 1
        with reader.env.read() as r:
            assert [i for i, _ in r.dictionaries()] == [0, 1]
        assert reader.verify(deep=True).ok
    finally:
        reader.close()
    with DeltaLogSaver.from_path(path) as again:
        graph = chat_graph(100).compile(checkpointer=again)
        assert len(graph.get_state(cfg("a")).values["messages"]) == 60
        assert len(graph.get_state(cfg("b")).values["messages"]) == 260


_TRAINER = """
import sys
from deltalog.engine import DeltaLogSaver
from tests.graphs import cfg, chat_graph, human
with DeltaLogSaver.from_path(sys.argv[1]) as saver:
    graph = chat_graph(100).compile(checkpointer=saver)
    for turn in range(160):  # the final dictionary comes at ~turn 125
        graph.invoke({"messages": [human(turn)]}, cfg("t"))
    assert saver.env.codec.active_dictionary == 1
"""


def test_a_reader_open_before_another_process_trained_the_dictionary_reads_its_records(
    tmp_path: Path,
) -> None:
    """issue 16 (codec handed its dictionaries): a process that opened the store before
    another process stored the record dictionary reads the records that name it."""
    path = tmp_path / "s"
    reader = DeltaLogSaver.from_path(path)
    try:
        assert reader.env.codec.dictionaries == {}
        root = Path(__file__).resolve().parent.parent
        subprocess.run([sys.executable, "-c", _TRAINER, str(path)], cwd=root, check=True)
        tags = [raw[0] & ~(KEYED | COMPACT) for _, raw in reader.env.iter_db("checkpoints")]
        from deltalog.engine.codec import TAG_DICT_COMPACT

        assert tags.count(TAG_DICT_COMPACT) > len(tags) // 4
        graph = chat_graph(100).compile(checkpointer=reader)
        messages = graph.get_state(cfg("t")).values["messages"]
        assert [m.content for m in messages][::2] == [human(t).content for t in range(160)]
        assert reader.env.codec.dictionaries.keys() == {0, 1}
        assert reader.verify(deep=True).ok
    finally:
        reader.close()


def test_no_dictionary_without_compression(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """compress_threshold=None stores plain records: no dictionary is trained."""
    saver = make_saver(compress_threshold=None)
    run(saver, 120, 100)
    assert saver.env.codec.active_dictionary is None
    assert {raw[0] for _, raw in saver.env.iter_db("checkpoints")} == {KEYED | COMPACT}


def test_no_dictionary_without_compression_for_large_values(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Large writes are compressed before their transaction (codec.compress_ahead);
    with compress_threshold=None they are stored plain and, as every other
    record, never sampled: no dictionary is trained or stored (one was, from
    the large-message chat's messages, before stop 46)."""
    scenario = {s.name: s for s in CHAT_SCENARIOS}["chat-large-sf10"].with_turns(40)
    saver = make_saver(compress_threshold=None)
    graph = build_graph(scenario, saver)
    for turn in range(40):
        graph.invoke({MESSAGES: [human_message(scenario, turn)]}, thread_config("t"))
    assert saver.env.codec.dictionaries == {}
    assert [key for key, _ in saver.env.iter_db("meta") if key.startswith(b"dict:")] == []
