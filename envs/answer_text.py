"""Reading reward inputs that may be malformed: messages and their text, ``{{…}}`` answers, multiple-choice
labels, per-row columns, judge verdicts.

Everything here takes whatever TRL, a dataset or a judge hands over and never raises on it; each function runs
in time linear in its input (plain ``str.find`` scans, no backtracking regex), so a hostile 1 MB completion
costs milliseconds. Used by ``tansaku.envs.rewards``.

>>> braced_answers("答えは{{ 東京都 }}です{{{x}}}")
['東京都', '{x']
>>> message_text([{"type": "text", "text": "{{1}}"}, {"type": "image_url", "image_url": {}}])
'{{1}}'
>>> row_aliases('["1945", "昭和20年"]'), row_aliases("1945"), row_aliases(7)
(['1945', '昭和20年'], ['1945'], [])
>>> judge_scores('{"scores": [1, 0, 2]}', [1, 1, 2]), judge_scores('{"scores": "11"}', [1, 1])
([1.0, 0.0, 2.0], None)
"""

from __future__ import annotations

import json
import re

from tansaku.core.parsing import final_answers
from tansaku.envs.normalize import normalize_answer


def message_text(content) -> str:
    """A message's ``content`` as text: a string as is; OpenAI-style parts → their ``text`` parts joined;
    None or anything else → ``""`` (an image or audio part carries no answer)."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p["text"] for p in content
                       if isinstance(p, dict) and p.get("type", "text") == "text"
                       and isinstance(p.get("text"), str))
    return ""



def braced_answers(content: str) -> list[str]:
    """Every ``{{…}}`` span in order, stripped (``tansaku.core.parsing.final_answers``: linear time)."""
    return final_answers(content)


def _plain(value):
    """numpy arrays / pandas values (parquet columns) → plain Python lists."""
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, (str, bytes)) else value


def per_row(column, n: int) -> list:
    """A TRL column as ``n`` per-row values: a list of ``n`` as is, None → Nones, anything else (a bare
    string, a single row's list of a different length) → that same value for every row."""
    column = _plain(column)
    if column is None:
        return [None] * n
    if isinstance(column, (list, tuple)) and len(column) == n:
        return list(column)
    return [column] * n


def row_aliases(value) -> list[str]:
    """One row's aliases: a list of strings, a single string, None, or a JSON-encoded list (parquet).

    A string that decodes to a JSON list is that list; any other string is one alias. Non-string items and
    any other value give no aliases.
    """
    value = _plain(value)
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            try:
                decoded = json.loads(value)
            except (ValueError, RecursionError):  # not JSON after all (or absurdly nested): a plain alias
                return [value]
            return [v for v in decoded if isinstance(v, str)] if isinstance(decoded, list) else [value]
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def choice_index(value) -> int | None:
    """A gold ``answer_index``: an int, an integral float or a digit string; anything else → None."""
    value = _plain(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdecimal():  # "２" yes, "²" no (isdigit: int() refuses it)
        return int(value.strip())
    return None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a score")


# Judge replies are short; a longer one is garbage, and capping it bounds the decode cost.
MAX_JUDGE_REPLY_CHARS = 100_000


def judge_scores(reply, top_points: list[int]) -> list[float] | None:
    """The judge's ``{"scores": [...]}``, checked strictly against the rubric; None when unreadable.

    The first JSON object after any ``</think>`` is decoded without repair; NaN, Infinity and overflowing
    numbers (``1e999``) are rejected, as are nesting too deep to decode, a ``scores`` that is not a list (a
    string ``"11"`` is not two scores), a wrong count, booleans, fractions and points outside ``0..top``.
    """
    if not isinstance(reply, str) or len(reply) > MAX_JUDGE_REPLY_CHARS:
        return None
    close = reply.rfind("</think>")
    body = reply[close + len("</think>"):] if close >= 0 else reply
    start = body.find("{")
    if start < 0:
        return None
    try:
        verdict, _ = json.JSONDecoder(parse_constant=_reject_constant).raw_decode(body, start)
    except (ValueError, RecursionError):
        return None
    scores = verdict.get("scores") if isinstance(verdict, dict) else None
    if not isinstance(scores, list) or len(scores) != len(top_points):
        return None
    out = []
    for value, top in zip(scores, top_points):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        # Range first: it also rejects NaN (all comparisons false) and inf, so int(value) below is safe.
        if not 0 <= value <= top or value != int(value):
            return None
        out.append(float(value))
    return out


def _message(message: dict) -> dict:
    # Content may be OpenAI-style parts or None; tool_calls anything at all: make both safe to read once,
    # here.
    calls = message.get("tool_calls")
    return {**message, "content": message_text(message.get("content")),
            "reasoning_content": message_text(message.get("reasoning_content")) or None,
            "tool_calls": list(calls) if isinstance(calls, (list, tuple)) else []}


def as_messages(completion) -> list[dict]:
    """TRL conversational completion (list of messages) or a plain string → list of messages.

    Every message comes back with text ``content`` (parts joined, None → ""), text-or-None
    ``reasoning_content`` and a list of ``tool_calls``; a stray string in the list is assistant text, a stray
    part list its text, anything else (or a completion that is neither string nor list) is skipped.
    """
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion, "reasoning_content": None, "tool_calls": []}]
    items = ([completion] if isinstance(completion, dict) else completion
             if isinstance(completion, (list, tuple)) else [])
    messages = []
    for m in items:
        if isinstance(m, dict):
            messages.append(_message(m))
        elif isinstance(m, (str, list, tuple)):
            messages.append(_message({"role": "assistant", "content": m}))
    return messages


