"""`langgraph dev` runs on deltalog through the shipped hook: interrupt and resume over HTTP (issue 19.3)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogStore

pytest.importorskip(
    "langgraph_api", reason="the LangGraph server is not installed: pip install -e '.[dev]'"
)
pytest.importorskip(
    "langgraph_cli", reason="langgraph-cli is not installed: pip install -e '.[dev]'"
)
httpx = pytest.importorskip("httpx", reason="httpx is not installed: pip install -e '.[dev]'")

GRAPH = """
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt


def ask(state: MessagesState) -> dict:
    answer = interrupt("approve?")
    get_store().put(("answers",), "last", {"answer": answer})
    return {"messages": [("ai", f"you said {answer}")]}


builder = StateGraph(MessagesState)
builder.add_node("ask", ask)
builder.add_edge(START, "ask")
graph = builder.compile()
"""

EMBED = """
from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass
class Settings:  # a dataclass looks its module up in sys.modules as it is defined
    size: int = 8


def embed(texts: list[str]) -> list[list[float]]:
    return [[b / 255 for b in hashlib.sha256(t.encode()).digest()[: Settings().size]] for t in texts]
"""

# No analytics, version checks or tracing: the server talks to nothing but the test.
QUIET = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real `langgraph dev` on 127.0.0.1 over a temp project whose langgraph.json names the hook."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "graph.py").write_text(GRAPH)
    (project / "embed.py").write_text(EMBED)
    (project / "langgraph.json").write_text(
        json.dumps(
            {
                "dependencies": ["."],
                "graphs": {"agent": "./graph.py:graph"},
                "checkpointer": {"path": "deltalog.langgraph.checkpointer"},
                "store": {
                    "path": "deltalog.langgraph.store",
                    "index": {"dims": 8, "embed": "./embed.py:embed", "fields": ["text"]},
                    "ttl": {"default_ttl": 60, "sweep_interval_minutes": 1},
                },
            }
        )
    )
    store = tmp_path / "server.lmdb"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(QUIET, DELTALOG_PATH=str(store))
    cli = Path(sys.executable).with_name("langgraph")
    # Without --allow-blocking: the dev server fails any blocking call on the event loop.
    proc = subprocess.Popen(
        [
            str(cli),
            "dev",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-browser",
            "--no-reload",
        ],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 45
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{out[-3000:]}")
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("langgraph dev did not answer /ok within 45 s")
            time.sleep(0.25)
        yield url, store
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _post(client: Any, path: str, body: dict[str, Any]) -> Any:
    response = client.post(path, json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _cli(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "deltalog", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_interrupt_and_resume_over_http(server: tuple[str, Path]) -> None:
    """A thread interrupts, resumes with Command(resume=...), its node writes memory through\n    the store hook, and the CLI reads checkpoints and memory from the one store."""
    url, store = server
    with httpx.Client(base_url=url) as client:
        thread_id = _post(client, "/threads", {})["thread_id"]
        first = _post(
            client,
            f"/threads/{thread_id}/runs/wait",
            {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}},
        )
        assert [i["value"] for i in first["__interrupt__"]] == ["approve?"]
        state = client.get(f"/threads/{thread_id}/state").json()
        assert state["next"] == ["ask"]

        # The store is readable by another process while the server holds it.
        (listed,) = [t for t in _cli("threads", str(store)) if t["thread_id"] == thread_id]
        interrupted_at = listed["checkpoints"]
        assert interrupted_at >= 2

        second = _post(
            client,
            f"/threads/{thread_id}/runs/wait",
            {"assistant_id": "agent", "command": {"resume": "yes"}},
        )
        assert [m["content"] for m in second["messages"]] == ["hi", "you said yes"]
        state = client.get(f"/threads/{thread_id}/state").json()
        assert state["next"] == []
        assert state["values"]["messages"][-1]["content"] == "you said yes"

    (listed,) = [t for t in _cli("threads", str(store)) if t["thread_id"] == thread_id]
    assert listed["checkpoints"] > interrupted_at
    history = _cli("history", str(store), thread_id)
    assert history["thread_id"] == thread_id
    # The node's memory went through the store hook into the same LMDB file.
    item = _cli("memory", "get", str(store), "answers", "last")
    assert item["value"] == {"answer": "yes"}


def test_the_store_hook_takes_index_and_ttl_from_langgraph_json(server: tuple[str, Path]) -> None:
    """The "store" section's index (an embedder in a file of the project) and ttl reach the
    store: a query search over HTTP scores by the embedder, and a node's put gets the default TTL."""
    url, store = server
    with httpx.Client(base_url=url) as client:
        for key, text in [("a", "hello"), ("b", "something else")]:
            body = {"namespace": ["docs"], "key": key, "value": {"text": text}}
            response = client.put("/store/items", json=body, timeout=30)
            assert response.status_code in (200, 204), response.text
        found = _post(
            client, "/store/items/search", {"namespace_prefix": ["docs"], "query": "hello"}
        )["items"]
        # A node's put without a ttl gets the default (the HTTP API passes ttl=None: none).
        thread_id = _post(client, "/threads", {})["thread_id"]
        runs: list[dict[str, Any]] = [{"input": {"messages": []}}, {"command": {"resume": "yes"}}]
        for run in runs:
            _post(client, f"/threads/{thread_id}/runs/wait", {"assistant_id": "agent", **run})
    assert [i["key"] for i in found] == ["a", "b"]
    assert found[0]["score"] == pytest.approx(1.0, abs=1e-5) and found[1]["score"] < 0.999
    now = time.time()
    with DeltaLogStore.from_path(store, clock=lambda: now + 59 * 60) as before_expiry:
        assert before_expiry.get(("answers",), "last", refresh_ttl=False) is not None
    with DeltaLogStore.from_path(store, clock=lambda: now + 61 * 60) as after_expiry:
        assert after_expiry.get(("answers",), "last", refresh_ttl=False) is None
        assert after_expiry.get(("docs",), "a", refresh_ttl=False) is not None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "is not JSON"),
        ("[1]", "is not a JSON object"),
        ('{"index": 3}', '"index": 3} in langgraph.json is not an object'),
        ('{"ttl": "week"}', "\"ttl\": 'week'} in langgraph.json is not an object"),
        ('{"index": {"dims": 8, "embed": "./nosuch.py:embed"}}', "no file"),
        ('{"index": {"dims": 8, "embed": "./embed.py:nosuch"}}', "defines no 'nosuch'"),
    ],
)
def test_the_store_hook_refuses_a_bad_store_section_before_opening(
    raw: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad "store" section stops the hook with an error naming it; no store is created."""
    import asyncio

    import deltalog.langgraph as hooks
    from deltalog.engine import InvalidInputError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "embed.py").write_text(EMBED)
    monkeypatch.setenv(hooks.ENV_PATH, str(tmp_path / "server.lmdb"))
    monkeypatch.setenv(hooks.ENV_STORE_CONFIG, raw)

    async def open_store() -> None:
        async with hooks.store():
            pass

    with pytest.raises(InvalidInputError, match=re.escape(message)):
        asyncio.run(open_store())
    assert not (tmp_path / "server.lmdb").exists()


def test_the_store_section_resolves_an_embedder_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store_settings loads "./embed.py:embed" from the working directory and passes ttl on."""
    import deltalog.langgraph as hooks

    monkeypatch.chdir(tmp_path)
    (tmp_path / "embed.py").write_text(EMBED)
    section = {"index": {"dims": 8, "embed": "./embed.py:embed"}, "ttl": {"default_ttl": 5}}
    monkeypatch.setenv(hooks.ENV_STORE_CONFIG, json.dumps(section))
    index, ttl = hooks.store_settings()
    assert index is not None and ttl == {"default_ttl": 5}
    embed: Any = index["embed"]
    assert callable(embed) and len(embed(["x"])[0]) == 8
    monkeypatch.setenv(hooks.ENV_STORE_CONFIG, "")
    assert hooks.store_settings() == (None, None)
