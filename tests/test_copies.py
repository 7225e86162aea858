"""Private pickles of decoded values (engine/copies.py): a copy from ``loads(dumps(v))``
holds what ``pickle.loads(pickle.dumps(v))`` holds, model for model, whether its
pydantic models were filled in C from the batch or through their own
``__setstate__``; and no code run while unpickling ever sees a model half made."""

from __future__ import annotations

import datetime
import decimal
import pickle
import uuid
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from deltalog.engine import copies
from deltalog.engine.copies import Pickled, dumps, loads
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    name: str
    items: list[Any] = []
    _secret: int = pydantic.PrivateAttr(default=7)


class Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)
    key: str


class OwnState(pydantic.BaseModel):
    n: int

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        object.__setattr__(self, "n", self.n + 1)


class Peek:
    """Unpickled through a function that reads a message's content: it must never
    be handed a model whose state is not set yet."""

    def __init__(self, message: Any) -> None:
        self.message = message
        self.seen = message.content

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_peek, (self.message,)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Peek) and (other.message, other.seen) == (self.message, self.seen)

    __hash__ = None  # type: ignore[assignment]


def _rebuild_peek(message: Any) -> Peek:
    return Peek(message)


def _models(value: Any) -> Iterator[Any]:
    """Every pydantic model in ``value`` (through containers and model fields)."""
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, pydantic.BaseModel):
            yield item
            stack.extend(item.__dict__.values())
            stack.extend((item.__pydantic_extra__ or {}).values())
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, Peek):
            stack.append(item.message)


def _state(model: Any) -> tuple[Any, ...]:
    return (
        type(model),
        model.__dict__,
        model.__pydantic_fields_set__,
        model.__pydantic_extra__,
        model.__pydantic_private__,
    )


def assert_same_copy(value: Any) -> Pickled | bytes:
    """``loads(dumps(value))`` equals the plain pickle round trip, model by model,
    shares no mutable object with the value, and keeps its shared references."""
    pickled = dumps(value)
    ours, theirs = loads(pickled), pickle.loads(pickle.dumps(value, protocol=5))
    assert ours == theirs == value
    ours_models, their_models = list(_models(ours)), list(_models(theirs))
    assert [_state(m) for m in ours_models] == [_state(m) for m in their_models]
    originals = {id(m) for m in _models(value)}
    for model in ours_models:
        assert id(model) not in originals
        assert id(model.__dict__) not in {id(m.__dict__) for m in _models(value)}
    return pickled


