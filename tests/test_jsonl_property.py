"""``core.jsonl.iter_jsonl`` on hostile files: it raises only ``InputError`` naming file:line, or with
``on_bad="yield"`` never raises and hands each bad line over as a ``BadLine`` (issue 15).

    pytest tests/test_jsonl_property.py -q
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tansaku.core.errors import InputError
from tansaku.core.jsonl import BadLine, iter_jsonl

BOM = "\ufeff".encode()
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                      max_leaves=10)
objects = st.dictionaries(st.text(), values, max_size=4)


def _object_line(obj: dict) -> tuple[bytes, dict]:
    return json.dumps(obj, ensure_ascii=False).encode(), obj  # json.dumps never writes a raw newline


# Each generated line: (bytes without a newline, the object it must yield or None when it may be bad).
lines = st.one_of(
    objects.map(_object_line),
    st.binary(max_size=40).map(lambda b: (b.replace(b"\n", b" "), None)),                  # garbage bytes
    st.integers(1_000, 100_000).map(lambda n: (b"[" * n + b"]" * n, None)),                # deep nesting
    st.integers(1_000, 100_000).map(lambda n: (b'{"a": [' * n + b"1" + b"]}" * n, None)),
    st.integers(4_301, 20_000).map(lambda n: (b'{"n": ' + b"9" * n + b"}", None)),         # over the int limit
    st.sampled_from([b"[1, 2]", b'"text"', b"null", b"1e999", b"{", b"\xff\xfe", b"\xed\xa0\x80"]).map(lambda b: (b, None)),
    objects.map(lambda o: (BOM + _object_line(o)[0], None)),                                 # a BOM mid-file is bad
)


@contextmanager
def _written(content: list[tuple[bytes, dict | None]], bom: bool) -> Iterator[Path]:
    """The lines as a file in a folder removed afterwards (hypothesis runs each test many times)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.jsonl"
        path.write_bytes((BOM if bom else b"") + b"\n".join(raw for raw, _ in content) + b"\n")
        yield path


@settings(max_examples=60, deadline=None)
@given(st.lists(lines, min_size=1, max_size=6), st.booleans())
def test_yield_mode_never_raises_and_keeps_every_good_line(content, bom):
    with _written(content, bom) as path:
        got = list(iter_jsonl(path, on_bad="yield"))
        numbers = [n for n, _ in got]
        assert numbers == sorted(set(numbers)) and all(1 <= n <= len(content) for n in numbers)
        by_number = dict(got)
        for number, (raw, obj) in enumerate(content, 1):
            value = by_number.get(number)
            if obj is not None:  # a well-formed object line (line 1 too, after a BOM) comes back as it was
                assert value == obj
            elif isinstance(value, BadLine):
                assert value.reason in ("bad_json_line", "not_an_object", "bad_encoding")
                assert value.where.startswith(f"{path}:{number}: ")
            elif value is None:
                assert not raw.decode("utf-8", "replace").strip()  # only blank lines are skipped
            else:
                assert isinstance(value, dict)


@settings(max_examples=60, deadline=None)
@given(st.lists(lines, min_size=1, max_size=6), st.booleans())
def test_raise_mode_raises_only_input_error_naming_file_and_line(content, bom):
    with _written(content, bom) as path:
        try:
            for _, value in iter_jsonl(path):
                assert isinstance(value, dict)
        except InputError as exc:
            assert re.match(rf"^{re.escape(str(path))}:\d+: ", str(exc)), str(exc)


@pytest.mark.parametrize("content, reason", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"n": ' + b"9" * 5_000 + b"}", "not valid JSON"),
    (b'{"a": "\xff"}', "not valid UTF-8"),
    (BOM + b'{"a": 1}', None),
])
def test_concrete_hostile_lines(tmp_path, content, reason):
    path = tmp_path / "x.jsonl"
    path.write_bytes(content + b"\n")
    if reason is None:
        assert list(iter_jsonl(path)) == [(1, {"a": 1})]
        return
    with pytest.raises(InputError, match=rf"x\.jsonl:1: .*{reason}"):
        list(iter_jsonl(path))


def test_a_folder_is_input_error_not_missing(tmp_path):
    with pytest.raises(InputError, match="a folder"):
        list(iter_jsonl(tmp_path))


def test_a_lone_surrogate_is_read_as_the_replacement_character_and_a_pair_as_its_character(tmp_path):
    """Issue 28: ``"\\ud800"`` decoded to a string no UTF-8 writer takes; the build died in whichever wrote it."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"title": "\\ud800", "k\\udfff": ["a\\uDC00b", {"x": "\\ud83d\\ude00"}]}\n')
    [(number, row)] = list(iter_jsonl(path))
    assert number == 1
    assert row == {"title": "\ufffd", "k\ufffd": ["a\ufffdb", {"x": "😀"}]}
    json.dumps(row, ensure_ascii=False).encode("utf-8")


def test_nesting_is_bounded_below_the_recursion_limit(tmp_path):
    """Deep enough to break whatever walks the value later, yet under the parser's own RecursionError."""
    from tansaku.core.jsontext import MAX_DEPTH

    path = tmp_path / "x.jsonl"
    ok, deep = MAX_DEPTH - 1, 500
    path.write_text('{"a": ' + "[" * ok + "]" * ok + "}\n" + '{"a": ' + "[" * deep + "]" * deep + "}\n", encoding="utf-8")
    got = list(iter_jsonl(path, on_bad="yield"))
    assert isinstance(got[0][1], dict)
    assert isinstance(got[1][1], BadLine) and "nested too deeply" in got[1][1].where
