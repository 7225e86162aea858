"""What callers pass the saver, parsed and validated before anything is read or written (R9).

Pure functions, no I/O: a ``RunnableConfig`` into ``(thread_id, checkpoint_ns,
checkpoint_id)``, ``list``'s ``before``, thread and run id lists, ``older_than``
ages, the metadata field ``counters_since_delta_snapshot``, and the saver's own
options of :meth:`~deltalog.engine.DeltaLogSaver.from_path` (the store checks
its own). Each bad value raises :class:`~deltalog.engine.errors.ConfigError` or
:class:`~deltalog.engine.errors.InvalidInputError` naming the value and the fix.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

from deltalog.engine.errors import ConfigError, InvalidInputError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = [
    "MEMORY",
    "before_checkpoint_id",
    "check_open_options",
    "checkpoint_config",
    "checkpoint_id_of",
    "config_for",
    "cutoff_of",
    "delta_counters",
    "parse_config",
    "thread_id_of",
    "thread_list",
]

# The path that opens a temporary store, as SQLite's ":memory:" database.
MEMORY: Final = ":memory:"


def checkpoint_config(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
) -> RunnableConfig:
    """The config LangGraph passes around for one checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def config_for(
    thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
) -> RunnableConfig:
    """A ``RunnableConfig`` naming a thread, a namespace and optionally a checkpoint."""
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def thread_id_of(value: Any) -> str:
    """A ``thread_id`` as a str (ints and UUIDs converted), else :class:`ConfigError`."""
    if isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise ConfigError(
        f"thread_id {value!r} is a {type(value).__name__}; pass a str (ints and UUIDs are "
        "converted with str())"
    )


def parse_config(config: Any) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a config, validated (R9)."""
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"config {config!r:.80} is not a mapping; pass {{'configurable': {{'thread_id': ...}}}}"
        )
    conf = config.get("configurable")
    if not isinstance(conf, Mapping) or conf.get("thread_id") is None:
        raise ConfigError(
            "config has no configurable.thread_id; pass "
            "{'configurable': {'thread_id': 'my-thread'}} when invoking the graph"
        )
    thread_id = thread_id_of(conf["thread_id"])
    ns = conf.get("checkpoint_ns") or ""
    if not isinstance(ns, str):
        raise ConfigError(f"checkpoint_ns {ns!r} is a {type(ns).__name__}; pass a str")
    return thread_id, ns, checkpoint_id_of(conf, "checkpoint_id")


def checkpoint_id_of(conf: Mapping[str, Any], what: str) -> str | None:
    """``conf["checkpoint_id"]`` (None when absent or empty), checked to be a str."""
    checkpoint_id = conf.get("checkpoint_id") or None
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise ConfigError(
            f"{what} {checkpoint_id!r} is a {type(checkpoint_id).__name__}; pass a str"
        )
    return checkpoint_id


def before_checkpoint_id(before: Any) -> str | None:
    """The checkpoint id of ``list``'s ``before`` config. Only the id counts: LangGraph's
    replay passes ``{"configurable": {"checkpoint_id": ...}}`` with no thread_id."""
    if before is None:
        return None
    if not isinstance(before, Mapping) or not isinstance(before.get("configurable"), Mapping):
        raise ConfigError(
            f"before {before!r:.80} is not a config; pass "
            "{'configurable': {'checkpoint_id': ...}}"
        )
    return checkpoint_id_of(before["configurable"], "before's checkpoint_id")


def thread_list(value: Any, what: str) -> list[str]:
    """A list of thread (or run) ids; a bare string is refused, not split into characters."""
    if isinstance(value, (str, bytes)):
        raise InvalidInputError(
            f"{what} {value!r} is a single string; pass a list, e.g. [{value!r}]"
        )
    try:
        items = list(value)
    except TypeError:
        raise InvalidInputError(f"{what} {value!r} is not a list of strings") from None
    return [thread_id_of(v) for v in items]


def cutoff_of(older_than: timedelta | datetime | None) -> datetime | None:
    """The aware instant before which ``older_than`` (an age or an instant) counts as old."""
    if older_than is None:
        return None
    if isinstance(older_than, timedelta):
        if older_than < timedelta(0):
            raise InvalidInputError(f"older_than {older_than!r} is negative; pass a positive age")
        return datetime.now(timezone.utc) - older_than
    if isinstance(older_than, datetime):
        if older_than.tzinfo is None:
            raise InvalidInputError(
                f"older_than {older_than!r} has no time zone; pass an aware datetime "
                "(e.g. datetime.now(timezone.utc) - timedelta(days=7))"
            )
        return older_than
    raise InvalidInputError(f"older_than {older_than!r} is neither a timedelta nor a datetime")


def delta_counters(counters: Any) -> list[str]:
    """The channels of ``counters_since_delta_snapshot`` (``{channel: (updates, supersteps)}``).

    Raises:
        InvalidInputError: The field is not such a mapping (checked before any write).
    """
    if not counters:
        return []
    if not isinstance(counters, Mapping):
        raise InvalidInputError(
            f"metadata counters_since_delta_snapshot {counters!r:.80} is not a mapping; pass "
            "{channel: (updates, supersteps)} as LangGraph writes it, or leave it out"
        )
    for channel, pair in counters.items():
        ints = (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in pair)
        ) or (isinstance(pair, int) and not isinstance(pair, bool))
        if not isinstance(channel, str) or not ints:
            raise InvalidInputError(
                f"metadata counters_since_delta_snapshot entry {channel!r}: {pair!r:.80} is not "
                "a channel name with (updates, supersteps) ints; pass "
                "{channel: (updates, supersteps)} as LangGraph writes it, or leave it out"
            )
    return sorted(counters)


def check_open_options(*, compress_threshold: Any, cache_bytes: Any) -> None:
    """The saver's own options of :meth:`DeltaLogSaver.from_path` (R9; the store checks its own)."""
    if compress_threshold is not None and (
        isinstance(compress_threshold, bool)
        or not isinstance(compress_threshold, int)
        or compress_threshold < 0
    ):
        raise InvalidInputError(
            f"compress_threshold={compress_threshold!r}: need a byte count >= 0 (e.g. 512), "
            "or None to turn compression off"
        )
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
        raise InvalidInputError(
            f"cache_bytes={cache_bytes!r}: need a byte count >= 0 (e.g. 64 * 1024**2), or 0 to "
            "turn the cache off"
        )
