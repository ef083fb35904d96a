"""Option checks every build runs before any work starts.

A bad option must fail in the first second with one line naming it, not after hours of work (an egov
``--limit -1`` used to fail only once articles and index were built) and never silently (``limit=-1`` once
meant ``[:-1]``, dropping the last chain). Each ``build_*`` calls these at its top, so programmatic callers
get the same refusal as the CLI; every check raises ``InputError`` (CLI: one line, exit 2). The bounds are
checked by ``tansaku.core.value_checks.check_number``, the check every number option of the CLI runs while it
is parsed (``tansaku.core.cli_types``), so both refuse a value in the same words.

>>> check_limit(None), check_limit(3)
(None, 3)
>>> check_limit(-1)
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --limit must be a whole number >= 1, got -1
>>> check_k_m(1, 5)
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --m must be within [0, --k] (solved m of k tries), got --m 5 --k 1
>>> check_fraction("--ratio", float("nan"), 0, None)
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --ratio must be a finite number >= 0, got nan
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from tansaku.core import store
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.value_checks import check_number

DOCUMENT_COLUMNS = ("id", "title", "text")  # what every document dataset has (docs/contracts.md)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_limit(limit, name: str = "--limit") -> int | None:
    """``None`` (no limit) or a whole number >= 1 (64 bits at most); 0 or a negative number is refused, never
    sliced with."""
    return None if limit is None else check_number(name, limit, integer=True, low=1)


def check_count(name: str, value, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` (tries, sizes, top-k), 64 bits at most."""
    return check_number(name, value, integer=True, low=minimum)


def check_fraction(name: str, value, low: float, high: float | None, high_open: bool = False) -> float:
    """A finite number in ``[low, high]`` (``[low, high)`` with ``high_open``; no upper bound if ``high`` is
    None).
    NaN is refused explicitly: every comparison with it is False, so a range check alone lets it through."""
    return check_number(name, value, low=low, high=high, high_open=high_open)


def check_k_m(k, m) -> None:
    """``k`` agent tries per question and ``m`` of them that must succeed: 1 <= k, 0 <= m <= k."""
    check_count("--k", k, 1)
    if not _is_int(m) or not 0 <= m <= k:
        raise InputError(f"--m must be within [0, --k] (solved m of k tries), got --m {m} --k {k}")


def require_document_dataset(path, option: str = "--corpus") -> dict:
    """The manifest of the document dataset at ``path``; refuses a missing folder, a broken manifest and a
    dataset of another kind (a question dataset has no ``title``/``text`` columns) before any work."""
    path = Path(path)
    if not path.is_dir():
        raise MissingInputError(f"{option} {path}: no such dataset folder; build it with `synth build "
                                f"corpus`")
    manifest = dataset_manifest(path, option)
    shards = sorted((path / "data").glob("train-*.parquet"))
    if not shards:
        raise InputError(f"{option} {path} has no 'train' split; build it with `synth build corpus`")
    try:
        columns = set(pq.read_schema(shards[0]).names)
    except (OSError, ValueError) as exc:  # ArrowInvalid (a ValueError) or OSError: a foreign file
        raise InputError(f"{option} {shards[0]}: not a readable parquet file ({exc})") from None
    if missing := [c for c in DOCUMENT_COLUMNS if c not in columns]:
        raise InputError(f"{option} {path} is not a document dataset (no {', '.join(missing)} column; "
                         f"pipeline {manifest.get('pipeline')!r}); build one with `synth build corpus`")
    return manifest


def dataset_manifest(path, option: str = "--dataset", required: tuple[str, ...] = ()) -> dict:
    """``read_manifest`` that also refuses a manifest that is not a non-empty JSON object or lacks a key in
    ``required`` (a list, ``{}`` or another tool's file used to fail later with a TypeError or KeyError)."""
    manifest = store.read_manifest(path)  # via the module: tests stand in a failing reader there
    missing = [k for k in required if k not in manifest] if isinstance(manifest, dict) else []
    if not isinstance(manifest, dict) or not manifest or missing:
        what = f"lacks {', '.join(missing)}" if missing else "is not a non-empty JSON object"
        raise InputError(f"{option} {path}: its manifest.json {what}; rebuild the dataset")
    return manifest


def read_system_prompt(value: str | None, option: str = "--system-prompt") -> str | None:
    """A system prompt given as text, or as ``@FILE`` (its UTF-8 text, the final newline dropped); None stays
    None.

    >>> read_system_prompt("日本語で考えてください。")
    '日本語で考えてください。'
    >>> read_system_prompt("@/no/such/prompt.txt")
    Traceback (most recent call last):
    ...
    tansaku.core.errors.MissingInputError: --system-prompt @/no/such/prompt.txt: no such file
    """
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.is_file():
            raise MissingInputError(f"{option} {value}: no such file")
        try:
            text = path.read_text(encoding="utf-8").removesuffix("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{option} {value}: cannot read it as UTF-8 text "
                             f"({type(exc).__name__})") from None
    if not text.strip():
        raise InputError(f"{option}: the system prompt is empty")
    return text
