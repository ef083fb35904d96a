"""The one error family of tansaku: bad input the user can fix.

Everything the toolkit raises for bad input — a missing file, a broken XML or JSONL line that stops a
whole input, an invalid search query, recipe or LLM spec, a dataset folder made by another run — is a
``TansakuError``. The CLI prints such an error as one line and exits with status 2 (and loses nothing
already done). Any other exception is a bug: the CLI lets it through with its traceback (exit 1).

Subclasses also derive from the matching built-in (``ValueError``, ``FileNotFoundError``, …) so code that
catches those keeps working.

>>> issubclass(InputError, ValueError) and issubclass(MissingInputError, FileNotFoundError)
True
>>> str(MissingInputError("no such file: x.jsonl"))
'no such file: x.jsonl'

:func:`user_error_line` also reads two kinds of built-in errors as the user's to fix: an OS error on a path
the user gave (a read-only ``--out``, a ``.work`` that is a file), a syntax error in the user's own Python
file (``scripted:FILE.py``) and a refused connection to a service the user named (OpenSearch). Each is one
line; any other OS error stays a bug. A full disk (``ENOSPC``, a quota, a file-size limit) is never a bug,
whatever the path: a ``write()``/``close()`` error carries no file name, so the line names the output the user
gave; Rust libraries (tantivy, safetensors) report it only as text (``… (os error 28) …``), read the same way.

>>> import errno
>>> user_error_line(PermissionError(errno.EACCES, "Permission denied", "/ro/out/.work"), ["/ro/out"])
'/ro/out/.work: Permission denied'
>>> user_error_line(PermissionError(errno.EACCES, "Permission denied", "/usr/lib/x"), ["/ro/out"]) is None
True
>>> user_error_line(OSError(errno.ENOSPC, "No space left on device"), ["docs.jsonl", "out"], outputs=["out"])
'out: No space left on device; free space (or raise the limit), then rerun'
"""

import errno
import os
import re
from pathlib import Path


class TansakuError(Exception):
    """Base of every error that means "bad input": one line for the user, exit status 2."""

    multiline = False  # True: the CLI prints the whole message (e.g. the RL readiness refusal's numbers)


class InputError(TansakuError, ValueError):
    """An argument, spec, file content or dataset that the toolkit cannot use."""


class MissingInputError(TansakuError, FileNotFoundError):
    """A file or folder named by the user does not exist."""


# OS errors that mean "this path cannot be used as given": the user's to fix, not a bug.
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST,
                errno.ENOENT, errno.ENOSPC, errno.ENAMETOOLONG, errno.ELOOP}


# The disk, a quota or a file-size limit is full: what the user must free, never a bug.
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how Rust's std::io::Error shows an errno in its text


def _storage_full(exc: BaseException) -> tuple[int, str | None] | None:
    """(errno, file name or None) when ``exc`` — or an error it was raised from — is a full disk, else
    None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return exc.errno, exc.filename and str(exc.filename)
        if found := [n for n in map(int, _RUST_OS_ERROR.findall(str(exc))) if n in _FULL_ERRNOS]:
            return found[0], None
        exc = exc.__cause__ or exc.__context__
    return None


def _within(name: str, roots: list[Path]) -> bool:
    target = Path(os.path.abspath(name))
    return any(target == root or root in target.parents for root in roots)


def _service_url(given: list) -> str:
    for value in given:  # the --index the user gave names the cluster (URL/NAME or opensearch:NAME)
        if isinstance(value, str) and value.startswith(("http://", "https://", "opensearch:")):
            return (value if "://" in value
                    else f"{os.environ.get('OPENSEARCH_URL', 'http://localhost:9200')} ({value})")
    return os.environ.get("OPENSEARCH_URL", "the search service")


def user_error_line(exc: BaseException, given: list, outputs: list | None = None) -> str | None:
    """One line for a built-in error that is bad input, else ``None`` (a bug: it keeps its traceback).

    ``given``: the values of the command's options and arguments. An OS error counts when it concerns one of
    those paths or a path inside one; a refused connection (built-in or opensearch-py ``ConnectionError``)
    names the service URL the user gave. ``outputs``: the paths the command writes (``--out``, ``--index`` …),
    named by a full-disk error that carries no file name."""
    if full := _storage_full(exc):
        code, name = full
        where = name or next((str(o) for o in outputs or [] if o is not None), None)
        text = f"{os.strerror(code)}; free space (or raise the limit), then rerun"
        return f"{where}: {text}" if where else f"{text} (the command's output could not be written)"
    kind = type(exc)
    if isinstance(exc, ConnectionError) or (kind.__name__ == "ConnectionError" and kind.__module__.startswith(
            ("opensearchpy", "urllib3", "requests"))):
        return f"cannot connect to {_service_url(given)}: {type(getattr(exc, 'info', None) or exc).__name__}"
    # A spec names its file after a backend prefix (scripted:FILE.py:FN), so each ':' part may be a path.
    roots = [Path(os.path.abspath(part)) for v in given if isinstance(v, (str, Path))
             for part in {str(v), *str(v).split(":")} if part]
    if isinstance(exc, SyntaxError) and exc.filename and _within(exc.filename, roots):  # the user's own code
        return f"{exc.filename}:{exc.lineno}: {exc.msg}"
    if not isinstance(exc, OSError) or exc.errno not in _PATH_ERRNOS or not exc.filename:
        return None
    names = [str(n) for n in (exc.filename, exc.filename2) if n]
    # A file missing *inside* a given folder is one the toolkit expected to have made: that is a bug.
    exact = exc.errno == errno.ENOENT
    if not any(Path(os.path.abspath(n)) in roots if exact else _within(n, roots) for n in names):
        return None
    return f"{names[0]}: {exc.strerror or os.strerror(exc.errno)}"
