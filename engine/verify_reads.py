"""Verification of a thread's records inside one read transaction (``verify`` per group)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from deltalog.engine import keys
from deltalog.engine.core import delta_chains, parent_cycles
from deltalog.engine.envelope import (
    RawNode,
    split_write_value,
)
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.packs import SEQ_SIZE
from deltalog.engine.queries import QueryReads

if TYPE_CHECKING:
    pass


@dataclass
class VerifyFindings:
    """Raw findings of :meth:`ReadTxn.verify_group` (the saver names threads)."""

    checkpoints: int = 0
    records: int = 0
    problems: list[tuple[str, Literal["error", "warning"], str | None, str]] = field(
        default_factory=list
    )
    decodable: list[str] = field(default_factory=list)


class VerifyReads(QueryReads):
    """Decode and cross-check every record of one (thread, ns) group."""

    def verify_packs(self) -> list[tuple[str, str]]:
        """``(kind, detail)`` of each damaged turn pack (format 14): an index entry
        whose pack is missing or does not decode (CRC, order, range, its chunks'
        bytes), or a pack or chunk (format 16) no index entry names. Never raises
        for damaged data."""
        problems: list[tuple[str, str]] = []
        if self.dbs.pack_index is None:
            return problems
        named: set[bytes] = set()
        for index_key, seq in self.txn.cursor(db=self.dbs.pack_index):
            named.add(bytes(seq))
            try:
                self.pack(bytes(index_key), bytes(seq))
            except CorruptRecordError as exc:
                problems.append(("damaged_pack", f"pack_index/{bytes(index_key).hex()}: {exc}"))
        for key in self.txn.cursor(db=self.dbs.packs).iternext(keys=True, values=False):
            if bytes(key[:SEQ_SIZE]) not in named:
                what = "it" if len(key) == SEQ_SIZE else "its pack"
                problems.append(
                    ("orphan_pack", f"packs/{bytes(key).hex()}: no index entry names {what}")
                )
        return problems

    def verify_group(self, t: int, n: int) -> VerifyFindings:
        """Check one (thread, ns): records decode, parents exist, delta chains reach a seed.

        Never raises for damaged data: every defect becomes a finding.
        """
        found = VerifyFindings()
        rows: list[RawNode] = []
        prefix = keys.ns_prefix(t, n)
        present: set[bytes] = set()
        for key, raw in self.iter_checkpoint_keys(prefix, start=None, reverse=False):
            present.add(key)
            found.records += 1
            try:
                cid = keys.decode_checkpoint_key(key)[2]
            except Exception as exc:
                found.problems.append(
                    ("undecodable", "error", None, f"checkpoint key {key.hex()}: {exc}")
                )
                continue
            try:
                rows.append(
                    RawNode.of(
                        self.codec.decode(raw, f"checkpoints/{key.hex()}", key=key),
                        key,
                        frozenset(),
                    )
                )
            except Exception as exc:
                found.problems.append(("undecodable", "error", cid, str(exc)))
        found.checkpoints = len(present)
        nodes = self._nodes(t, n, rows, frozenset())
        found.decodable = list(nodes)
        for cid, node in nodes.items():
            if node.parent_id is not None and node.parent_id not in nodes:
                found.problems.append(
                    ("dangling_parent", "error", cid, f"parent {node.parent_id} is missing")
                )
        for cycle in parent_cycles({cid: node.parent_id for cid, node in nodes.items()}):
            loop = " -> ".join([*cycle, cycle[0]])
            found.problems.append(
                (
                    "parent_cycle",
                    "error",
                    cycle[0],
                    f"the parent chain loops (child -> parent: {loop}); every read of these checkpoints fails",
                )
            )
        for (cid, channel), missing in sorted(delta_chains(nodes, list(nodes)).broken.items()):
            found.problems.append(
                (
                    "broken_delta_chain",
                    "error",
                    cid,
                    f"channel {channel!r} needs missing ancestor {missing}",
                )
            )
        orphaned: set[bytes] = set()
        cur = self.write_cursor()
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            found.records += 1
            try:
                ckey = keys.write_checkpoint_key(key)
                cbytes, _, record = split_write_value(raw)
                self.write_typed(key, cbytes, record)
                if ckey not in present and ckey not in orphaned:
                    orphaned.add(ckey)
                    found.problems.append(
                        (
                            "writes_without_checkpoint",
                            "warning",
                            keys.decode_checkpoint_key(ckey)[2],
                            "no checkpoint record",
                        )
                    )
            except Exception as exc:
                found.problems.append(("undecodable", "error", None, f"write {key.hex()}: {exc}"))
            ok = cur.next()
        referenced = self.referenced_blob_keys(t, n, (r.versions for r in rows))
        cur = self.txn.cursor(db=self.dbs.blobs)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            found.records += 1
            try:
                # Cached payloads are keyed by record bytes, so they prove the
                # record and its bases; what they cannot prove is that a write
                # range's content is still what the record was encoded over.
                self.blob_typed(key, raw)
                head = self.codec.delta_header(raw, f"blobs/{key.hex()}", key=key)
                span = None if head is None else head.span
                if head is not None and span is not None:
                    content = self._range_content(key, head)
                    self.codec.check_writes(head, content, f"blobs/{key.hex()}")
                    bt, bn, bc, _ = keys.decode_blob_key(key, legacy=self.legacy_blobs)
                    mark = self.txn.get(keys.wdep_key(bt, bn, bc), db=self.dbs.meta)
                    if mark is None or bytes(mark) < span[1]:
                        found.problems.append(
                            (
                                "unguarded_write_range",
                                "error",
                                None,
                                f"blob {key.hex()} depends on writes past its channel's mark; "
                                "a new write there would not rebase it",
                            )
                        )
            except Exception as exc:
                found.problems.append(("undecodable", "error", None, str(exc)))
            if key not in referenced:
                found.problems.append(("unreferenced_blob", "warning", None, f"blob {key.hex()}"))
            ok = cur.next()
        return found
