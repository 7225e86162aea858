"""Properties of the `deltalog.channels` reducers, field helpers and `replay`.

Every reducer must satisfy the batching law
``reducer(reducer(s, xs), ys) == reducer(s, xs + ys)``; a replay from any seed
of a random history must equal the value the live channel held (R7: a read
never shows a different state from the one written).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from deltalog.channels import (
    DELETE,
    DeltaReducer,
    append,
    append_unique,
    delta,
    fold,
    merge,
    replay,
    replay_history,
    total,
    union,
    window,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph._internal._typing import MISSING
from langgraph.channels.binop import _get_overwrite
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.errors import InvalidUpdateError
from langgraph.types import Overwrite

SERDE = JsonPlusSerializer()
EXAMPLES = settings(max_examples=150, deadline=None)


def roundtrip(value: Any) -> Any:
    """What a saver gives back after storing ``value``."""
    return SERDE.loads_typed(SERDE.dumps_typed(value))


def _by_k(item: dict[str, int]) -> Hashable:
    return item["k"]


unique_first = append_unique(_by_k)
unique_last = append_unique(_by_k, keep="last")
window3 = window(3)


def _total_step(state: int, write: int) -> int:
    return state * 2 + write  # order-sensitive on purpose


doubling = fold(_total_step, empty=int, name="doubling")


# --- strategies ---------------------------------------------------------------

ints = st.integers(-50, 50)
small_floats = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
records = st.fixed_dictionaries({"k": st.integers(0, 4), "v": ints})
keys = st.sampled_from("abcde")


def overwrite_of(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An Overwrite in any of the three forms DeltaChannel accepts, or Overwrite(None)."""
    return st.one_of(
        values.map(Overwrite),
        values.map(lambda v: {"__overwrite__": v}),
        values.map(lambda v: {"type": "__overwrite__", "value": v}),
        st.just(Overwrite(None)),
    )


@dataclass(frozen=True)
class Case:
    """A reducer with strategies for its states and its ordinary writes."""

    reducer: DeltaReducer[Any]
    states: st.SearchStrategy[Any]
    writes: st.SearchStrategy[Any]

    def any_write(self) -> st.SearchStrategy[Any]:
        return st.one_of(self.writes, self.writes, self.writes, overwrite_of(self.states))

    def __repr__(self) -> str:
        return self.reducer.__name__


CASES = [
    Case(append, st.lists(ints, max_size=6), st.one_of(st.lists(ints, max_size=4), ints)),
    Case(window3, st.lists(ints, max_size=6), st.one_of(st.lists(ints, max_size=5), ints)),
    Case(
        unique_first,
        st.lists(records, max_size=5),
        st.one_of(st.lists(records, max_size=4), records),
    ),
    Case(
        unique_last,
        st.lists(records, max_size=5),
        st.one_of(st.lists(records, max_size=4), records),
    ),
    Case(
        merge,
        st.dictionaries(keys, ints, max_size=4),
        st.dictionaries(keys, st.one_of(ints, st.just(DELETE)), max_size=4),
    ),
    Case(
        union,
        st.sets(ints, max_size=6),
        st.one_of(st.sets(ints, max_size=4), st.lists(ints, max_size=4), ints),
    ),
    Case(total, st.one_of(ints, small_floats), st.one_of(ints, small_floats)),
    Case(doubling, ints, ints),
]


def case_and_data(case: Case) -> st.SearchStrategy[tuple[Any, list[Any], list[int]]]:
    """A state, a write sequence and sorted split points into it."""
    return st.tuples(case.states, st.lists(case.any_write(), max_size=12)).flatmap(
        lambda sw: st.tuples(
            st.just(sw[0]),
            st.just(sw[1]),
            st.lists(st.integers(0, len(sw[1])), max_size=4).map(sorted),
        )
    )


def chunks(writes: list[Any], splits: list[int]) -> list[list[Any]]:
    bounds = [0, *splits, len(writes)]
    return [writes[a:b] for a, b in itertools.pairwise(bounds)]


# --- the batching law ---------------------------------------------------------


