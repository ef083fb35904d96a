"""Exclusive ``flock`` locks on folders: one build at a time per folder (design: ``tansaku.core.ownership``).

A lock is held on the folder itself through an open descriptor; the kernel drops it when the descriptor is
closed or the process exits, even on ``kill -9``, so no stale lock is ever left and no lock file is written.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tansaku.core.errors import InputError


class FolderBusyError(InputError):
    """Another process is building into the same folder right now."""


def locked(folder: Path) -> int | None:
    """A new descriptor of the existing folder ``folder`` holding an exclusive ``flock`` on it; None when
    another descriptor holds one (another process's, or another of this process's: flock locks are per open
    file)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        pass  # a file system without flock (some network mounts): build unlocked rather than not at all
    return fd


def still_names(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the folder open as ``fd`` (not removed or replaced since it was
    opened)."""
    try:
        st, now = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


@contextmanager
def folder_lock(folder: Path, option: str) -> Iterator[None]:
    """Hold an exclusive lock on the existing folder ``folder``; FolderBusyError when another process holds
    it."""
    fd = locked(folder)
    if fd is None:
        raise FolderBusyError(f"{option} {folder} is being built by another process right now; wait for it "
                              f"to finish or choose another {option}")
    try:
        if not still_names(fd, folder):  # swapped in by a build that just finished
            raise FolderBusyError(f"{option} {folder} was just replaced by another process; run again")
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
