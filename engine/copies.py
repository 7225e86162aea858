"""Private pickles of decoded values, from which every reader gets a fresh copy.

The caches (:mod:`deltalog.engine.cache`) keep what the serde decoded as a
pickle and hand each caller ``loads(pickle)``: a copy that no other reader
shares, so mutating a returned state can never change what the next one
sees. Two things make those copies cheaper than a plain pickle round trip,
and neither changes what a copy holds:

- **Long strings are shared.** A ``str`` of :data:`SHARED_STR_MIN` characters
  or more is kept aside and every copy refers to that one object (a string
  cannot be changed in place).
- **pydantic models are filled in C.** Unpickling a model calls pydantic's
  ``BaseModel.__setstate__``, a Python function, once per model: 1.8 ms of a
  2.8 ms ``pickle.loads`` of a 2,000-message seed here. A pickle made by
  :func:`dumps` creates the models of a value first, without state, then
  their states, and sets the four attributes pydantic's ``__setstate__``
  sets with ``object.__setattr__`` over all of them at once
  (:func:`_restore`); only then is the value itself unpickled, around models
  that are already whole. Only models found through the value's lists,
  tuples and dicts (:func:`_models`) are made this way, only when their
  class pickles exactly as ``BaseModel`` does (:func:`_plain_model`), and
  only when nothing in their states is an object whose unpickling could run
  code that looks at another model before it is whole (any other pickle is
  made the plain way).

Pickles never leave the process; nothing read from disk is ever unpickled.
"""

from __future__ import annotations

import copyreg
import datetime
import decimal
import io
import pickle
import sys
import types
import uuid
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any, Final, NamedTuple

__all__ = [
    "SHARED_STR_MIN",
    "Pickled",
    "dumps",
    "loads",
    "may_hold_long_str",
    "nbytes",
    "shares",
    "size",
]

#: Strings at least this long are not copied into a cache's pickle: the pickle
#: refers to the string object itself, which every copy handed out shares (a
#: ``str`` cannot be changed in place, so no caller can change another's).
#: Measured on a 1,000-message seed of the large-message chat (2,000 + 8,000
#: characters a turn): ``pickle.loads`` 4.7 ms, 1.4 ms with its strings
#: shared, and the pickle 68 KB instead of 5.0 MB (which the strings, kept
#: alive by the decoded value, no longer double). Below it (the 300 + 600
#: character chat) nothing is shared.
SHARED_STR_MIN: Final = 1024

#: At most this many containers and items of a value are looked at for models
#: (:func:`_models`); a model past them is pickled the plain way.
WALK_MAX: Final = 1 << 16
#: ... and the look stops after this many when it found none (a value of
#: numbers or plain dicts is not walked to its end for nothing).
WALK_PROBE: Final = 256


class Pickled(NamedTuple):
    """A pickle that is more than plain bytes for :func:`pickle.loads`.

    Attributes:
        data: The pickle.
        strings: Long strings kept aside: each is a persistent id in ``data``,
            its index here.
        models: ``data`` starts with the models' batch (:func:`_restore`),
            then holds the value.
    """

    data: bytes
    strings: tuple[str, ...] = ()
    models: bool = False


# The attributes pydantic 2's BaseModel.__setstate__ sets, in its order.
_MODEL_STATE: Final = (
    "__pydantic_fields_set__",
    "__pydantic_extra__",
    "__pydantic_private__",
    "__dict__",
)
_SETATTR: Final = object.__setattr__
# What pickle turns into its NEWOBJ opcode: ``cls.__new__(cls)``, no state.
_NEWOBJ: Final[Callable[..., Any]] = copyreg.__newobj__  # type: ignore[attr-defined]
# Objects in a model's state whose unpickling runs no code that could see
# another object of the pickle: pickled by reference ...
_BY_REFERENCE: Final = (type, types.FunctionType, types.BuiltinFunctionType)
# ... or rebuilt from plain data (exact types: a subclass may reduce its own way).
_PLAIN_DATA: Final = frozenset(
    {
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
        datetime.timezone,
        uuid.UUID,
        decimal.Decimal,
    }
)
# Class -> whether it pickles exactly as pydantic 2's BaseModel (bounded below).
_PLAIN: dict[type, bool] = {}


