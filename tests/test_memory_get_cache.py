"""The get cache (engine/memory_gets.py) never serves what a read would not (issue 17).

``DeltaLogStore.get`` answers from decoded items while the environment's last
transaction id shows nothing was committed since a read confirmed the cache's
memory state. These tests change the stored items every way a user can (this
process, a saver on the same file, another process, group-committed threads,
a sweep, a delete) and compare each get with a read that bypasses the cache.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver, DeltaLogStore
from deltalog.engine.cache import CachePolicy
from deltalog.engine.memory_gets import MISSING, GetCache
from deltalog.engine.memory_io import Changes, ItemRecord
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import GetOp, Item


def _uncached(store: DeltaLogStore, ns: tuple[str, ...], key: str) -> Any:
    """The value a one-op batch reads from LMDB (batches never use the get cache)."""
    item = store.batch([GetOp(ns, key, refresh_ttl=False)])[0]
    assert item is None or isinstance(item, Item)
    return None if item is None else item.value


def test_hits_after_own_puts_and_a_saver_commit(tmp_path: Path) -> None:
    """Items this process put are served without a read, also after an unrelated commit."""
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        store = DeltaLogStore.from_saver(saver)
        for i in range(20):
            store.put(("a",), f"k{i}", {"i": i})
        gets = store._directory.gets
        assert store.get(("a",), "k3") == store.batch([GetOp(("a",), "k3")])[0]
        before = gets.hits
        assert [store.get(("a",), f"k{i}").value for i in range(20)] == [  # type: ignore[union-attr]
            {"i": i} for i in range(20)
        ]
        assert gets.hits - before == 20
        # A checkpoint commit moves the transaction id, not the memory state.
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {}, {})  # type: ignore[arg-type]
        assert store.get(("a",), "k1").value == {"i": 1}  # type: ignore[union-attr]
        hits = gets.hits
        assert store.get(("a",), "k2").value == {"i": 2}  # type: ignore[union-attr]
        assert gets.hits == hits + 1


def test_updates_deletes_and_mutated_results(tmp_path: Path) -> None:
    """A re-put, a delete and a caller mutating a returned value are all seen correctly."""
    with DeltaLogStore.from_path(tmp_path / "u") as store:
        store.put(("a",), "k", {"v": [1, {"x": 1}]})
        got = store.get(("a",), "k")
        assert got is not None
        got.value["v"][1]["x"] = 99  # the caller's copy
        got.value["new"] = True
        assert store.get(("a",), "k").value == {"v": [1, {"x": 1}]}  # type: ignore[union-attr]
        store.put(("a",), "k", {"v": 2})
        assert store.get(("a",), "k").value == {"v": 2}  # type: ignore[union-attr]
        store.delete(("a",), "k")
        assert store.get(("a",), "k") is None
        assert store.get(("a",), "absent") is None
        store.put(("a",), "absent", {"now": "here"})
        assert store.get(("a",), "absent").value == {"now": "here"}  # type: ignore[union-attr]


def test_expiry_is_checked_on_every_hit(tmp_path: Path) -> None:
    """A cached item with a TTL stops being returned when it expires, before any sweep."""
    now = [1_000_000.0]
    with DeltaLogStore.from_path(tmp_path / "t", clock=lambda: now[0]) as store:
        store.put(("a",), "k", {"v": 1}, ttl=1)
        assert store.get(("a",), "k", refresh_ttl=False) is not None
        now[0] += 61
        assert store.get(("a",), "k", refresh_ttl=False) is None
        assert store.sweep_ttl() == 1
        assert store.get(("a",), "k") is None


def test_another_process_write_is_seen(tmp_path: Path) -> None:
    """Puts and deletes by another process reach this process's next get."""
    path = tmp_path / "p"
    script = textwrap.dedent(
        """
        import sys
        from deltalog.engine import DeltaLogStore

        with DeltaLogStore.from_path(sys.argv[1]) as store:
            if sys.argv[2] == "delete":
                store.delete(("a",), "k")
            else:
                store.put(("a",), "k", {"v": sys.argv[2]})
        """
    )
    with DeltaLogStore.from_path(path) as store:
        store.put(("a",), "k", {"v": "mine"})
        assert store.get(("a",), "k").value == {"v": "mine"}  # type: ignore[union-attr]
        for action in ("theirs", "again", "delete"):
            subprocess.run(
                [sys.executable, "-c", script, str(path), action], check=True, timeout=120
            )
            want = None if action == "delete" else {"v": action}
            got = store.get(("a",), "k")
            assert (None if got is None else got.value) == want == _uncached(store, ("a",), "k")


def test_threads_read_their_own_writes_through_group_commit(tmp_path: Path) -> None:
    """Writers sharing group commits always get back what they last put, and the
    cache ends equal to LMDB for every key."""
    errors: list[str] = []
    with DeltaLogStore.from_path(tmp_path / "g") as store:

        def worker(n: int) -> None:
            for i in range(60):
                key = f"k{i % 7}"
                store.put(("w", str(n)), key, {"i": i})
                store.put(("shared",), key, {"n": n, "i": i})
                got = store.get(("w", str(n)), key)
                if got is None or got.value != {"i": i}:
                    errors.append(f"worker {n} put {i} at {key}, got {got}")
                store.get(("shared",), key)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for ns in [("shared",), *[("w", str(n)) for n in range(6)]]:
            for i in range(7):
                got = store.get(ns, f"k{i}")
                assert (None if got is None else got.value) == _uncached(store, ns, f"k{i}")


