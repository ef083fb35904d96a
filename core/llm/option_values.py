"""The value grammar of the LLM options (``--api-key``, ``--extra-body``, ``--llm-option``): what a value must
be to be usable at all. ``tansaku.core.llm.settings`` (keys, bodies) and ``tansaku.core.llm.vllm_engine``
(engine arguments) apply it where they read a value, so a command line (checked while Typer parses it,
``tansaku.core.llm.cli_options``), a recipe and a Python caller all meet the same rules, and a value that can
never work is refused in one line before any model loads or server starts, not when the first request is sent:

- a key: not empty, visible ASCII (it travels in an HTTP header, which carries no line break, NUL or non-ASCII
  character; httpx would raise on the first request), at most ``MAX_KEY_CHARS``; never shown in a refusal;
- a request body (``--extra-body``): at most ``MAX_BODY_CHARS``, only what JSON carries (no NaN or Infinity,
  which Python's ``json`` writes but no server's JSON parser reads; no YAML date), whole numbers within 64
  bits;
- an engine argument (``KEY=VALUE``): at most ``MAX_ENGINE_CHARS``, no control character (a line break, NUL),
  nested at most ``MAX_ENGINE_DEPTH`` levels, its numbers finite and whole numbers within 64 bits.

>>> value_problem({"top_k": 20, "stop": ["\\n"]}, json_only=True) is None
True
>>> value_problem({"a": [float("nan")]}, json_only=True)
'holds a number that is not finite (nan); JSON has none'
>>> key_problem("sk-\\n1")
'the key holds a control character (a line break, NUL …); an HTTP header cannot carry it'
"""

from __future__ import annotations

import math
import re
from typing import Any

from tansaku.core.jsontext import LONE_SURROGATE, depth_exceeds, nesting_exceeds

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_KEY_CHARS = 16_384  # bearer tokens (JWTs included) stay far below; servers refuse headers past 8–16 KiB
MAX_BODY_CHARS = 256 * 1024  # merged into every request: a guided_json schema is a few KiB
MAX_ENGINE_CHARS = 16_384  # one KEY=VALUE; a compilation_config or speculative_config mapping is under 1 KiB
MAX_ENGINE_DEPTH = 16  # levels of an engine argument's value (limit_mm_per_prompt={image: 2} has 1)
MAX_BODY_DEPTH = 64  # as jsontext.MAX_DEPTH: a request body
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shown(text: str, limit: int = 60) -> str:
    """``text`` for a one-line refusal: repr'd (a line break stays on the line), cut when long."""
    return repr(text) if len(text) <= limit else f"{text[:40]!r}… ({len(text)} characters)"


def key_problem(key: str) -> str | None:
    """Why ``key`` (already read from its ``@FILE`` or variable, stripped) cannot be sent as a bearer key, or
    None. The key itself is never part of the answer: a refusal line may end up in a log."""
    if not key:
        return "the key is empty"
    if len(key) > MAX_KEY_CHARS:
        return f"the key is {len(key)} characters, over the {MAX_KEY_CHARS} an HTTP header carries"
    if CONTROL.search(key):
        return "the key holds a control character (a line break, NUL …); an HTTP header cannot carry it"
    if not key.isascii():
        return "the key holds a character that is not ASCII (or not UTF-8); an HTTP header cannot carry it"
    return None


def value_problem(value: Any, *, json_only: bool = False, controls: bool = False,
                  max_depth: int = MAX_BODY_DEPTH) -> str | None:
    """Why a decoded option value cannot be used, or None: a number that is not finite, a whole number past
    64 bits, a lone surrogate, nesting past ``max_depth``; ``controls``: a control character in a string too;
    ``json_only``: a value JSON cannot carry (a YAML date, a set). Other values (a Python caller's objects,
    such as a ``torch.dtype``) pass unless ``json_only``. Walked without recursion."""
    if depth_exceeds(value, max_depth):
        return f"is nested deeper than {max_depth} levels"
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, float) and not math.isfinite(item):
            return f"holds a number that is not finite ({item!r}){'; JSON has none' if json_only else ''}"
        if isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            return f"holds a whole number past 64 bits ({shown(str(item))})"
        if isinstance(item, str):
            if LONE_SURROGATE.search(item):
                return f"holds text that is not UTF-8 (a lone surrogate) in {shown(item)}"
            if controls and CONTROL.search(item):
                return f"holds a control character (a line break, NUL …) in {shown(item)}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif json_only and not isinstance(item, (int, float)):
            return f"holds a {type(item).__name__} ({shown(str(item))}), which JSON cannot carry"
    return None


def engine_text_problem(text: str) -> str | None:
    """Why one ``--llm-option KEY=VALUE`` text is no engine argument, before its value is read as YAML: too
    long, a control character, a lone surrogate, brackets nested past ``MAX_ENGINE_DEPTH`` (YAML's parser
    recurses), a number that is not finite (``nan``, ``inf``, ``1e999``)."""
    if len(text) > MAX_ENGINE_CHARS:
        return f"is {len(text)} characters, over the {MAX_ENGINE_CHARS} an engine argument may have"
    if CONTROL.search(text):
        return "holds a control character (a line break, NUL …)"
    if LONE_SURROGATE.search(text):
        return "holds text that is not UTF-8 (a lone surrogate)"
    if nesting_exceeds(text, MAX_ENGINE_DEPTH):
        return f"is nested deeper than {MAX_ENGINE_DEPTH} levels"
    try:  # YAML reads "nan" and "inf" as text, which vLLM would take for the number they spell
        number = float(text.partition("=")[2])
    except ValueError:
        return None
    return None if math.isfinite(number) else "is not a finite number"