def _chat(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        out.append(HumanMessage(content=f"question {i}", id=f"h{i}"))
        out.append(
            AIMessage(
                content=f"answer {i}",
                id=f"a{i}",
                tool_calls=[{"name": "search", "args": {"q": str(i)}, "id": f"c{i}"}],
                usage_metadata={"input_tokens": i, "output_tokens": 2, "total_tokens": i + 2},
                response_metadata={"model": "m", "n": [i, None]},
            )
        )
        out.append(ToolMessage(content="x" * (i * 600), tool_call_id=f"c{i}", id=f"t{i}"))
    return out


def test_a_chat_seed_is_filled_from_the_batch_and_copies_the_same() -> None:
    seed = _DeltaSnapshot(_chat(5))
    pickled = assert_same_copy(seed)
    assert isinstance(pickled, Pickled) and pickled.models
    assert pickled.strings  # the long tool results are kept aside as before


def test_the_batch_never_calls_setstate(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the batch is for: a copy of n models makes no Python call per model."""
    calls = []
    original = pydantic.BaseModel.__setstate__

    def counting(self: Any, state: Any) -> None:
        calls.append(1)
        original(self, state)

    monkeypatch.setattr(pydantic.BaseModel, "__setstate__", counting)
    monkeypatch.setattr(copies, "_PLAIN", {})
    chat = _chat(4)
    pickled = dumps(chat, share=False)
    assert isinstance(pickled, Pickled) and pickled.models and not pickled.strings
    copy = loads(pickled)
    assert copy == chat and calls == []
    pickle.loads(pickle.dumps(chat))
    assert len(calls) == len(chat)


def test_extras_private_attributes_nesting_and_shared_references() -> None:
    inner = Loose.model_validate({"name": "inner", "extra_field": {"deep": [1, 2]}})
    inner._secret = 41
    outer = Loose(name="outer", items=[inner, HumanMessage(content="nested", id="n1")])
    twice = HumanMessage(content="twice", id="t")
    value = {"a": [outer, twice], "b": (twice, {"c": inner})}
    assert_same_copy(value)
    copy = loads(dumps(value))
    assert copy["a"][1] is copy["b"][0]  # one object twice stays one object
    assert copy["b"][1]["c"] is copy["a"][0].items[0]
    assert copy["a"][0].items[0]._secret == 41
    assert copy["a"][0].items[0].extra_field == {"deep": [1, 2]}


def test_a_model_holding_itself() -> None:
    loop = Loose(name="loop")
    loop.items.append(loop)
    copy = loads(dumps([loop, {"again": loop}]))
    assert copy[0].items[0] is copy[0] is copy[1]["again"]
    assert copy[0].name == "loop" and copy[0] is not loop


def test_code_run_while_unpickling_never_sees_a_half_made_model() -> None:
    """A message's state holding an object whose unpickling reads another message:
    the pickle is made the plain way, so that message is whole when read."""
    watched = HumanMessage(content="watched", id="w")
    holder = AIMessage(content="holder", id="h", additional_kwargs={"peek": Peek(watched)})
    value = [holder, watched]
    pickled = assert_same_copy(value)
    assert not (isinstance(pickled, Pickled) and pickled.models)
    assert loads(pickled)[0].additional_kwargs["peek"].seen == "watched"


def test_models_pickled_their_own_way_are_left_to_it() -> None:
    """Hashable models (set members, dict keys), and a class with its own
    ``__setstate__``, are unpickled as pickle does it."""
    frozen = Frozen(key="k")
    value = [frozen, {frozen}, {frozen: 1}, OwnState(n=1), HumanMessage(content="m", id="m")]
    assert not copies._plain_model(Frozen) and not copies._plain_model(OwnState)
    assert copies._plain_model(HumanMessage)
    copy = loads(dumps(value))
    assert copy[3].n == 2 and pickle.loads(pickle.dumps(value))[3].n == 2
    assert copy[0] in copy[1] and copy[2][copy[0]] == 1


def test_a_copy_is_fresh_every_time() -> None:
    chat = _chat(3)
    pickled = dumps(chat)
    first = loads(pickled)
    first[1].content = "changed"
    first[1].tool_calls[0]["args"]["q"] = "changed"
    first[0].__pydantic_fields_set__.add("name")
    first[1].response_metadata["n"].append(5)
    assert loads(pickled) == _chat(3)
    assert "name" not in loads(pickled)[0].model_fields_set


def test_models_past_the_walk_are_pickled_the_plain_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copies, "WALK_MAX", 5)
    chat = _chat(6)
    assert 0 < len(copies._models(chat)) < len(chat)
    assert_same_copy(chat)


def test_values_without_models_stay_plain_pickles() -> None:
    assert isinstance(dumps([{"a": "b" * 10}, (1, 2)], share=False), bytes)
    assert isinstance(dumps(["short"]), bytes)


_leaf = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.none(),
    st.builds(
        lambda c, i: HumanMessage(content=c, id=i), st.text(max_size=1100), st.text(max_size=4)
    ),
    st.builds(lambda n: Loose.model_validate({"name": n, "extra": n}), st.text(max_size=4)),
)


@given(
    st.recursive(
        _leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.text(max_size=3), inner, max_size=3),
            st.tuples(inner, inner),
            st.builds(lambda xs: Loose(name="box", items=xs), st.lists(inner, max_size=3)),
        ),
        max_leaves=12,
    )
)
def test_any_nesting_copies_as_pickle_does(value: Any) -> None:
    assert_same_copy(value)


def test_a_value_without_models_is_not_walked_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past WALK_PROBE steps with no model found the look stops: a long list of
    numbers is not walked for nothing, and a model after them is pickled the
    plain way (correctly)."""
    late = [*range(copies.WALK_PROBE + 10), HumanMessage(content="late", id="l")]
    assert copies._models(late) == []
    early = [HumanMessage(content="early", id="e"), *range(copies.WALK_PROBE + 10)]
    assert len(copies._models(early)) == 1
    assert_same_copy(late)


class Day(datetime.date):
    """A date subclass reduces however it likes: not taken for plain data."""


def test_plain_data_in_a_state_keeps_the_batch_and_a_subclass_does_not() -> None:
    when = datetime.datetime(2026, 12, 3, 18, 0, tzinfo=datetime.timezone.utc)
    meta = {"at": when, "id": uuid.UUID(int=5), "cost": decimal.Decimal("1.5")}
    value = [AIMessage(content="a", id="a", response_metadata=meta), HumanMessage(content="h")]
    pickled = assert_same_copy(value)
    assert isinstance(pickled, Pickled) and pickled.models
    odd = [AIMessage(content="a", id="a", response_metadata={"day": Day(2026, 1, 1)})]
    pickled = assert_same_copy(odd)
    assert not (isinstance(pickled, Pickled) and pickled.models)
