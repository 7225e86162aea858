"""The serde boundary: every stored value, checkpoint body, metadata dict and write.

Functions of the saver's ``serde`` (and its cache of decoded values), shared
by :class:`~deltalog.engine.DeltaLogSaver`, :class:`~deltalog.engine.maintenance.Maintenance`
and the inspection library, so a value that cannot be serialized, or one this
serde cannot load (an encrypted store without the key, a pickled value with
pickle off), is the same one-line error wherever it is met.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from deltalog.engine.cache import DecodedCache, HistoryCopies, gc_paused
from deltalog.engine.config import checkpoint_config
from deltalog.engine.copies import may_hold_long_str
from deltalog.engine.errors import InvalidInputError, SerdeMismatchError, UndecryptableValueError
from deltalog.engine.store_rows import CheckpointRow, DeltaHistory, StoredValue, Typed, WriteRow
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import EXT_DELTA_SNAPSHOT

__all__ = [
    "decode_histories",
    "dumps",
    "history_writes",
    "load",
    "loads",
    "prefill",
    "seed_like",
    "serde_mismatch",
    "to_tuple",
]


def dumps(serde: SerializerProtocol, value: Any, what: str) -> Typed:
    """``serde.dumps_typed``, with a value it cannot serialize as :class:`InvalidInputError`."""
    try:
        return serde.dumps_typed(value)
    except Exception as exc:
        raise InvalidInputError(
            f"{what} of type {type(value).__name__} cannot be serialized by "
            f"{type(serde).__name__} ({type(exc).__name__}: {exc}); store "
            "serializable values or pass a serde that handles this type"
        ) from exc


def _ext_code(payload: bytes) -> int | None:
    """The extension type code of a msgpack payload that is one ext object, else None.

    >>> _ext_code(bytes([0xC7, 3, 7, 1, 2, 3])), _ext_code(bytes([0xD4, 7, 0])), _ext_code(b"\\x90")
    (7, 7, None)
    """
    if len(payload) < 2:
        return None
    head = payload[0]
    at = {0xD4: 1, 0xD5: 1, 0xD6: 1, 0xD7: 1, 0xD8: 1, 0xC7: 2, 0xC8: 3, 0xC9: 5}.get(head)
    if at is None or len(payload) <= at:
        return None
    return payload[at]


def seed_like(typed: Typed) -> bool:
    """Whether LangGraph's serializer wrote this value as a ``_DeltaSnapshot`` (one
    msgpack extension object of type ``EXT_DELTA_SNAPSHOT``). A hint only: other
    serdes' seeds say False and are cached like any value."""
    return typed[0] == "msgpack" and _ext_code(typed[1]) == EXT_DELTA_SNAPSHOT


def load(
    serde: SerializerProtocol,
    cache: DecodedCache,
    value: StoredValue,
    *,
    reused: bool = False,
    spare: int = 0,
) -> Any:
    """Decode a stored channel value through the cache (a private copy per caller);
    ``reused`` and ``spare`` as for :meth:`DecodedCache.load`."""
    return cache.load(
        value.record,
        functools.partial(_decode, serde, value.typed),
        len(value.typed[1]),
        reused=reused,
        share=functools.partial(may_hold_long_str, *value.typed),
        spare=spare,
    )


def prefill(
    serde: SerializerProtocol, cache: DecodedCache, written: Sequence[tuple[bytes, Typed]]
) -> None:
    """Queue the decode of each seed among a committed put's large values (``(record,
    typed)``, :meth:`DecodedCache.prefill`): the next turn reads it, and the
    serde's decode of a whole message list is the slowest read there is."""
    for record, typed in written:
        if seed_like(typed):
            cache.prefill(
                record,
                functools.partial(_decode, serde, typed),
                len(typed[1]),
                share=functools.partial(may_hold_long_str, *typed),
            )


def _decode(serde: SerializerProtocol, typed: Typed, record: bytes) -> Any:
    """The cache's decode of ``record``: the serde's of the payload it holds, ``typed``."""
    return loads(serde, typed)


def loads(serde: SerializerProtocol, typed: Typed, what: str = "a stored value") -> Any:
    """``serde.loads_typed``, with a value the serde cannot load as :class:`SerdeMismatchError`.

    Raises:
        SerdeMismatchError: The value's type is one this serde does not load
            (e.g. ``msgpack+aes`` without the key), or it does not decrypt.
    """
    try:
        return serde.loads_typed(typed)
    except NotImplementedError as exc:
        raise serde_mismatch(serde, typed[0], what, None) from exc
    except ValueError as exc:
        if "+" not in str(typed[0]):
            raise
        raise serde_mismatch(serde, typed[0], what, exc) from exc


