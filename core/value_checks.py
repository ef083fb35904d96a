"""The checks behind every option value: numbers within bounds, paths of a declared kind, Hugging Face repo
ids.

Each check takes the value (the command line's text, or what a Python caller passed), the option's name and
what the option declares, and returns the value to use or raises ``InputError`` / ``MissingInputError``: one
line that names the option. ``tansaku.core.cli_types`` applies them to every option of every command while
Typer parses it (before any work); ``tansaku.core.options`` (the builders' own checks, for Python callers)
shares :func:`check_number`.

Numbers: a whole number is refused beyond 64 bits (a slice, a seed or a parquet column would overflow later,
with a traceback) and beyond the declared bounds; a float is refused when it is NaN or infinite, or where a
whole number is wanted.

>>> check_number("--limit", "3", integer=True, low=1, text=True)
3
>>> check_number("--limit", 2**70, integer=True, low=1)
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --limit must be a whole number >= 1 that fits in 64 bits (at most
9223372036854775807), got 1180591620717411303424
>>> check_number("--limit", "1e30", integer=True, low=1, text=True)
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --limit must be a whole number >= 1, got 1e30
>>> check_number("--share", "nan", low=0, high=1, high_open=True, text=True)
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --share must be a finite number within [0, 1), got nan

Paths (:func:`check_path`): a leading ``~`` or ``~user`` is expanded, as a shell would have (a quoted
    ``'~/x'``
reaches tansaku as it is, and pyarrow would expand it where Python does not: one command would write to two
places); an unknown user, an empty name, a NUL byte, a name longer than the file system allows or one that is
not UTF-8 is refused. An input is looked at with ``stat`` only, never opened: a FIFO, device or socket is
refused (a reader would block), as are a folder where a file is wanted and the reverse, a dangling link, a
link loop and what cannot be read. A missing input is left to the command, which says what builds it. An
output is refused when it is a special file, of the wrong kind, or lies under a file; whose folder it is
stays ``tansaku.core.ownership``'s (and ``tansaku.core.safe_write.refuse_shared_folder``'s) to decide. An
output file is refused when anything tansaku cannot prove it made is at its path, a link included, or its
folder is missing (``tansaku.core.output_files``).

>>> check_path("~/x", OUTPUT_FOLDER, "--out") == Path.home() / "x"
True
>>> check_path("a\\0b", INPUT_FILE, "--input")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --input 'a\\x00b': the name holds a NUL byte
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from pathlib import Path

from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.index_target import parse_service
from tansaku.core.input_files import kind_of_mode
from tansaku.core.output_files import check_output_file, stat_problem

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------- numbers


def _bounds_text(low, high, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"within {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high}"
    return ""


def _parsed(value):
    """``value`` as an int or float when it is one (a command line's text is parsed), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        return int(text)  # also what int() takes beyond: "1_000", "+3"; over 4300 digits: ValueError
    except ValueError:
        pass
    try:
        return float(text)  # "1e30", "nan", "inf": refused below with what was wanted
    except ValueError:
        return None


def check_number(name: str, value, *, integer: bool = False, low=None, high=None, low_open: bool = False,
                 high_open: bool = False, text: bool = False):
    """``value`` as an int (``integer``) or float within the bounds (``None``: unbounded on that side;
    ``*_open``: the bound itself excluded); ``InputError`` naming ``name`` otherwise. A whole number must also
    fit in 64 bits, and a float must be finite. ``text``: ``value`` may be a command line's text, parsed here
    (a Python caller's string is refused, as any other type)."""
    number = _parsed(value) if text or not isinstance(value, str) else None
    shown = (value.strip() if isinstance(value, str) else repr(value) if isinstance(value, float)
             else str(value))
    # one line stays readable
    shown = shown if len(shown) <= 60 else f"{shown[:40]}… ({len(shown)} characters)"
    bounds = _bounds_text(low, high, low_open, high_open)
    what = "a whole number" if integer else "a finite number"
    if number is not None and not integer:
        try:
            number = float(number)
        except OverflowError:  # a whole number past float's range: no finite float
            number = None
    ok = number is not None and (isinstance(number, int) if integer else math.isfinite(number))
    if ok:
        ok = ((low is None or (number > low if low_open else number >= low))
              and (high is None or (number < high if high_open else number <= high)))
    if not ok:
        raise InputError(f"{name} must be {what}{' ' + bounds if bounds else ''}, got {shown}")
    if integer and not INT64_MIN <= number <= INT64_MAX:
        fits = (f"fits in 64 bits "
                f"({'at least ' + str(INT64_MIN) if number < 0 else 'at most ' + str(INT64_MAX)})")
        raise InputError(f"{name} must be {what}{' ' + bounds if bounds else ''} that {fits}, got {shown}")
    return int(number) if integer else float(number)


# ---------------------------------------------------------------- paths

INPUT_FILE = "input file"
INPUT_FOLDER = "input folder"
INPUT = "input file or folder"
DATASET = "dataset folder"
INDEX = "search index"  # an index folder, or a service: opensearch:NAME, http(s)://host:9200/NAME
OUTPUT_FOLDER = "output folder"
OUTPUT_FILE = "output file"
OUTPUT_INDEX = "output index"  # an index folder to write, or a service
INPUT_KINDS = (INPUT_FILE, INPUT_FOLDER, INPUT, DATASET, INDEX)
OUTPUT_KINDS = (OUTPUT_FOLDER, OUTPUT_FILE, OUTPUT_INDEX)
_FILES = (INPUT_FILE, OUTPUT_FILE)
_FOLDERS = (INPUT_FOLDER, DATASET, INDEX, OUTPUT_FOLDER, OUTPUT_INDEX)
# a service, not a path (tansaku.core.ownership reads it so)
_REMOTE = re.compile(r"^(https?://|opensearch:)")
_NAME_MAX, _PATH_MAX = 255, 4096  # Linux's limits, where the file system cannot be asked


def is_remote(text: str) -> bool:
    """Whether an index option's value names a service (``opensearch:NAME``, ``https://host:9200/NAME``)."""
    return bool(_REMOTE.match(text))


def _limit(path: Path, name: str, default: int) -> int:
    """``os.pathconf`` of the nearest existing folder at or above ``path`` (the file system it lands on)."""
    for folder in (path, *path.parents):
        try:
            return os.pathconf(folder, name)
        except (OSError, ValueError):
            continue
    return default


def _expanded(text: str, option: str) -> Path:
    """The path ``text`` names, its leading ``~``/``~user`` expanded; refused when it cannot name a file."""
    if not text:
        raise InputError(f"{option}: the path is empty")
    if "\0" in text:
        raise InputError(f"{option} {text!r}: the name holds a NUL byte")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # argv bytes that are not UTF-8 arrive as lone surrogates
        raise InputError(f"{option} {text.encode('utf-8', 'backslashreplace').decode()}: the name is not "
                         "valid UTF-8; rename it") from None
    if text.startswith("~"):
        expanded = os.path.expanduser(text)
        if expanded == text:  # no such user (or no home to expand to)
            user = text[1:].split("/", 1)[0]
            raise InputError(f"{option} {text}: " + (f"no user named {user!r}" if user else "no home folder "
                                                     "to expand ~ to"))
        text = expanded
    path = Path(text)
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > (name_max := _limit(path.parent, "PC_NAME_MAX", _NAME_MAX)):
        raise InputError(f"{option} {text[:80]}…: a name in it is {longest} bytes, longer than the file "
                         f"system allows ({name_max})")
    if len(os.fsencode(text)) >= _PATH_MAX:
        raise InputError(f"{option} {text[:80]}…: the path is {len(os.fsencode(text))} bytes, longer than "
                         f"the system allows ({_PATH_MAX - 1})")
    return path


def _check_input(path: Path, kind: str, option: str) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise MissingInputError(f"{option} {path} is a symbolic link to {os.readlink(path)}, which does "
                                    "not exist") from None
        return  # missing: the command says what would make it
    except OSError as exc:
        raise InputError(f"{option} {path} {stat_problem(exc)}") from None
    if special := kind_of_mode(st.st_mode):  # looked at, never opened: a reader would block on it
        raise InputError(f"{option} {path} is {special}, not a regular file: reading it could block forever")
    folder = stat.S_ISDIR(st.st_mode)
    if kind in _FILES and folder:
        raise InputError(f"{option} {path} is a folder, not a file")
    if kind in _FOLDERS and not folder:
        raise InputError(f"{option} {path} is a file, not a "
                         f"{'dataset folder' if kind == DATASET else 'folder'}")
    if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
        raise InputError(f"{option} {path} cannot be read (permission denied)")


def _check_output(path: Path, kind: str, option: str) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return  # a dangling link: safe_write.refuse_shared_folder says whose and where it points
        parent = path.parent
        while True:  # the nearest existing folder above must be a folder: under a file nothing can be made
            try:
                if not stat.S_ISDIR(os.stat(parent).st_mode):
                    raise InputError(f"{option} {path}: cannot create it, {parent} is a file, not a folder")
                return
            except FileNotFoundError:
                if parent == parent.parent:
                    return
                parent = parent.parent
            except OSError as exc:
                raise InputError(f"{option} {path}: {parent} {stat_problem(exc)}") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise InputError(f"{option} {path}: cannot create it, a folder above it is a file") from None
        raise InputError(f"{option} {path} {stat_problem(exc)}") from None
    if special := kind_of_mode(st.st_mode):
        raise InputError(f"{option} {path} is {special}, not a {'file' if kind in _FILES else 'folder'} to "
                         f"write")
    if kind in _FILES and stat.S_ISDIR(st.st_mode):
        raise InputError(f"{option} {path} is a folder, not a file")
    if kind in _FOLDERS and not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{option} {path} is a file, not a folder")


def check_path(value, kind: str, option: str) -> Path | str:
    """The path ``value`` names, as a ``Path`` (an index option's service target stays its text), checked as
    ``kind`` (``INPUT_FILE`` … ``OUTPUT_INDEX``); ``InputError``/``MissingInputError`` naming ``option``."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        raise InputError(f"{option} must be a path, got {type(value).__name__}")
    if kind in (INDEX, OUTPUT_INDEX):  # a service (opensearch:NAME, https://host/NAME) or a malformed URL
        try:
            if parse_service(text) is not None:
                return text
        except InputError as exc:
            raise InputError(f"{option} {exc}") from None
    path = _expanded(text, option)
    (_check_output if kind in OUTPUT_KINDS else _check_input)(path, kind, option)
    if kind == OUTPUT_FILE:  # over nothing tansaku cannot prove it made, a link included (output_files)
        check_output_file(path, option)
    return path


# ---------------------------------------------------------------- Hugging Face repo ids


def repo_id_problem(text: str, namespaced: bool = False) -> str | None:
    """Why the Hub would refuse ``text`` as a repo id (``huggingface_hub``'s own validator; ``namespaced``:
    the ``namespace/name`` form is required too), or None."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id  # the Hub's rules, not a copy

    if not isinstance(text, str) or not text:
        return "the repo id is empty"
    try:
        validate_repo_id(text)
    except HFValidationError as exc:
        return str(exc).splitlines()[0]
    if namespaced and text.count("/") != 1:
        return f"give it as namespace/name (e.g. me/{text}), got {text!r}"
    return None


def check_repo_id(text: str, option: str, namespaced: bool = False) -> str:
    """``text`` when the Hub accepts it as a repo id; ``InputError`` naming ``option`` otherwise.

    >>> check_repo_id("org/name", "--repo-id", namespaced=True)
    'org/name'
    >>> check_repo_id("a/b/c", "--repo-id")
    Traceback (most recent call last):
    ...
    tansaku.core.errors.InputError: --repo-id a/b/c: not a Hugging Face repo id (Repo id must be in the form
    'repo_name' or 'namespace/repo_name': 'a/b/c'. ...)
    """
    if problem := repo_id_problem(text, namespaced):
        raise InputError(f"{option} {text}: not a Hugging Face repo id ({problem})")
    return text
