"""The one exception hierarchy of deltalog.

Every error the engine raises on purpose derives from :class:`DeltaLogError`.
Messages name the bad value and say how to fix it. LMDB's own exceptions are
translated into these at the transaction boundary (``deltalog.engine.store``),
so callers never need to import ``lmdb``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

__all__ = [
    "ConfigError",
    "CorruptRecordError",
    "DamagedKeyError",
    "DeltaChainError",
    "DeltaLogError",
    "EmbeddingError",
    "FormatVersionError",
    "InvalidInputError",
    "ItemValueError",
    "KeyTooLongError",
    "NamespaceError",
    "StoreFullError",
    "StoreOpenError",
    "ThreadExistsError",
]


class DeltaLogError(Exception):
    """Base class of every error deltalog raises on purpose."""


class InvalidInputError(DeltaLogError, ValueError):
    """A caller passed a value the engine cannot store (R9).

    Raised before anything is written.
    """


class ConfigError(InvalidInputError):
    """A ``RunnableConfig`` lacks a required key or has a value of the wrong type."""


class KeyTooLongError(InvalidInputError):
    """A key component (e.g. a non-uuid checkpoint id or a task path) cannot fit
    LMDB's 511-byte key limit."""


class ThreadExistsError(DeltaLogError):
    """``copy_thread`` was asked to copy onto a thread that already has checkpoints."""


class DeltaChainError(DeltaLogError):
    """A maintenance operation would cut the delta chain of a checkpoint that stays (R7)."""


class StoreOpenError(DeltaLogError):
    """The store could not be opened (missing folder, garbage file, unsupported filesystem)."""


class FormatVersionError(StoreOpenError):
    """The store was written by a newer (or unknown) on-disk format version (R10)."""


class StoreFullError(DeltaLogError):
    """The LMDB map reached its configured cap, or the disk is full; nothing was written."""


class CorruptRecordError(DeltaLogError):
    """A stored record could not be decoded. The message names the database and key."""


class DamagedKeyError(CorruptRecordError, ValueError):
    """Stored key bytes do not decode (LMDB keeps no checksums, so a damaged key is
    found only when it is read). A ``ValueError`` too, as the key decoders raised before."""


class ItemValueError(InvalidInputError):
    """A memory item's key, value, filter, TTL or index field list cannot be stored."""


class EmbeddingError(InvalidInputError):
    """The memory store's embedder raised, or returned the wrong number of vectors or
    dimensions; nothing was written."""


if TYPE_CHECKING:
    from langgraph.store.base import InvalidNamespaceError

    class NamespaceError(InvalidInputError, InvalidNamespaceError):
        """A memory store namespace (or a prefix/suffix pattern) is invalid."""


_NAMESPACE_ERROR_LOCK = threading.Lock()


def __getattr__(name: str) -> Any:
    """``NamespaceError``, made on first use: it is also LangGraph's
    ``InvalidNamespaceError`` (as the contract says), and importing LangGraph
    here would make every ``import deltalog.engine.errors`` load it."""
    if name != "NamespaceError":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _NAMESPACE_ERROR_LOCK:
        made = globals().get("NamespaceError")
        if made is None:
            from langgraph.store.base import InvalidNamespaceError

            made = type(
                "NamespaceError",
                (InvalidInputError, InvalidNamespaceError),
                {
                    "__module__": __name__,
                    "__doc__": "A memory store namespace (or a prefix/suffix pattern) is "
                    "invalid: a label that is not a non-empty string, or holds a period or "
                    "NUL; for put(), also an empty namespace or the root label "
                    '``"langgraph"``. Also LangGraph\'s ``InvalidNamespaceError``.',
                },
            )
            globals()["NamespaceError"] = made
        return made