def _plain_model(cls: type) -> bool:
    """Whether instances of ``cls`` pickle exactly as pydantic 2's ``BaseModel``
    does: its ``__getstate__`` and ``__setstate__``, object's reduction, no
    ``copyreg`` entry, no new-args, and no ``__hash__`` (so no such model can
    be a set member or dict key, whose unpickling hashes it)."""
    known = _PLAIN.get(cls)
    if known is None:
        pydantic = sys.modules.get("pydantic")
        base = getattr(pydantic, "BaseModel", None)
        known = (
            isinstance(base, type)
            and str(getattr(pydantic, "VERSION", "")).startswith("2.")
            and issubclass(cls, base)
            and getattr(cls, "__getstate__", None) is getattr(base, "__getstate__", 0)
            and getattr(cls, "__setstate__", None) is getattr(base, "__setstate__", 0)
            and cls.__reduce_ex__ is object.__reduce_ex__  # type: ignore[comparison-overlap]
            and cls.__reduce__ is object.__reduce__  # type: ignore[comparison-overlap]
            and cls.__hash__ is None  # type: ignore[comparison-overlap]
            and cls not in copyreg.dispatch_table
            and not hasattr(cls, "__getnewargs_ex__")
            and not hasattr(cls, "__getnewargs__")
        )
        if len(_PLAIN) >= 4096:
            _PLAIN.clear()
        _PLAIN[cls] = known
    return known


def _models(value: Any) -> list[Any]:
    """The plain models (:func:`_plain_model`) reached from ``value`` through
    lists, tuples (named tuples too) and dict values in order, not looking inside them;
    at most :data:`WALK_MAX` steps, or :data:`WALK_PROBE` without finding one."""
    if "pydantic" not in sys.modules:
        return []
    found: list[Any] = []
    seen: set[int] = set()
    stack = [value]
    steps = WALK_MAX
    while stack and steps:
        steps -= 1
        if not found and WALK_MAX - steps > WALK_PROBE:
            break
        item = stack.pop()
        cls = type(item)
        if cls is str:
            continue
        # (a tuple subclass that iterates its own way is not looked into)
        if (
            cls is list
            or cls is dict
            or (isinstance(item, tuple) and cls.__iter__ is tuple.__iter__)
        ):
            if id(item) in seen:
                continue
            seen.add(id(item))
            stack.extend(reversed(item.values() if cls is dict else item))  # in order
        elif _plain_model(cls):
            found.append(item)
    return found


def _inert(obj: Any) -> bool:
    """Whether unpickling ``obj`` in a model's state is safe before the batch's
    models are whole: it is pickled by reference, rebuilt from plain data, or a
    plain model itself (whose ``__setstate__`` only stores what it is given)."""
    cls = type(obj)
    return cls in _PLAIN_DATA or isinstance(obj, _BY_REFERENCE) or _plain_model(cls)


class _Pickler(pickle.Pickler):
    """Creates the marked models without state (the batch's first item); while
    checking (the rest of the batch), notes any object that is not inert."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.bare: set[int] = set()
        self.checking = False
        self.foreign = False

    def reducer_override(self, obj: Any) -> Any:
        if id(obj) in self.bare:  # first met in the batch's list: no state yet
            return _NEWOBJ, (type(obj),)
        if self.checking and not _inert(obj):
            self.foreign = True
        return NotImplemented


class _SharingPickler(_Pickler):
    def __init__(self, file: io.BytesIO, strings: list[str]) -> None:
        super().__init__(file)
        self._strings = strings

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is str and len(obj) >= SHARED_STR_MIN:
            self._strings.append(obj)
            return len(self._strings) - 1
        return None


class _SharingUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, strings: tuple[str, ...]) -> None:
        super().__init__(io.BytesIO(data))
        self._strings = strings

    def persistent_load(self, pid: Any) -> str:
        return self._strings[int(pid)]


def may_hold_long_str(kind: str, payload: bytes) -> bool:
    """Whether a value a serde decodes from ``(kind, payload)`` may hold a string of
    :data:`SHARED_STR_MIN` characters or more (True when it cannot tell).

    False only for a payload shorter than that (a character takes a byte at
    least), or for msgpack whose every string header is shorter: such a
    string is a ``str 16`` (``0xDA`` and a 2-byte length) or ``str 32``
    (``0xDB``) in the payload, its nested extension data included. A ``0xDA``
    inside other bytes only makes the answer True. Only sharing depends on
    it: a long string a constructor builds from a short payload is copied
    into the pickle like a short one.
    """
    if len(payload) < SHARED_STR_MIN:
        return False
    if kind != "msgpack":
        return True
    at = payload.find(b"\xda")
    while at != -1:  # usually the first long one comes early
        if int.from_bytes(payload[at + 1 : at + 3], "big") >= SHARED_STR_MIN:
            return True
        at = payload.find(b"\xda", at + 1)
    return b"\xdb" in payload


def _batch(models: list[Any]) -> tuple[list[Any], ...]:
    """The models, then one list per attribute of :data:`_MODEL_STATE`, from
    pydantic's own ``__getstate__`` (read as its ``__setstate__`` reads it)."""
    states = [model.__getstate__() for model in models]
    return (models, *([state.get(name, {}) for state in states] for name in _MODEL_STATE))


