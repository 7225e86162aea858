"""The `messages` reducer: add_messages parity, batching law, stable ids across replays."""

from __future__ import annotations

import copy
import itertools
from typing import Any, get_args

import pytest
from deltalog.channels import REMOVE_ALL_MESSAGES, DeltaMessages, messages, replay
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langgraph._internal._typing import MISSING
from langgraph.channels.binop import _get_overwrite
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph.message import add_messages
from langgraph.pregel._messages import ensure_message_ids
from langgraph.types import Overwrite

SERDE = JsonPlusSerializer()
EXAMPLES = settings(max_examples=200, deadline=None)
POOL = ["a", "b", "c", "d"]
CONTENTS = ["hi", "yo", "ok", "more"]  # never a role name: see difference 2
ROLES = ["user", "human", "ai", "assistant", "system"]
SPEC = get_args(DeltaMessages)[1]  # the DeltaChannel in the Annotated alias


def roundtrip(value: Any) -> Any:
    return SERDE.loads_typed(SERDE.dumps_typed(value))


# --- strategies ---------------------------------------------------------------

ids = st.one_of(st.none(), st.sampled_from(POOL))
contents = st.sampled_from(CONTENTS)


def message_objects() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda c, i: HumanMessage(content=c, id=i), contents, ids),
        st.builds(lambda c, i: AIMessage(content=c, id=i), contents, ids),
        st.builds(lambda c, i: SystemMessage(content=c, id=i), contents, ids),
        st.builds(lambda c, i: AIMessageChunk(content=c, id=i), contents, st.sampled_from(POOL)),
    )


def message_likes() -> st.SearchStrategy[Any]:
    """Every form add_messages coerces: objects, chunks, str, dicts, (role, content)."""
    dicts = st.builds(
        lambda role, content, mid: (
            {"role": role, "content": content} | ({"id": mid} if mid else {})
        ),
        st.sampled_from(ROLES),
        contents,
        ids,
    )
    pairs = st.tuples(st.sampled_from(ROLES), contents)
    return st.one_of(message_objects(), message_objects(), contents, dicts, pairs)


removals = st.one_of(
    st.sampled_from(POOL).map(lambda i: RemoveMessage(id=i)),
    st.just(RemoveMessage(id=REMOVE_ALL_MESSAGES)),
)
items = st.one_of(message_likes(), message_likes(), message_likes(), removals)


def _segment(kind: int, mid: str, content: str) -> list[Any]:
    remove, again = RemoveMessage(id=mid), AIMessage(content=content, id=mid)
    clear = RemoveMessage(id=REMOVE_ALL_MESSAGES)
    options: list[list[Any]] = [[remove, again], [again, remove], [clear], [clear, content, clear]]
    return options[kind]


# Patterns random items rarely hit: remove and re-add of one id inside a
# write (either order), and several REMOVE_ALL_MESSAGES in one write.
segments = st.builds(_segment, st.integers(0, 3), st.sampled_from(POOL), contents)
tricky = st.lists(st.one_of(segments, items.map(lambda m: [m])), min_size=2, max_size=4).map(
    lambda parts: [m for part in parts for m in part]
)


def without_tail_quirks(write: Any) -> Any:
    """Drop what add_messages passes through verbatim after REMOVE_ALL (difference 3)."""
    if not isinstance(write, list):
        return write
    last = max(
        (
            i
            for i, m in enumerate(write)
            if isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES
        ),
        default=None,
    )
    if last is None:
        return write
    tail: list[Any] = []
    seen: set[Any] = set()
    for m in write[last + 1 :]:
        mid = m.id if isinstance(m, BaseMessage) else m.get("id") if isinstance(m, dict) else None
        if isinstance(m, RemoveMessage) or (mid is not None and mid in seen):
            continue
        seen.add(mid)
        tail.append(m)
    return [*write[: last + 1], *tail]


