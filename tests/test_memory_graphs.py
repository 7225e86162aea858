"""A real LangGraph graph reads and writes memory through the injected store, across threads and reopen, sync and async (issue 17)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, TypedDict

from deltalog.engine import DeltaLogSaver
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime


class State(TypedDict):
    user: str
    visits: int


def remember(state: State, runtime: Runtime[Any]) -> dict[str, Any]:
    store = runtime.store
    assert store is not None
    ns = ("users", state["user"])
    item = store.get(ns, "profile")
    visits = (item.value["visits"] if item else 0) + 1
    store.put(ns, "profile", {"visits": visits})
    return {"visits": visits}


def audit(state: State) -> dict[str, Any]:
    store = get_store()
    store.put(("audit", state["user"]), f"visit-{state['visits']}", {"n": state["visits"]})
    return {}


async def aremember(state: State, runtime: Runtime[Any]) -> dict[str, Any]:
    store = runtime.store
    assert store is not None
    ns = ("users", state["user"])
    item = await store.aget(ns, "profile")
    visits = (item.value["visits"] if item else 0) + 1
    await store.aput(ns, "profile", {"visits": visits})
    return {"visits": visits}


async def aaudit(state: State, runtime: Runtime[Any]) -> dict[str, Any]:
    """``audit`` for async graphs: through the runtime, since a sync node's
    ``get_store()`` in an async graph needs Python 3.11+ (LangGraph hands the
    run's context to executor threads there only)."""
    store = runtime.store
    assert store is not None
    await store.aput(("audit", state["user"]), f"visit-{state['visits']}", {"n": state["visits"]})
    return {}


def build(
    saver: DeltaLogSaver, node: Any, audit_node: Any = audit
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(State)
    builder.add_node("remember", node)
    builder.add_node("audit", audit_node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "audit")
    builder.add_edge("audit", END)
    return builder.compile(checkpointer=saver, store=saver.memory_store())


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_graph_memory_across_threads_and_reopen(tmp_path: Path) -> None:
    """Memory written by one LangGraph thread is read by another, by Python threads, after reopen."""
    path = tmp_path / "app"
    with DeltaLogSaver.from_path(path) as saver:
        graph = build(saver, remember)
        assert graph.invoke({"user": "ann", "visits": 0}, cfg("t1"))["visits"] == 1
        assert graph.invoke({"user": "ann", "visits": 0}, cfg("t2"))["visits"] == 2

        def worker(user: str) -> None:
            for i in range(5):
                graph.invoke({"user": user, "visits": 0}, cfg(f"{user}-{i}"))

        threads = [threading.Thread(target=worker, args=(f"u{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    with DeltaLogSaver.from_path(path) as saver:
        graph = build(saver, remember)
        assert graph.invoke({"user": "ann", "visits": 0}, cfg("t3"))["visits"] == 3
        assert graph.get_state(cfg("t1")).values["visits"] == 1  # checkpoints, same file
        mem = saver.memory_store()
        for i in range(4):
            item = mem.get(("users", f"u{i}"), "profile")
            assert item is not None and item.value == {"visits": 5}
        assert len(mem.search(("audit", "ann"))) == 3
        mem.close()


async def test_async_graph_memory(tmp_path: Path) -> None:
    """An async graph uses the store through aget/aput, concurrently and after reopen."""
    path = tmp_path / "app"
    with DeltaLogSaver.from_path(path) as saver:
        graph = build(saver, aremember, aaudit)
        await asyncio.gather(
            *(graph.ainvoke({"user": f"u{i}", "visits": 0}, cfg(f"a{i}")) for i in range(6))
        )
        out = await graph.ainvoke({"user": "u0", "visits": 0}, cfg("again"))
        assert out["visits"] == 2
    with DeltaLogSaver.from_path(path) as saver:
        mem = saver.memory_store()
        assert sorted(await mem.alist_namespaces(prefix=("users",))) == [
            ("users", f"u{i}") for i in range(6)
        ]
        mem.close()
