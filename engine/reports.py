"""Structured results of maintenance operations (returned, printed by the CLI as JSON)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["CompactReport", "CopyReport", "Problem", "RemovalReport", "VerifyReport"]


@dataclass
class RemovalReport:
    """What prune / delete_for_runs removed (or would remove, with ``dry_run``).

    Attributes:
        threads: Threads looked at.
        checkpoints: Checkpoint records removed.
        writes: Write records removed.
        blobs: Channel values removed (no remaining checkpoint referenced them).
        bytes: Key + value bytes of everything removed (LMDB reuses the pages;
            ``compact`` returns them to the OS).
        hidden: Checkpoints kept only for a delta chain and hidden from ``list``.
        seeds: ``_DeltaSnapshot`` seeds written so a chain could be dropped.
        dry_run: Nothing was written.
    """

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    bytes: int = 0
    hidden: int = 0
    seeds: int = 0
    dry_run: bool = False

    def add(self, counts: dict[str, int]) -> None:
        """Add the counts one (thread, ns) reported."""
        for name in ("checkpoints", "writes", "blobs", "bytes", "hidden", "seeds"):
            setattr(self, name, getattr(self, name) + counts.get(name, 0))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class CopyReport:
    """What copy_thread copied.

    Attributes:
        source: Source thread id.
        target: Target thread id.
        found: False when the source has nothing (nothing was copied).
        checkpoints: Checkpoint records copied.
        writes: Write records copied.
        blobs: Channel values copied.
    """

    source: str
    target: str
    found: bool
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


Severity = Literal["error", "warning"]


@dataclass
class Problem:
    """One finding of :meth:`DeltaLogSaver.verify`.

    Kinds (severity): ``dangling_parent`` (error) — a parent id with no record;
    ``parent_cycle`` (error) — checkpoints whose parent chain loops (each
    cycle once, ``checkpoint_id`` its smallest id; every read through it raises);
    ``broken_delta_chain`` (error) — a delta channel whose walk hits a missing
    ancestor before a seed or the root; ``undecodable`` (error) — a record the
    codec (or, with ``deep``, the serde) cannot decode; ``unreferenced_blob``
    (warning) — a value no checkpoint points at; ``writes_without_checkpoint``
    (warning) — writes whose checkpoint is absent (normal for a moment, R2;
    left behind by a crash between ``put_writes`` and ``put``);
    ``unguarded_write_range`` (error) — a blob whose dictionary holds writes
    past its channel's write-range mark, so a new write there would not rebase
    it first (see ``WriteTxn.put_blob``); ``unreadable`` (error) — LMDB itself
    reports a damaged page (or aborted walking one) where a read would go.
    Damaged keys, name records that fail their CRC and ``names``/``names_rev``
    entries without their counterpart are ``undecodable`` findings naming
    the database and key.
    """

    kind: str
    severity: Severity
    thread_id: str | None
    checkpoint_ns: str | None
    checkpoint_id: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class VerifyReport:
    """Result of :meth:`DeltaLogSaver.verify`.

    Attributes:
        problems: Every finding.
        threads: Threads checked.
        checkpoints: Checkpoints checked.
        records: Records decoded.
    """

    problems: list[Problem] = field(default_factory=list)
    threads: int = 0
    checkpoints: int = 0
    records: int = 0

    @property
    def ok(self) -> bool:
        """True when no finding is an error."""
        return not any(p.severity == "error" for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "ok": self.ok,
            "threads": self.threads,
            "checkpoints": self.checkpoints,
            "records": self.records,
            "problems": [p.to_dict() for p in self.problems],
        }


@dataclass
class CompactReport:
    """Result of compact: data file bytes before (source) and after (the copy)."""

    source: str
    dest: str
    bytes_before: int
    bytes_after: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)
