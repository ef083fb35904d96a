"""The one JSON-lines reader: every ``.jsonl`` input (and the engine's work chunks) is read here.

    for n, row in iter_jsonl("rows.jsonl"):                  # a bad line raises InputError naming file:line
    for n, row in iter_jsonl(path, on_bad="yield"):          # a bad line arrives as BadLine(reason, where)
    for n, row in iter_jsonl(path, error=StoreError):        # raise the caller's own error class

Blank lines are skipped and ``.gz`` files are read through gzip. Lines are the file's own ``\\n`` lines,
never ``str.splitlines()``, which also breaks at U+2028 and other separators that JSON strings may hold.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
>>> _ = p.write_text('{"a": 1}\\n\\n[2]\\n{bad\\n', encoding="utf-8")
>>> [(n, v if isinstance(v, dict) else v.reason) for n, v in iter_jsonl(p, on_bad="yield")]
[(1, {'a': 1}), (3, 'not_an_object'), (4, 'bad_json_line')]
>>> list(iter_jsonl(p, objects=False))
Traceback (most recent call last):
...
tansaku.core.errors.InputError: ...x.jsonl:4: not valid JSON (Expecting property name enclosed in double quotes)
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tansaku.core.errors import InputError, MissingInputError


@dataclass(frozen=True)
class BadLine:
    """A line that could not be used: ``reason`` (``bad_json_line`` | ``not_an_object``) and ``path:line``."""

    reason: str
    where: str


_BLANK = object()  # what _parse returns for a blank line (JSON null is a value, so None cannot say it)


def _parse(raw: bytes, number: int, path: Path) -> tuple[Any, BadLine | None]:
    """One line's value, or why it is bad. Bytes are decoded per line, so one invalid byte costs that line,
    not the rest of the file; a UTF-8 BOM on line 1 is the file's encoding mark, not part of the record."""
    try:
        line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        return None, BadLine("bad_encoding", f"{path}:{number}: not valid UTF-8 (byte {exc.start})")
    if not line.strip():
        return _BLANK, None
    try:
        return json.loads(line), None
    except json.JSONDecodeError as exc:
        return None, BadLine("bad_json_line", f"{path}:{number}: not valid JSON ({exc.msg})")
    except RecursionError:  # hostile nesting ([[[[…) overflows the parser's stack
        return None, BadLine("bad_json_line", f"{path}:{number}: not valid JSON (nested too deeply)")
    except ValueError as exc:  # e.g. an integer over Python's 4300-digit conversion limit
        return None, BadLine("bad_json_line", f"{path}:{number}: not valid JSON ({exc})")


def iter_jsonl(path: str | os.PathLike, *, on_bad: Literal["raise", "yield"] = "raise", objects: bool = True,
               error: type[Exception] = InputError) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of ``path``.

    ``objects``: a value that is not a JSON object is a bad line too. A bad line (not JSON, not UTF-8, nested
    too deeply) raises ``error`` (message ``"PATH:LINE: …"``) or, with ``on_bad="yield"``, comes as
    ``(line number, BadLine)`` so the caller can drop it with its reason. A missing file raises
    ``MissingInputError``; a folder or an unreadable gzip file raises ``error``.
    """
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: a folder, expected a JSON-lines file")
    if not path.is_file():
        raise MissingInputError(f"{path}: no such file")
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                value, bad = _parse(raw, number, path)
                if value is _BLANK:
                    continue
                if bad is None:
                    if not objects or isinstance(value, dict):
                        yield number, value
                        continue
                    bad = BadLine("not_an_object", f"{path}:{number}: not a JSON object")
                if on_bad == "raise":
                    raise error(bad.where)
                yield number, bad
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # a truncated or foreign .gz: the file, not a line
        raise error(f"{path}: not a readable gzip file ({exc})") from None