# Accepted forms for choice k (0-based) of n, after normalize_answer (NFKC: ① → 1, Ａ → a):
#   "2", "(2)", "2.", "2)", "2番", "選択肢2"  — the number as displayed (1-based);
#   "b", "(b)", "選択肢b"                    — the letter;
#   "イ" (ア イ ウ エ オ カ)                  — the katakana label used in Japanese exams;
#   the exact text of one choice, or "2. <that choice's text>" (label and text must agree).
# Labels win: an answer that is a label of one of the n choices reads as that label even when some choice's
# text is that same string (choices "3", "1", "2", "4": "{{1}}" is the first choice, not the one reading "1");
# only an answer that is no label is compared with the choice texts.
# Anything else — two labels, a label plus the wrong text, a text matching no choice — is wrong.
_KANA_LABELS = "アイウエオカキクケコ"
_LABEL = re.compile(r"^(?:選択肢|選択|no\.?)?\(?([0-9]{1,2}|[a-j]|[アイウエオカキクケコ])\)?(?:番"
                    r"目?|\.|:|\)|、)?(.*)$")


def _label_index(label: str, n: int) -> int | None:
    if label.isdecimal():
        index = int(label) - 1
    elif label in _KANA_LABELS:
        index = _KANA_LABELS.index(label)
    else:
        index = ord(label) - ord("a")
    return index if 0 <= index < n else None


def parse_choice(text: str, choices: list[str] | None, n_choices: int = 4) -> int | None:
    """0-based index of the chosen option, or None when the answer is not one unambiguous choice.

    >>> parse_choice("②", None), parse_choice("C", None), parse_choice("イ", None), parse_choice("5", None)
    (1, 2, 1, None)
    >>> parse_choice("2. 東京", ["大阪", "東京"]), parse_choice("1. 東京", ["大阪", "東京"])
    (1, None)
    >>> parse_choice("1", ["3", "1", "2", "4"]), parse_choice("5", ["5", "6", "7", "8"])  # labels win
    (0, 0)
    """
    n = len(choices) if choices else n_choices
    norm = normalize_answer(text)
    texts = [normalize_answer(c) for c in choices] if choices else []
    match = _LABEL.match(norm)
    label, rest = match.groups() if match else (None, "")
    index = _label_index(label, n) if label else None
    if index is not None and not rest:
        return index
    if norm in texts and texts.count(norm) == 1:
        return texts.index(norm)
    # "2. 東京" is fine when choice 2 is 東京; any other trailing text makes the answer ambiguous.
    if index is not None and texts and normalize_answer(rest) == texts[index]:
        return index
    return None
