"""The one JSON-lines reader: every ``.jsonl`` input (and the engine's work chunks) is read here.

    for n, row in iter_jsonl("rows.jsonl"):                  # a bad line raises InputError naming file:line
    for n, row in iter_jsonl(path, on_bad="yield"):          # a bad line arrives as BadLine(reason, where)
    for n, row in iter_jsonl(path, error=StoreError):        # raise the caller's own error class

Values are read by ``tansaku.core.jsontext.loads``: a line nested deeper than ``jsontext.MAX_DEPTH`` is a
bad line, and a lone surrogate (``"\\ud800"``) is read as U+FFFD. Blank lines are skipped; ``.gz``, ``.bz2``
and ``.zst`` files are decompressed as a stream
(``open_compressed``: a 10 GB dump is never held in memory). Lines are the file's own ``\\n`` lines,
never ``str.splitlines()``, which also breaks at U+2028 and other separators that JSON strings may hold.

>>> import tempfile, pathlib
>>> folder = tempfile.TemporaryDirectory()
>>> p = pathlib.Path(folder.name) / "x.jsonl"
>>> _ = p.write_text('{"a": 1}\\n\\n[2]\\n{bad\\n', encoding="utf-8")
>>> [(n, v if isinstance(v, dict) else v.reason) for n, v in iter_jsonl(p, on_bad="yield")]
[(1, {'a': 1}), (3, 'not_an_object'), (4, 'bad_json_line')]
>>> list(iter_jsonl(p, objects=False))
Traceback (most recent call last):
...
tansaku.core.errors.InputError: ...x.jsonl:4: not valid JSON (Expecting property name enclosed in double
quotes)
>>> folder.cleanup()
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import zstandard

from tansaku.core import jsontext
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.input_files import refuse_special

COMPRESSED = (".gz", ".bz2", ".zst", ".zstd")
# What a truncated or foreign compressed file raises while it is read: the file is bad, not a line.
DECOMPRESSION_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error, zstandard.ZstdError, OSError)


def open_compressed(path: str | os.PathLike):
    """``path`` opened for binary reading, decompressed as a stream by its suffix (``.gz``, ``.bz2``,
    ``.zst``/``.zstd``; anything else as it is). Lines come out one at a time: memory stays one buffer.
    A FIFO, device or socket is refused (``InputError``) before it is opened: reading one would block."""
    path = Path(path)
    refuse_special(path)
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix in (".zst", ".zstd"):
        return io.BufferedReader(_ZstdFrames(open(path, "rb")), buffer_size=CHUNK)
    return open(path, "rb")


CHUNK = 1 << 17


class _ZstdFrames(io.RawIOBase):
    """A zstd file decompressed frame after frame (``pzstd`` and ``zstd -T`` write several), raising
    ``ZstdError`` when it ends inside a frame: zstandard's ``stream_reader`` returns a truncated dump's
    partial data without a word, which would build a silently shorter corpus."""

    def __init__(self, raw):
        self._raw, self._zstd = raw, zstandard.ZstdDecompressor()
        self._frame, self._fed, self._out = self._zstd.decompressobj(), False, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._out:
            chunk = self._raw.read(CHUNK)
            if not chunk:
                if self._fed and not self._frame.eof:
                    raise zstandard.ZstdError("the file ends inside a frame (truncated?)")
                return 0
            while chunk:
                if self._frame.eof:  # the previous frame ended: what follows is the next one
                    self._frame, self._fed = self._zstd.decompressobj(), False
                self._out += self._frame.decompress(chunk)
                self._fed = True
                chunk = self._frame.unused_data if self._frame.eof else b""
        n = min(len(buffer), len(self._out))
        buffer[:n], self._out = self._out[:n], self._out[n:]
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def unreadable(path: Path, exc: Exception) -> str:
    """The one line a truncated or foreign compressed file gets."""
    kind = {".gz": "gzip", ".bz2": "bzip2"}.get(path.suffix.lower(), "zstandard")
    return f"{path}: not a readable {kind} file ({exc})"


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
    try:  # nesting bounded (jsontext.MAX_DEPTH), lone surrogates read as U+FFFD
        return jsontext.loads(line, decoded=True), None
    except json.JSONDecodeError as exc:  # also too deep, or an integer over Python's 4300-digit limit
        return None, BadLine("bad_json_line", f"{path}:{number}: not valid JSON ({exc.msg})")


def iter_jsonl(path: str | os.PathLike, *, on_bad: Literal["raise", "yield"] = "raise", objects: bool = True,
               error: type[Exception] = InputError) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of ``path``.

    ``objects``: a value that is not a JSON object is a bad line too. A bad line (not JSON, not UTF-8, nested
    too deeply) raises ``error`` (message ``"PATH:LINE: …"``) or, with ``on_bad="yield"``, comes as
    ``(line number, BadLine)`` so the caller can drop it with its reason. A missing file raises
    ``MissingInputError``; a folder or an unreadable compressed file raises ``error``.
    """
    path = Path(path)
    refuse_special(path, error=error)  # looked at, not opened: a FIFO would block the read
    if path.is_dir():
        raise error(f"{path}: a folder, expected a JSON-lines file")
    if not path.is_file():
        raise MissingInputError(f"{path}: no such file")
    try:
        with open_compressed(path) as f:
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
    except DECOMPRESSION_ERRORS as exc:  # a truncated or foreign archive: the file, not a line
        if path.suffix.lower() not in COMPRESSED:
            raise
        raise error(unreadable(path, exc)) from None
