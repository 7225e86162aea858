"""Hooks for the LangGraph server (``langgraph dev``, ``langgraph up``, ``langgraph-api``).

In ``langgraph.json``::

    {
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "deltalog.langgraph.checkpointer"},
      "store": {"path": "deltalog.langgraph.store"}
    }

(a dotted path: the server reads ``module:attr`` only for files, like
``./agent.py:graph``, and ``package.module.attr`` for installed modules).

The server calls :func:`checkpointer` once per worker thread and enters the
async context manager it returns; the store opens then (in a worker thread,
off the event loop) and closes when the server stops. Several worker threads
share one open store (one LMDB environment per path and process).

The store folder is ``$DELTALOG_PATH``, or ``deltalog.lmdb`` in the server's
working directory (the folder of ``langgraph.json`` under ``langgraph dev``).
``~`` is expanded. Inspect it with the CLI while the server runs, e.g.
``deltalog threads deltalog.lmdb``.

Graphs served this way are compiled without a checkpointer: the server
passes this one to every run.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from deltalog.engine.saver import DeltaLogSaver

if TYPE_CHECKING:
    from deltalog.engine.memory import DeltaLogStore

__all__ = ["DEFAULT_PATH", "ENV_PATH", "checkpointer", "store", "store_path"]

ENV_PATH: Final = "DELTALOG_PATH"
"""The environment variable naming the store folder."""
DEFAULT_PATH: Final = "deltalog.lmdb"
"""The store folder when :data:`ENV_PATH` is unset or empty (relative to the working directory)."""

logger = logging.getLogger(__name__)


def store_path() -> str:
    """The store folder the hooks open: ``$DELTALOG_PATH`` or :data:`DEFAULT_PATH`, absolute."""
    return os.path.abspath(os.path.expanduser(os.environ.get(ENV_PATH) or DEFAULT_PATH))


@asynccontextmanager
async def checkpointer() -> AsyncIterator[DeltaLogSaver]:
    """A :class:`~deltalog.engine.DeltaLogSaver` on :func:`store_path`, for ``langgraph.json``.

    Yields:
        An open saver (durable, group commit on), closed when the server stops.
    """
    path = store_path()
    logger.info("deltalog checkpointer at %s (set %s to move it)", path, ENV_PATH)
    async with DeltaLogSaver.from_conn_string(path) as saver:
        yield saver


@asynccontextmanager
async def store() -> AsyncIterator[DeltaLogStore]:
    """A :class:`~deltalog.engine.DeltaLogStore` (long-term memory) on :func:`store_path`.

    In ``langgraph.json``: ``"store": {"path": "deltalog.langgraph.store"}``. With
    the checkpointer hook too, both live in one LMDB environment (one file).

    Yields:
        An open memory store, closed when the server stops.
    """
    from deltalog.engine.memory import DeltaLogStore

    path = store_path()
    logger.info("deltalog memory store at %s (set %s to move it)", path, ENV_PATH)
    # Opening touches the disk: off the event loop, as the checkpointer does.
    opened = await asyncio.to_thread(DeltaLogStore.from_path, path)
    try:
        yield opened
    finally:
        await asyncio.to_thread(opened.close)