# Pick the shape first: a nested one_of would be flattened and weighted by leaf count.
_shapes = [tricky, st.lists(items, min_size=1, max_size=4), items]
writes = st.integers(0, len(_shapes) - 1).flatmap(lambda k: _shapes[k])
parity_writes = writes.map(without_tail_quirks)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except ValueError:
        return "error", None


def normalised(msgs: list[AnyMessage]) -> list[BaseMessage]:
    """Generated ids (uuid4 in add_messages, derived here) compared as one placeholder."""
    return [m if m.id in POOL else m.model_copy(update={"id": "<generated>"}) for m in msgs]


# --- add_messages parity ------------------------------------------------------


@EXAMPLES
@given(ws=st.lists(parity_writes, min_size=1, max_size=8))
def test_matches_add_messages_folded_one_write_at_a_time(ws: list[Any]) -> None:
    """messages(s, ws) == add_messages folded per write: updates, removals, remove-all, coercion."""
    expected: tuple[str, Any] = ("ok", [])
    for w in copy.deepcopy(ws):
        if expected[0] == "ok":
            expected = outcome(add_messages, expected[1], w)
    got = outcome(messages, [], copy.deepcopy(ws))
    assert got[0] == expected[0]
    if got[0] == "ok":
        assert normalised(got[1]) == normalised(expected[1])


@EXAMPLES
@given(
    ws=st.lists(st.one_of(writes, writes, st.lists(message_likes()).map(Overwrite)), max_size=10),
    data=st.data(),
)
def test_batching_invariance(ws: list[Any], data: st.DataObject) -> None:
    """R7: any split of the writes (Overwrite, remove-all tails included) gives the same result.

    One asymmetry is allowed: a batch skips the writes before its last Overwrite
    (as DeltaChannel.replay_writes does), so a bad write there raises only when
    a split makes the reducer reach it.
    """
    splits = sorted(data.draw(st.lists(st.integers(0, len(ws)), max_size=4)))
    whole = outcome(messages, [], copy.deepcopy(ws))
    bounds = [0, *splits, len(ws)]
    acc: tuple[str, Any] = ("ok", [])
    for a, b in itertools.pairwise(bounds):
        if acc[0] == "ok":
            acc = outcome(messages, acc[1], copy.deepcopy(ws[a:b]))
    if acc[0] == "ok" or whole[0] == "error":
        assert acc == whole


# --- ids across replays ---------------------------------------------------------


def stored_like_the_runtime(write: Any) -> Any:
    """The write as put_writes stores it: after ensure_message_ids, through serde."""
    pending = [("messages", write)]
    ensure_message_ids({"messages": SPEC}, pending)
    return pending[0][1]


@EXAMPLES
@given(steps=st.lists(st.lists(writes, max_size=3), max_size=10), every=st.integers(1, 5))
def test_replay_equals_live_with_the_runtime_id_treatment(
    steps: list[list[Any]], every: int
) -> None:
    """R7: replaying stored writes from any seed gives the live value, with identical ids."""
    ch = DeltaChannel(messages, list, snapshot_frequency=every).from_checkpoint(MISSING)
    seed: Any = None
    since_seed: list[tuple[str, str, Any]] = []
    updates = 0
    for step in steps:
        live_writes = [stored_like_the_runtime(w) for w in copy.deepcopy(step)]
        before = ch.get()
        try:
            changed = ch.update(live_writes)
        except ValueError:  # the step fails: the runtime stores no checkpoint for it
            assert ch.get() is before
            continue
        since_seed += [("task", "messages", roundtrip(w)) for w in live_writes]
        updates += changed
        if updates >= every or any(_get_overwrite(w)[0] for w in live_writes):
            seed, since_seed, updates = roundtrip(_DeltaSnapshot(ch.get())), [], 0
        first = replay(seed, since_seed, messages)
        assert first == ch.get()
        assert [m.id for m in replay(seed, since_seed, messages)] == [m.id for m in first]


