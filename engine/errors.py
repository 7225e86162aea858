"""The one exception hierarchy of deltalog.

Every error the engine raises on purpose derives from :class:`DeltaLogError`.
Messages name the bad value and say how to fix it. LMDB's own exceptions are
translated into these at the transaction boundary (``deltalog.engine.env_files.translate_error``),
so callers never need to import ``lmdb``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

__all__ = [
    "AmbiguousCheckpointError",
    "CheckpointNotFoundError",
    "ConcurrentChangeError",
    "ConfigError",
    "CorruptRecordError",
    "DamagedKeyError",
    "DeltaChainError",
    "DeltaLogError",
    "EmbeddingError",
    "ForkedStoreError",
    "FormatVersionError",
    "GroupCommitOffError",
    "ImportRecordError",
    "InvalidInputError",
    "ItemExistsError",
    "ItemValueError",
    "KeyTooLongError",
    "MigrationError",
    "NamespaceError",
    "NotAStoreError",
    "OptionError",
    "ParentCycleError",
    "ReadOnlyStoreError",
    "ReducerMismatchError",
    "ReentrantWriteError",
    "SerdeMismatchError",
    "StoreClosedError",
    "StoreFullError",
    "StoreOpenError",
    "ThreadExistsError",
    "UndecryptableValueError",
    "UntrustedTypeError",
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


class ParentCycleError(InvalidInputError):
    """A ``put`` would make a checkpoint its own ancestor (a parent cycle, R11).

    Raised before anything is written; the message names the checkpoints of the loop.
    """


class ReducerMismatchError(InvalidInputError):
    """A re-seeding prune's reducers do not rebuild the values the thread stores (R7).

    The check runs in the prune's write transaction before any seed is written;
    nothing is changed. The message names the channel and the mismatch.
    """


class NotAStoreError(StoreOpenError):
    """The path holds no deltalog store: no folder, no ``data.mdb``, an empty or
    partial one, or another application's LMDB environment. Nothing was created
    or changed (R12)."""


class ImportRecordError(InvalidInputError):
    """A record of an import stream is malformed; nothing was written (issue 15.8).

    ``line`` is the record's line in the stream (the header is line 1) and
    ``reason`` what is wrong with it; the message is ``line N of the import
    stream: reason``.
    """

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line} of the import stream: {reason}")
        self.line = line
        self.reason = reason


class SerdeMismatchError(DeltaLogError, NotImplementedError):
    """A stored value's type is one this saver's serde does not load, e.g. a value
    written with ``EncryptedSerializer`` read without the key. A ``NotImplementedError``
    too, as LangGraph's serde raised before."""


class UntrustedTypeError(DeltaLogError):
    """A value read under LangGraph's strict msgpack allowlist names a type it blocks, where
    a command would write what it read (``migrate``, ``prune --graph``): refused, not
    silently stored as plain data (issue 15.14)."""


class UndecryptableValueError(SerdeMismatchError, ValueError):
    """An encrypted value does not decrypt with this saver's key (wrong key, or altered).
    A ``ValueError`` too, as the cipher raised before."""


class MigrationError(DeltaLogError):
    """A migration cannot start or did not verify; the message names the thread and the fix.

    Also importable from ``deltalog.engine.migrate``, where it was defined first."""


class ConcurrentChangeError(DeltaLogError):
    """A maintenance operation gave up because writers kept changing the threads it
    planned on; nothing was changed. Retry when the writers pause."""


class ReadOnlyStoreError(DeltaLogError):
    """A write was asked of a store opened read-only."""


class StoreClosedError(DeltaLogError):
    """The store (or the saver over it) was closed; open a new one."""


class ForkedStoreError(DeltaLogError):
    """A store inherited over ``fork()`` cannot be reopened in the child, because a
    transaction stayed open in the parent while it forked."""


class GroupCommitOffError(DeltaLogError):
    """``Environment.submit`` was called on a store opened with ``group_commit=False``."""


class OptionError(InvalidInputError):
    """A constructor option is out of range (a negative cache or memo budget, a negative
    compression threshold); the message names the option and its value."""


class ReentrantWriteError(DeltaLogError):
    """A write was asked for from inside a write transaction of the same store (a
    callback such as a prune reducer writing to the saver); it would wait for itself."""


class ItemValueError(InvalidInputError):
    """A memory item's key, value, filter, TTL or index field list cannot be stored."""


class EmbeddingError(InvalidInputError):
    """The memory store's embedder raised, or returned the wrong number of vectors or
    dimensions; nothing was written."""


class ItemExistsError(DeltaLogError):
    """An import stream holds a memory item whose (namespace, key) is already live in
    the target store; nothing was written."""


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


class CheckpointNotFoundError(DeltaLogError, LookupError):
    """No checkpoint of the thread matches the id, prefix or ``latest`` asked for (inspection)."""


class AmbiguousCheckpointError(InvalidInputError):
    """A checkpoint id prefix matches several checkpoints of the thread; give more of it."""
