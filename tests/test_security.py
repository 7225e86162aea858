"""Security: what reading a store may execute, what encryption hides, who may open the files.

The threat model these tests pin down is in docs/reliability.md: the saver's
serde is LangGraph's ``JsonPlusSerializer`` with the pickle fallback off; its
strict msgpack allowlist (``LANGGRAPH_STRICT_MSGPACK=true``, ``with_allowlist``)
decides which types a record may construct; ``EncryptedSerializer`` (AES-EAX)
hides and authenticates values and writes; files are owner-only.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from tests.checkpoints import put_values
from tests.graphs import cfg, chat_graph, history, human

REPO = Path(__file__).resolve().parent.parent
CALLS: list[str] = []  # every constructor / function a crafted record managed to run


def record_call(note: str) -> str:
    """What a crafted pickle would call."""
    CALLS.append(note)
    return note


@dataclass
class Canary:
    """A type no allowlist names: constructing it from a record is the attack."""

    note: str

    def __post_init__(self) -> None:
        CALLS.append(f"Canary({self.note})")


@dataclass
class Allowed:
    """A type an allowlist names."""

    note: str

    def __post_init__(self) -> None:
        CALLS.append(f"Allowed({self.note})")


class PickleEverything:
    """A hostile serializer: what someone with write access could put in the file."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Every value as a pickle."""
        return "pickle", pickle.dumps(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Never used: only the victim reads."""
        raise NotImplementedError


class Payload:
    """Unpickling this calls record_call — arbitrary code, as far as the reader knows."""

    def __reduce__(self) -> tuple[Callable[[str], str], tuple[str]]:
        return record_call, ("pickle ran",)


@pytest.fixture(autouse=True)
def _no_calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


def test_default_serde_is_jsonplus_without_pickle(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """The default serde is LangGraph's JsonPlusSerializer with the pickle fallback off."""
    saver = make_saver()
    assert type(saver.serde) is JsonPlusSerializer
    assert saver.serde.pickle_fallback is False


def test_pickled_record_never_runs(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """A record written as a pickle (by a hostile writer) is refused on read; its code never runs."""
    victim = make_saver()
    attacker = DeltaLogSaver(victim.env, serde=PickleEverything(), owns_env=False)
    config = put_values(attacker, "t", {"messages": Payload()})
    CALLS.clear()
    with pytest.raises(NotImplementedError, match="pickle"):
        victim.get_tuple(config)
    assert CALLS == []


def test_strict_allowlist_is_honoured(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Under a strict msgpack allowlist a crafted record naming an unlisted type comes back as plain data, never constructed; with_allowlist admits exactly the named types."""
    writer = make_saver()
    config = put_values(writer, "t", {"a": Canary("crafted"), "b": Allowed("listed")})
    strict = DeltaLogSaver(
        writer.env, serde=JsonPlusSerializer(allowed_msgpack_modules=None), owns_env=False
    )
    CALLS.clear()
    found = strict.get_tuple(config)
    assert found is not None
    assert found.checkpoint["channel_values"] == {"a": {"note": "crafted"}, "b": {"note": "listed"}}
    assert CALLS == []
    allowing = strict.with_allowlist([(__name__, "Allowed")])
    found = allowing.get_tuple(config)
    assert found is not None
    assert found.checkpoint["channel_values"]["b"] == Allowed("listed")
    assert found.checkpoint["channel_values"]["a"] == {"note": "crafted"}
    assert set(CALLS) == {"Allowed(listed)"}
    # The clone did not loosen the original.
    found = strict.get_tuple(config)
    assert found is not None and found.checkpoint["channel_values"]["b"] == {"note": "listed"}


def test_permissive_default_constructs_unlisted_types(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Documented hazard: without LANGGRAPH_STRICT_MSGPACK, LangGraph's default serde constructs any type a record names (with a warning) — so strict mode is the defence against hostile writers."""
    saver = make_saver()
    config = put_values(saver, "t", {"a": Canary("crafted")})
    CALLS.clear()
    found = saver.get_tuple(config)
    assert found is not None and found.checkpoint["channel_values"]["a"] == Canary("crafted")
    assert set(CALLS) == {"Canary(crafted)"}


_STRICT_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[2])
from deltalog.engine import DeltaLogSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from tests import test_security as ts
from tests.checkpoints import put_values
from tests.graphs import cfg, chat_graph, human
out = {}
with DeltaLogSaver.from_path(sys.argv[1]) as saver:
    out["strict_default"] = saver.serde._allowed_msgpack_modules is None
    writer = DeltaLogSaver(saver.env, serde=JsonPlusSerializer(allowed_msgpack_modules=True),
                           owns_env=False)
    config = put_values(writer, "crafted", {"a": ts.Canary("crafted")})
    ts.CALLS.clear()
    out["crafted"] = saver.get_tuple(config).checkpoint["channel_values"]["a"]
    out["calls"] = list(ts.CALLS)
    graph = chat_graph(3).compile(checkpointer=saver)
    for turn in range(4):
        graph.invoke({"messages": [human(turn)]}, cfg("chat"))
    state = graph.get_state(cfg("chat"))
    out["types"] = sorted({type(m).__name__ for m in state.values["messages"]})
    out["turns"] = state.values["turns"]
print(json.dumps(out))
"""


def test_strict_mode_end_to_end(tmp_path: Path) -> None:
    """With LANGGRAPH_STRICT_MSGPACK=true the saver's default serde is strict: a crafted record is not constructed, and a real chat graph (compile() applies with_allowlist to the saver) still rebuilds its messages."""
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    done = subprocess.run(
        [sys.executable, "-c", _STRICT_CHILD, str(tmp_path / "store"), str(REPO)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out == {
        "strict_default": True,
        "crafted": {"note": "crafted"},
        "calls": [],
        "types": ["AIMessage", "HumanMessage"],
        "turns": 4,
    }


AES_KEY = "0123456789abcdef0123456789abcdef"  # 32 bytes: AES-256
SECRET = "SECRET-MARKER-7f3a"


def _secret_chat(saver: Any) -> list[Any]:
    graph = chat_graph(3).compile(checkpointer=saver)
    for turn in range(5):
        graph.invoke({"messages": [human(turn, f"{SECRET} turn {turn} " * 20)]}, cfg("thread-x"))
    graph.update_state(cfg("thread-x"), {"messages": [human(99, f"{SECRET} edit")]})
    return history(graph, cfg("thread-x"))


def test_encrypted_serializer_roundtrips_and_hides_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EncryptedSerializer (AES via LANGGRAPH_AES_KEY) round-trips a chat exactly, and no plaintext channel value, write or metadata value is left in the files; ids and names stay in clear (documented)."""
    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    serde = EncryptedSerializer.from_pycryptodome_aes()
    path = tmp_path / "encrypted"
    with DeltaLogSaver.from_path(path, serde=serde, compress_threshold=None) as saver:
        observed = _secret_chat(saver)
        assert any(t.pending_writes for t in saver.list(cfg("thread-x")))
    assert observed == _secret_chat(InMemorySaver())
    files = b"".join(p.read_bytes() for p in path.iterdir())
    assert SECRET.encode() not in files
    assert b"lorem ipsum" not in files and b"dolor sit amet" not in files  # the model's replies
    assert b"thread-x" in files  # names are keys: not encrypted
    # The positive control: without encryption the same bytes are there to find.
    plain = tmp_path / "plain"
    with DeltaLogSaver.from_path(plain, compress_threshold=None) as saver:
        _secret_chat(saver)
    assert SECRET.encode() in (plain / "data.mdb").read_bytes()


@pytest.mark.parametrize("held", [True, False], ids=["in-record", "blob"])
def test_encrypted_values_are_authenticated(
    held: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer without the key cannot forge or alter an encrypted value, even one who fixes our checksum: AES-EAX verification refuses it. Both for a small string held in the checkpoint record and for a list stored as a blob."""
    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    serde = EncryptedSerializer.from_pycryptodome_aes()
    with DeltaLogSaver.from_path(tmp_path / "s", serde=serde) as saver:
        config = put_values(saver, "t", {"secret": SECRET if held else [SECRET]})
        store = saver.env
        db = "checkpoints" if held else "blobs"
        (key, raw), *_ = list(store.iter_db(db))
        rec = store.codec.decode(raw, db, key=key)
        kind, ciphertext = rec[9]["secret"] if held else rec
        assert kind == "msgpack+aes"
        forged = bytearray(ciphertext)
        forged[-1] ^= 1
        if held:
            rec[9]["secret"][1] = bytes(forged)
        else:
            rec = [kind, bytes(forged)]
        handle = store.db(db)
        store.write(lambda w: w.put_raw(handle, key, store.codec.encode(rec, key=key)))
        with pytest.raises(ValueError, match="MAC check failed"):
            saver.get_tuple(config)


def test_encrypted_saver_still_loads_plaintext_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documented hazard: EncryptedSerializer loads records without a cipher suffix as plaintext (for migration), so encryption alone does not stop a hostile writer's crafted record; a strict inner serde does."""
    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    permissive = DeltaLogSaver.from_path(
        tmp_path / "s", serde=EncryptedSerializer.from_pycryptodome_aes()
    )
    try:
        attacker = DeltaLogSaver(permissive.env, serde=JsonPlusSerializer(), owns_env=False)
        config = put_values(attacker, "t", {"a": Canary("crafted")})
        CALLS.clear()
        found = permissive.get_tuple(config)
        assert found is not None and found.checkpoint["channel_values"]["a"] == Canary("crafted")
        strict_inner = EncryptedSerializer.from_pycryptodome_aes(
            serde=JsonPlusSerializer(allowed_msgpack_modules=None)
        )
        CALLS.clear()
        strict = DeltaLogSaver(permissive.env, serde=strict_inner, owns_env=False)
        found = strict.get_tuple(config)
        assert found is not None and found.checkpoint["channel_values"]["a"] == {"note": "crafted"}
        assert CALLS == []
    finally:
        permissive.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_files_are_owner_only(
    umask: int, tmp_path: Path, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """The store folder is created 0700 and its files 0600 whatever the umask; so are a compacted copy and a backup."""
    old = os.umask(umask)
    try:
        path = tmp_path / "store"
        saver = make_saver(path)
        put_values(saver, "t", {"x": 1})
        saver.compact(tmp_path / "compacted")
        saver.backup(tmp_path / "backup")
    finally:
        os.umask(old)
    for folder in (path, tmp_path / "compacted", tmp_path / "backup"):
        assert _mode(folder) == 0o700, oct(_mode(folder))
        for name in ("data.mdb", "lock.mdb"):
            if (folder / name).exists():
                assert _mode(folder / name) == 0o600, (folder / name, oct(_mode(folder / name)))
    assert (path / "lock.mdb").exists()
