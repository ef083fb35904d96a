"""Parse model output: ``<think>…</think>``, Qwen3/Hermes ``<tool_call>{json}</tool_call>``, ``{{answer}}``.

Nothing here raises on model output: a malformed tool call becomes a ``ParseError`` that the rollout runner
turns into a tool message the model sees (and counts as a format failure).

Run the examples: ``pytest tests/test_doctests.py -k parsing``.

>>> turn = parse_assistant_text('<think>検索する</think>\\n<tool_call>\\n{"name": "search", '
...                             '"arguments": {"query": "あまちゃん"}}\\n</tool_call>')
>>> turn.reasoning, turn.content, turn.tool_calls[0].name, turn.tool_calls[0].arguments
('検索する', '', 'search', {'query': 'あまちゃん'})
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FINAL_ANSWER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
# Chat-template end markers a raw decode may leave behind.
_END_MARKERS = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>")

# Tool results that mean "this call failed". The first two are what TRL's tool loop writes when a tool
# raises (str({"error": ...})); the rest are what tansaku.envs.tools / the rollout runner write.
TOOL_ERROR_PREFIXES = ("{'error'", '{"error"', "エラー", "Error", "ERROR", "[error]")


@dataclass(frozen=True)
class ToolCall:
    """One well-formed tool call."""

    name: str
    arguments: dict

    def as_message_call(self) -> dict:
        """The HF/TRL chat-message form: ``{"type": "function", "function": {name, arguments}}``."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParseError:
    """A tool call the model tried to make but that could not be parsed."""

    kind: str  # bad_json | not_object | missing_name | bad_arguments | unclosed
    message: str
    raw: str

    def as_tool_message(self) -> str:
        """Text shown to the model in the tool message that answers the broken call."""
        return f"エラー: ツール呼び出しを解釈できません ({self.kind}): {self.message}"


@dataclass
class ParsedTurn:
    """One assistant turn split into its parts."""

    reasoning: str | None
    content: str  # text outside <think> and <tool_call> blocks, stripped
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)


def strip_end_markers(text: str) -> str:
    """Remove chat-template end tokens a raw decode may leave at the end.

    >>> strip_end_markers("答え<|im_end|>")
    '答え'
    """
    for marker in _END_MARKERS:
        text = text.replace(marker, "")
    return text


def split_think(text: str) -> tuple[str | None, str]:
    """Split off the reasoning block; returns ``(reasoning or None, rest)``.

    Handles a missing ``<think>`` opener (templates that put it in the prompt) and an unclosed block
    (a truncated generation: everything is reasoning, there is no answer).

    >>> split_think("<think>考える</think>{{答え}}")
    ('考える', '{{答え}}')
    >>> split_think("考える</think>{{答え}}")
    ('考える', '{{答え}}')
    >>> split_think("<think>途中で切れた")
    ('途中で切れた', '')
    >>> split_think("{{答え}}")
    (None, '{{答え}}')
    """
    close = text.find(_THINK_CLOSE)
    if close >= 0:
        head = text[:close]
        open_at = head.find(_THINK_OPEN)
        # Text before a <think> opener (rare) stays with the content rather than vanishing.
        before = head[:open_at] if open_at >= 0 else ""
        reasoning = head[open_at + len(_THINK_OPEN):] if open_at >= 0 else head
        rest = before + text[close + len(_THINK_CLOSE):]
        return reasoning.strip(), rest.strip()
    open_at = text.find(_THINK_OPEN)
    if open_at >= 0:
        return text[open_at + len(_THINK_OPEN):].strip(), text[:open_at].strip()
    return None, text.strip()


def coerce_tool_call(obj: object, raw: str = "") -> ToolCall | ParseError:
    """Validate a decoded tool call: ``{"name": str, "arguments": dict | JSON-string of dict}``.

    Also accepts the OpenAI/TRL nesting ``{"type": "function", "function": {...}}``.

    >>> coerce_tool_call({"name": "search", "arguments": '{"query": "x"}'})
    ToolCall(name='search', arguments={'query': 'x'})
    >>> coerce_tool_call({"arguments": {}}).kind
    'missing_name'
    """
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    if not isinstance(obj, dict):
        return ParseError("not_object", "tool call must be a JSON object", raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError("missing_name", 'tool call needs a string "name"', raw)
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ParseError("bad_arguments", f"arguments string is not JSON: {exc.msg}", raw)
    if not isinstance(arguments, dict):
        return ParseError("bad_arguments", '"arguments" must be a JSON object', raw)
    return ToolCall(name.strip(), arguments)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[ParseError]]:
    """Extract every ``<tool_call>`` block; returns ``(text without the blocks, calls, errors)``.

    JSON is parsed strictly (no repair): a call the model got wrong must be seen as wrong.

    >>> _, calls, errors = parse_tool_calls('<tool_call>{"name": "search", "arguments": {"q": 1}}'
    ...                                     '</tool_call><tool_call>{name: search}</tool_call>')
    >>> [c.name for c in calls], [e.kind for e in errors]
    (['search'], ['bad_json'])
    >>> parse_tool_calls('<tool_call>{"name": "search"')[2][0].kind
    'unclosed'
    """
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    for match in _TOOL_CALL_BLOCK.finditer(text):
        raw = match.group(1).strip()
        if not match.group(0).endswith("</tool_call>"):
            errors.append(ParseError("unclosed", "missing </tool_call>", raw))
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(ParseError("bad_json", f"{exc.msg} at char {exc.pos}", raw))
            continue
        parsed = coerce_tool_call(obj, raw)
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
    rest = _TOOL_CALL_BLOCK.sub("", text)
    # A stray closing tag without an opener is a broken call too.
    if "</tool_call>" in rest:
        errors.append(ParseError("unclosed", "</tool_call> without <tool_call>", ""))
        rest = rest.replace("</tool_call>", "")
    return rest.strip(), calls, errors


def parse_assistant_text(text: str) -> ParsedTurn:
    """Parse one raw assistant generation into reasoning, content, tool calls and parse errors."""
    reasoning, rest = split_think(strip_end_markers(text))
    content, calls, errors = parse_tool_calls(rest)
    return ParsedTurn(reasoning=reasoning or None, content=content, tool_calls=calls, errors=errors)


def final_answers(content: str) -> list[str]:
    """Every ``{{…}}`` span in a final message, in order (stripped).

    >>> final_answers("答えは{{ 東京都 }}です")
    ['東京都']
    >>> final_answers("答えなし")
    []
    """
    return [m.strip() for m in _FINAL_ANSWER.findall(content)]


def is_tool_error(tool_result: str) -> bool:
    """True when a tool message's content reports a failure (see ``TOOL_ERROR_PREFIXES``).

    >>> is_tool_error("{'error': 'Tool foo not found.'}"), is_tool_error("1. 東京都 ...")
    (True, False)
    """
    return str(tool_result).lstrip().startswith(TOOL_ERROR_PREFIXES)
