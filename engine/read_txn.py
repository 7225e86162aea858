"""The read transaction: every read mixin together."""

from __future__ import annotations

from deltalog.engine.verify_reads import VerifyReads


class ReadTxn(VerifyReads):
    """A read transaction with typed accessors. Valid only inside ``Environment.read()``.

    What it reads comes from :class:`~deltalog.engine.txn_base.TxnBase` (names,
    envelopes, writes), :class:`~deltalog.engine.blobs.BlobReads` (values, one
    checkpoint with them), :class:`~deltalog.engine.history.HistoryReads` (the
    delta walk), :class:`~deltalog.engine.queries.QueryReads` (listing,
    summaries, export rows) and :class:`~deltalog.engine.verify_reads.VerifyReads`.
    """