def test_turned_off(tmp_path: Path) -> None:
    """CachePolicy(item_entries=0) keeps no items; gets still answer."""
    from deltalog.engine.env import Environment

    env = Environment(str(tmp_path / "off"), caches=CachePolicy(item_entries=0))
    with DeltaLogStore(env, owns_env=True) as store:
        store.put(("a",), "k", {"v": 1})
        assert store.get(("a",), "k").value == {"v": 1}  # type: ignore[union-attr]
        assert store._directory.gets.entries == {} and store._directory.gets.hits == 0


def _rec(key: str, v: int) -> ItemRecord:
    return ItemRecord(("a",), key, {"v": v}, 1, 1, None, None)


def test_a_slow_reader_cannot_move_the_cache_back() -> None:
    """A read that began before a newer one reported is ignored."""
    cache = GetCache(100)
    cache.seen((0, 5), 50)
    cache.remember((0, 5), b"k", _rec("k", 5))
    cache.seen((0, 4), 40)  # a reader whose snapshot is older
    assert cache.state == (0, 5) and cache.txnid == 50
    hit = cache.hit(50, b"k")
    assert hit is not MISSING and hit is not None and hit.value == {"v": 5}
    assert cache.hit(51, b"k") is MISSING  # something was committed since


def test_commits_applied_out_of_order() -> None:
    """Two ops of one group commit applied in either order leave only true entries."""
    first = Changes(5, 6, items={b"k": _rec("k", 6), b"j": _rec("j", 6), b"o": None})
    second = Changes(6, 7, items={b"k": _rec("k", 7)})
    for order in ([first, second], [second, first]):
        cache = GetCache(100)
        cache.seen((0, 5), 50)
        cache.remember((0, 5), b"k", _rec("k", 5))
        cache.remember((0, 5), b"o", _rec("o", 5))  # the first op deletes it
        for changes in order:
            cache.after(changes)
        assert cache.state == (0, 7) and cache.txnid == -1
        k = cache.entries.get(b"k")
        assert k is not None and k.value == {"v": 7}
        j = cache.entries.get(b"j")
        assert j is None or j.value == {"v": 6}
        assert cache.entries.get(b"o", MISSING) in (MISSING, None)
        cache.seen((0, 7), 51)  # the next get's read confirms it
        assert cache.hit(51, b"k") is k


_COUNTER_WRITER = textwrap.dedent(
    """
    import sys
    from deltalog.engine import DeltaLogSaver, DeltaLogStore
    from langgraph.checkpoint.base import empty_checkpoint

    path, rounds = sys.argv[1], int(sys.argv[2])
    with DeltaLogSaver.from_path(path) as saver:
        store = DeltaLogStore.from_saver(saver)
        config = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
        for n in range(1, rounds + 1):
            store.put(("c",), "counter", {"n": n})
            if n % 3 == 0:  # commits that move the transaction id, not the memory
                saver.put(config, empty_checkpoint(), {}, {})
    """
)


def test_reads_never_go_back_while_another_process_writes(tmp_path: Path) -> None:
    """Gets of a counter another process increments never return an older value
    than one already returned, and end at the last one, while this process's
    own puts on other keys interleave with them: each of those commits starts
    from a state the cache has not seen, which must drop what it held (with
    that reset removed the final read returned 298 of 300)."""
    path = tmp_path / "m"
    rounds = 300
    with DeltaLogStore.from_path(path) as store:
        store.put(("c",), "counter", {"n": 0})
        writer = subprocess.Popen([sys.executable, "-c", _COUNTER_WRITER, str(path), str(rounds)])
        seen = [0]
        try:
            i = 0
            while writer.poll() is None:
                got = store.get(("c",), "counter")
                assert got is not None
                n = got.value["n"]
                assert n >= seen[-1], f"read {n} after {seen[-1]}"
                seen.append(n)
                if i % 7 == 0:  # now and then a put of this process's own
                    store.put(("mine",), f"k{i % 5}", {"i": i})
                    assert store.get(("mine",), f"k{i % 5}").value == {"i": i}  # type: ignore[union-attr]
                i += 1
        finally:
            writer.wait(timeout=120)
        assert writer.returncode == 0
        # Reads only from here: nothing of this process's resets the cache.
        for _ in range(3):
            assert store.get(("c",), "counter").value == {"n": rounds}  # type: ignore[union-attr]
        assert len(set(seen)) > 2  # the reads overlapped the writes


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.timeout(60)
def test_a_child_forked_while_the_cache_lock_is_held_can_get(tmp_path: Path) -> None:
    """fork() copies the cache's lock as it is; the child gets a fresh one (and an
    empty cache) instead of waiting forever for a thread it does not have."""
    with DeltaLogStore.from_path(tmp_path / "f") as store:
        store.put(("a",), "k", {"v": 1})
        gets = store._directory.gets
        with gets._lock:  # as another thread of the parent might hold it
            pid = os.fork()
            if pid == 0:
                signal.alarm(20)  # a deadlock kills the child
                try:
                    got = store.get(("a",), "k")
                    os._exit(0 if got is not None and got.value == {"v": 1} else 3)
                except BaseException:
                    os._exit(4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.get(("a",), "k").value == {"v": 1}  # type: ignore[union-attr]
