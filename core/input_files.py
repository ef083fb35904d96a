"""What a reader may open: a regular file, never a FIFO, a device or a socket.

Opening a FIFO for reading blocks until some other process writes to it, and a character device such as
``/dev/zero`` or ``/dev/urandom`` never ends: a build handed either (``--input x.jsonl`` that is a named pipe,
or one ``*.json`` inside an ``--input`` folder) would hang or fill memory instead of failing. So every reader
looks at the file's type with ``stat`` first (which never blocks) and opens only a regular file: a path given
as an option is refused in one line (:func:`refuse_special`), a file found by walking a folder is skipped
(:func:`regular_files`), as a folder walk skips what is not data.

>>> import os, tempfile
>>> tmp = tempfile.TemporaryDirectory()
>>> folder = tmp.name
>>> fifo = os.path.join(folder, "x.jsonl")
>>> os.mkfifo(fifo)
>>> special_kind(fifo), special_kind(folder), special_kind(os.path.join(folder, "missing"))
('a FIFO (named pipe)', None, None)
>>> refuse_special(fifo, "--input")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --input .../x.jsonl is a FIFO (named pipe), not a regular file: reading it
could block forever
>>> list(regular_files([fifo, folder]))
[]
>>> tmp.cleanup()
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from tansaku.core.errors import InputError

# File types no reader opens, in the words a refusal uses.
_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of_mode(mode: int) -> str | None:
    """``"a FIFO (named pipe)"`` … for a special file's ``st_mode``; None for a regular file, folder or
    link."""
    return next((words for test, words in _SPECIAL if test(mode)), None)


def special_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it is a FIFO, device or socket (links followed); None otherwise, also when it is
    missing or cannot be looked at (the reader's own check names that)."""
    try:
        return kind_of_mode(os.stat(path).st_mode)
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None


def refuse_special(path: str | os.PathLike, option: str | None = None,
                   error: type[Exception] = InputError) -> None:
    """Raise ``error`` (one line) when ``path`` is a FIFO, device or socket; looked at with ``stat``, never
    opened, so this never blocks."""
    if kind := special_kind(path):
        named = f"{option} {path}" if option else str(path)
        raise error(f"{named} is {kind}, not a regular file: reading it could block forever")


def regular_files(paths: Iterable[str | os.PathLike]) -> Iterator[Path]:
    """The regular files among ``paths`` (links followed), for a reader that walks a folder: a FIFO, device,
    socket, folder or dangling link found there is skipped, never opened."""
    for path in paths:
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                yield Path(path)
        except (OSError, ValueError):
            continue
