"""Outputs swapped in whole (a search index, a merged model): built beside the folder, then renamed over it.

    with ownership.claimed(out, "--out", check), swapped_in(out, "--out") as tmp:
        ...  # write the whole output into tmp; it replaces out when the block ends without an error

The output is written into a hidden sibling ``.NAME.partial-XXXXXXXX`` whose first file
(``.tansaku_partial.json``) names ``NAME``, then renamed over ``NAME`` through an empty ``.NAME.old-XXXXXXXX``
(:func:`swapped_in`). After a ``kill -9`` at any point each leftover is provably the build's own (marked,
empty, or the output it replaced: ``tansaku.core.ownership.leftover_of``), and the next build into ``NAME``
removes it (:func:`sweep_leftovers`). A live build holds a ``flock`` on its leftovers, so a sweep never
removes one in use (:func:`swapped_in` says why).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from tansaku.core import safe_write
from tansaku.core.errors import InputError
from tansaku.core.folder_locks import FolderBusyError, locked, still_names
from tansaku.core.ownership import PARTIAL_MARKER, leftover_of


def sweep_leftovers(folder: Path) -> int:
    """Remove what killed builds into ``folder`` left next to it: every leftover that no live build holds
    locked (a killed build's locks are gone: the kernel drops them, even on ``kill -9``); returns how many
    leftovers a live build holds (it is swapping into ``folder`` right now)."""
    live = 0
    for entry in folder.parent.iterdir():
        if leftover_of(entry) == folder.name:
            with suppress(OSError):  # removed meanwhile, or unreadable: nothing to remove now
                if (fd := locked(entry)) is None:
                    live += 1
                else:
                    shutil.rmtree(entry, ignore_errors=True)
                    os.close(fd)
    return live


def _sibling(folder: Path, part: str, option: str | None, held: ExitStack) -> Path:
    """A new empty ``.NAME.<part>-XXXXXXXX`` next to ``folder``, locked until ``held`` closes; InputError when
    ``folder``'s parent folder is not writable."""
    named = f"{option} {folder}" if option else str(folder)
    try:
        path = Path(tempfile.mkdtemp(prefix=f".{folder.name}.{part}-", dir=folder.parent))
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise InputError(f"{named}: cannot write beside it ({exc.strerror}): the output is built next to it "
                         f"and swapped in, so its parent folder {folder.parent} must be writable") from None
    # gone, or locked by another: a sweep took it, empty and not yet locked, for a leftover
    with suppress(OSError):
        if (fd := locked(path)) is not None:
            held.callback(os.close, fd)
            if still_names(fd, path):
                return path
    raise FolderBusyError(f"{named} is being built by another process right now; run again")


@contextmanager
def swapped_in(folder: Path, option: str | None = None) -> Iterator[Path]:
    """A new hidden sibling of ``folder`` to write a whole output into; when the block ends without an error
    it replaces ``folder`` (for a symbolic link: the folder it points to, so the link stays), else it is
    removed and ``folder`` is left as it was. Call it holding ``folder``'s lock (:func:`claimed`): it first
    removes the leftovers of killed builds. ``option`` names ``folder`` in an error (an unwritable parent
    folder).

    ``folder``'s lock alone does not prove a leftover dead: between the two renames the name is free, so a
    second build can create and lock a fresh ``folder`` and sweep. So this build holds a ``flock`` on each of
    its siblings while they are its own (``held``; once ``.old-*`` holds the replaced output, it is the folder
    that the caller's :func:`folder_lock` holds), and :func:`sweep_leftovers` skips what it cannot lock; a
    build that
    finds such live siblings is refused (FolderBusyError): its swap would collide with the other's second
    rename."""
    folder = Path(os.path.realpath(folder))
    if sweep_leftovers(folder):
        raise FolderBusyError(f"{option or ''} {folder} is being built by another process right now; run "
                              f"again".lstrip())
    with ExitStack() as held:
        tmp = _sibling(folder, "partial", option, held)
        held.callback(shutil.rmtree, tmp, ignore_errors=True)  # still there only when the build failed
        safe_write.write_text_atomic(tmp / PARTIAL_MARKER, json.dumps({"of": folder.name}))  # first: ours
        yield tmp
        old, moved = _sibling(folder, "old", option, held), False
        try:
            if folder.exists():
                os.replace(folder, old)  # onto the empty folder: allowed for directories
                moved = True
            os.replace(tmp, folder)
        except BaseException:
            if moved:  # the old output back: never leave folder missing and its output in .old-* (swept)
                os.replace(old, folder)
            else:
                old.rmdir()  # still empty
            raise
        (folder / PARTIAL_MARKER).unlink(missing_ok=True)
        shutil.rmtree(old, ignore_errors=True)
