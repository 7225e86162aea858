"""More threads reading at once than LMDB has reader slots: reads wait for a slot, none fails
(issue 15.12)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogSaver

from .graphs import cfg, chat_graph, human, observe

THREADS = 200


@pytest.mark.parametrize("max_readers", [126, 8], ids=["default-126", "8-slots"])
def test_200_reader_threads_all_succeed(tmp_path: Path, max_readers: int) -> None:
    """200 threads each run get_tuple + get_state on a real chat graph at once (released together
    by a barrier); every call succeeds and returns the state the writer left."""
    with DeltaLogSaver.from_path(tmp_path / "s", max_readers=max_readers) as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        for thread in range(4):
            for turn in range(6):
                graph.invoke({"messages": [human(turn)]}, cfg(f"t{thread}"))
        expected = {f"t{t}": observe(graph.get_state(cfg(f"t{t}"))) for t in range(4)}
        barrier = threading.Barrier(THREADS)
        failures: list[BaseException] = []
        wrong: list[str] = []
        lock = threading.Lock()

        def read(i: int) -> None:
            thread_id = f"t{i % 4}"
            try:
                barrier.wait(timeout=60)
                for _ in range(3):
                    assert saver.get_tuple(cfg(thread_id)) is not None
                    if observe(graph.get_state(cfg(thread_id))) != expected[thread_id]:
                        with lock:
                            wrong.append(thread_id)
            except BaseException as exc:
                with lock:
                    failures.append(exc)

        workers = [threading.Thread(target=read, args=(i,)) for i in range(THREADS)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=300)
        assert not any(worker.is_alive() for worker in workers)
        assert failures == [], f"{len(failures)} failed, first: {failures[0]!r}"
        assert wrong == []
