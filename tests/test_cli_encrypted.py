"""An EncryptedSerializer store: the CLI reads it with LANGGRAPH_AES_KEY or --serde, and without the key every reader gets one line naming the cause (issue 15.16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogSaver
from deltalog.engine.errors import DeltaLogError, SerdeMismatchError, UndecryptableValueError
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from tests.graphs import cfg, chat_graph, human

DELTALOG = Path(sys.executable).parent / "deltalog"
KEY = "0123456789abcdef0123456789abcdef"  # 32 bytes: AES-256
OTHER_KEY = "fedcba9876543210fedcba9876543210"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DeltaChannel chat of 3 turns written with EncryptedSerializer (AES-EAX)."""
    path = tmp_path_factory.mktemp("enc") / "s"
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY.encode())
    with DeltaLogSaver.from_path(path, serde=serde) as saver:
        graph = chat_graph(2).compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("chat"))
    return path


def deltalog(*args: object, key: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed script; LANGGRAPH_AES_KEY set to ``key`` (unset when None)."""
    env = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_AES_KEY"}
    if key is not None:
        env["LANGGRAPH_AES_KEY"] = key
    return subprocess.run(
        [str(DELTALOG), *map(str, args)], capture_output=True, text=True, timeout=120, env=env
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """Exit 1, one `Error:` line on stderr, no traceback; return the line."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


def test_library_without_the_key_names_the_cause(store: Path) -> None:
    """A saver without the key: SerdeMismatchError (a DeltaLogError, still a NotImplementedError) saying how to fix it."""
    with DeltaLogSaver.from_path(store) as saver:
        for read in (lambda: saver.get_tuple(cfg("chat")), lambda: list(saver.list(cfg("chat")))):
            with pytest.raises(SerdeMismatchError) as info:
                read()
            message = str(info.value)
            assert "'msgpack+aes'" in message and "written with EncryptedSerializer" in message
            assert "pass serde=EncryptedSerializer" in message and "\n" not in message
            assert isinstance(info.value, (DeltaLogError, NotImplementedError))
        with pytest.raises(SerdeMismatchError, match="written with EncryptedSerializer"):
            chat_graph(2).compile(checkpointer=saver).get_state(cfg("chat"))


def test_library_with_a_wrong_key(store: Path) -> None:
    """Another key: UndecryptableValueError (also a ValueError) saying it cannot be decrypted."""
    serde = EncryptedSerializer.from_pycryptodome_aes(key=OTHER_KEY.encode())
    with DeltaLogSaver.from_path(store, serde=serde) as saver:
        with pytest.raises(UndecryptableValueError, match="cannot be decrypted") as info:
            saver.get_tuple(cfg("chat"))
        assert isinstance(info.value, ValueError) and "MAC check failed" in str(info.value)


@pytest.mark.parametrize("command", ["show", "history", "diff"])
def test_cli_without_the_key_is_one_line(store: Path, command: str) -> None:
    """show / history / diff without the key: `Error: … written with EncryptedSerializer; set LANGGRAPH_AES_KEY or pass --serde …`, exit 1."""
    args = ["chat", "latest", "latest"] if command == "diff" else ["chat"]
    line = one_error_line(deltalog(command, store, *args))
    assert "written with EncryptedSerializer" in line
    assert "set LANGGRAPH_AES_KEY or pass --serde" in line


def test_cli_verify_deep_without_the_key_reports_errors(store: Path) -> None:
    """verify --deep without the key reports the values as undecodable and exits 1 (no traceback)."""
    done = deltalog("verify", store, "--deep", "--json")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    problems = json.loads(done.stdout)["problems"]
    assert problems and all("EncryptedSerializer" in p["detail"] for p in problems)
    assert deltalog("verify", store, "--deep", key=KEY).returncode == 0


def test_cli_with_the_key_reads_the_store(store: Path) -> None:
    """LANGGRAPH_AES_KEY: show prints the same state the library reads with the key."""
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY.encode())
    with DeltaLogSaver.from_path(store, serde=serde) as saver:
        state = chat_graph(2).compile(checkpointer=saver).get_state(cfg("chat"))
    done = deltalog("show", store, "chat", "--json", key=KEY)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["values"]
    assert [m["content"] for m in shown["messages"]] == [
        m.content for m in state.values["messages"]
    ]
    assert shown["turns"] == state.values["turns"] == 3
    assert deltalog("history", store, "chat", key=KEY).returncode == 0


def test_cli_with_a_wrong_or_bad_key(store: Path) -> None:
    """A wrong key: one line saying it cannot be decrypted; a key of a bad length: one line naming it."""
    assert "cannot be decrypted" in one_error_line(deltalog("show", store, "chat", key=OTHER_KEY))
    line = one_error_line(deltalog("show", store, "chat", key="short"))
    assert "LANGGRAPH_AES_KEY" in line and "16, 24, or 32 bytes" in line


def test_cli_serde_option(store: Path, tmp_path: Path) -> None:
    """--serde MODULE:ATTR (a file path or a module; an object or a factory) reads the store."""
    module = tmp_path / "my_serde.py"
    module.write_text(
        "from langgraph.checkpoint.serde.encrypted import EncryptedSerializer\n"
        f"serde = EncryptedSerializer.from_pycryptodome_aes(key={KEY.encode()!r})\n"
        "def make():\n    return serde\n"
    )
    for spec in (f"{module}:serde", f"{module}:make"):
        done = deltalog("--serde", spec, "show", store, "chat", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["values"]["turns"] == 3
    line = one_error_line(deltalog("--serde", f"{module}:nosuch", "show", store, "chat"))
    assert "has no attribute 'nosuch'" in line
    line = one_error_line(deltalog("--serde", "os:sep", "show", store, "chat"))
    assert "point it at a serializer" in line
    # A serializer class is instantiated; this one has no key, so: the cause, in one line.
    plain = "langgraph.checkpoint.serde.jsonplus:JsonPlusSerializer"
    line = one_error_line(deltalog("--serde", plain, "show", store, "chat"))
    assert "written with EncryptedSerializer" in line


def test_migrate_to_sqlite_with_the_key_writes_the_target_encrypted(
    store: Path, tmp_path: Path
) -> None:
    """`migrate --to sqlite:` with LANGGRAPH_AES_KEY keeps the values encrypted at rest, as
    `--from` does: the SQLite file holds `msgpack+aes` values, SqliteSaver with the same
    EncryptedSerializer reads the same state, and without it reading fails."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    target = tmp_path / "moved.sqlite"
    done = deltalog("migrate", store, "--to", f"sqlite:{target}", key=KEY)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(target) as conn:
        kinds = {row[0] for row in conn.execute("SELECT type FROM checkpoints")}
        kinds |= {row[0] for row in conn.execute("SELECT type FROM writes")}
    assert kinds and all(kind.endswith("+aes") for kind in kinds), kinds
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY.encode())
    with DeltaLogSaver.from_path(store, serde=serde) as saver:
        want = chat_graph(2).compile(checkpointer=saver).get_state(cfg("chat")).values
    with sqlite3.connect(target, check_same_thread=False) as conn:
        got = chat_graph(2).compile(checkpointer=SqliteSaver(conn, serde=serde))
        assert got.get_state(cfg("chat")).values == want
        with pytest.raises(Exception, match=r"aes"):
            chat_graph(2).compile(checkpointer=SqliteSaver(conn)).get_state(cfg("chat"))
