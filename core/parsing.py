"""The one parser of what a model writes: ``<think>…</think>``, Qwen3/Hermes
``<tool_call>{json}</tool_call>``, ``{{answer}}``, JSON answers, and the two message forms (``to_hf`` /
``to_wire``).

LLM backends (``tansaku.core.llm``) return the raw generated text; everything that reads it parses it here.
The policy's tool calls are parsed strictly, as TRL's GRPO loop does (transformers' ``parse_response``):
a call with broken JSON is a ``ParseError``, never repaired, so ``train eval``, ``format_reward`` and
teacher trajectories see the same calls GSPO trains on. Only ``parse_json`` (teacher/judge answers) repairs
JSON, and only because ``repair=True`` is its explicit default.

Nothing here raises on model output, except ``parse_json`` (``LLMBadJSON``, which stages drop with
``llm_bad_json``): a malformed tool call becomes a ``ParseError`` that the rollout runner counts.

Run the examples: ``pytest tests/test_doctests.py -k parsing``.

>>> turn = parse_assistant_text('<think>検索する</think>\\n<tool_call>\\n{"name": "search", '
...                             '"arguments": {"query": "あまちゃん"}}\\n</tool_call>')
>>> turn.reasoning, turn.content, turn.tool_calls[0].name, turn.tool_calls[0].arguments
('検索する', '', 'search', {'query': 'あまちゃん'})
>>> parse_assistant_text('<tool_call>{name: "search", "arguments": {"query": "東京",}}'
...                      '</tool_call>').errors[0].kind
'bad_json'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import json_repair

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.core.jsontext import nesting_exceeds

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FINAL_ANSWER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
# Chat-template end markers a raw decode may leave behind.
_END_MARKERS = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>")

# Tool results that mean "this call failed". The first two are what TRL's tool loop writes when a tool
# raises (str({"error": ...})) — tansaku's tools raise, and the rollout runner writes the same text
# (tansaku.envs.environments.call_tool); "エラー" was the runner's old parse-error message; the rest are
# other tools' conventions, kept so older trajectories still read as failed.
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

    # bad_json | not_object | missing_name | bad_arguments | unclosed | not_text (a response of another type)
    kind: str
    message: str
    raw: str


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


def coerce_tool_call(obj: object, raw: str = "", *, in_text: bool = False) -> ToolCall | ParseError:
    """Validate one decoded tool call.

    A call in a message (``in_text=False``: a server's parsed ``tool_calls``, stored trajectories, TRL's
    messages): ``{"name": str, "arguments": dict | JSON text of a dict}``, possibly nested as
    ``{"type": "function", "function": {...}}``; JSON text is decoded strictly.

    The JSON the model wrote inside ``<tool_call>`` (``in_text=True``) is read as transformers'
    ``parse_response`` reads it in TRL: flat ``{"name": ..., "arguments": {...}}`` only (no nesting, no
    ``parameters``), the name as written, missing or null ``arguments`` → ``{}``. Arguments that are not an
    object are a ``bad_arguments`` error here, where TRL runs the call and the tool fails; either way the
    call fails.

    >>> coerce_tool_call({"name": "search", "arguments": '{"query": "x"}'})
    ToolCall(name='search', arguments={'query': 'x'})
    >>> coerce_tool_call({"name": "search", "arguments": '{"query": "x"}'}, in_text=True).kind
    'bad_arguments'
    >>> coerce_tool_call({"arguments": {}}).kind
    'missing_name'
    """
    if not in_text and isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    if not isinstance(obj, dict):
        return ParseError("not_object", "tool call must be a JSON object", raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError("missing_name", 'tool call needs a string "name"', raw)
    arguments = obj.get("arguments") if in_text else obj.get("arguments", obj.get("parameters"))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str) and not in_text:
        try:  # bounded like every JSON a model writes; lone surrogates read as U+FFFD
            arguments = jsontext.loads(arguments, max_depth=MAX_JSON_DEPTH) if arguments.strip() else {}
        except json.JSONDecodeError as exc:  # also nested too deeply, a number too long (jsontext)
            return ParseError("bad_arguments", f"arguments string is not JSON: {exc.msg}", raw[:200])
    if not isinstance(arguments, dict):
        return ParseError("bad_arguments", '"arguments" must be a JSON object', raw)
    # a dict a server or callable made: no text to check
    if jsontext.depth_exceeds(arguments, MAX_JSON_DEPTH):
        return ParseError("bad_arguments", f"arguments nested deeper than {MAX_JSON_DEPTH} levels", raw[:200])
    return ToolCall(name if in_text else name.strip(), arguments)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[ParseError]]:
    """Extract every ``<tool_call>`` block; returns ``(text without the blocks, calls, errors)``.

    JSON is parsed strictly (``json.loads``, no repair), as transformers' ``parse_response`` does in TRL: a
    call the model got wrong must be seen as wrong.

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
        if nesting_exceeds(raw, MAX_JSON_DEPTH):  # json.loads would recurse once per level (RecursionError)
            errors.append(ParseError("bad_json", f"nested deeper than {MAX_JSON_DEPTH} levels", raw[:200]))
            continue
        try:
            obj = jsontext.loads(raw, max_depth=MAX_JSON_DEPTH)  # lone surrogates read as U+FFFD
        except jsontext.JSONInputError as exc:  # an integer over Python's 4300-digit limit
            errors.append(ParseError("bad_json", exc.msg, raw[:200]))
            continue
        except json.JSONDecodeError as exc:
            errors.append(ParseError("bad_json", f"{exc.msg} at char {exc.pos}", raw))
            continue
        parsed = coerce_tool_call(obj, raw, in_text=True)
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
    # Alone, the lazy regex is quadratic on a brace storm: at every ``{{`` with no ``}}`` after it, it scans
    # to the end. Cut at the last ``}}`` first: every ``{{`` before the cut has a ``}}`` after it, so each
    # search stops at its own span and the pass is linear (and finds exactly the same spans).
    last = content.rfind("}}")
    return [] if last < 0 else [m.strip() for m in _FINAL_ANSWER.findall(content, 0, last + 2)]


