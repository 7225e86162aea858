"""The one exception hierarchy of deltalog.

Every error the engine raises on purpose derives from :class:`DeltaLogError`.
Messages name the bad value and say how to fix it. LMDB's own exceptions are
translated into these at the transaction boundary (``deltalog.engine.store``),
so callers never need to import ``lmdb``.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorruptRecordError",
    "DamagedKeyError",
    "DeltaChainError",
    "DeltaLogError",
    "FormatVersionError",
    "InvalidInputError",
    "KeyTooLongError",
    "ParentCycleError",
    "ReducerMismatchError",
    "NotAStoreError",
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
