"""Writes that a symbolic link planted in an output folder cannot redirect, and the check that refuses an
output folder where another user could plant one.

Every file tansaku writes goes to a fresh temporary name that ``tempfile.mkstemp`` creates (``O_EXCL``: never
an existing name, never a link) beside the target, ``.NAME.XXXXXXXX.tmp``, and is then renamed onto the
target: a rename replaces a link that sits at the target instead of writing through it, and readers never see
half a file. A failed write removes its temporary file. A file that must grow in place (a log) is opened with
``O_NOFOLLOW``. Folders made under a temporary name come from ``tempfile.mkdtemp``
(``NAME.XXXXXXXX.partial``).

    write_text_atomic(out / "README.md", card)
    with open_atomic(out / "rows.jsonl") as f:          # streamed: the rows appear all at once
        f.write(line)
    with atomic_path(out / "rescored.parquet") as tmp:  # a library that insists on writing a path itself
        pq.write_table(table, tmp)

:func:`refuse_shared_folder` runs before any work on every output folder (``tansaku.core.ownership``): a
folder another user may write into could get such a link planted at any time, so it is refused in one line.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "secret").write_text("s", encoding="utf-8")
>>> (folder / "card.md").symlink_to(folder / "secret")  # planted where the card goes
>>> _ = write_text_atomic(folder / "card.md", "card")
>>> (folder / "secret").read_text(encoding="utf-8"), (folder / "card.md").is_symlink()
('s', False)
>>> temp_of(".card.md.ab12cd_3.tmp"), partial_of("data.ab12cd_3.partial"), temp_of("card.md")
('card.md', 'data', None)
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from tansaku.core.errors import InputError

# tempfile's random part: 8 of [a-z0-9_] (tempfile._RandomNameSequence)
_TEMP = re.compile(r"^\.(?P<of>.+)\.[a-z0-9_]{8}\.tmp$")
_PARTIAL = re.compile(r"^(?P<of>.+)\.[a-z0-9_]{8}\.partial$")
_SHARED = stat.S_IWGRP | stat.S_IWOTH


class LinkRefusedError(InputError):
    """A file tansaku would copy is a symbolic link: its target's contents would land in the output."""


def temp_of(name: str) -> str | None:
    """The target name a temporary file name made here stands for, else None."""
    return m["of"] if (m := _TEMP.match(name)) else None


def partial_of(name: str) -> str | None:
    """The target name a temporary folder name made by :func:`fresh_dir` stands for, else None."""
    return m["of"] if (m := _PARTIAL.match(name)) else None