def is_tool_error(tool_result: str) -> bool:
    """True when a tool message's content reports a failure (see ``TOOL_ERROR_PREFIXES``).

    >>> is_tool_error("{'error': 'Tool foo not found.'}"), is_tool_error("1. 東京都 ...")
    (True, False)
    """
    return str(tool_result).lstrip().startswith(TOOL_ERROR_PREFIXES)


# ---------------------------------------------------------------------------------------------- messages
def _call_id(call: object) -> dict:
    return {"id": call["id"]} if isinstance(call, dict) and call.get("id") else {}


def to_hf(messages: list[dict]) -> list[dict]:
    """Messages in the HF/TRL form: each tool call
    ``{"type": "function", "function": {"name", "arguments": dict}}``.

    What chat templates render and TRL hands to reward functions (and what trajectories hold). Arguments
    given as JSON text are decoded strictly, by ``coerce_tool_call``; a call's ``id`` is kept when it has one;
    messages without tool calls pass through. Raises ``ValueError`` for a call that is not valid (no name,
    arguments that are not a JSON object): stored data with a broken call is a bug to fix, not a call to
    guess.

    >>> wire = [{"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function",
    ...          "function": {"name": "search", "arguments": '{"query": "東京"}'}}]}]
    >>> to_hf(wire)[0]["tool_calls"]
    [{'id': 'c0', 'type': 'function', 'function': {'name': 'search', 'arguments': {'query': '東京'}}}]
    >>> to_wire(to_hf(wire)) == wire
    True
    """
    out = []
    for i, message in enumerate(messages):
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                parsed = coerce_tool_call(call)
                if isinstance(parsed, ParseError):
                    raise ValueError(f"message {i}: {parsed.message} ({parsed.kind}): {call!r:.120}")
                calls.append({**_call_id(call), **parsed.as_message_call()})
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def to_wire(messages: list[dict]) -> list[dict]:
    """Messages in the OpenAI wire form: each tool call ``{"type": "function", "function": {"name",
    "arguments": "<JSON text>"}}``.

    What OpenAI-compatible servers take, and how tool calls are stored (Arrow would merge the argument keys
    of every call into one struct). A dict is dumped with ``ensure_ascii=False`` in its own key order;
    arguments that already are text are kept byte for byte (stored trajectories are compared byte-wise).
    A call's ``id`` is kept when it has one; messages without tool calls pass through. Raises ``ValueError``
    for a call without a function name.

    >>> to_wire([{"role": "assistant", "tool_calls": [{"name": "search", "arguments": {"query": "東京"}}]}])
    [{'role': 'assistant', 'tool_calls': [{'type': 'function', 'function': {'name': 'search', 'arguments':
    '{"query": "東京"}'}}]}]
    """
    out = []
    for i, message in enumerate(messages):
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                fn = call.get("function", call) if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"].strip():
                    raise ValueError(f"message {i} has a tool call without a function name: {call!r:.120}")
                arguments = fn.get("arguments")
                arguments = {} if arguments is None else arguments
                text = arguments if isinstance(arguments, str) else jsontext.dumps(arguments)
                calls.append({**_call_id(call), "type": "function",
                              "function": {"name": fn["name"], "arguments": text}})
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


