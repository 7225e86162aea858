"""deltalog.engine: an embedded, event-sourced LMDB store for LangGraph checkpoints.

>>> from deltalog.engine import DeltaLogSaver  # doctest: +SKIP
>>> with DeltaLogSaver.from_path("chat.lmdb") as saver:  # doctest: +SKIP
...     graph = builder.compile(checkpointer=saver)
"""

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
from deltalog.engine.memory import DeltaLogStore
from deltalog.engine.saver import DeltaLogSaver
from deltalog.engine.store import Store

__all__ = [
    "ConfigError",
    "CorruptRecordError",
    "DamagedKeyError",
    "DeltaChainError",
    "DeltaLogError",
    "DeltaLogSaver",
    "DeltaLogStore",
    "FormatVersionError",
    "InvalidInputError",
    "KeyTooLongError",
    "Store",
    "StoreFullError",
    "StoreOpenError",
    "ThreadExistsError",
]
