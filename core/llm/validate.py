"""Check a parsed LLM answer against the small schema its call site declares, before any stage reads it.

A teacher or judge answer is untrusted input for one record: it may be nested 100k deep, hold ``1e999``
(``inf`` once parsed), ``NaN``, a lone surrogate (``"\\ud83d"``, which no parquet or UTF-8 writer accepts),
a megabyte string, or an int where a string was promised. :func:`output_problem` walks the value once,
iteratively (no recursion, so no ``RecursionError``), and names the first thing wrong, or returns None.

The schema is the JSON-Schema subset the stages already send to the server as ``json_schema`` (declared
next to the stage that uses it): ``type`` (one name or a list), ``properties``, ``items``, ``maxLength``,
``maxItems``, and ``minimum`` / ``maximum`` on integers. Value rules that a stage names itself (``enum``,
rubric weights, distinct choices) stay with the stage, so its own drop reasons keep their meaning.
Whatever the schema says, every value must be safe to store: finite numbers, integers within ±2**53,
strings that encode to UTF-8 and are at most ``MAX_STRING_CHARS`` long, lists of at most ``MAX_ITEMS``,
at most ``tansaku.core.parsing.MAX_JSON_DEPTH`` levels of nesting, the bound of every JSON answer (the raw
text's depth is checked against it before parsing: ``tansaku.core.jsontext.nesting_exceeds``).

>>> schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}}}
>>> output_problem({"n": 3}, schema) is None
True
>>> output_problem({"n": float("inf")}, schema)
'$.n: inf is not a finite number'
>>> output_problem({"n": "3"}, schema)
"$.n: expected integer, got str '3'"
>>> output_problem({"n": 1, "x": "\\ud83d"}, schema)
"$.x: string is not valid Unicode (lone surrogate '\\\\ud83d')"
"""

from __future__ import annotations

import math

from tansaku.core.parsing import MAX_JSON_DEPTH  # levels of nesting: no answer schema has more than four

MAX_STRING_CHARS = 20_000   # characters of one string without its own maxLength: a long explanation fits
MAX_ITEMS = 1_000           # items of one list without its own maxItems
MAX_INT = 2**53             # larger integers lose precision in JSON readers and overflow int64 columns

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    # bool is an int subclass in Python but never a JSON number; an integral float (2.0) is an integer.
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and math.isfinite(v) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _scalar_problem(value, schema: dict) -> str | None:
    """What is wrong with one non-container value (None when it is fine)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return f"integer with {len(str(abs(value)))} digits is out of range"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = value[exc.start:exc.end]
            return f"string is not valid Unicode (lone surrogate {bad!r})"
        cap = schema.get("maxLength", MAX_STRING_CHARS)
        if len(value) > cap:
            return f"string of {len(value)} characters; the limit is {cap}"
    if schema.get("type") == "integer" and _TYPES["integer"](value):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{_short(value)} is outside {low}..{high}"
    return None


def _type_problem(value, schema: dict) -> str | None:
    wanted = schema.get("type")
    if wanted is None:
        return None
    names = wanted if isinstance(wanted, list) else [wanted]
    if any(_TYPES.get(name, lambda v: True)(value) for name in names):
        return None
    return f"expected {'|'.join(names)}, got {type(value).__name__} {_short(value)}"


def output_problem(value, schema: dict | None = None) -> str | None:
    """The first problem of a parsed answer as ``"$.path: what"``, or None when it is usable."""
    stack = [(value, schema or {}, "$", 0)]
    while stack:
        node, node_schema, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"{path}: nested deeper than {MAX_JSON_DEPTH} levels"
        problem = _scalar_problem(node, node_schema) or _type_problem(node, node_schema)
        if problem:
            return f"{path}: {problem}"
        if isinstance(node, dict):
            properties = node_schema.get("properties", {})
            for key, child in node.items():
                if not isinstance(key, str):  # json never makes these, but a repaired object might
                    return f"{path}: key {_short(key)} is not a string"
                key_problem = _scalar_problem(key, {"maxLength": 200})
                if key_problem:
                    return f"{path}: key {key_problem}"
                stack.append((child, properties.get(key, {}), f"{path}.{key}", depth + 1))
        elif isinstance(node, list):
            cap = node_schema.get("maxItems", MAX_ITEMS)
            if len(node) > cap:
                return f"{path}: list of {len(node)} items; the limit is {cap}"
            items = node_schema.get("items", {})
            stack.extend((child, items, f"{path}[{i}]", depth + 1) for i,
                         child in reversed(list(enumerate(node))))
    return None
