"""The export stream's one module round-trips every line and refuses what it cannot carry (issue 16, export)."""

from __future__ import annotations

from typing import Any

import pytest
from deltalog.engine import export
from deltalog.engine.errors import ImportRecordError, InvalidInputError
from hypothesis import given
from hypothesis import strategies as st

_leaf = st.none() | st.booleans() | st.integers() | st.text() | st.binary()
_values = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text().filter(lambda k: k != "$b64"), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text().filter(lambda k: k != "$b64"), _values, max_size=5))
def test_a_record_round_trips_through_its_line(record: dict[str, Any]) -> None:
    """decode_record(encode_record(r)) == r for bytes anywhere; one line, no newline in it."""
    line = export.encode_record(record)
    assert "\n" not in line
    assert export.decode_record(line) == record


def test_a_mapping_that_would_read_back_as_bytes_is_refused() -> None:
    """A value {"$b64": ...} cannot be exported: the library says so with InvalidInputError."""
    with pytest.raises(InvalidInputError, match=r"only key is '\$b64'"):
        export.encode_record({"kind": "blob", "value": {"$b64": "AQ=="}})


def test_the_header_is_the_one_the_reader_accepts() -> None:
    """header() passes check_header; another format or version is refused at line 1."""
    assert export.check_header(export.header()) == export.EXPORT_VERSION
    assert export.check_header({**export.header(), "version": 1}) == 1  # still read
    bad_headers: list[Any] = [
        {**export.header(), "version": 3},
        {**export.header(), "version": True},
        {**export.header(), "format": "x"},
        [],
    ]
    for bad in bad_headers:
        with pytest.raises(ImportRecordError, match="line 1 of the import stream"):
            export.check_header(bad)


def test_read_lines_skips_blank_lines_and_names_a_bad_one() -> None:
    """Blank lines are skipped (numbers kept); a line that is not JSON names its number."""
    lines = [export.encode_record(export.header()).encode() + b"\n", b"\n", b'{"kind":"x"}\n']
    records, numbers = export.read_lines(lines)
    assert records == [export.header(), {"kind": "x"}]
    assert numbers == [1, 3]
    with pytest.raises(ImportRecordError, match="line 2 of the import stream: JSONDecodeError"):
        export.read_lines([lines[0], b"{not json\n"])
