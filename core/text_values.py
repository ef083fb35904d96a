"""The check behind every text option (a field name, a task, a dataset name, a prompt, a query …): text that
can never be used is refused while the command line is parsed, in one line naming the option, instead of
failing after the work (a field named ``a\\nb`` matched no row: "0 rows") or with a traceback (a lone
surrogate, which the shell passes for bytes that are not UTF-8, cannot be written to a manifest or sent to an
engine).

Never usable: a lone surrogate, a NUL byte or another control character (a line break too, unless the text is
free text such as a prompt or a query, ``multiline``), more characters than the option allows, an empty value
(unless the option takes one), a value outside the option's known ``choices``. ``split``: a list given in one
value (``--heldout-phrasing answer,about``), each item checked.

>>> check_text("title", "--title-field")
'title'
>>> check_text("a\\nb", "--title-field")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --title-field 'a\\nb': holds a line break or another control character
>>> check_text("nope", "--format", choices=("auto", "jsonl"))
Traceback (most recent call last):
...
tansaku.core.errors.InputError: --format 'nope': choose one of auto, jsonl
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tansaku.core.errors import InputError

LINE_MAX_CHARS = 256  # one line: a key, a task, a dataset name, a license id
FREE_TEXT_MAX_CHARS = 1 << 20  # a prompt or a query; a search engine's own limits apply after this
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode's Cc: what no key, name or id holds
_CONTROL_IN_FREE_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # a prompt keeps \t \n \r


def shown(text: str, limit: int = 60) -> str:
    """``text`` quoted as one printable line: control characters and lone surrogates escaped, a long one
    cut."""
    quoted = repr(text)  # repr escapes what is not printable, a lone surrogate included
    return quoted if len(quoted) <= limit else f"{quoted[:40]}…' ({len(text)} characters)"


def holds_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: no UTF-8 encoder (a file, an engine, a socket) writes it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def text_problem(text: str, multiline: bool = False) -> str | None:
    """Why ``text`` can never be used (a lone surrogate, a NUL byte, a control character; ``multiline``: line
    breaks and tabs allowed), or None."""
    if holds_surrogate(text):
        return "holds a lone surrogate (bytes that are not UTF-8); pass it as UTF-8 text"
    if "\0" in text:
        return "holds a NUL byte"
    if (_CONTROL_IN_FREE_TEXT if multiline else _CONTROL).search(text):
        return "holds a control character" if multiline else "holds a line break or another control character"
    return None


def check_text(value, option: str, *, choices: Iterable[str] | None = None, required: bool = True,
               multiline: bool = False, max_chars: int | None = None, split: str | None = None) -> str:
    """``value`` when it is text the option can use; ``InputError`` naming ``option`` otherwise (the rules:
    the module's docstring). ``max_chars``: default ``LINE_MAX_CHARS``, ``FREE_TEXT_MAX_CHARS`` for
    ``multiline``."""
    if not isinstance(value, str):
        raise InputError(f"{option} must be text, got {type(value).__name__}")
    if problem := text_problem(value, multiline):
        raise InputError(f"{option} {shown(value)}: {problem}")
    limit = max_chars or (FREE_TEXT_MAX_CHARS if multiline else LINE_MAX_CHARS)
    if len(value) > limit:
        raise InputError(f"{option} {shown(value)}: {len(value):,} characters, more than the {limit:,} it "
                         f"takes")
    items = [value] if split is None else [item.strip() for item in value.split(split) if item.strip()]
    known = tuple(choices) if choices is not None else None
    if required and not any(item.strip() for item in items):
        raise InputError(f"{option}: the value is empty"
                         + (f"; choose one of {', '.join(known)}" if known else ""))
    for item in items if known is not None else ():
        if item not in known:
            raise InputError(f"{option} {shown(item)}: choose one of {', '.join(known)}")
    return value