def _umask() -> int:
    """The process's umask, read without setting it (``os.umask`` reads only by setting, racing other
    threads)."""
    with suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def temp_path(path: str | Path) -> Path:
    """A new empty file beside ``path`` (``.NAME.XXXXXXXX.tmp``), with the mode a plain ``open`` would give
    ``path`` (mkstemp makes it private), for the caller to fill and ``os.replace`` onto ``path``."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    return Path(name)


def sync_file(path: str | Path) -> None:
    """Flush what was written to the file ``path`` (never through a link) to the disk: a full disk that the
    file system reports only now (delayed allocation, a network file system, a quota) raises here, not after a
    rename."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` for a library that writes a path itself (pyarrow, safetensors,
    matplotlib: give it ``format=``, the name ends in ``.tmp``); synced and renamed onto ``path`` when the
    block ends without an error, else removed."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        sync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class AtomicFile:
    """``path`` written through an open temporary file (``.file``): :meth:`commit` syncs it and renames it
    onto ``path``, :meth:`discard` removes it. For a file filled over a long time (a chunk of rows)."""

    def __init__(self, path: str | Path, mode: str = "w", encoding: str | None = "utf-8"):
        self.path = Path(path)
        self.tmp = temp_path(self.path)
        try:
            self.file: IO = open(self.tmp, mode, encoding=None if "b" in mode else encoding)
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise

    def commit(self) -> Path:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise
        return self.path

    def discard(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


@contextmanager
def open_atomic(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """``open(path, mode)`` whose contents appear at ``path`` only when the block ends without an error."""
    out = AtomicFile(path, mode, encoding)
    try:
        yield out.file
    except BaseException:
        out.discard()
        raise
    out.commit()


def write_text_atomic(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """``Path(path).write_text(text)``, through a temporary file renamed onto ``path``."""
    with open_atomic(path, "w", encoding) as f:
        f.write(text)
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """``Path(path).write_bytes(data)``, through a temporary file renamed onto ``path``."""
    with open_atomic(path, "wb") as f:
        f.write(data)
    return Path(path)


def copy_file_atomic(src: str | Path, dst: str | Path) -> Path:
    """Copy the regular file ``src`` to ``dst`` (atomically); LinkRefusedError when ``src`` is a symbolic
    link: its target, wherever it points, would be copied (opened with ``O_NOFOLLOW``, so a link planted after
    a check is refused too)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if not os.path.islink(src):
            raise
        raise LinkRefusedError(f"{src} is a symbolic link (to {os.path.realpath(src)}): tansaku copies no "
                               "linked file, whose target's contents would land in the output; replace the "
                               "link with a copy of the file") from exc
    with os.fdopen(fd, "rb") as source, open_atomic(dst, "wb") as target:
        shutil.copyfileobj(source, target)
    return Path(dst)


def open_for_append(path: str | Path, encoding: str = "utf-8") -> IO:
    """``open(path, "a")`` that refuses (OSError ELOOP) a symbolic link at ``path`` instead of following
    it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    return os.fdopen(fd, "a", encoding=encoding)


def ensure_dir(path: str | Path) -> Path:
    """``path`` (and its parents) created when missing; InputError when ``path`` is a symbolic link: a fixed
    folder name inside an output (``.work``, a segment) is tansaku's own, and a link there points
    elsewhere."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        raise InputError(f"{path} is a symbolic link (to {os.path.realpath(path)}), not the folder tansaku "
                         "made there; remove it and run again")
    return path


def replace_dir(fresh: Path, target: Path) -> None:
    """Put the folder ``fresh`` (written beside ``target``) in place of ``target``, whatever was there: a link
    planted at ``target`` is removed itself (rmtree refuses links), never what it points to."""
    if target.is_symlink():
        target.unlink()
    shutil.rmtree(target, ignore_errors=True)
    os.replace(fresh, target)


def fresh_dir(path: str | Path) -> Path:
    """A new empty folder beside ``path`` (``NAME.XXXXXXXX.partial``, made by ``mkdtemp``: never an existing
    name or a link), with the mode ``mkdir`` would give it, to fill and ``os.replace`` onto ``path``."""
    path = Path(path)
    made = Path(tempfile.mkdtemp(prefix=f"{path.name}.", suffix=".partial", dir=path.parent))
    made.chmod(0o777 & ~_umask())
    return made


def sweep_partials(path: str | Path) -> None:
    """Remove the temporary folders that killed writes of ``path`` left beside it (real folders only)."""
    path = Path(path)
    for entry in path.parent.iterdir() if path.parent.is_dir() else ():
        if partial_of(entry.name) == path.name and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def sweep_temps(folder: str | Path, names: tuple[str, ...]) -> None:
    """Remove the temporary files that killed writes of ``names`` left in ``folder`` (a link is removed
    itself, never followed). Call it only where no live write of those names can be under way (holding the
    folder's lock, or once nothing writes them again): a live write's temp file looks the same. Tidying only:
    a folder that cannot be read or written (a finished dataset made read-only) keeps them."""
    with suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if temp_of(entry.name) in names and not entry.is_dir(follow_symlinks=False):
                with suppress(OSError):
                    os.unlink(entry.path)


# ---------------------------------------------------------------- output folders other users cannot write


def owned_by_me(st: os.stat_result) -> bool:
    """Whether the current user owns what ``st`` describes (one place, so a test can play another user)."""
    return st.st_uid == os.geteuid()


def _nearest(path: Path) -> tuple[Path, os.stat_result]:
    """The nearest existing folder at or above ``path``, with its status."""
    while True:
        try:
            return path, os.stat(path)
        # not there yet (or under a file: creating it says so)
        except (FileNotFoundError, NotADirectoryError):
            if path.parent == path:
                raise
            path = path.parent


def refuse_shared_folder(folder: str | Path, option: str) -> None:
    """InputError (one line, nothing written) when another user could plant a link where tansaku writes in
    ``folder``: it is a symbolic link another user made or that points to a place another user owns, or it is
    group- or world-writable and another user's; or the folder it is (or would be) created in is, without the
    sticky bit (with it, as in ``/tmp``, others can neither rename nor remove what tansaku creates there, and
    a link planted before tansaku creates ``folder`` is refused here when it checks again after creating
    it)."""
    given = Path(folder)
    with suppress(FileNotFoundError, NotADirectoryError):
        link = os.lstat(given)
        if stat.S_ISLNK(link.st_mode):
            target = os.path.realpath(given)
            try:
                mine = owned_by_me(link) and owned_by_me(os.stat(target))
            except OSError:
                raise InputError(f"{option} {folder} is a symbolic link to {target}, which does not exist; "
                                 f"create that folder or choose another {option}") from None
            if not mine:
                raise InputError(f"{option} {folder} is a symbolic link to {target}, and another user owns "
                                 f"the link or its target; choose a folder of your own for {option}")
    resolved = Path(os.path.realpath(given))
    with suppress(FileNotFoundError, NotADirectoryError):
        if (st := os.stat(resolved)).st_mode & _SHARED and not owned_by_me(st):
            raise InputError(f"{option} {folder} is writable by other users and owned by another "
                             f"(mode {stat.S_IMODE(st.st_mode):o}): any of them could plant a link where "
                             f"tansaku writes; choose a folder of your own for {option}")
    parent, st = _nearest(resolved.parent)
    if st.st_mode & _SHARED and not st.st_mode & stat.S_ISVTX and not owned_by_me(st):
        raise InputError(f"{option} {folder}: the folder it lies in, {parent}, is writable by other users "
                         f"and owned by another (mode {stat.S_IMODE(st.st_mode):o}, no sticky bit): any of "
                         f"them could replace {option} while tansaku writes; choose a folder inside one of "
                         f"your own")
