"""The saver opens the way other LangGraph savers do: from_conn_string, setup, ":memory:", ~ (issue 19.1)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver, DeltaLogStore
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t"}}


def _graph(saver: DeltaLogSaver) -> Any:
    def reply(state: MessagesState) -> dict[str, list[tuple[str, str]]]:
        return {"messages": [("ai", f"echo {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def test_from_conn_string_is_a_context_manager(tmp_path: Path) -> None:
    """`with DeltaLogSaver.from_conn_string(path) as saver` opens the store and closes it on exit."""
    with DeltaLogSaver.from_conn_string(tmp_path / "s") as saver:
        graph = _graph(saver)
        graph.invoke({"messages": [("user", "hi")]}, CONFIG)
        assert saver.get_tuple(CONFIG) is not None
    assert saver.env.closed
    with DeltaLogSaver.from_conn_string(str(tmp_path / "s")) as again:
        assert again.get_tuple(CONFIG) is not None


async def test_from_conn_string_is_an_async_context_manager(tmp_path: Path) -> None:
    """`async with DeltaLogSaver.from_conn_string(path)` works as AsyncSqliteSaver's does."""
    async with DeltaLogSaver.from_conn_string(tmp_path / "s", durable=False) as saver:
        graph = _graph(saver)
        await graph.ainvoke({"messages": [("user", "hi")]}, CONFIG)
        assert (await saver.aget_tuple(CONFIG)) is not None
    assert saver.env.closed


def test_from_conn_string_passes_options(tmp_path: Path) -> None:
    """Keyword options reach from_path (an unknown one is a TypeError naming it)."""
    with DeltaLogSaver.from_conn_string(tmp_path / "s", compress_threshold=None) as saver:
        assert saver.env.codec.compress_threshold is None
    with (
        pytest.raises(TypeError, match="nosuch"),
        DeltaLogSaver.from_conn_string(tmp_path / "s", nosuch=1),
    ):
        pass


async def test_setup_is_a_noop_sync_and_awaited(tmp_path: Path) -> None:
    """setup() works called plainly (PostgresSaver habit) and awaited (AsyncPostgresSaver habit)."""
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        saver.setup()
        await saver.setup()
        await saver.asetup()
        assert saver.get_tuple(CONFIG) is None
        saver.put(CONFIG, empty_checkpoint(), {}, {})
        assert saver.get_tuple(CONFIG) is not None


@pytest.mark.parametrize("arg", ["chat.lmdb", Path("chat.lmdb"), b"chat.lmdb"])
def test_constructor_with_a_path_names_from_path(
    arg: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeltaLogSaver("path") is a TypeError naming from_path, and creates nothing."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=r"DeltaLogSaver\.from_path\("):
        DeltaLogSaver(arg)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_constructor_with_another_object_is_a_type_error() -> None:
    """DeltaLogSaver(object) says it takes an Environment."""
    with pytest.raises(TypeError, match="takes an open Environment"):
        DeltaLogSaver(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("opener", ["from_path", "from_conn_string"])
def test_memory_is_a_private_temporary_store(
    opener: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ ":memory:" opens a new temporary store per call, deleted when the saver closes."""
    monkeypatch.chdir(tmp_path)
    if opener == "from_path":
        first = DeltaLogSaver.from_path(":memory:")
        second = DeltaLogSaver.from_path(":memory:")
    else:
        first = DeltaLogSaver.from_conn_string(":memory:").__enter__()
        second = DeltaLogSaver.from_conn_string(":memory:").__enter__()
    folder = first.env.path
    assert os.path.isdir(folder) and not os.path.exists(":memory:")
    first.put(CONFIG, empty_checkpoint(), {}, {})
    assert second.get_tuple(CONFIG) is None  # not shared, like SQLite's ":memory:"
    first.close()
    second.close()
    assert not os.path.exists(folder)


def test_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ "~/x" opens $HOME/x, not a folder literally named "~"."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    os.makedirs(tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    with DeltaLogSaver.from_conn_string("~/chat.lmdb") as saver:
        saver.put(CONFIG, empty_checkpoint(), {}, {})
    assert (tmp_path / "home" / "chat.lmdb" / "data.mdb").exists()
    assert not (tmp_path / "~").exists()


def test_the_store_opens_as_sqlitestore_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeltaLogStore: from_conn_string, ":memory:" private and deleted on close, "~" expanded."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    os.makedirs(tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    with DeltaLogStore.from_conn_string("~/memory.lmdb", durable=False) as store:
        store.setup()
        store.put(("users", "u1"), "prefs", {"tone": "brief"})
    assert store.env.closed
    assert (tmp_path / "home" / "memory.lmdb" / "data.mdb").exists()
    with DeltaLogStore.from_path("~/memory.lmdb") as again:
        assert again.get(("users", "u1"), "prefs") is not None
    first = DeltaLogStore.from_path(":memory:")
    with DeltaLogStore.from_conn_string(":memory:") as second:
        folder = first.env.path
        first.put(("ns",), "k", {"v": 1})
        assert second.get(("ns",), "k") is None  # not shared, like SQLite's ":memory:"
    first.close()
    assert not os.path.exists(folder)
    assert sorted(os.listdir(tmp_path)) == ["home"]  # no "~" or ":memory:" folder
    with (
        pytest.raises(TypeError, match="nosuch"),
        DeltaLogStore.from_conn_string(tmp_path / "s", nosuch=1),
    ):
        pass


async def test_the_store_opens_in_async_with(tmp_path: Path) -> None:
    """`async with DeltaLogStore.from_conn_string(path)` opens and closes off the loop."""
    async with DeltaLogStore.from_conn_string(tmp_path / "s", durable=False) as store:
        await store.aput(("ns",), "k", {"v": 1})
        sweeper = await store.astart_ttl_sweeper()
        assert (await store.aget(("ns",), "k")) is not None
    assert store.env.closed
    assert sweeper.done()  # stopped on the loop before the store closed
