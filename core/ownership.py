"""Which folders a command may write into, and one build at a time per folder.

A command replaces only what it can prove it made. Each kind of output carries a marker file that tansaku
writes last (so its presence also means "complete"):

    dataset folder   manifest.json        (``synth build …``: a JSON object with ``pipeline`` and ``fingerprint``)
    search index     tansaku_index.json   (``synth index build``: a JSON object with ``format`` and ``backend``)

``foreign_entries(folder, kind)`` lists what in a folder is not provably tansaku's (a dataset folder may
also hold nested tansaku outputs: the egov build keeps ``articles/`` and ``index/`` in its dataset folder).
A missing or empty folder is free; anything foreign is refused, never overwritten or removed.

``folder_lock(folder, option)`` holds an exclusive ``flock`` on the folder itself for the whole build, so a
second build into the same folder is refused in one line instead of racing for the same temp files. The
kernel drops the lock when the process exits, even on ``kill -9``, so a killed build never leaves a stale
lock behind, and no lock file is ever written into the user's folder.

    with folder_lock(out, "--out"):
        ...  # check again, then build
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tansaku.core.errors import InputError

DATASET_MARKER = "manifest.json"
INDEX_MARKER = "tansaku_index.json"
# What a dataset build writes; LICENSE (tansaku.core.licenses) only after the manifest, so a folder holding it is
# already provably tansaku's.
DATASET_WRITES = ("data", "data.partial", "README.md", DATASET_MARKER, ".work", "LICENSE")


class FolderBusyError(InputError):
    """Another process is building into the same folder right now."""


def refuse_other_kind(folder: Path, option: str, kind: str) -> None:
    """InputError when ``folder`` is a file or tansaku output of the other kind (``kind``: dataset | index):
    an index is never built into a dataset folder, nor a dataset into an index."""
    wanted, other = ("dataset folder", "search index") if kind == "dataset" else ("search index", "dataset folder")
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{option} {folder} is a file, not a {wanted}; choose another {option}")
    if is_index(folder) if kind == "dataset" else is_dataset(folder):
        raise InputError(f"{option} {folder} is a tansaku {other}, not a {wanted}; choose another {option}")


def _shaped(obj: object, keys: tuple[str, ...]) -> bool:
    """Whether ``obj`` has the shape tansaku writes (so reading it back as a recipe cannot fail)."""
    if not isinstance(obj, dict) or not all(k in obj for k in keys):
        return False
    stages, inputs = obj.get("stages") or [], obj.get("inputs") or []
    return (isinstance(stages, list) and all(isinstance(s, dict) and "name" in s for s in stages)
            and isinstance(inputs, list) and all(isinstance(i, dict) for i in inputs)
            and all(isinstance(obj.get(k) or {}, dict) for k in ("config", "heldout", "llm")))


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def is_dataset(folder: str | Path) -> bool:
    """Whether ``folder`` holds a finished dataset that tansaku wrote (its manifest parses as one)."""
    return _shaped(_read_json(Path(folder) / DATASET_MARKER), ("pipeline", "fingerprint", "stages"))


def is_index(folder: str | Path) -> bool:
    """Whether ``folder`` holds a finished embedded search index that tansaku wrote."""
    return _shaped(_read_json(Path(folder) / INDEX_MARKER), ("format", "backend"))


def work_recipe(out: Path) -> dict | None:
    """The recipe of the unfinished build in ``out/.work`` (None: there is none); InputError when the file is
    there but tansaku did not write it."""
    path = out / ".work" / "recipe.json"
    if not path.exists():
        return None
    recipe = _read_json(path)
    if not _shaped(recipe, ("pipeline", "stages")):
        raise InputError(f"--out {out}: {path.relative_to(out)} is not a recipe tansaku wrote; choose another --out")
    return recipe


def require_named(path: str | Path | None, option: str) -> Path:
    """``path`` as a Path; InputError for an empty name (``--out ''`` would otherwise mean the current
    directory) or one with no last component (``/``, ``..``): such a folder cannot be a build's own."""
    text = "" if path is None else str(path).strip()
    p = Path(text)
    if text in ("", ".") or p.name in ("", ".", ".."):
        raise InputError(f"{option} {text!r} names no folder of its own (empty, the current or a parent folder); "
                         f"give a folder name, e.g. {option} runs/x")
    return p


def foreign_entries(folder: Path, kind: str) -> list[str]:
    """Names in ``folder`` that no tansaku build provably made (sorted). For a dataset folder (``kind``:
    dataset) nested dataset/index folders are tansaku's and left alone by the build, unless they sit where
    the build writes (``data`` …), and an empty ``.work`` is a build killed before its first write. An index
    folder is swapped whole, so for ``kind`` index everything in it counts."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        real_dir = entry.is_dir() and not entry.is_symlink()
        if kind == "dataset" and real_dir and entry.name not in DATASET_WRITES:
            if is_dataset(entry) or is_index(entry):
                continue
        if kind == "dataset" and real_dir and entry.name == ".work" and not any(entry.iterdir()):
            continue
        found.append(entry.name)
    return sorted(found)


def refuse_foreign(folder: str | Path, option: str) -> Path:
    """Early check for a build that writes sub-builds (egov: ``out/articles``, ``out/index``) before its own
    dataset: refuse ``folder`` unless it is missing, empty, or a dataset folder tansaku made, finished or
    interrupted (the store checks its recipe later), so a refused run leaves nothing in someone else's folder."""
    folder = require_named(folder, option)
    refuse_other_kind(folder, option, "dataset")
    if not (is_dataset(folder) or work_recipe(folder) is not None):  # finished, or interrupted (resumes)
        refuse_foreign_entries(folder, option)
    return folder


def refuse_foreign_entries(folder: Path, option: str, error: type[Exception] = InputError) -> None:
    """``error`` (one line naming a few of them) when ``folder`` holds anything no tansaku build made."""
    if foreign := foreign_entries(folder, "dataset"):
        raise error(f"{option} {folder} is not empty and no tansaku build made it (it holds "
                    f"{describe(foreign)}); choose a new or empty folder for {option}")


def describe(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def make_folder(folder: Path, option: str) -> None:
    """Create ``folder`` (and its parents); an unwritable place is the user's to fix (InputError), not a bug."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {folder}: cannot create the folder ({exc.strerror or exc})") from None


@contextmanager
def folder_lock(folder: Path, option: str) -> Iterator[None]:
    """Hold an exclusive lock on the existing folder ``folder``; FolderBusyError when another process holds it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusyError(f"{option} {folder} is being built by another process right now; wait for it "
                                  f"to finish or choose another {option}") from None
        except OSError:
            # A file system without flock (some network mounts): build unlocked rather than not at all.
            pass
        st, now = os.fstat(fd), os.stat(folder)
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):  # swapped in by a build that just finished
            raise FolderBusyError(f"{option} {folder} was just replaced by another process; run again")
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


@contextmanager
def claimed(folder: Path, option: str, check: Callable[[], object]) -> Iterator[object]:
    """``check()`` (it raises for a folder that is not ours and writes nothing), then, unless it returned a
    finished result, create and lock ``folder`` and ``check()`` again under the lock: yields that result."""
    found = check()
    if found is not None:
        yield found
        return
    created = not folder.exists()
    make_folder(folder, option)
    try:
        with folder_lock(folder, option):
            yield check()  # again: a build that held the lock may have finished or started this folder
    except BaseException:
        if created:  # ours and (rmdir succeeds only if) still empty: a failed build leaves no trace
            try:
                folder.rmdir()
            except OSError:
                pass
        raise
