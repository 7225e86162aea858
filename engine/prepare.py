"""A ``put`` or ``put_writes`` serialized into a write operation before any transaction.

Every channel value, checkpoint body, metadata dict and write goes through the
saver's ``serde`` here, in the caller's thread (the runtime may mutate what it
passed as soon as ``put`` returns), and every id and version is checked, so the
operation handed to the store's write transaction (or its group commit) holds
bytes only. It applies the inline rule
(:func:`deltalog.engine.envelope.held_inline`): a small scalar, or a small run
input, is held by the checkpoint record itself instead of a blob.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack
from deltalog.engine import checkpoint_form, keys
from deltalog.engine.codec import DENSE_MIN, Ahead, RecordCodec
from deltalog.engine.config import checkpoint_config, delta_counters, parse_config
from deltalog.engine.envelope import (
    INPUT_CHANNEL,
    CheckpointEnvelope,
    held_inline,
    is_scalar,
    parent_in,
    write_record,
)
from deltalog.engine.errors import ConfigError, InvalidInputError
from deltalog.engine.store_rows import BlobRow, Typed
from deltalog.engine.values import dumps
from deltalog.engine.write_txn import WriteTxn
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

__all__ = ["PreparedWrites", "prepare_put", "prepare_writes"]

# Exact types whose small values a checkpoint record holds itself (subclasses
# such as enums go to blobs). The same set LangGraph's PostgresSaver keeps in
# its checkpoint row; lists and dicts (growing values, delta seeds) never.


#: Values at least this large (serialized) are compressed before their write
#: transaction (:func:`prepare_writes`); smaller ones cannot reach DENSE_MIN.
AHEAD_MIN = DENSE_MIN
#: What a write key (thread, namespace, checkpoint, UUID task id, idx) and its
#: channel id usually take: the sizes compress_ahead decides with. The write
#: transaction decides again with the real ones.
AHEAD_KEY_SIZE = 42
AHEAD_PREFIX_SIZE = 2


def prepare_put(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> tuple[Callable[[WriteTxn], list[tuple[bytes, Typed]]], RunnableConfig]:
    """The write op of :meth:`~deltalog.engine.DeltaLogSaver.put` and the config it returns.

    The op returns the ``(record, typed)`` of each large value it stored
    (:func:`~deltalog.engine.values.prefill` decodes the seeds among them ahead).

    Raises:
        ConfigError: No usable ``thread_id``.
        InvalidInputError: An unserializable value, a bad id or version.
    """
    if not isinstance(checkpoint, Mapping) or "id" not in checkpoint:
        raise InvalidInputError(
            f"checkpoint {checkpoint!r:.80} is not a Checkpoint dict with an 'id'"
        )
    # Serialize the channel values first: with durability="async" the
    # runtime calls put from a worker thread while its next superstep goes
    # on mutating live values (a join edge's set), so every microsecond
    # before this snapshot is a window for a value from the future.
    values: Mapping[str, Any] = checkpoint.get("channel_values") or {}
    if not isinstance(new_versions, Mapping):
        raise InvalidInputError(f"new_versions {new_versions!r:.80} is not a mapping")
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(
            f"metadata {metadata!r:.80} is not a mapping; pass a CheckpointMetadata dict"
        )
    blobs: list[BlobRow] = []
    inline: dict[str, Typed] = {}  # small scalars and inputs: held by the record
    for channel, version in new_versions.items():
        if channel not in values:
            continue
        value = values[channel]
        typed = dumps(serde, value, f"channel {channel!r}")
        if held_inline(channel, value, typed):
            inline[channel] = typed
        else:
            blobs.append(BlobRow(channel, version, typed))
    thread_id, checkpoint_ns, parent_id = parse_config(config)
    checkpoint_id = checkpoint["id"]
    keys.encode_id(checkpoint_id)
    if parent_id is not None:
        keys.encode_id(parent_id)
    body: dict[str, Any] = dict(checkpoint)
    body.pop("channel_values", None)
    body.pop("id")  # the key holds it; re-added on read
    versions = dict(body.pop("channel_versions", None) or {})
    for channel, version in {**versions, **new_versions}.items():
        if not isinstance(channel, str):
            raise InvalidInputError(f"channel name {channel!r} is not a string")
        keys.encode_version(version)
    full_metadata = get_checkpoint_metadata(config, metadata)
    run_id = full_metadata.get("run_id")
    ckpt_typed = dumps(serde, body, "checkpoint")
    meta_typed = dumps(serde, full_metadata, "metadata")
    run = None if run_id is None else str(run_id)
    # Delta channels this checkpoint rebuilds by replay: what prune and
    # delete_for_runs must keep a chain (or write a seed) for (R7).
    delta = delta_counters(full_metadata.get("counters_since_delta_snapshot"))
    for channel in [c for c in inline if c not in versions]:
        # A value the checkpoint has no version of is no part of it: a blob
        # stores it as before, where no read finds it.
        blobs.append(BlobRow(channel, new_versions[channel], inline.pop(channel)))
    # Unchanged versions: put_checkpoint copies the parent record's inline
    # value of each, whether or not the graph still has the channel (the
    # value of a version is what was stored when it was new). Where the
    # parent does not have the version (a "__copy__" fork's parent is the
    # copied checkpoint's parent; no parent), a small scalar this put passes
    # is held instead, else the value a record holding that version has.
    # Serialized here, before the transaction (the storage layer never calls
    # back into the serde): a few small scalars at most.
    carry = [c for c in versions if c not in new_versions]
    passed: dict[str, Typed] = {}
    for c in carry:
        if c in values and is_scalar(values[c]):
            typed = dumps(serde, values[c], f"channel {c!r}")
            if held_inline(c, values[c], typed):
                passed[c] = typed
    # The record's compact form (format 12), all but its inline values and blob
    # mask, made here: outside the write transaction that every writer queues for.
    made = checkpoint_form.front(
        CheckpointEnvelope(
            parent_in(parent_id), versions, ckpt_typed, meta_typed, 0, run, list(delta)
        ).pack()[: checkpoint_form.FULL_FIELDS],
        keys.encode_id(checkpoint_id),
    )

    def op(w: WriteTxn) -> list[tuple[bytes, Typed]]:
        w.put_checkpoint(
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            parent_id=parent_id,
            channel_versions=versions,
            checkpoint=ckpt_typed,
            metadata=meta_typed,
            run_id=run,
            blobs=blobs,
            delta=delta,
            inline=inline,
            carry=carry,
            passed=passed,
            minted=True,
            made=made,
        )
        return w.large_blobs

    return op, checkpoint_config(thread_id, checkpoint_ns, checkpoint_id)


def prepare_writes(
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> PreparedWrites:
    """The write op of :meth:`~deltalog.engine.DeltaLogSaver.put_writes`, values serialized.

    Raises:
        ConfigError: Missing ``thread_id`` or ``checkpoint_id``.
        InvalidInputError: A malformed write or unserializable value.
    """
    thread_id, checkpoint_ns, checkpoint_id = parse_config(config)
    if checkpoint_id is None:
        raise ConfigError(
            "put_writes needs configurable.checkpoint_id (the checkpoint the writes "
            f"belong to); got {dict(config.get('configurable', {}))!r}"
        )
    if not isinstance(task_id, str):
        raise InvalidInputError(f"task_id {task_id!r} is not a string")
    if not isinstance(task_path, str):
        raise InvalidInputError(f"task_path {task_path!r} is not a string")
    try:
        task_path.encode("utf-8")  # stored in the write records (format 7): UTF-8 only
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"task_path {task_path[:40]!r} is not valid Unicode ({exc.reason}); pass a "
            "string without lone surrogates"
        ) from None
    if isinstance(writes, (str, bytes, Mapping)) or not isinstance(writes, Iterable):
        raise InvalidInputError(
            f"writes {writes!r:.80} is not a sequence of (channel, value) pairs"
        )
    rows: list[tuple[str, int, Typed]] = []
    for idx, item in enumerate(writes):
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
            raise InvalidInputError(
                f"write #{idx} {item!r:.80} is not a (channel, value) pair with a str channel"
            )
        channel, value = item
        rows.append(
            (
                channel,
                WRITES_IDX_MAP.get(channel, idx),
                dumps(serde, value, f"write to {channel!r}"),
            )
        )
    return PreparedWrites(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, rows)


@dataclass(eq=False)
class PreparedWrites:
    """The write op of :func:`prepare_writes`: call it with the write transaction.

    The arguments of :meth:`~deltalog.engine.checkpoint_writes.CheckpointWrites.put_writes`.
    :meth:`compress_ahead` compresses the records of large values before the
    op queues for the store's writer, so that the other writes of its group
    commit do not wait for their compression (codec.DENSE_LEVEL).
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    rows: list[tuple[str, int, Typed]]
    aheads: list[Ahead | None] | None = None

    @property
    def wants_ahead(self) -> bool:
        """True when a value is large enough for :meth:`compress_ahead` to do anything.

        The ``__start__`` task's writes may become references to the input
        (format 7), so they are compressed in the transaction.
        """
        return INPUT_CHANNEL not in self.task_path and any(
            len(value[1]) >= AHEAD_MIN for _, _, value in self.rows
        )

    def compress_ahead(self, codec: RecordCodec) -> None:
        """Compress the records of values of :data:`AHEAD_MIN` bytes or more now
        (:meth:`~deltalog.engine.codec.RecordCodec.compress_ahead`)."""
        if not self.wants_ahead:
            return
        self.aheads = [
            codec.compress_ahead(
                ormsgpack.packb(write_record(value, self.task_path)),
                AHEAD_KEY_SIZE,
                AHEAD_PREFIX_SIZE,
            )
            if len(value[1]) >= AHEAD_MIN
            else None
            for _, _, value in self.rows
        ]

    def __call__(self, w: WriteTxn) -> None:
        w.put_writes(
            self.thread_id,
            self.checkpoint_ns,
            self.checkpoint_id,
            self.task_id,
            self.task_path,
            self.rows,
            self.aheads,
        )
