"""Single-file outputs (``train report --out PNG``, ``synth serve-env --export JSONL``, any option of kind
``value_checks.OUTPUT_FILE``): written only where nothing is yet, or over a file tansaku can prove it made.

An output folder is claimed with a marker inside it (``tansaku.core.ownership``). A single file has no inside,
and an owner record beside it would be one more file in the user's folder to own and keep in step, so the
proof is the file's own content: a PNG tansaku drew carries a ``tEXt`` chunk keyed ``tansaku``
(:data:`PNG_METADATA`, which ``tansaku.trainer.curves.save_figure`` hands matplotlib), and such a file,
regular and the user's own, may be drawn again (``train report RUN --out curves.png``, rerun after more
steps). Nothing else that exists at the path is tansaku's to replace: a user's file, a file of a format with
no room for a mark (an exported JSONL is a list of rows a trainer reads), a symbolic link, dangling or not (a
rename would replace the user's link, a plain open would write through it), a FIFO. Each is refused in one
line that names the option and says to remove it or choose another path; so is a path whose folder is missing,
not a folder, or not writable.

:func:`check_output_file` runs while the command line is parsed (``value_checks.check_path``), before any
work; :func:`output_file` writes: into a fresh temp file beside the target (``safe_write.temp_path``: never an
existing name, never a link), synced, then checked again (the work may have taken hours) and published with
``os.link``, which fails when anything, a link included, appeared at the path meanwhile; a file proven ours is
renamed over.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> with output_file(folder / "rows.jsonl", "--export") as tmp:
...     _ = tmp.write_text("{}\\n", encoding="utf-8")
>>> check_output_file(folder / "rows.jsonl", "--export")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --export ... exists and tansaku cannot prove it made it (only a PNG it drew
carries its mark); remove it or choose another --export
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tansaku.core.errors import InputError
from tansaku.core.safe_write import owned_by_me, sync_file, temp_path

MARK = "tansaku"
PNG_METADATA = {MARK: "drawn by tansaku; a rerun may draw it again"}
_PNG = b"\x89PNG\r\n\x1a\n"
_SCAN = 1 << 20  # bytes of chunks read before the image data: matplotlib's text chunks come right after IHDR


def _png_marked(f) -> bool:
    """Whether the open PNG ``f`` holds a ``tEXt`` chunk keyed :data:`MARK` before its image data."""
    if f.read(8) != _PNG:
        return False
    while f.tell() < _SCAN:
        head = f.read(8)
        if len(head) < 8:
            return False
        length, kind = int.from_bytes(head[:4], "big"), head[4:]
        if kind in (b"IDAT", b"IEND"):
            return False
        if kind == b"tEXt" and length <= 4096:
            if f.read(length).split(b"\0", 1)[0] == MARK.encode():
                return True
            f.seek(4, os.SEEK_CUR)  # the CRC
        else:
            f.seek(length + 4, os.SEEK_CUR)
    return False


def made_by_tansaku(path: str | Path) -> bool:
    """Whether ``path`` is a regular file of the current user's (never a link: opened with ``O_NOFOLLOW``)
    whose content carries tansaku's mark."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        return stat.S_ISREG(st.st_mode) and owned_by_me(st) and _png_marked(f)


def stat_problem(exc: OSError) -> str:
    """Why a path given to an option cannot be looked at, worded once for inputs and outputs alike."""
    if exc.errno == errno.ENOTDIR:
        return "lies under a file, not a folder"
    if exc.errno == errno.ELOOP:
        return "is a symbolic link loop"
    return f"cannot be looked at ({exc.strerror or os.strerror(exc.errno or 0)})"


def check_output_file(path: str | Path, option: str) -> Path:
    """``path`` when ``option`` may write it: nothing is there (in an existing, writable folder) or a file
    tansaku made (:func:`made_by_tansaku`); ``InputError``, one line naming ``option``, otherwise."""
    _ours_there(Path(path), option)
    return Path(path)


def _ours_there(path: Path, option: str) -> bool:
    """:func:`check_output_file`'s check; True when a file tansaku made is at ``path``, False when nothing
    is."""
    parent = path.parent
    again = f"remove it or choose another {option}"
    try:
        folder = os.stat(parent)
    except FileNotFoundError:
        raise InputError(f"{option} {path}: its folder {parent} does not exist; create it or choose another "
                         f"{option}") from None
    except OSError as exc:
        raise InputError(f"{option} {path}: its folder {parent} {stat_problem(exc)}") from None
    if not stat.S_ISDIR(folder.st_mode):
        raise InputError(f"{option} {path}: {parent} is a file, not a folder to write it in")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: its folder {parent} cannot be written (permission denied)")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise InputError(f"{option} {path} {stat_problem(exc)}") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{option} {path} is a symbolic link (to {os.readlink(path)}): tansaku neither "
                         f"replaces a link nor writes through one; {again}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{option} {path} exists and is not a file tansaku wrote; {again}")
    if not made_by_tansaku(path):
        raise InputError(f"{option} {path} exists and tansaku cannot prove it made it (only a PNG it drew "
                         f"carries its mark); {again}")
    return True


def _publish(tmp: Path, path: Path, option: str) -> None:
    """``tmp`` at ``path``: linked where nothing is (``os.link`` replaces nothing, not even a link planted
    since the last check), renamed over a file proven tansaku's."""
    if _ours_there(path, option):  # proven ours just now: a rename replaces it, never writes through
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise InputError(f"{option} {path} appeared while tansaku worked and was left as it is; remove it or "
                         f"choose another {option}") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        os.replace(tmp, path)  # a file system without hard links: nothing was there a moment ago


@contextmanager
def output_file(path: str | Path, option: str) -> Iterator[Path]:
    """A fresh temp path beside ``path`` to fill (a library writing a path itself: give it ``format=``, the
    name ends in ``.tmp``); published at ``path`` when the block ends without an error (:func:`_publish`),
    removed in every case. Checked first, so a Python caller is refused before any work as the command line
    is."""
    path = Path(path)
    check_output_file(path, option)
    tmp = temp_path(path)
    try:
        yield tmp
        sync_file(tmp)
        _publish(tmp, path, option)
    finally:
        tmp.unlink(missing_ok=True)
