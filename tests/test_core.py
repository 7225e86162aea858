"""The pure core fed plain data: the walk step, the skip-delta base choice, plans (issue 16)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from deltalog.engine.blobs import MAX_LINKS, SPLIT_MAX, link_span
from deltalog.engine.core import (
    SKIP_RADIX,
    DeltaWalk,
    Node,
    delta_chains,
    parent_cycles,
    plan_delete,
    plan_keep,
    skip_base,
)
from deltalog.engine.store_rows import StoredValue, WriteRow


def w(channel: str, payload: bytes) -> WriteRow:
    return WriteRow("task", channel, ("msgpack", payload), "", 0)


def seed(tag: bytes) -> StoredValue:
    return StoredValue(tag, f"blobs/{tag.hex()}", ("msgpack", tag))


def test_the_walk_stops_each_channel_at_its_seed_and_orders_writes_oldest_first() -> None:
    """R6: ancestors fed nearest first; a channel ends at its first seed, whose writes count."""
    walk = DeltaWalk(("a", "b"))
    walk.visit([w("a", b"a3"), w("b", b"b3"), w("c", b"c3")], {})
    walk.visit([w("a", b"a2")], {"b": seed(b"B")})
    assert walk.remaining == {"a"} and not walk.done
    walk.visit([w("a", b"a1"), w("b", b"ignored")], {})
    assert walk.result() == {
        "a": (None, [w("a", b"a1"), w("a", b"a2"), w("a", b"a3")]),
        "b": (seed(b"B"), [w("b", b"b3")]),
    }


def test_adopting_a_known_history_puts_its_writes_first() -> None:
    """The memo's shortcut: a remembered history of the last ancestor finishes the channel."""
    walk = DeltaWalk(("a",))
    walk.visit([w("a", b"new")], {})
    walk.adopt("a", seed(b"S"), [w("a", b"old1"), w("a", b"old2")])
    assert walk.done
    assert walk.result() == {"a": (seed(b"S"), [w("a", b"old1"), w("a", b"old2"), w("a", b"new")])}


def chain_links(n: int, span: int | None = None, growth: int | None = None) -> list[int]:
    """Links a read of each of n versions resolves, choosing bases with skip_base
    (with ``span``); with ``growth``, as the store does when every version grows
    by that many bytes (skip_base, then link_span's split)."""
    indices: list[int] = []
    base_of: list[int | None] = []
    for v in range(n):
        found = skip_base(reversed(indices), span)
        if found is not None and growth is not None:
            base = len(indices) - 1 - found[0]
            split = link_span((v + 1) * growth, (base + 1) * growth, found[1] - indices[base])
            if split is not None:
                found = skip_base(reversed(indices), split)
        if found is None:
            indices.append(0)
            base_of.append(None)
        else:
            steps, seq = found
            base_of.append(len(indices) - 1 - steps)
            indices.append(seq)
    links = []
    for v in range(n):
        k, b = 0, base_of[v]
        while b is not None:
            k, b = k + 1, base_of[b]
        links.append(k)
    return links


def test_skip_deltas_keep_every_chain_near_log_of_the_versions() -> None:
    """The base choice: no chain longer than 3 links per base-4 digit of the
    versions (SKIP_RADIX - 1 each), plain ints in."""
    links = chain_links(1000)
    assert links[0] == 0 and links[1] == 1
    assert max(links) <= (SKIP_RADIX - 1) * math.ceil(math.log(1000, SKIP_RADIX))
    assert max(links) >= math.log2(1000) - 1  # a delta chain, not full records


def _span(index: int) -> int:
    """How many versions back the base of the version with this index is."""
    found = skip_base(range(index - 1, -1, -1))
    assert found is not None and found[1] == index
    return found[0] + 1


def test_three_versions_in_four_are_deltas_of_the_one_before() -> None:
    """With SKIP_RADIX 4 a version's base is the one before it unless its index is
    a multiple of 4, and what the deltas span in all (what they store: the
    content added since their bases) is a quarter less than with radix 2."""
    assert SKIP_RADIX == 4
    spans = [_span(index) for index in range(1, 1001)]
    assert [index for index, span in enumerate(spans, 1) if span > 1] == list(range(4, 1001, 4))
    assert [_span(index) for index in (8, 16, 48, 64, 192, 256)] == [4, 16, 16, 64, 64, 256]
    radix_2 = sum(index & -index for index in range(1, 1001))  # lowest set bit cleared
    assert sum(spans) < 0.8 * radix_2


def test_a_span_bounds_every_link_and_keeps_chains_short() -> None:
    """With a span (the store's split of a link that grew too much), no base is
    more than span versions back, and a chain is ~1.5 versions/span (three links
    per two spans on the base-4 lattice) + 3 links per base-4 digit of span."""
    assert skip_base(range(191, -1, -1), span=32) == (31, 192)  # index 160, not 128
    assert skip_base(range(199, -1, -1), span=32) == (3, 200)  # index 196 (200 is 3020 in
    assert skip_base(range(199, -1, -1)) == (3, 200)  # base 4): within the span already
    assert skip_base(range(191, -1, -1), span=1) == (0, 192)
    links = chain_links(1000, span=32)
    assert max(links) <= 3 * 1000 // (2 * 32) + (SKIP_RADIX - 1) * math.ceil(math.log(32, 4)) + 1
    assert links[192] == 1 + links[160]
    with pytest.raises(ValueError, match="span=0"):
        skip_base([3, 2, 1, 0], span=0)