def law_holds(
    reducer: Callable[[Any, list[Any]], Any], state: Any, writes: list[Any], splits: list[int]
) -> bool:
    """Whether folding ``writes`` in the chunks ``splits`` makes equals one call."""
    whole = reducer(copy.deepcopy(state), copy.deepcopy(writes))
    acc = copy.deepcopy(state)
    for part in chunks(copy.deepcopy(writes), splits):
        acc = reducer(acc, part)
    return bool(acc == whole)


@pytest.mark.parametrize("case", CASES, ids=repr)
@EXAMPLES
@given(data=st.data())
def test_batching_invariance(case: Case, data: st.DataObject) -> None:
    """R7: folding a write sequence split at random points equals one call on all of it."""
    state, writes, splits = data.draw(case_and_data(case))
    assert law_holds(case.reducer, state, writes, splits)


def test_law_check_detects_a_non_invariant_reducer() -> None:
    """The law check can fail: a reducer that records batch sizes breaks it."""

    def batch_sizes(state: list[int], writes: list[Any]) -> list[int]:
        return [*state, len(writes)]

    assert law_holds(batch_sizes, [], [1, 2, 3], [])
    assert not law_holds(batch_sizes, [], [1, 2, 3], [1])


@pytest.mark.parametrize("case", CASES, ids=repr)
@EXAMPLES
@given(data=st.data())
def test_one_write_at_a_time_equals_batch(case: Case, data: st.DataObject) -> None:
    """The reducer is the left fold of its one-write steps (the finest batching)."""
    state, writes, _ = data.draw(case_and_data(case))
    acc = copy.deepcopy(state)
    for w in copy.deepcopy(writes):
        acc = case.reducer(acc, [w])
    assert acc == case.reducer(copy.deepcopy(state), copy.deepcopy(writes))


@pytest.mark.parametrize("case", CASES, ids=repr)
@EXAMPLES
@given(data=st.data())
def test_reducer_never_mutates_its_inputs(case: Case, data: st.DataObject) -> None:
    """State and writes are left untouched (snapshots and checkpoints share them)."""
    state, writes, _ = data.draw(case_and_data(case))
    state_before, writes_before = copy.deepcopy(state), copy.deepcopy(writes)
    case.reducer(state, writes)
    assert state == state_before
    assert writes == writes_before


@pytest.mark.parametrize("case", CASES, ids=repr)
@EXAMPLES
@given(data=st.data())
def test_writes_mean_the_same_after_serde(case: Case, data: st.DataObject) -> None:
    """A stored write (tuples become lists) reduces exactly as the live write did."""
    state, writes, _ = data.draw(case_and_data(case))
    assert case.reducer(state, roundtrip(writes)) == case.reducer(state, writes)


@pytest.mark.parametrize("case", CASES, ids=repr)
@EXAMPLES
@given(data=st.data())
def test_overwrite_matches_deltachannel(case: Case, data: st.DataObject) -> None:
    """A batch with Overwrites reduces as DeltaChannel.replay_writes does (last one resets)."""
    state, writes, _ = data.draw(case_and_data(case))
    ch = DeltaChannel(case.reducer, case.reducer.value_type).from_checkpoint(copy.deepcopy(state))
    ch.replay_writes([("t", "c", w) for w in copy.deepcopy(writes)])
    expected = case.reducer(copy.deepcopy(state), copy.deepcopy(writes)) if writes else state
    assert ch.get() == expected


# --- replay of a random history equals the live value ------------------------


def steps_of(case: Case) -> st.SearchStrategy[list[list[Any]]]:
    """Supersteps of writes; at most one Overwrite per step, as the runtime allows."""
    plain = st.lists(case.writes, max_size=3)
    with_overwrite = st.tuples(plain, overwrite_of(case.states), st.integers(0, 3)).map(
        lambda t: [*t[0][: t[2]], t[1], *t[0][t[2] :]]
    )
    return st.lists(st.one_of(plain, plain, with_overwrite), max_size=15)


@dataclass
class Stored:
    """One checkpoint as a saver holds it: maybe a seed, and the writes of its step."""

    seed: Any  # _DeltaSnapshot, or None when nothing was stored
    writes: list[tuple[str, str, Any]]
    live: Any


