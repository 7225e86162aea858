"""Splice deltas (format 8): a new value as runs copied from its base, plus the bytes between.

A delta channel's seed (``_DeltaSnapshot``) is the previous seed's message list
plus the messages added since, and an ``add_messages`` list is the previous
list plus one or two messages: serialized, the new value holds the base's bytes
in one long run, cut only where a length or a count in a header changed, and
the new messages after it. zstd finds that run too, but only after indexing the
whole base into its match tables: 20-40 ms for the 2 MB seed of the
large-message chat at the level its deltas need, on every seed
(docs/benchmarks.md, "Stop 34").

:func:`splice_runs` finds the runs directly, with ``bytes.startswith`` over
memoryviews (a ``memcmp`` without a copy) and ``bytes.find`` near the last
position to step over a changed header; what is left, the *literal*, is a few
bytes of headers and the new messages, which the codec compresses against the
channel's recent writes. :func:`splice_apply` rebuilds the value from the base,
the runs and the literal, checking every run against both.

The runs are a flat list of ints ``[lit, src, n, lit, src, n, …, lit]``: take
``lit`` literal bytes, then ``n`` bytes of the base from offset ``src``, and so
on; the last entry is the literal bytes after the last run. Pure functions, no
I/O.
"""

from __future__ import annotations

from typing import Final

from deltalog.engine.errors import CorruptRecordError

__all__ = [
    "SPLICE_ANCHOR",
    "SPLICE_KEEP",
    "SPLICE_RUNS",
    "splice_apply",
    "splice_literal",
    "splice_runs",
]

#: The shortest run copied from the base: a shorter common stretch stays literal.
SPLICE_ANCHOR: Final = 32
#: Offsets after a mismatch at which an anchor of the new value is looked for
#: to find the base again (a length field in a header is a few bytes).
SPLICE_TRIES: Final = (0, 8, 16, 32, 64)
#: How far around the base position a new anchor is looked for (the base bytes
#: a removed or replaced message took).
SPLICE_REACH: Final = 64 * 1024
#: At most this many common stretches are looked at; the rest of the value is literal.
SPLICE_RUNS: Final = 64
#: The shortest common stretch kept as a run. A shorter one is mostly a new
#: message's boilerplate (field names, a type) that also occurs in the base:
#: as a run it costs ~6 header bytes and cuts the literal's new messages in
#: two, which the literal's dictionary (the base's end and the writes) would
#: otherwise give as one match. On 100 turns of an ``add_messages`` chat its
#: 56-328 byte runs took 15-25 bytes of each ~95-byte delta record.
SPLICE_KEEP: Final = 1024


def _common(new: bytes, i: int, base: memoryview, j: int) -> int:
    """Length of the common stretch of ``new[i:]`` and ``base[j:]``."""
    n = min(len(new) - i, len(base) - j)
    if n <= 0:
        return 0
    if new.startswith(base[j : j + n], i):
        return n
    # A match of lo bytes is known, one of hi bytes is not: gallop, then bisect.
    lo, hi, step = 0, n, 64
    while lo + step < hi and new.startswith(base[j + lo : j + lo + step], i + lo):
        lo += step
        step *= 2
    hi = min(hi, lo + step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if new.startswith(base[j + lo : j + mid], i + lo):
            lo = mid
        else:
            hi = mid
    return lo


def _resync(new: bytes, i: int, base: bytes, j: int) -> tuple[int, int] | None:
    """The next (new position, base position) at which SPLICE_ANCHOR bytes agree.

    Anchors are taken at :data:`SPLICE_TRIES` offsets after ``i`` and looked for
    within SPLICE_REACH of ``j`` in ``base`` (the nearest match at or after ``j``
    first, then before it); a match found is then extended back towards ``i``
    over the bytes that agree too, so a changed field of up to
    ``SPLICE_TRIES[-1]`` bytes costs a few searches, not one per byte."""
    lo, hi = max(0, j - SPLICE_REACH), min(len(base), j + SPLICE_REACH)
    for off in SPLICE_TRIES:
        a = i + off
        if a + SPLICE_ANCHOR > len(new):
            return None
        anchor = new[a : a + SPLICE_ANCHOR]
        k = base.find(anchor, j, hi)  # the nearest ahead, else the nearest behind
        if k < 0:
            k = base.rfind(anchor, lo, j + SPLICE_ANCHOR - 1)
        if k >= 0:
            back = 0
            while back < off and back < k and new[a - back - 1] == base[k - back - 1]:
                back += 1
            return a - back, k - back
    return None


def splice_runs(new: bytes, base: bytes) -> tuple[list[int], int]:
    """The runs of ``new`` copied from ``base``, and how many bytes they copy.

    The runs are ``[lit, src, n, …, lit]`` (see the module docstring), each at
    least :data:`SPLICE_KEEP` bytes; with no such common stretch they are
    ``[len(new)]``.
    """
    view = memoryview(base)
    runs: list[int] = []
    i = j = start = copied = stretches = 0
    while i < len(new) and stretches < SPLICE_RUNS:
        m = _common(new, i, view, j)
        if m >= SPLICE_ANCHOR:
            stretches += 1
            if m >= SPLICE_KEEP:
                runs += [i - start, j, m]
                start = i + m
                copied += m
            i += m
            j += m
            continue
        found = _resync(new, i, base, j)
        if found is None:
            break
        i, j = found
    runs.append(len(new) - start)
    return runs, copied


def splice_literal(new: bytes, runs: list[int]) -> bytes:
    """The bytes of ``new`` that ``runs`` do not copy, in order."""
    view = memoryview(new)
    parts: list[memoryview] = []
    at = 0
    for k in range(0, len(runs) - 1, 3):
        lit, n = runs[k], runs[k + 2]
        parts.append(view[at : at + lit])
        at += lit + n
    parts.append(view[at : at + runs[-1]])
    return b"".join(parts)


def splice_apply(runs: list[int], base: bytes, literal: bytes, what: str) -> bytes:
    """Rebuild a value from its base, runs and literal.

    Raises:
        CorruptRecordError: A run reaches outside the base or the literal, or the
            literal has bytes left over (naming ``what``).
    """
    if not runs or len(runs) % 3 != 1 or any(type(x) is not int or x < 0 for x in runs):
        raise CorruptRecordError(
            f"record {what} is a splice delta with malformed runs; run `deltalog verify`"
        )
    lview, bview = memoryview(literal), memoryview(base)
    parts: list[memoryview] = []
    at = 0
    for k in range(0, len(runs) - 1, 3):
        lit, src, n = runs[k], runs[k + 1], runs[k + 2]
        if at + lit > len(literal) or src + n > len(base):
            break
        parts.append(lview[at : at + lit])
        parts.append(bview[src : src + n])
        at += lit
    else:
        if at + runs[-1] == len(literal):
            parts.append(lview[at:])
            return b"".join(parts)
    raise CorruptRecordError(
        f"record {what} is a splice delta whose runs do not fit its base "
        f"({len(base)} bytes) and literal ({len(literal)} bytes); run `deltalog verify`"
    )