def test_link_span_splits_only_links_that_grew_too_much() -> None:
    """The span is the largest power of two of versions within LINK_GROWTH at the
    link's average growth a version; values above SPLIT_MAX are never split."""
    mib = 1024**2
    assert link_span(12 * mib, 8 * mib, 64) == 32  # 4 MiB over 64 versions
    assert link_span(12 * mib, 10 * mib, 32) is None  # 2 MiB: within
    assert link_span(12 * mib, 4 * mib, 64) == 16  # 8 MiB over 64
    assert link_span(12 * mib, 0, 2) == 1
    assert link_span(12 * mib, 0, 1) is None  # one back: nothing nearer
    assert link_span(SPLIT_MAX, SPLIT_MAX - 4 * mib, 64) == 32
    assert link_span(SPLIT_MAX + 1, SPLIT_MAX - 4 * mib, 64) is None


@pytest.mark.parametrize("growth", [20_000, 66_000, 1_100_000, 3_000_000])
def test_split_links_keep_chains_well_within_max_links(growth: int) -> None:
    """Split links cover ~1 MiB or more each and stop above SPLIT_MAX, so a chain
    stays far below MAX_LINKS (a reader's loop guard) however large the value
    grows: here up to 2,000 versions or 256 MiB."""
    versions = min(2000, 256 * 1024**2 // growth)
    longest = max(chain_links(versions, growth=growth))
    assert longest <= MAX_LINKS - 16, longest
    if growth == 66_000:
        assert longest > 2 * math.log2(versions)  # links were split (skip deltas alone: ~11)


def test_skip_base_reads_only_as_far_as_the_base() -> None:
    """The indices are consumed lazily (the storage side walks a cursor)."""
    seen: list[int] = []

    def lazy() -> Iterator[int]:
        for i in [7, 6, 5, 4, 3, 2, 1, 0]:
            seen.append(i)
            yield i

    assert skip_base(lazy()) == (3, 8)  # new index 8 (20 in base 4): base index 4
    assert seen == [7, 6, 5, 4]
    seen.clear()
    assert skip_base(lazy(), span=2) == (1, 8)  # at most two back: base index 6
    assert seen == [7, 6]
    assert skip_base([6, 5, 4, 3, 2, 1, 0]) == (0, 7)
    assert skip_base([]) is None
    assert skip_base([3, 2]) is None  # new index 4 wants the full record: missing


def nodes(*rows: tuple[str, str | None, str, str]) -> dict[str, Node]:
    """(id, parent, delta channels, seeded channels) rows as Nodes."""
    return {
        cid: Node(cid, parent, frozenset(delta), frozenset(seeded))
        for cid, parent, delta, seeded in rows
    }


CHAIN = nodes(
    ("1", None, "", "m"),
    ("2", "1", "m", ""),
    ("3", "2", "m", ""),
    ("4", "3", "m", "m"),
    ("5", "4", "m", ""),
)


def test_chains_reach_back_to_the_seed() -> None:
    """R7: a kept checkpoint needs every ancestor up to (and with) the nearest seed."""
    assert delta_chains(CHAIN, ["5"]).required == {"5", "4"}
    assert delta_chains(CHAIN, ["3"]).required == {"3", "2", "1"}
    broken = delta_chains({k: v for k, v in CHAIN.items() if k != "1"}, ["3"])
    assert broken.broken == {("3", "m"): "1"}


def test_plan_keep_deletes_what_no_kept_chain_needs_and_hides_the_rest() -> None:
    """A prune that keeps 5 drops 1-3, keeps 4 (its seed) hidden."""
    plan = plan_keep(CHAIN, {"5"})
    assert plan.delete == {"1", "2", "3"}
    assert plan.hide == {"4"}
    reseeded = plan_keep(CHAIN, {"5"}, reseed=frozenset({"m"}))
    assert reseeded.seeds == {"5": {"m"}} and reseeded.delete == {"1", "2", "3", "4"}


def test_plan_delete_reseeds_a_crossing_or_reports_it() -> None:
    """Deleting 4 (a run): 5 replays through it, so 5 is re-seeded, or the crossing returned."""
    plan, unresolved = plan_delete(CHAIN, {"4"}, reseed=frozenset({"m"}))
    assert plan.delete == {"4"} and plan.seeds == {"5": {"m"}} and unresolved == {}
    assert plan.relink == {"5": "3"}
    _, unresolved = plan_delete(CHAIN, {"4"})
    assert unresolved == {("5", "m"): "5"}


def test_parent_cycles_are_found_once_from_their_smallest_id() -> None:
    """R11: each loop once; roots and missing parents end a chain."""
    assert parent_cycles({"a": None, "b": "a"}) == []
    assert parent_cycles({"b": "c", "c": "b", "d": "b", "e": "e"}) == [["b", "c"], ["e"]]
    assert parent_cycles({"x": "gone"}) == []