def run_live(reducer: DeltaReducer[Any], steps: list[list[Any]], every: int) -> list[Stored]:
    """Drive a real DeltaChannel like the Pregel loop, recording what a saver would store."""
    ch = DeltaChannel(reducer, reducer.value_type, snapshot_frequency=every).from_checkpoint(
        MISSING
    )
    out = [Stored(None, [], copy.deepcopy(ch.get()))]
    updates = 0
    for step in steps:
        step_writes = copy.deepcopy(step)
        stored_writes = [("task", "ch", roundtrip(w)) for w in step_writes]
        if ch.update(step_writes):
            updates += 1
        # The loop forces a snapshot after an Overwrite, and on cadence.
        forced = any(_get_overwrite(w)[0] for w in step)
        seed = None
        if forced or updates >= every:
            seed = roundtrip(_DeltaSnapshot(ch.get()))
            updates = 0
        out.append(Stored(seed, stored_writes, copy.deepcopy(ch.get())))
    return out


def history_at(stored: list[Stored], i: int) -> tuple[Any, list[tuple[str, str, Any]]]:
    """The seed and writes get_delta_channel_history returns for checkpoint ``i``."""
    writes: list[tuple[str, str, Any]] = []
    j = i
    while j > 0 and stored[j].seed is None:
        writes = stored[j].writes + writes
        j -= 1
    return stored[j].seed, writes


@pytest.mark.parametrize("case", CASES, ids=repr)
@EXAMPLES
@given(data=st.data())
def test_replay_of_random_history_equals_live_value(case: Case, data: st.DataObject) -> None:
    """R7: seed + replayed writes (after serde) equals the live channel at every checkpoint."""
    steps = data.draw(steps_of(case))
    every = data.draw(st.integers(1, 6))
    stored = run_live(case.reducer, steps, every)
    for i, cp in enumerate(stored):
        seed, writes = history_at(stored, i)
        if cp.seed is not None:
            seed, writes = cp.seed, []
        assert replay(seed, writes, case.reducer) == cp.live
        assert replay_history({"seed": seed, "writes": writes}, case.reducer) == cp.live


# --- semantics by example -----------------------------------------------------


def test_append_semantics() -> None:
    """append: a list/tuple write extends, any other write is one item."""
    assert append([1], [[2, 3], 4, (5, 6), "ab"]) == [1, 2, 3, 4, 5, 6, "ab"]
    assert append(None, [[1]]) == [1]


def test_window_semantics() -> None:
    """window(3) keeps the last 3 items; an Overwrite value is kept whole until the next write."""
    assert window3([1, 2], [[3, 4, 5], 6]) == [4, 5, 6]
    assert window3([1], [Overwrite([9, 8, 7, 6])]) == [9, 8, 7, 6]
    assert window3([1], [Overwrite([9, 8, 7, 6]), 5]) == [7, 6, 5]
    assert window(1)([], [list(range(1000))]) == [999]


def test_append_unique_semantics() -> None:
    """append_unique keeps the first item per key, or replaces it in place with keep='last'."""
    a, b, a2 = {"k": 1, "v": 1}, {"k": 2, "v": 1}, {"k": 1, "v": 2}
    assert unique_first([], [[a, b, a2]]) == [a, b]
    assert unique_last([], [[a, b], a2]) == [a2, b]


def test_merge_semantics() -> None:
    """merge: last write wins per key; DELETE removes a key (absent keys too, silently)."""
    assert merge({"a": 1}, [{"b": 2}, {"a": 3}]) == {"a": 3, "b": 2}
    assert merge({"a": 1}, [{"a": DELETE, "z": DELETE}]) == {}
    assert roundtrip(DELETE) == DELETE


def test_union_and_total_semantics() -> None:
    """union adds items; total adds numbers strictly left to right."""
    assert union({1}, [[2, 3], {4}, 5]) == {1, 2, 3, 4, 5}
    xs = [0.1, 1e16, -1e16, 0.1]
    acc = 0.0
    for x in xs:
        acc += x
    assert total(0.0, xs) == acc
    assert total(None, [Overwrite(None), 2]) == 2


