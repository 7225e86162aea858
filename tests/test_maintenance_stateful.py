"""Stateful property test: random chat turns and maintenance against a model (R7, R8).

After every step, every checkpoint the model still holds is listed and
reconstructs to exactly the state it had when it was written, and
``verify()`` reports no error.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
from deltalog.engine import DeltaChainError, DeltaLogSaver, InvalidInputError, ThreadExistsError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from langchain_core.runnables import RunnableConfig

from .graphs import cfg, chat_graph, human, observe, reply_to

THREADS = ("a", "b", "c")
SF = 3


class MaintenanceMachine(RuleBasedStateMachine):
    """deltalog versus a model of what each thread must still show."""

    #: every such turn of a thread gets a long reply (0: none), whose record a
    #: turn pack carries in chunks (format 16)
    long_every = 0

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = f"{self.dir}/store"
        self.saver = DeltaLogSaver.from_path(self.path, map_size=256 * 1024)
        self.graph = chat_graph(SF, self.long_every).compile(checkpointer=self.saver)
        # thread -> {checkpoint_id: observed values}, for every listed checkpoint
        self.model: dict[str, dict[str, Any]] = {}
        self.turn_no = 0

    def teardown(self) -> None:
        self.saver.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _listed(self, thread_id: str) -> list[str]:
        return [
            t.config["configurable"]["checkpoint_id"]
            for t in self.saver.list(cfg(thread_id, checkpoint_ns=""))
        ]

    def _state(self, thread_id: str, checkpoint_id: str) -> Any:
        config: RunnableConfig = cfg(thread_id, checkpoint_id=checkpoint_id, checkpoint_ns="")
        return observe(self.graph.get_state(config))["values"]

    def _record(self, thread_id: str) -> None:
        known = self.model.setdefault(thread_id, {})
        for cid in self._listed(thread_id):
            if cid not in known:
                known[cid] = self._state(thread_id, cid)

    @rule(thread=st.sampled_from(THREADS), count=st.integers(1, 5))
    def turn(self, thread: str, count: int) -> None:
        """``count`` chat turns (enough of them make turn packs): each new latest
        state is the old one plus the human message and the reply."""
        for _ in range(count):
            values = self.graph.get_state(cfg(thread)).values
            before, turns = values.get("messages", []), values.get("turns", 0) + 1
            self.turn_no += 1
            config = cfg(thread)
            config["metadata"] = {"run_id": f"run-{self.turn_no}"}
            self.graph.invoke({"messages": [human(self.turn_no)]}, config)
            expected = [*before, human(self.turn_no)]
            long = self.long_every and turns % self.long_every == 0
            expected.append(reply_to(expected, 700 if long else 75))
            got = self.graph.get_state(cfg(thread)).values["messages"]
            assert [(m.id, m.content) for m in got] == [(m.id, m.content) for m in expected]
            self._record(thread)

    @rule(src=st.sampled_from(THREADS), dst=st.sampled_from(THREADS))
    def copy(self, src: str, dst: str) -> None:
        """copy_thread: the target shows the source's checkpoints; it never merges or self-copies."""
        if src == dst:
            with pytest.raises(InvalidInputError):
                self.saver.copy_thread(src, dst)
            return
        if src not in self.model:
            assert not self.saver.copy_thread(src, dst).found
            return
        if dst in self.model:
            with pytest.raises(ThreadExistsError):
                self.saver.copy_thread(src, dst)
            return
        assert self.saver.copy_thread(src, dst).found
        self.model[dst] = dict(self.model[src])

    @rule(thread=st.sampled_from(THREADS), reducers=st.booleans(), keep=st.integers(1, 3))
    def prune(self, thread: str, reducers: bool, keep: int) -> None:
        """prune(keep_last): the newest `keep` checkpoints stay exact; older ones leave the listing."""
        self.saver.prune([thread], keep_last=keep, reducers=self.graph if reducers else None)
        if thread in self.model:
            ids = sorted(self.model[thread], reverse=True)[:keep]
            self.model[thread] = {cid: self.model[thread][cid] for cid in ids}

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), reducers=st.booleans())
    def delete_run(self, data: st.DataObject, reducers: bool) -> None:
        """delete_for_runs: either refuses (DeltaChainError) changing nothing, or removes exactly that run."""
        thread = data.draw(st.sampled_from(sorted(self.model)))
        runs = sorted(
            {
                run_id
                for t in self.saver.list(cfg(thread, checkpoint_ns=""))
                if (run_id := t.metadata.get("run_id")) is not None
            }
        )
        if not runs:
            return
        run = data.draw(st.sampled_from(runs))
        doomed = {
            t.config["configurable"]["checkpoint_id"]
            for tid in self.model
            for t in self.saver.list(cfg(tid, checkpoint_ns=""), filter={"run_id": run})
        }
        try:
            self.saver.delete_for_runs([run], reducers=self.graph if reducers else None)
        except DeltaChainError:
            assert not reducers, "with reducers a cut chain is re-seeded, never refused"
            return
        for tid in list(self.model):
            self.model[tid] = {c: v for c, v in self.model[tid].items() if c not in doomed}
            if not self.model[tid]:  # the run was the thread's only one: the thread is gone
                del self.model[tid]

    @rule(thread=st.sampled_from(THREADS))
    def delete_thread(self, thread: str) -> None:
        """delete_thread removes the thread and nothing else."""
        self.saver.delete_thread(thread)
        self.model.pop(thread, None)

    @rule()
    def reopen(self) -> None:
        """Closing and reopening the store changes nothing."""
        self.saver.close()
        self.saver = DeltaLogSaver.from_path(self.path, map_size=256 * 1024)
        self.graph = chat_graph(SF, self.long_every).compile(checkpointer=self.saver)

    @invariant()
    def every_kept_checkpoint_is_exact(self) -> None:
        """Every checkpoint the model holds is listed and reconstructs to its recorded state."""
        for thread in THREADS:
            expected = self.model.get(thread, {})
            listed = self._listed(thread)
            assert listed == sorted(expected, reverse=True), thread
            for cid, values in expected.items():
                assert self._state(thread, cid) == values, (thread, cid)

    @invariant()
    def verify_is_clean(self) -> None:
        """verify() finds no error after any sequence of operations."""
        report = self.saver.verify()
        assert report.ok, report.problems


class LongRepliesMachine(MaintenanceMachine):
    """The same with a long reply every second turn of a thread: packs carry
    records in chunks, and copy, prune, deletes and reopening meet them."""

    long_every = 2


_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMaintenanceMachine = MaintenanceMachine.TestCase
TestMaintenanceMachine.settings = _SETTINGS
TestLongRepliesMachine = LongRepliesMachine.TestCase
TestLongRepliesMachine.settings = _SETTINGS
