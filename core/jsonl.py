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


def iter_jsonl(path: str | os.PathLike, *, on_bad: Literal["raise", "yield"] = "raise", objects: bool = True,
               error: type[Exception] = InputError) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of ``path``.

    ``objects``: a value that is not a JSON object is a bad line too. A bad line raises ``error`` (message
    ``"PATH:LINE: …"``) or, with ``on_bad="yield"``, comes as ``(line number, BadLine)`` so the caller can
    drop it with its reason. A missing file raises ``MissingInputError``.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"{path}: no such file")
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                bad = BadLine("bad_json_line", f"{path}:{number}: not valid JSON ({exc.msg})")
            else:
                if not objects or isinstance(value, dict):
                    yield number, value
                    continue
                bad = BadLine("not_an_object", f"{path}:{number}: not a JSON object")
            if on_bad == "raise":
                raise error(bad.where)
            yield number, bad