def test_empty_writes_return_state() -> None:
    """No writes: the state itself comes back (DeltaChannel never calls with none)."""
    state = [1, 2]
    assert append(state, []) is state
    assert append(None, []) == []


# --- bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "needle"),
    [
        (lambda: window(0), ValueError, "window size must be a positive int, got 0"),
        (lambda: window(-2), ValueError, "got -2"),
        (lambda: window("3"), TypeError, "window size must be an int"),  # type: ignore[arg-type]
        (lambda: window(True), TypeError, "window size must be an int"),
        (lambda: append_unique("id"), TypeError, "key must be a callable"),  # type: ignore[arg-type]
        (lambda: append_unique(_by_k, keep="middle"), ValueError, "'first' or 'last'"),  # type: ignore[arg-type]
        (lambda: delta(append, snapshot_every=0), ValueError, "positive int, got 0"),
        (lambda: delta(append, snapshot_every=-5), ValueError, "got -5"),
        (lambda: delta(append, snapshot_every=2.5), TypeError, "must be an int"),  # type: ignore[arg-type]
        (lambda: delta(append, snapshot_every=True), TypeError, "must be an int"),
        (lambda: delta("append"), TypeError, "needs a reducer callable"),  # type: ignore[arg-type]
        (lambda: fold("step", empty=list), TypeError, "fold step must be a callable"),  # type: ignore[arg-type]
        (lambda: merge({}, [["a", 1]]), TypeError, "each write must be a dict"),
        (lambda: total(0, ["1"]), TypeError, "each write must be a number"),
        (lambda: total(0, [True]), TypeError, "each write must be a number"),
        (lambda: union(set(), [[[1]]]), TypeError, "items must be hashable"),
        (lambda: append([], "ab"), TypeError, "writes must be a list"),  # type: ignore[arg-type]
        (lambda: unique_first([], [{"k": [1]}]), TypeError, "unhashable"),
        (lambda: replay(None, [[1, 2]], append), TypeError, "PendingWrite"),  # type: ignore[list-item]
        (lambda: replay(None, [], "append"), TypeError, "reducer callable"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_raises_clear_error(make: Callable[[], Any], error: type, needle: str) -> None:
    """R9: bad input raises a TypeError/ValueError naming the value and the fix."""
    with pytest.raises(error) as info:
        make()
    assert needle in str(info.value)


def test_delta_builds_a_configured_deltachannel() -> None:
    """delta() returns a DeltaChannel with the reducer, cadence and the reducer's value type."""
    ch = delta(merge, snapshot_every=7)
    assert isinstance(ch, DeltaChannel)
    assert ch.reducer is merge
    assert ch.snapshot_frequency == 7
    assert ch.typ is dict
    assert delta(append).snapshot_frequency == 100
    assert delta(total).typ is int


def test_two_overwrites_in_one_step_still_rejected_by_channel() -> None:
    """The reducers do not change DeltaChannel's one-Overwrite-per-superstep rule."""
    ch = DeltaChannel(append, list).from_checkpoint(MISSING)
    with pytest.raises(InvalidUpdateError):
        ch.update([Overwrite([1]), Overwrite([2])])


def test_reducers_are_usable_in_annotated_fields() -> None:
    """Annotated[list, delta(append)] compiles into a DeltaChannel with the annotated type."""
    from langgraph.graph import StateGraph
    from typing_extensions import TypedDict

    class S(TypedDict):
        xs: Annotated[list[int], delta(append, snapshot_every=3)]
        tags: Annotated[set[str], delta(union)]

    graph: StateGraph[Any] = StateGraph(S)
    graph.add_node("n", lambda s: {"xs": [1], "tags": ["t"]})
    graph.set_entry_point("n")
    compiled = graph.compile()
    xs, tags = compiled.channels["xs"], compiled.channels["tags"]
    assert isinstance(xs, DeltaChannel) and xs.snapshot_frequency == 3 and xs.typ is list
    assert isinstance(tags, DeltaChannel) and tags.typ is set
    assert compiled.invoke({"xs": [0]}) == {"xs": [0, 1], "tags": {"t"}}
