"""`langgraph dev` runs on deltalog through the shipped hook: interrupt and resume over HTTP (issue 19.3)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
    (project / "langgraph.json").write_text(
        json.dumps(
            {
                "dependencies": ["."],
                "graphs": {"agent": "./graph.py:graph"},
                "checkpointer": {"path": "deltalog.langgraph.checkpointer"},
                "store": {"path": "deltalog.langgraph.store"},
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
