"""JSON text in and out of tansaku that no input can break: lone surrogates and hostile nesting.

    from tansaku.core import jsontext
    line = jsontext.dumps(row)              # json.dumps(ensure_ascii=False); lone surrogates become U+FFFD
    value = jsontext.loads(text_or_bytes)   # json.loads with nesting bounded; lone surrogates read as U+FFFD
    value, n = jsontext.scrub(value)        # a value made elsewhere (a model's answer, a Python callable's)
    value = jsontext.read_file(path)        # a JSON file: any way it fails is one JSONInputError
    meta = jsontext.read_object(path)       # a JSON object file, or None (missing, broken, not an object)

Lone surrogates. JSON may spell half of a UTF-16 pair on its own (``"\\ud800"``); ``json.loads`` returns it
as a Python string that no UTF-8 writer accepts, so it raised ``UnicodeEncodeError`` far from the input, in
whichever writer met it first (a chunk file, a parquet shard, an HTTP answer, a cache key), losing the whole
build. Every reader here (``tansaku.core.jsonl``, the JSON files a user gives, HTTP request bodies, what a
model answers: ``tansaku.core.llm``) replaces each one with U+FFFD — what a decoder's ``errors="replace"``
gives a broken byte: the text stays, the broken character is marked — and every writer does the same for
one that came another way. Nothing else in the text changes.

Nesting. ``json`` and json-repair recurse once per bracket level: ``[[[[…`` 100,000 deep raises
``RecursionError``, and so does any code that walks the value later. ``loads`` refuses more than
``max_depth`` levels (``MAX_DEPTH`` for files and requests; a model's JSON answers and tool calls take
``tansaku.core.parsing.MAX_JSON_DEPTH``): past the recursion limit by the C parser's own ``RecursionError``,
below it by counting the value's levels without recursion (``depth_exceeds``); ``nesting_exceeds`` counts
them on text, for parsers that recurse in Python (json-repair). Refusals are
:class:`JSONInputError`, a ``json.JSONDecodeError``: callers (and FastAPI, which answers 422) treat it as
invalid JSON, with ``msg`` saying why.

Files. :func:`read_file` is how tansaku reads a JSON file (a manifest, an index's metadata, a report, a
trainer state): the bytes through ``loads``, and every way the file fails to give a value — unreadable,
not UTF-8, not JSON, too deep — is one ``JSONInputError``, so each caller words one line (or treats the file
as absent, :func:`read_object`) instead of listing the exceptions it remembered.

>>> dumps({"title": "\\ud800港"})
'{"title": "\\ufffd港"}'
>>> loads('{"title": "\\\\ud800港"}')
{'title': '\\ufffd港'}
>>> loads("[" * 100_000 + "]" * 100_000)
Traceback (most recent call last):
...
tansaku.core.jsontext.JSONInputError: nested too deeply, over 64 levels
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tansaku.core.input_files import special_kind

REPLACEMENT = "\ufffd"
MAX_DEPTH = 64  # bracket levels of a file's record or a request body; tansaku's own data nests under 15
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # how JSON text spells one (or half of a pair)
_BRACKETS = re.compile(r'[\[\]{}"\\]')  # what nesting_exceeds looks at


class JSONInputError(json.JSONDecodeError):
    """JSON text that will not be read: nested deeper than the bound, a number too long, bytes that are not
    UTF-8. ``msg`` is the reason."""

    def __init__(self, msg: str):
        super().__init__(msg, "", 0)

    def __str__(self) -> str:  # no "line 1 column 1": the reason concerns the whole text
        return self.msg


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same string when there is none).

    >>> clean_text("a\\udc00b"), clean_text("😀")
    ('a\\ufffdb', '😀')
    """
    return LONE_SURROGATE.sub(REPLACEMENT, text) if LONE_SURROGATE.search(text) else text


def dumps(value: Any, **kwargs) -> str:
    """``json.dumps(value, ensure_ascii=False, **kwargs)`` as text any UTF-8 writer takes:
    ``ensure_ascii=False`` writes a lone surrogate as it is (for the writer to refuse later); here it becomes
    U+FFFD."""
    return clean_text(json.dumps(value, ensure_ascii=False, **kwargs))


def scrub(value: Any) -> tuple[Any, int]:
    """``(value with every lone surrogate in its strings and keys replaced by U+FFFD, strings changed)``.

    Containers are copied (tuples become lists, as JSON has them); the caller's objects stay as they were.
    Iterative, so any depth is walked without recursion.

    >>> scrub({"a\\ud800": ["x", "\\udfff", 1]})
    ({'a\\ufffd': ['x', '\\ufffd', 1]}, 2)
    """
    changed = 0

    def fix(text: str) -> str:
        nonlocal changed
        if LONE_SURROGATE.search(text):
            changed += 1
            return LONE_SURROGATE.sub(REPLACEMENT, text)
        return text

    root = [value]
    slots: list[tuple[Any, Any]] = [(root, 0)]
    while slots:
        parent, key = slots.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = fix(item)
        elif isinstance(item, dict):
            parent[key] = copy = {fix(k) if isinstance(k, str) else k: v for k, v in item.items()}
            slots.extend((copy, k) for k in copy)
        elif isinstance(item, (list, tuple)):
            parent[key] = copy = list(item)
            slots.extend((copy, i) for i in range(len(copy)))
    return root[0], changed


