"""The saver's async plumbing: a write committed off the event loop, batches, a no-op awaitable.

With group commit a write is queued on the store (``Environment.submit``) and the
coroutine awaits a future that the committing thread resolves, so no thread
waits per pending write; without it the write runs in the saver's small pool.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

from deltalog.engine.env import Environment
from deltalog.engine.write_txn import WriteTxn

__all__ = ["DONE", "run_write", "take"]

T = TypeVar("T")


async def run_write(
    store: Environment,
    pool: Callable[[], ThreadPoolExecutor],
    op: Callable[[WriteTxn], T],
    *,
    history_safe: bool = False,
) -> T:
    """Run ``op`` in a write transaction off the event loop and await its durable commit.

    A cancelled coroutine does not cancel its write, which may still commit.
    """
    loop = asyncio.get_running_loop()
    if not store.group_commit:
        write = functools.partial(store.write, op, history_safe=history_safe)
        return await loop.run_in_executor(pool(), write)
    done: asyncio.Future[T] = loop.create_future()

    def notify(error: BaseException | None, value: T | None) -> None:  # committing thread
        loop.call_soon_threadsafe(_settle, done, error, value)

    store.submit(op, notify, history_safe=history_safe)
    return await done


def take(items: Iterator[T], n: int) -> list[T]:
    """The next ``n`` items of an iterator (fewer at its end)."""
    out: list[T] = []
    for item in items:
        out.append(item)
        if len(out) >= n:
            break
    return out


class _Done:
    """An awaitable that is already done: what the no-op :meth:`DeltaLogSaver.setup` returns."""

    __slots__ = ()

    def __repr__(self) -> str:  # what a REPL echoes after saver.setup()
        return "<deltalog: nothing to set up>"

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that finishes at once


DONE: Final = _Done()


def _settle(done: asyncio.Future[T], error: BaseException | None, value: T | None) -> None:
    """Resolve an async write's future on its event loop (unless it was cancelled)."""
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(value)  # type: ignore[arg-type]