def test_derived_ids_are_deterministic_and_unique() -> None:
    """Id-less messages get the same ids on every replay, distinct even for equal content."""
    ws: list[Any] = ["hi", ["hi", ("ai", "hi")], {"role": "developer", "content": "hi"}]
    first, second = messages([], copy.deepcopy(ws)), messages([], roundtrip(ws))
    assert [m.id for m in first] == [m.id for m in second]
    assert len({m.id for m in first}) == 4
    assert all(m.id for m in first)
    # A later write can target a derived id.
    target = first[1].id
    assert target is not None
    after = messages(first, [RemoveMessage(id=target)])
    assert [m.id for m in after] == [first[0].id, first[2].id, first[3].id]


def test_ids_depend_on_state_not_on_batching() -> None:
    """The same id-less message gets the same id whether replayed alone or in a batch."""
    one_by_one = messages(messages([], ["x"]), ["y"])
    batched = messages([], ["x", "y"])
    assert one_by_one == batched


# --- semantics and documented differences -------------------------------------


def test_update_remove_and_readd_in_one_write_replace_in_place() -> None:
    """As add_messages: [RemoveMessage(x), Message(x)] in one write replaces x in place."""
    state: Any = [HumanMessage("1", id="a"), HumanMessage("2", id="b")]
    write: Any = [RemoveMessage(id="a"), HumanMessage("new", id="a")]
    out = messages(state, [write])
    assert out == add_messages(state, write)
    assert [m.content for m in out] == ["new", "2"]
    # Across two writes the message is removed and re-appended at the end.
    out = messages(state, [RemoveMessage(id="a"), HumanMessage("new", id="a")])
    assert [m.content for m in out] == ["2", "new"]


def test_remove_of_unknown_id_raises() -> None:
    """As add_messages: removing an id that is not present raises ValueError naming it."""
    with pytest.raises(ValueError, match="'zzz'"):
        messages([HumanMessage("1", id="a")], [RemoveMessage(id="zzz")])


def test_remove_all_clears_then_merges_the_rest() -> None:
    """REMOVE_ALL_MESSAGES clears; difference 3: the tail is merged, not passed verbatim."""
    state = [HumanMessage("1", id="a")]
    out = messages(
        state,
        [[RemoveMessage(id=REMOVE_ALL_MESSAGES), AIMessage("x", id="q"), AIMessage("y", id="q")]],
    )
    assert out == [AIMessage("y", id="q")]
    assert (
        messages(state, [[HumanMessage("z", id="b"), RemoveMessage(id=REMOVE_ALL_MESSAGES)]]) == []
    )


def test_top_level_role_pair_is_one_message() -> None:
    """Difference 2: ["user", "hi"] at top level is one message, like the tuple it was."""
    assert [m.content for m in messages([], [["user", "hi"]])] == ["hi"]
    assert [m.content for m in messages([], [("user", "hi")])] == ["hi"]
    assert [m.content for m in messages([], [[["user", "hi"], "yo"]])] == ["hi", "yo"]
    assert [m.content for m in messages([], [["hello", "world"]])] == ["hello", "world"]


def test_chunks_become_messages_and_inputs_are_not_mutated() -> None:
    """Chunks convert to messages; difference 4: no input message is mutated."""
    chunk = AIMessageChunk(content="c", id="k")
    bare = HumanMessage("no id")
    out = messages([], [[chunk, bare]])
    assert type(out[0]) is AIMessage and out[0].id == "k"
    assert bare.id is None and out[1].id is not None


def test_overwrite_resets_to_the_given_list() -> None:
    """Overwrite sets the value as given; later writes merge onto its coerced form."""
    raw: Any = messages([HumanMessage("1", id="a")], [Overwrite(["raw"])])
    assert raw == ["raw"]
    out = messages([], [Overwrite(["raw"]), HumanMessage("2", id="b")])
    assert [m.content for m in out] == ["raw", "2"]
    assert messages([HumanMessage("1", id="a")], [Overwrite(None)]) == []
