"""Hand-built checkpoints for tests that call the saver API without the graph runtime."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint
from langgraph.checkpoint.base import empty_checkpoint as _empty


def new_checkpoint(
    saver: BaseCheckpointSaver[Any], values: dict[str, Any]
) -> tuple[Checkpoint, ChannelVersions]:
    """A checkpoint (fresh uuid6 id) holding ``values``, each channel at a new version."""
    checkpoint = _empty()
    versions: ChannelVersions = {c: saver.get_next_version(None, None) for c in values}
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = dict(versions)
    return checkpoint, versions


def put_values(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    values: dict[str, Any],
    *,
    parent: RunnableConfig | None = None,
    checkpoint_ns: str = "",
) -> RunnableConfig:
    """Store one checkpoint holding ``values`` (a child of ``parent`` when given)."""
    checkpoint, versions = new_checkpoint(saver, values)
    config: RunnableConfig = parent or {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    }
    return saver.put(config, checkpoint, {"source": "input", "step": -1}, versions)


def checkpoint_id(config: RunnableConfig) -> str:
    """The checkpoint id of a config returned by ``put``."""
    value: str = config["configurable"]["checkpoint_id"]
    return value


def at(thread_id: str, checkpoint: str, checkpoint_ns: str = "") -> RunnableConfig:
    """The config addressing one checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint,
        }
    }