def may_hold_surrogates(text: str, decoded: bool = False) -> bool:
    """True when JSON ``text`` might decode to a lone surrogate: an escape of one, or (unless the text was
    ``decoded`` from UTF-8, which has none) one as it is."""
    if "\\" in text and _SURROGATE_ESCAPE.search(text) is not None:
        return True
    return not decoded and LONE_SURROGATE.search(text) is not None


def nesting_exceeds(text: str, limit: int = 32) -> bool:
    """True when brackets in ``text`` (outside JSON strings) nest deeper than ``limit``: checked on the
    raw text so that neither ``json`` nor json-repair ever recurses into a hostile answer.

    >>> nesting_exceeds("[" * 100 + "]" * 100, 32), nesting_exceeds('{"a": "[[[[["}', 2)
    (True, False)
    """
    if text.count("[") + text.count("{") <= limit:  # C-speed: most texts have fewer brackets than the limit
        return False
    depth = 0
    in_string = False
    skip = -1  # position of a character escaped by a backslash
    for match in _BRACKETS.finditer(text):
        pos, char = match.start(), match.group()
        if pos == skip:
            continue
        if in_string:
            if char == "\\":
                skip = pos + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth = max(0, depth - 1)
    return False


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when a decoded value (dicts and lists) nests deeper than ``limit`` levels, counted as
    ``nesting_exceeds`` counts brackets: for a value that was never text (a Python callable's answer),
    before anything recursive (``json.dumps``, a reward) walks it. Iterative.

    >>> depth_exceeds({"a": [1]}, 2), depth_exceeds({"a": [[1]]}, 2)
    (False, True)
    """
    level, depth = [value], 0
    while level:  # one pass per level, in comprehensions: a wide record costs microseconds
        containers = [item for item in level if isinstance(item, (dict, list, tuple))]
        if not containers:
            return False
        depth += 1
        if depth > limit:
            return True
        level = [child for item in containers
                 for child in (item.values() if isinstance(item, dict) else item)]
    return False


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, decoded: bool = False) -> Any:
    """``json.loads(text)`` that cannot overflow the stack and never returns a lone surrogate.

    ``bytes`` are read as UTF-8 (a BOM allowed). Raises ``json.JSONDecodeError`` for invalid JSON and
    :class:`JSONInputError` (one) for nesting deeper than ``max_depth``, a number over Python's 4300-digit
    limit or bytes that are not UTF-8. ``decoded``: ``text`` was decoded from UTF-8 by the caller, so it holds
    no raw surrogate to look for (only escapes of one); bytes are decoded here, with the same saving."""
    if isinstance(text, (bytes, bytearray)):
        decoded = True
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JSONInputError(f"not valid UTF-8 (byte {exc.start})") from None
    if not isinstance(text, str):  # as json.loads refuses it
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:  # CPython's C parser stops at the recursion limit (~1000 levels) and unwinds
        raise JSONInputError(f"nested too deeply, over {max_depth} levels") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise JSONInputError(str(exc).split(";")[0]) from None
    # Depth counted on the value, not the text: a corpus line's text may hold thousands of brackets in its
    # strings, its value a few dozen nodes. Fewer brackets than the bound cannot nest deeper than it.
    if text.count("[") + text.count("{") > max_depth and depth_exceeds(value, max_depth):
        raise JSONInputError(f"nested too deeply, over {max_depth} levels")
    return scrub(value)[0] if may_hold_surrogates(text, decoded) else value


def read_file(path: str | Path, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in the file at ``path``: its bytes read by :func:`loads` (nesting bounded, a BOM
    allowed, lone surrogates read as U+FFFD).

    Raises :class:`JSONInputError` (a ``json.JSONDecodeError``, so a ``ValueError``), and only that, for every
    file that gives no value; ``msg`` says why: the file cannot be read (missing, a folder, no permission: the
    OS's words), is not UTF-8, is not JSON (json's reason with its line and column), nests deeper than
    ``max_depth`` or holds a number over Python's digit limit. No ``OSError`` passes through: the caller names
    the file in its own one-line message. What the value must be (an object, its keys) is the caller's check.
    """
    if kind := special_kind(path):  # looked at, not opened: reading a FIFO would block
        raise JSONInputError(f"cannot be read (it is {kind}, not a regular file)")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise JSONInputError(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        return loads(data, max_depth=max_depth)
    except JSONInputError:
        raise
    except json.JSONDecodeError as exc:  # invalid JSON: json's own reason and where
        raise JSONInputError(str(exc)) from None


def read_object(path: str | Path, default: Any = None, *, max_depth: int = MAX_DEPTH) -> dict | Any:
    """The JSON object (a dict) in the file at ``path``, else ``default``: for a file that is missing or that
    :func:`read_file` refuses, and for a file holding another JSON value (a list, a string, a number).

    For files a program may do without — a cache, a saved result it recomputes, a state it can skip — never
    for a file whose damage the user must be told about (use ``read_file`` and say so in one line)."""
    try:
        value = read_file(path, max_depth=max_depth)
    except JSONInputError:
        return default
    return value if isinstance(value, dict) else default