# ---------------------------------------------------------------------------------------------- JSON answers
class LLMBadJSON(InputError):
    """The model's text holds no usable JSON object (or misses required keys). Stages drop with
    ``llm_bad_json``."""

    reason = "llm_bad_json"


class LLMBadOutput(LLMBadJSON):
    """JSON that parses but cannot be used safely (nested too deep, a number too long to read). Stages drop
    with ``llm_bad_output``, like an answer that fails its schema (``tansaku.core.llm.validate``)."""

    reason = "llm_bad_output"


# bracket levels; no answer schema has more than four, and json/json-repair recurse per level
MAX_JSON_DEPTH = 32


def parse_json(text: str, schema: dict | None = None, repair: bool = True) -> dict:
    """The JSON object a teacher or judge answered with (``ask_json``-style calls), after any ``<think>``
    block.

    The first object in the answer wins; chatter before or after it is ignored. ``repair`` (on by default,
    for teacher/judge answers): an object that is not valid JSON is fixed by json-repair (fences, trailing
    commas, a cut-off end). ``repair=False`` takes valid JSON only. The policy's tool calls never come
    through here: ``parse_tool_calls`` reads them strictly.

    Raises ``LLMBadJSON`` (with an excerpt of the text) when there is no object, or when ``schema`` lists
    ``required`` keys that are missing; ``LLMBadOutput`` when brackets nest deeper than ``MAX_JSON_DEPTH``
    (checked on the text, before any parser recurses) or a number cannot be read (over 4300 digits).

    >>> parse_json('<think>{考える}</think>答え: {"city": "東京",}')
    {'city': '東京'}
    >>> parse_json('{"city": "東京",}', repair=False)
    Traceback (most recent call last):
    ...
    tansaku.core.parsing.LLMBadJSON: invalid JSON (...): '{"city": "東京",}'
    """
    if not isinstance(text, str):
        raise LLMBadJSON(f"expected model text, got {type(text).__name__}")
    # Raw backend text carries the reasoning (a template may even have opened <think> in the prompt).
    _, body = split_think(text)
    start = body.find("{")
    if start < 0:
        raise LLMBadJSON(f"no JSON object in model output: {_excerpt(text)!r}")
    if nesting_exceeds(body[start:], MAX_JSON_DEPTH):
        raise LLMBadOutput(f"JSON nested deeper than {MAX_JSON_DEPTH} levels: {_excerpt(text)!r}")
    try:  # valid JSON first: fast, and the first object wins when chatter or a second object follows
        value: Any = json.JSONDecoder().raw_decode(body, start)[0]
    except json.JSONDecodeError as exc:
        if not repair:
            raise LLMBadJSON(f"invalid JSON ({exc.msg} at char {exc.pos}): {_excerpt(text)!r}") from None
        try:
            value = json_repair.repair_json(body[start:], return_objects=True)
        except RecursionError:  # the depth check above should make this unreachable; never a traceback
            raise LLMBadOutput(f"JSON nested too deeply: {_excerpt(text)!r}") from None
        except Exception as exc:  # json-repair gives up on some inputs by raising
            raise LLMBadJSON(f"unrepairable JSON ({exc}): {_excerpt(text)!r}") from exc
    except RecursionError:
        raise LLMBadOutput(f"JSON nested too deeply: {_excerpt(text)!r}") from None
    except ValueError as exc:  # an integer of more than 4300 digits (Python's int parsing limit)
        raise LLMBadOutput(f"unreadable JSON number ({str(exc)[:80]}): {_excerpt(text)!r}") from None
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]  # several objects in a row: the first is the answer, the rest is chatter
    if not isinstance(value, dict):
        raise LLMBadJSON(f"model output is not a JSON object: {_excerpt(text)!r}")
    missing = [k for k in (schema or {}).get("required", []) if k not in value]
    if missing:
        raise LLMBadJSON(f"JSON misses required keys {missing}: {_excerpt(text)!r}")
    # A lone surrogate ("\ud800") is left in: the answer's schema check (tansaku.core.llm.validate) drops
    # such an answer with its reason, as a broken answer; jsontext.dumps would write it as U+FFFD.
    return value


def _excerpt(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"…(+{len(text) - limit} chars)"
