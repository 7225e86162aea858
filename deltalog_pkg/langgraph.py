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
``deltalog threads deltalog.lmdb``. ``$DELTALOG_DURABLE`` sets the store's
``durable`` option: ``true`` (the default: every commit synced), ``normal``
(one sync a commit: a machine crash may undo the last one) or ``false``
(docs/operations.md, "Durability").

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

from deltalog.engine.errors import InvalidInputError
from deltalog.engine.saver import DeltaLogSaver

if TYPE_CHECKING:
    from deltalog.engine.env_files import Durable
    from deltalog.engine.memory import DeltaLogStore

__all__ = [
    "DEFAULT_PATH",
    "ENV_DURABLE",
    "ENV_PATH",
    "checkpointer",
    "durable_setting",
    "store",
    "store_path",
]

ENV_PATH: Final = "DELTALOG_PATH"
"""The environment variable naming the store folder."""
DEFAULT_PATH: Final = "deltalog.lmdb"
"""The store folder when :data:`ENV_PATH` is unset or empty (relative to the working directory)."""

ENV_DURABLE: Final = "DELTALOG_DURABLE"
"""The environment variable naming the ``durable`` setting (``true``, ``normal``, ``false``)."""
_DURABLE_WORDS: Final[dict[str, Durable]] = {"true": True, "normal": "normal", "false": False}

logger = logging.getLogger(__name__)


def store_path() -> str:
    """The store folder the hooks open: ``$DELTALOG_PATH`` or :data:`DEFAULT_PATH`, absolute."""
    return os.path.abspath(os.path.expanduser(os.environ.get(ENV_PATH) or DEFAULT_PATH))


def durable_setting() -> Durable:
    """The ``durable`` option the hooks open with: ``$DELTALOG_DURABLE`` (``true``,
    ``normal`` or ``false``, any case; unset or empty: ``true``).

    Raises:
        InvalidInputError: Any other value, naming it and the three words.
    """
    raw = os.environ.get(ENV_DURABLE, "")
    word = raw.strip().lower() or "true"
    if word not in _DURABLE_WORDS:
        raise InvalidInputError(
            f"{ENV_DURABLE}={raw!r}: need true (sync every commit, the default), normal "
            "(one sync a commit: a machine crash may undo the last one) or false (no sync)"
        )
    return _DURABLE_WORDS[word]


@asynccontextmanager
async def checkpointer() -> AsyncIterator[DeltaLogSaver]:
    """A :class:`~deltalog.engine.DeltaLogSaver` on :func:`store_path`, for ``langgraph.json``.

    Yields:
        An open saver (group commit on, ``durable`` from :func:`durable_setting`),
        closed when the server stops.
    """
    path = store_path()
    durable = durable_setting()
    logger.info(
        "deltalog checkpointer at %s (set %s to move it), durable=%r", path, ENV_PATH, durable
    )
    async with DeltaLogSaver.from_conn_string(path, durable=durable) as saver:
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
    durable = durable_setting()
    logger.info("deltalog memory store at %s (set %s to move it)", path, ENV_PATH)
    # Opening touches the disk: off the event loop, as the checkpointer does.
    opened = await asyncio.to_thread(DeltaLogStore.from_path, path, durable=durable)
    try:
        yield opened
    finally:
        await asyncio.to_thread(opened.close)
