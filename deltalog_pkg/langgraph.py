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
import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, cast

from deltalog.engine.errors import InvalidInputError
from deltalog.engine.saver import DeltaLogSaver

if TYPE_CHECKING:
    from deltalog.engine.env_files import Durable
    from deltalog.engine.memory import DeltaLogStore
    from langgraph.store.base import IndexConfig, TTLConfig

__all__ = [
    "DEFAULT_PATH",
    "ENV_DURABLE",
    "ENV_PATH",
    "ENV_STORE_CONFIG",
    "checkpointer",
    "durable_setting",
    "store",
    "store_path",
    "store_settings",
]

ENV_PATH: Final = "DELTALOG_PATH"
"""The environment variable naming the store folder."""
DEFAULT_PATH: Final = "deltalog.lmdb"
"""The store folder when :data:`ENV_PATH` is unset or empty (relative to the working directory)."""

ENV_STORE_CONFIG: Final = "LANGGRAPH_STORE"
"""The environment variable in which the server passes the ``"store"`` section of
``langgraph.json`` (JSON)."""

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


def store_settings() -> tuple[IndexConfig | None, TTLConfig | None]:
    """The ``index`` and ``ttl`` of the ``"store"`` section of ``langgraph.json``.

    The server passes that section to its process as JSON in
    :data:`ENV_STORE_CONFIG`; the built-in store reads ``index`` and ``ttl``
    from it, and so does :func:`store`. An ``embed`` naming a file
    (``"./embed.py:embed"``, relative to the working directory) is loaded from
    that file, as the server loads it for its own store; a provider
    (``"openai:text-embedding-3-small"``) goes to LangChain's ``init_embeddings``.

    Raises:
        InvalidInputError: The variable is not a JSON object, ``index`` or
            ``ttl`` is not one, or an embedder's file or name is missing.
    """
    raw = os.environ.get(ENV_STORE_CONFIG, "").strip()
    if not raw:
        return None, None
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise InvalidInputError(
            f'{ENV_STORE_CONFIG}={raw!r:.80} is not JSON ({exc}); it is the "store" '
            "section of langgraph.json, which the server sets"
        ) from None
    if not isinstance(config, dict):
        raise InvalidInputError(f"{ENV_STORE_CONFIG}={raw!r:.80} is not a JSON object")
    index, ttl = config.get("index") or None, config.get("ttl") or None
    for name, part in (("index", index), ("ttl", ttl)):
        if part is not None and not isinstance(part, dict):
            raise InvalidInputError(
                f'"store": {{"{name}": {part!r:.60}}} in langgraph.json is not an object'
            )
    if index is not None and isinstance(index.get("embed"), str) and ".py:" in index["embed"]:
        index = {**index, "embed": _embedder_from_file(index["embed"])}
    return cast("IndexConfig | None", index), cast("TTLConfig | None", ttl)


def _embedder_from_file(spec: str) -> Any:
    """The object ``"path/to/file.py:name"`` names (relative to the working
    directory, as the server resolves it), loaded as a module of its own."""
    file, _, name = spec.rpartition(":")
    where = f'"store": {{"index": {{"embed": {spec!r}}}}} in langgraph.json'
    if not os.path.isfile(file):
        raise InvalidInputError(f"{where}: no file {os.path.abspath(file)!r}")
    from deltalog.engine.cli_common import module_from_file

    found = getattr(module_from_file(file), name, None)
    if found is None:
        raise InvalidInputError(f"{where}: {file!r} defines no {name!r}")
    return found


@asynccontextmanager
async def store() -> AsyncIterator[DeltaLogStore]:
    """A :class:`~deltalog.engine.DeltaLogStore` (long-term memory) on :func:`store_path`.

    In ``langgraph.json``: ``"store": {"path": "deltalog.langgraph.store"}``. With
    the checkpointer hook too, both live in one LMDB environment (one file).
    The section's ``index`` (semantic search) and ``ttl`` apply as they do to
    the server's built-in store (:func:`store_settings`); with
    ``ttl.sweep_interval_minutes`` a sweeper task deletes expired items.

    Yields:
        An open memory store, closed when the server stops.
    """
    from deltalog.engine.memory import DeltaLogStore

    path = store_path()
    durable = durable_setting()
    # Loading an embedder's file is blocking I/O: off the event loop, as opening is.
    index, ttl = await asyncio.to_thread(store_settings)
    logger.info(
        "deltalog memory store at %s (set %s to move it), index=%s, ttl=%r",
        path,
        ENV_PATH,
        "on" if index else "off",
        ttl,
    )
    opener = DeltaLogStore.from_conn_string(path, durable=durable, index=index, ttl=ttl)
    async with opener as opened:
        if ttl and ttl.get("sweep_interval_minutes"):
            await opened.astart_ttl_sweeper()
        yield opened
