"""Delta (de)compression runs on one codec thread (engine/codec.py, issue 18.2).

Its multi-MB zstd contexts then live in one glibc arena instead of one per
LangGraph pool thread; these tests pin where the work runs and that the
thread survives what callers do: many threads at once, fork, a nested call.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import zstandard
from deltalog.engine import codec, splice
from deltalog.engine.codec import ZstdCompressor


def _pair(seed: int) -> tuple[bytes, bytes]:
    rng = random.Random(seed)
    base = bytes(rng.getrandbits(8) for _ in range(200_000))
    return base, base[:150_000] + b"new tail %d" % seed + base[150_000:]


def test_deltas_run_on_one_codec_thread_and_round_trip() -> None:
    """Eight threads compressing against bases all hand the work to the same thread."""
    seen: set[str] = set()
    original = codec._compress_with_base

    def spy(data: bytes, base: bytes, tail: bytes, level: int) -> bytes:
        seen.add(threading.current_thread().name)
        return original(data, base, tail, level)

    z = ZstdCompressor()
    errors: list[str] = []

    def worker(n: int) -> None:
        base, data = _pair(n)
        packed = z.compress_with_base(data, base[:100_000], 6, base[100_000:])
        if len(packed) > len(data) // 8:
            errors.append(f"{n}: delta of {len(packed)} bytes")
        if z.decompress_with_base(packed, base[:100_000], base[100_000:]) != data:
            errors.append(f"{n}: round trip differs")

    codec._compress_with_base = spy
    try:
        threads = [threading.Thread(target=worker, args=(n,), name=f"caller-{n}") for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        codec._compress_with_base = original
    assert errors == []
    assert len(seen) == 1 and next(iter(seen)).startswith("deltalog-codec")


def test_splices_are_made_and_rebuilt_on_the_codec_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A splice's runs, its literal and the rebuilt value (as large as the base)
    come from the codec thread, not the caller's: their buffers stay in its arena."""
    seen: dict[str, set[str]] = {"runs": set(), "apply": set()}

    def spy(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            seen[name].add(threading.current_thread().name)
            return fn(*args)

        return run

    monkeypatch.setattr(codec, "splice_runs", spy("runs", splice.splice_runs))
    monkeypatch.setattr(codec, "splice_apply", spy("apply", splice.splice_apply))
    rc = codec.RecordCodec()
    base, _ = _pair(1)
    typed = ("msgpack", base + b"new tail")
    record = rc.encode_delta(typed, base, b"ref", 1, key=b"k")
    assert record is not None
    head = rc.delta_header(record, "t", key=b"k")
    assert head is not None and head.splice is not None
    assert rc.decode_delta(head, base, "t") == list(typed)
    assert seen["runs"] == seen["apply"] and len(seen["runs"]) == 1
    assert next(iter(seen["runs"])).startswith("deltalog-codec")


def test_a_job_submitted_from_the_codec_thread_runs_inline() -> None:
    """A nested call does not wait on itself."""

    def bang(data: bytes) -> bytes:
        return data + b"!"

    def nested(data: bytes) -> bytes:
        return codec._on_codec_thread(bang, data)

    assert codec._on_codec_thread(nested, b"x") == b"x!"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.timeout(60)
def test_a_forked_child_gets_its_own_codec_thread() -> None:
    """After fork() the parent's worker is gone; the child starts one of its own."""
    z = ZstdCompressor()
    base, data = _pair(1)
    packed = z.compress_with_base(data, base)  # the parent's thread exists now
    pid = os.fork()
    if pid == 0:  # the child: exit status tells the parent what happened
        signal.alarm(20)  # a hang (no worker in the child) kills it
        try:
            ok = z.decompress_with_base(packed, base) == data
            os._exit(0 if ok else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, sys.platform


def test_only_large_jobs_trim_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose inputs reach TRIM_MIN bytes calls malloc_trim(0) once, after it
    ran, on the codec thread; a smaller job does not (a trim costs ~0.3 ms)."""
    calls: list[tuple[int, str]] = []

    def trim(pad: int) -> int:
        calls.append((pad, threading.current_thread().name))
        return 1

    monkeypatch.setattr(codec._Trim, "looked_up", True)
    monkeypatch.setattr(codec._Trim, "fn", trim)
    z = ZstdCompressor()
    base, data = _pair(1)
    small_base, small = base[:50_000], data[:60_000]
    assert z.decompress_with_base(z.compress_with_base(small, small_base), small_base) == small
    assert calls == []
    big_base = base * (codec.TRIM_MIN // len(base) + 1)
    packed = z.compress_with_base(big_base + b"tail", big_base)
    assert [pad for pad, _ in calls] == [0]
    assert calls[0][1].startswith("deltalog-codec")
    assert z.decompress_with_base(packed, big_base) == big_base + b"tail"
    assert len(calls) == 2


_RSS_CHILD = """
import ctypes, os, random
from deltalog.engine import codec
ctypes.CDLL(None)  # both children load the same libraries before measuring
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
rng = random.Random(1)
base = rng.randbytes(4 * 1024 * 1024)
data = base + b"tail" * 1000
z = codec.ZstdCompressor()
kept = []  # decoded values stay cached, above the freed contexts in the heap
before = rss()
for i in range(3):
    packed = z.compress_with_base(data + bytes([i]), base, level=codec.DELTA_LEVEL_LARGE)
    kept.append(z.decompress_with_base(packed, base))
    assert kept[-1] == data + bytes([i])
print(rss() - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or codec._Trim.get() is None,
    reason="malloc_trim is glibc's",
)
def test_trimming_returns_the_delta_contexts_memory() -> None:
    """Real effect, in fresh processes: after three 4 MiB snapshot deltas whose
    decoded values stay alive, the RSS grew at least 12 MiB less with the trim
    than with DELTALOG_MALLOC_TRIM=0 (measured here: 56 against 81 MiB; 81
    against 81 with the trim call removed)."""
    import subprocess

    grown = {}
    for flag in ("1", "0"):
        env = {**os.environ, "DELTALOG_MALLOC_TRIM": flag}
        out = subprocess.run(
            [sys.executable, "-c", _RSS_CHILD], env=env, capture_output=True, text=True, check=True
        )
        grown[flag] = int(out.stdout.split()[-1])
    assert grown["1"] <= grown["0"] - 12 * 2**20, grown


def test_a_far_delta_of_incompressible_messages_stays_small() -> None:
    """A snapshot delta whose dictionary is mostly writes (a skip-delta link to
    the first snapshot) finds its messages however random their bytes (base64
    images, say). Stop 36 tried match tables of a quarter of the window's
    bytes, which halved the 21.8 MiB context of such a link in the sf=100
    chat; on this 1.6 MB job the delta then took 105-141 KB instead of 5 KB,
    so the tables stay at half the window."""
    rng = random.Random(5)
    words = [rng.randbytes(rng.randint(200, 900)) for _ in range(1500)]
    writes = b"".join(b"\x91" + w for w in words)
    base = b"".join(words[:60])
    data = b"\x92" + b"".join(words)
    z = ZstdCompressor()
    packed = z.compress_with_base(data, base, codec.DELTA_LEVEL_LARGE, writes)
    assert len(packed) < len(data) // 50, len(packed)
    assert z.decompress_with_base(packed, base, writes) == data


def test_dictionary_training_runs_on_the_codec_thread_then_trims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """zstd's trainer allocates several MB; on a LangGraph pool thread that
    memory stayed with the process (stop 36), so it trains on the codec thread
    and trims the allocator after it, on that thread."""
    calls: list[tuple[str, str]] = []

    def trim(pad: int) -> int:
        calls.append(("trim", threading.current_thread().name))
        return 1

    real_train = zstandard.train_dictionary

    def train(size: int, samples: list[bytes | bytearray | memoryview], **options: Any) -> Any:
        calls.append(("train", threading.current_thread().name))
        return real_train(size, samples, **options)

    monkeypatch.setattr(codec._Trim, "looked_up", True)
    monkeypatch.setattr(codec._Trim, "fn", trim)
    monkeypatch.setattr(zstandard, "train_dictionary", train)
    words = ["checkpoint", "thread", "channel", "delta", "the", "of", "replay", "store"]
    rng = random.Random(7)
    record_codec = codec.RecordCodec()
    while not record_codec.wants_training:
        text = " ".join(rng.choice(words) for _ in range(600))
        record_codec.encode_body(b"\x92\xa7message" + text.encode()[:4000])
    _, dictionary = record_codec.train()
    assert isinstance(dictionary, bytes) and dictionary
    assert [kind for kind, _ in calls] == ["train", "trim"]
    assert all(name.startswith("deltalog-codec") for _, name in calls), calls
