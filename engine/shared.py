"""One environment per path and process, shared by every saver and memory store opened on it.

LMDB (and py-lmdb) refuse a second open of the same path in one process, so
:meth:`DeltaLogSaver.from_path <deltalog.engine.DeltaLogSaver.from_path>` and
``DeltaLogStore.from_path`` get their :class:`~deltalog.engine.env.Environment`
here: one per real path, counted, closed with its last user. A second open
with other options is refused.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import Any, TypeVar

from deltalog.engine.codec import RecordCodec
from deltalog.engine.config import MEMORY
from deltalog.engine.env import Environment
from deltalog.engine.env_files import check_durable, check_pack_turns, check_sizes
from deltalog.engine.errors import InvalidInputError

__all__ = ["ClosingContext", "OpenContext", "open_path", "open_shared", "release_shared"]

_C = TypeVar("_C", bound="ClosingContext")


class ClosingContext:
    """``with`` and ``async with`` for the saver and the memory store: both
    return the object itself and close it on exit (``async with`` through
    :meth:`_aclose`, which a subclass extends); and what both do with the
    environment they hold when they close (:meth:`_let_go`)."""

    env: Environment
    owns_env: bool
    #: Opened by ``from_path``: the environment is shared (:func:`open_shared`)
    #: and released, not closed.
    _shared: bool = False
    #: The folder of a ``":memory:"`` store, deleted on close.
    _temp_dir: str | None = None

    def close(self) -> None:
        raise NotImplementedError

    def _opened_at(self, temp_dir: str | None) -> None:
        """Hold an environment from :func:`open_path` (and its temporary folder)."""
        self._shared = True
        self._temp_dir = temp_dir

    def _let_go(self) -> None:
        """Release the shared environment or close an owned one, then delete a
        ``":memory:"`` store's folder. Idempotent."""
        if self._shared:
            self._shared = False
            release_shared(self.env)
        elif self.owns_env:
            self.owns_env = False
            self.env.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    async def _astop(self) -> None:
        """Stop what runs on the event loop (the memory store's sweeper task)."""

    async def _aclose(self) -> None:
        await self._astop()
        self.close()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self: _C) -> _C:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._aclose()


class OpenContext(AbstractContextManager[_C], AbstractAsyncContextManager[_C]):
    """What ``from_conn_string`` returns (:meth:`DeltaLogSaver.from_conn_string
    <deltalog.engine.DeltaLogSaver.from_conn_string>`, ``DeltaLogStore.from_conn_string``):
    opens the store on entering the block and closes it on leaving it.

    ``async with`` opens and closes it in a worker thread (opening may create
    files, run migrations and fsync; closing waits for writers), after
    stopping what runs on the loop.
    """

    def __init__(self, opener: Callable[[], _C]) -> None:
        self._opener = opener
        self._opened: _C | None = None

    def __enter__(self) -> _C:
        self._opened = self._opener()
        return self._opened

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            opened.close()

    async def __aenter__(self) -> _C:
        self._opened = await asyncio.to_thread(self._opener)
        return self._opened

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            await opened._astop()
            await asyncio.to_thread(opened.close)


# One environment per path and process: LMDB (and py-lmdb) refuse a second
# open of the same path in one process, so from_path hands out one Environment per
# real path, counted, and closes it with its last saver.
_SHARED_LOCK = threading.Lock()
_SHARED: dict[str, tuple[Environment, dict[str, Any], int]] = {}


def _new_shared_lock_in_child() -> None:
    # A fork while another thread held the lock would leave it locked forever
    # in the child; the stores themselves reopen there on first use.
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_shared_lock_in_child)


def open_shared(path: str | os.PathLike[str], options: dict[str, Any]) -> Environment:
    # Named as bad before "already open with other options" could hide them.
    check_sizes(options["map_size"], options["max_map_size"], options["max_readers"])
    check_durable(options["durable"])
    check_pack_turns(options["pack_turns"])
    real = os.path.realpath(os.fspath(path))
    with _SHARED_LOCK:
        entry = _SHARED.get(real)
        if entry is not None and not entry[0].closed:
            store, opened_with, refs = entry
            if opened_with != options:
                diff = {k: (opened_with[k], v) for k, v in options.items() if opened_with[k] != v}
                raise InvalidInputError(
                    f"{os.fspath(path)!r} is already open in this process with other options "
                    f"(option: (open, asked) = {diff}); open it with the same options or "
                    "share the first saver"
                )
            _SHARED[real] = (store, opened_with, refs + 1)
            return store
        store = Environment(
            path,
            map_size=options["map_size"],
            max_map_size=options["max_map_size"],
            durable=options["durable"],
            codec=RecordCodec(compress_threshold=options["compress_threshold"]),
            group_commit=options["group_commit"],
            pack_turns=options["pack_turns"],
            max_readers=options["max_readers"],
        )
        _SHARED[real] = (store, options, 1)
        return store


def release_shared(store: Environment) -> None:
    with _SHARED_LOCK:
        for real, (shared, options, refs) in list(_SHARED.items()):
            if shared is store:
                if refs > 1:
                    _SHARED[real] = (shared, options, refs - 1)
                    return
                del _SHARED[real]
                break
    store.close()


def open_path(
    path: str | os.PathLike[str], options: dict[str, Any]
) -> tuple[Environment, str | None]:
    """The shared store at ``path`` (``~`` expanded; ``":memory:"``: a new temporary folder).

    Returns:
        The store and the temporary folder to delete when it closes (None for a path).
    """
    temp_dir = None
    if os.fspath(path) == MEMORY:
        temp_dir = tempfile.mkdtemp(prefix="deltalog-memory-")
        path = temp_dir
    else:
        path = os.path.expanduser(os.fspath(path))
    try:
        store = open_shared(path, options)
    except BaseException:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return store, temp_dir
