"""The victim of the crash tests: a chat graph writing to a deltalog store until killed.

Usage::

    python tests/crash_writer.py PATH LOGFILE [--threads N] [--durable true|normal|false] [--sf K] [--wait] [--async]

It opens the store at PATH, then runs ``tests.graphs.chat_graph`` (``messages``
is a ``DeltaChannel``; every ``LONG_EVERY``-th reply long) turn after turn on N LangGraph threads at once (one
Python thread each, so group commit batches their puts). With ``--async`` the N
writers are coroutines on one event loop (``ainvoke``, so the saver's ``aput``
queues its writes for group commit). Every line of LOGFILE
is one JSON object, written, flushed and fsynced before the writer goes on:

* ``{"kind": "ready", "pid": …}`` once the store is open;
* ``{"kind": "put", "thread_id": …, "checkpoint_id": …}`` after each ``put``
  (or ``aput``) returned — so the checkpoint is durable by the saver's contract;
* ``{"kind": "turn", "thread_id": …, "checkpoint_id": …, "state": …}`` after
  each ``invoke`` returned, with the state ``graph.get_state`` reconstructed.

With ``--wait`` it imports everything, then waits for a line on stdin before
opening the store, so the test can check the previous kill while the next
writer starts up. The test kills the process with SIGKILL at a random moment
and checks the store against the log (tests/test_crash.py). A line torn by the kill can only
be the last one; the reader ignores it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import sys
import threading
import traceback
from typing import Any, NoReturn

if __package__ in (None, ""):  # run as a script: make `tests.graphs` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from deltalog.engine import DeltaLogSaver
from deltalog.engine.env_files import Durable
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.types import StateSnapshot

from tests.graphs import cfg, chat_graph

#: Every this many turns a reply is long enough (~2 KB stored) that the turn packs
#: carry it in chunks (format 16), so a kill can land while chunks are written.
LONG_EVERY = 4

#: ``--durable`` words and the saver's settings they stand for.
DURABLE: dict[str, Durable] = {"true": True, "normal": "normal", "false": False}


class Log:
    """An append-only JSON-lines file; every line is fsynced before ``write`` returns."""

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def write(self, **entry: Any) -> None:
        """Append one entry durably."""
        line = json.dumps(entry) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())


class LoggingSaver(DeltaLogSaver):
    """A DeltaLogSaver that logs every checkpoint id once its ``put`` has returned."""

    log: Log

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store the checkpoint, then log it (only a returned put is promised durable)."""
        return self._logged(super().put(config, checkpoint, metadata, new_versions))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store the checkpoint through the async path, then log it once ``aput`` returned."""
        return self._logged(await super().aput(config, checkpoint, metadata, new_versions))

    def _logged(self, out: RunnableConfig) -> RunnableConfig:
        conf = out["configurable"]
        self.log.write(kind="put", thread_id=conf["thread_id"], checkpoint_id=conf["checkpoint_id"])
        return out


def fingerprint(values: dict[str, Any]) -> dict[str, Any]:
    """What the checker compares: message ids, a digest of each content, the turn counter."""
    messages: list[BaseMessage] = values.get("messages", [])
    return {
        "messages": [
            [m.id, hashlib.sha256(str(m.content).encode()).hexdigest()[:16]] for m in messages
        ],
        "turns": values.get("turns", 0),
    }


def run_thread(saver: DeltaLogSaver, log: Log, thread_id: str, sf: int) -> None:
    """Invoke the chat graph on ``thread_id`` forever; any error ends the process (exit 3).

    The test expects the writer alive when it kills it, so a writer that died on
    its own is reported as a failure rather than hidden.
    """
    try:
        graph = chat_graph(sf, long_every=LONG_EVERY).compile(checkpointer=saver)
        config = cfg(thread_id)
        for turn in itertools.count(1):
            graph.invoke({"messages": [_message(thread_id, turn)]}, config)
            _log_turn(log, thread_id, graph.get_state(config))
    except BaseException:
        _die()


async def _achat_forever(saver: DeltaLogSaver, log: Log, thread_id: str, sf: int) -> None:
    """:func:`run_thread` with ``ainvoke`` and ``aget_state``; any error ends the process."""
    try:
        graph = chat_graph(sf, long_every=LONG_EVERY).compile(checkpointer=saver)
        config = cfg(thread_id)
        for turn in itertools.count(1):
            await graph.ainvoke({"messages": [_message(thread_id, turn)]}, config)
            _log_turn(log, thread_id, await graph.aget_state(config))
    except BaseException:
        _die()


def _message(thread_id: str, turn: int) -> HumanMessage:
    return HumanMessage(
        content=f"turn {turn} of writer {os.getpid()}: " + "lorem ipsum " * 20,
        id=f"h-{os.getpid()}-{thread_id}-{turn}",
    )


def _log_turn(log: Log, thread_id: str, state: StateSnapshot) -> None:
    log.write(
        kind="turn",
        thread_id=thread_id,
        checkpoint_id=state.config["configurable"]["checkpoint_id"],
        state=fingerprint(state.values),
    )


def _die() -> NoReturn:
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(3)


async def _run_coroutines(saver: DeltaLogSaver, log: Log, writers: int, sf: int) -> None:
    await asyncio.gather(*(_achat_forever(saver, log, f"w{k}", sf) for k in range(writers)))


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, open the store, start the writer threads and never return."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("path")
    parser.add_argument("logfile")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--durable",
        choices=sorted(DURABLE),
        default="true",
        help='the saver\'s durable setting (True, "normal" or False)',
    )
    parser.add_argument("--sf", type=int, default=3, help="DeltaChannel snapshot_frequency")
    parser.add_argument(
        "--wait", action="store_true", help="read a line from stdin before opening the store"
    )
    parser.add_argument(
        "--async", dest="use_async", action="store_true", help="coroutines instead of threads"
    )
    args = parser.parse_args(argv)
    if args.wait:  # imports are done: the test checks the previous kill meanwhile
        sys.stdin.readline()
    log = Log(args.logfile)
    saver = LoggingSaver.from_path(args.path, durable=DURABLE[args.durable])
    if not isinstance(saver, LoggingSaver):  # from_path is typed as returning the base class
        raise TypeError(f"from_path returned {type(saver).__name__}")
    saver.log = log
    log.write(kind="ready", pid=os.getpid())
    if args.use_async:
        asyncio.run(_run_coroutines(saver, log, args.threads, args.sf))
        return
    workers = [
        threading.Thread(target=run_thread, args=(saver, log, f"w{k}", args.sf), daemon=True)
        for k in range(args.threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
