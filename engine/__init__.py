"""deltalog.engine: an embedded, event-sourced LMDB store for LangGraph checkpoints.

>>> from deltalog.engine import DeltaLogSaver  # doctest: +SKIP
>>> with DeltaLogSaver.from_path("chat.lmdb") as saver:  # doctest: +SKIP
...     graph = builder.compile(checkpointer=saver)

The saver (and with it LangGraph) is imported on first use of
``DeltaLogSaver``, ``DeltaLogStore`` or ``Environment``, so ``deltalog --help`` and the commands that
read only keys start without loading LangGraph (issue 19, fast start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltalog.engine.errors import (
    ConfigError,
    CorruptRecordError,
    DamagedKeyError,
    DeltaChainError,
    DeltaLogError,
    FormatVersionError,
    InvalidInputError,
    KeyTooLongError,
    StoreFullError,
    StoreOpenError,
    ThreadExistsError,
)

if TYPE_CHECKING:
    from deltalog.engine.env import Environment
    from deltalog.engine.memory import DeltaLogStore
    from deltalog.engine.saver import DeltaLogSaver

__all__ = [
    "ConfigError",
    "CorruptRecordError",
    "DamagedKeyError",
    "DeltaChainError",
    "DeltaLogError",
    "DeltaLogSaver",
    "DeltaLogStore",
    "Environment",
    "FormatVersionError",
    "InvalidInputError",
    "KeyTooLongError",
    "StoreFullError",
    "StoreOpenError",
    "ThreadExistsError",
]

_LAZY = {
    "DeltaLogSaver": "deltalog.engine.saver",
    "DeltaLogStore": "deltalog.engine.memory",
    "Environment": "deltalog.engine.env",
}


def __getattr__(name: str) -> Any:
    """``DeltaLogSaver``, ``DeltaLogStore`` and ``Environment``, imported when first asked for (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
