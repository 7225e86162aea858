"""The read transaction: every read mixin together, and one checkpoint with its values."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from deltalog.engine import keys
from deltalog.engine.errors import (
    CorruptRecordError,
)
from deltalog.engine.store_rows import (
    CheckpointRow,
)
from deltalog.engine.verify_reads import VerifyReads

if TYPE_CHECKING:
    pass


class ReadTxn(VerifyReads):
    """A read transaction with typed accessors. Valid only inside ``Environment.read()``."""

    def checkpoint(
        self,
        t: int,
        n: int,
        checkpoint_id: str | None,
        *,
        with_values: bool = True,
        with_writes: bool = True,
    ) -> CheckpointRow | None:
        """One checkpoint (the latest when ``checkpoint_id`` is None) with its blobs and writes."""
        if checkpoint_id is None:
            key = self.latest_key(t, n)
            if key is None:
                return None
        else:
            key = keys.checkpoint_key(t, n, keys.encode_id(checkpoint_id))
        raw = self.txn.get(key, db=self.dbs.checkpoints)
        if raw is None:
            return None
        try:
            row = self._decode_checkpoint(t, n, key, raw)
            if with_values:
                row.values = self.values(t, n, key, row.channel_versions, row.inline)
            if with_writes:
                row.writes = self.writes(key)
        except CorruptRecordError as exc:
            cid = checkpoint_id or f"key {key.hex()}"
            with contextlib.suppress(Exception):
                cid = keys.decode_checkpoint_key(key)[2]
            raise self._damaged(t, n, cid, exc) from exc
        return row
