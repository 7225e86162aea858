"""The write transaction: every write mixin together (and all the reads)."""

from __future__ import annotations

from deltalog.engine.thread_ops import ThreadWrites


class WriteTxn(ThreadWrites):
    """A write transaction: the reads plus the mutations. One per write batch entry.

    Valid only inside an op given to ``Environment.write()``. What it adds to
    :class:`~deltalog.engine.read_txn.ReadTxn` comes from
    :class:`~deltalog.engine.txn_base.WriteBase` (interning, meta, raw puts),
    :class:`~deltalog.engine.blobs.BlobWrites` (channel values),
    :class:`~deltalog.engine.checkpoint_writes.CheckpointWrites` (checkpoints and
    writes) and :class:`~deltalog.engine.thread_ops.ThreadWrites` (whole threads).
    """

    memo_reads = False
