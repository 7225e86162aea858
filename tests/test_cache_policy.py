"""One cache policy object sets every budget of an environment (issue 16, "one cache policy")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine.cache import CachePolicy
from deltalog.engine.env import Environment
from deltalog.engine.errors import OptionError

from tests.checkpoints import put_values


def test_every_cache_of_an_environment_takes_its_budget_from_the_policy(tmp_path: Path) -> None:
    """The payload, envelope, name and memo caches are built from one CachePolicy."""
    policy = CachePolicy(
        payload_bytes=5_000_000,
        envelope_entries=7,
        name_entries=3,
        memo_entries=11,
        memo_bytes=6_000_000,
    )
    env = Environment(tmp_path / "s", caches=policy)
    try:
        assert env.caches is policy
        assert env.payloads.max_bytes == 5_000_000
        assert env.envelopes.max_entries == 7
        assert env._names.max_entries == env._name_ids.max_entries == 3
        assert env.memo.max_entries == 11 and env.memo.budget.cap == 6_000_000
    finally:
        env.close()


def test_the_name_budget_bounds_the_name_maps_through_real_puts(tmp_path: Path) -> None:
    """A name budget of 4 keeps at most 4 names each way after 50 threads were written."""
    env = Environment(tmp_path / "s", caches=CachePolicy(name_entries=4))
    with DeltaLogSaver(env) as saver:
        for k in range(50):
            put_values(saver, f"t{k}", {"v": k})
        with env.read() as r:
            for k in range(50):
                assert r.name_id(keys.KIND_THREAD, f"t{k}") is not None
        assert len(env._names) <= 4 and len(env._name_ids) <= 4


def test_memo_entries_overrides_the_policy(tmp_path: Path) -> None:
    """``memo_entries=0`` (the documented switch) still turns the memo off under a policy."""
    env = Environment(tmp_path / "s", memo_entries=0, caches=CachePolicy(memo_entries=99))
    try:
        assert env.caches.memo_entries == 0 and not env.memo.enabled
    finally:
        env.close()


@pytest.mark.parametrize(
    "options",
    [
        {"payload_bytes": -1},
        {"name_entries": 0},
        {"memo_entries": "4096"},
        {"envelope_entries": True},
        {"decoded_bytes": 1.5},
    ],
)
def test_a_bad_budget_is_refused_naming_it(options: dict[str, Any]) -> None:
    """R9: OptionError naming the budget and its value, before anything is opened."""
    with pytest.raises(OptionError) as raised:
        CachePolicy(**options)
    (name, value), *_ = options.items()
    assert f"{name}={value!r}" in str(raised.value)
