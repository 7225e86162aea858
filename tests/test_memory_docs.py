"""The examples of docs/memory.md run as written and print what their comments say (issue 17)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = (Path(__file__).resolve().parent.parent / "docs" / "memory.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_memory_doc_example(
    block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each example runs on a real store; every `print(...)  # expected` prints expected."""
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/memory.md", "exec"), {"__name__": "docs_memory"})
    printed = capsys.readouterr().out.splitlines()
    expected = [
        m.group(1).split(":")[0].strip()
        for m in re.finditer(r"^\s*print\(.*\)\s+#\s*(.*)$", block, re.M)
    ]
    assert printed == expected