def to_tuple(
    serde: SerializerProtocol, cache: DecodedCache, row: CheckpointRow, *, spare: int = 0
) -> CheckpointTuple:
    """A stored checkpoint row as LangGraph's ``CheckpointTuple``, every value decoded;
    ``spare`` as for :meth:`DecodedCache.load`, for its seeds (an ``add_messages``
    list is a new value every turn: a spare of it would not be read)."""
    checkpoint: Checkpoint = loads(serde, row.checkpoint)
    checkpoint["id"] = row.checkpoint_id
    checkpoint["channel_versions"] = dict(row.channel_versions)
    # A delta channel's value in a checkpoint is its seed, which the histories
    # of every following turn replay from until the next seed: cached at once.
    values: dict[str, Any] = {}
    for k, v in row.values.items():
        seed = seed_like(v.typed)
        values[k] = load(serde, cache, v, reused=seed, spare=spare if seed else 0)
    checkpoint["channel_values"] = values
    return CheckpointTuple(
        config=checkpoint_config(row.thread_id, row.checkpoint_ns, row.checkpoint_id),
        checkpoint=checkpoint,
        metadata=loads(serde, row.metadata),
        parent_config=(
            checkpoint_config(row.thread_id, row.checkpoint_ns, row.parent_id)
            if row.parent_id is not None
            else None
        ),
        pending_writes=[(w.task_id, w.channel, loads(serde, w.value)) for w in row.writes],
    )


def serde_mismatch(
    serde: SerializerProtocol, type_tag: Any, what: str, error: Exception | None
) -> SerdeMismatchError:
    """The error of a value ``serde`` cannot load, naming the likely cause and the fix."""
    tag = str(type_tag)
    serde_name = type(serde).__name__
    if "+" in tag:
        cipher = tag.split("+", 1)[1]
        if error is not None:
            return UndecryptableValueError(
                f"{what} of type {tag!r} cannot be decrypted by {serde_name} "
                f"({type(error).__name__}: {error}): wrong key? It was written with "
                f"EncryptedSerializer ({cipher}); pass the serde= that wrote the store, with "
                "its key (deltalog CLI: LANGGRAPH_AES_KEY or --serde MODULE:ATTR)"
            )
        return SerdeMismatchError(
            f"{what} of type {tag!r} was written with EncryptedSerializer ({cipher}) and "
            f"{serde_name} cannot decrypt it; pass serde=EncryptedSerializer."
            "from_pycryptodome_aes() with the key (LANGGRAPH_AES_KEY); deltalog CLI: set "
            "LANGGRAPH_AES_KEY or pass --serde MODULE:ATTR"
        )
    if tag == "pickle":
        return SerdeMismatchError(
            f"{what} of type 'pickle' is refused by {serde_name} (pickle fallback off: "
            "unpickling runs code); only if you trust whoever wrote the store, pass "
            "serde=JsonPlusSerializer(pickle_fallback=True)"
        )
    return SerdeMismatchError(
        f"{what} of type {tag!r} is not a type {serde_name} loads; pass the serde= that "
        "wrote the store (deltalog CLI: --serde MODULE:ATTR)"
    )


def decode_histories(
    serde: SerializerProtocol,
    cache: DecodedCache,
    copies: HistoryCopies,
    raw: Mapping[str, DeltaHistory],
    channels: Sequence[str],
    *,
    spare: int = 0,
) -> dict[str, DeltaChannelHistory]:
    """``get_delta_channel_history``'s result from the raw histories the store walked;
    ``spare`` as for :meth:`DecodedCache.load`."""
    result: dict[str, DeltaChannelHistory] = {}
    # Hundreds of writes plus a seed make tens of thousands of objects.
    with gc_paused():
        for channel in channels:
            history = raw[channel]
            entry: DeltaChannelHistory = {"writes": history_writes(serde, copies, history)}
            if history.seed is not None:
                entry["seed"] = load(serde, cache, history.seed, spare=spare)
            result[channel] = entry
    return result


def _share(writes: Sequence[WriteRow]) -> bool:
    """Whether the decoded ``writes`` may hold a long string worth sharing."""
    return any(may_hold_long_str(*w.value) for w in writes)


def history_writes(
    serde: SerializerProtocol, copies: HistoryCopies, history: DeltaHistory
) -> list[Any]:
    """Decoded ``(task_id, channel, value)`` of a history's writes: private objects.

    When the history extends a remembered one whose decoded list the saver
    kept (:class:`~deltalog.engine.cache.HistoryCopies`), only the writes
    read fresh go through the serde; the rest are unpickled copies.
    """
    decode = functools.partial(loads, serde)
    base = history.base
    chunks = copies.get(base) if base is not None else None
    if base is not None and chunks is not None:
        new = history.writes[len(base.writes) :]
        fresh = [(w.task_id, w.channel, decode(w.value)) for w in new]
        decoded, kept = copies.extend(chunks, fresh, _share(new))
    else:
        decoded = [(w.task_id, w.channel, decode(w.value)) for w in history.writes]
        kept = copies.start(decoded, _share(history.writes)) if history.entry is not None else None
    if history.entry is not None and history.entry is not base and kept is not None:
        copies.put(history.entry, kept)
    return decoded
