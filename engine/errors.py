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
    """``Store.submit`` was called on a store opened with ``group_commit=False``."""


class OptionError(InvalidInputError):
    """A constructor option is out of range (a negative cache or memo budget, a negative
    compression threshold); the message names the option and its value."""


# Issue 16: one subclass per distinct condition. Appended here (not into the
# sorted list above) so that parallel additions merge.
__all__ += [
    "ConcurrentChangeError",
    "ForkedStoreError",
    "GroupCommitOffError",
    "MigrationError",
    "OptionError",
    "ReadOnlyStoreError",
    "StoreClosedError",
]
