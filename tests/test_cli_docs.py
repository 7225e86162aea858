"""The examples in the CLI and user docs run (doctest) and the CLI reference covers the stream format."""

from __future__ import annotations

import doctest
import tempfile
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("name", ["getting-started.md", "concepts.md", "migrating-to-postgres.md"])
def test_doc_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `>>>` example of the page gives the output the page shows (the
    folders its ``tempfile.mkdtemp()`` makes land in ``tmp_path``, not /tmp)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    failed, attempted = doctest.testfile(
        str(DOCS / name), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert attempted > 0, f"{name} has no examples"
    assert failed == 0, f"{failed} of {attempted} examples in docs/{name} failed"


def test_cli_reference_documents_every_export_field() -> None:
    """docs/cli.md names every field a real export record has."""
    from deltalog.engine import DeltaLogSaver
    from langchain_core.messages import HumanMessage

    from .graphs import cfg, chat_graph

    text = (DOCS / "cli.md").read_text()
    section = text.split("### The export stream", 1)[1].split("\n## ", 1)[0]
    with tempfile.TemporaryDirectory() as tmp, DeltaLogSaver.from_path(Path(tmp) / "s") as saver:
        chat_graph(3).compile(checkpointer=saver).invoke(
            {"messages": [HumanMessage("hi", id="h")]}, cfg("t")
        )
        records = list(saver.export_records())
    kinds = {r["kind"] for r in records}
    assert kinds == {"header", "checkpoint", "blob", "write", "end"}
    for record in records:
        assert f"`{record['kind']}`" in section
        for key in record:
            assert f"`{key}`" in section, f"docs/cli.md does not document export field {key!r}"