def _restore(batch: tuple[list[Any], ...]) -> None:
    """Set what pydantic's ``__setstate__`` would on each model of the batch:
    one ``map`` of ``object.__setattr__`` per attribute, all in C."""
    models = batch[0]
    for name, values in zip(_MODEL_STATE, batch[1:], strict=True):
        deque(map(_SETATTR, models, repeat(name), values), maxlen=0)


def dumps(value: Any, share: bool = True) -> bytes | Pickled:
    """``value`` pickled: plain bytes, or a :class:`Pickled` with its long strings
    kept aside and its models in a batch ahead of it.

    With ``share`` False (the caller knows there is no long string: see
    :func:`may_hold_long_str`) no string is kept aside: the sharing pickler
    calls back into Python for every object, which was most of pickling a
    history's short messages (110,308 calls for 240 turns).
    """
    models = _models(value)
    if models:
        batched = _dumps_batched(value, models, share)
        if batched is not None:
            return batched
    if not share:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    buffer = io.BytesIO()
    strings: list[str] = []
    _SharingPickler(buffer, strings).dump(value)
    data = buffer.getvalue()
    return Pickled(data, tuple(strings)) if strings else data


def _dumps_batched(value: Any, models: list[Any], share: bool) -> Pickled | None:
    """:func:`dumps` with ``models`` in a batch ahead of the value, or None when
    something in their states could see a model half made (then each model is
    unpickled through its own ``__setstate__``)."""
    buffer = io.BytesIO()
    strings: list[str] = []
    pickler = _SharingPickler(buffer, strings) if share else _Pickler(buffer)
    pickler.bare = {id(model) for model in models}
    batch = _batch(models)
    pickler.checking = True
    pickler.dump(batch)
    if pickler.foreign:
        return None
    pickler.checking = False
    pickler.bare = set()
    pickler.dump(value)
    return Pickled(buffer.getvalue(), tuple(strings), models=True)


def loads(pickled: bytes | Pickled) -> Any:
    """A fresh copy of what :func:`dumps` pickled (long strings shared)."""
    if isinstance(pickled, bytes):
        return pickle.loads(pickled)
    unpickler = (
        _SharingUnpickler(pickled.data, pickled.strings)
        if pickled.strings
        else pickle.Unpickler(io.BytesIO(pickled.data))
    )
    if pickled.models:
        _restore(unpickler.load())
    return unpickler.load()


def shares(pickled: bytes | Pickled) -> bool:
    """Whether ``pickled`` keeps long strings aside."""
    return isinstance(pickled, Pickled) and bool(pickled.strings)


def size(pickled: bytes | Pickled) -> int:
    """Bytes a pickle keeps alive, its strings included."""
    if isinstance(pickled, bytes):
        return len(pickled)
    return len(pickled.data) + sum(sys.getsizeof(s) for s in pickled.strings)


def nbytes(pickled: bytes | Pickled) -> int:
    """Length of the pickle itself."""
    return len(pickled) if isinstance(pickled, bytes) else len(pickled.data)
