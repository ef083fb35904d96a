"""Reward functions with TRL's signature ``f(completions, **columns) -> list[float | None]``.

Each function is pure (same input, same output; the rubric judge is injected) and scores one component, so
TRL logs each as its own ``rewards/<name>/mean``. A completion is what TRL passes in conversational mode: a
list of messages (assistant turns with ``reasoning_content``/``tool_calls``, ``tool`` results, and finally the
assistant's answer). A plain string is treated as a single assistant message.

Only the **final** assistant message counts for correctness: it must carry no tool call, and its answer is
read from ``{{…}}`` outside ``<think>``. An answer that appears only in reasoning or inside tool arguments
scores 0. Several different ``{{…}}`` answers in one message are ambiguous and score 0.

Components: ``tool_call_reward`` (capped, de-duplicated successful calls that found something),
``format_reward``, ``answer_reward`` (multihop), ``mcq_reward`` (egov), ``make_rubric_reward(judge)``
(deepresearch: ``tansaku.envs.rubric_reward``) and ``zh_mix_penalty``. Every one returns a score (the rubric reward: or None) for any input —
parts content, None, junk columns, hostile text — and runs in time linear in it; malformed inputs are read by
``tansaku.envs.answer_text``. Tests: ``pytest tests/test_rewards.py tests/test_rewards_robust.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tansaku.core.errors import InputError
from tansaku.core.parsing import (
    ParseError,
    coerce_tool_call,
    is_tool_error,
    parse_tool_calls,
    split_think,
    strip_end_markers,
)
from tansaku.envs.answer_text import (
    as_messages,
    braced_answers,
    choice_index,
    parse_choice,
    per_row,
    row_aliases,
)
from tansaku.envs.normalize import answers_match, normalize_answer
from tansaku.envs.tools import NO_HITS
from tansaku.envs.zh_detect import contains_chinese

DEFAULT_TOOL_CALL_CAP = 3


@dataclass
class EpisodeStats:
    """What one completion did, read back from its messages."""

    calls: int = 0  # well-formed tool calls the model made
    ok_calls: int = 0  # of those, executed without an error result
    empty_calls: int = 0  # of the ok ones, searches that matched nothing ("No results.")
    unique_ok_calls: int = 0  # distinct (name, normalized arguments) among ok calls that returned something
    failed_calls: int = 0  # error result or no result at all
    parse_errors: int = 0  # malformed <tool_call> blocks, stray tags
    turns: int = 0  # assistant messages
    turns_with_reasoning: int = 0
    reasoning: list[str] = field(default_factory=list)  # every step's reasoning, in order
    final_content: str | None = None  # content of the final answer message (None: no final message)


def _call_key(name: str, arguments: dict) -> str:
    # Same call with cosmetic differences ("東京 都" vs "東京都", full-width digits) counts once.
    try:
        return name + normalize_answer(json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):  # unsortable keys, absurd nesting: a call of its own
        return f"{name}#{id(arguments)}"


def _parse_turn(rest: str, structured: list) -> tuple[str, list, list]:
    """Content, well-formed calls and parse errors of one assistant turn; JSON nested past Python's recursion
    limit (``[[[[…``) is a malformed call, not a crash."""
    try:
        content, calls, errors = parse_tool_calls(rest)
    except RecursionError:
        content, calls, errors = rest, [], [ParseError("bad_json", "JSON nested too deeply", "")]
    for c in structured:
        try:
            parsed = coerce_tool_call(c)
        except RecursionError:
            parsed = ParseError("bad_arguments", "arguments nested too deeply", "")
        if isinstance(parsed, ParseError):
            errors.append(parsed)
        else:
            calls.append(parsed)
    return content, calls, errors


def episode_stats(completion) -> EpisodeStats:
    """Count calls, failures, parse errors and collect reasoning and the final answer message."""
    messages = as_messages(completion)
    stats = EpisodeStats()
    seen_ok: set[str] = set()
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.get("role") != "assistant":
            continue
        stats.turns += 1
        reasoning, rest = split_think(strip_end_markers(message["content"]))
        reasoning = message["reasoning_content"] or reasoning
        if reasoning:
            stats.turns_with_reasoning += 1
            stats.reasoning.append(reasoning)
        # TRL falls back to plain content when it cannot parse a tool call, so raw blocks may remain here.
        content, calls, errors = _parse_turn(rest, message["tool_calls"])
        stats.parse_errors += len(errors)
        stats.calls += len(calls)
        # Tool results follow the assistant message: one per well-formed call, in order, then one per error.
        results = []
        while i < len(messages) and messages[i].get("role") == "tool":
            results.append(messages[i]["content"])
            i += 1
        for call, result in zip(calls, results + [None] * len(calls)):
            if result is None or is_tool_error(result):
                stats.failed_calls += 1
                continue
            stats.ok_calls += 1
            if result.lstrip().startswith(NO_HITS):  # the search ran but found nothing: no credit
                stats.empty_calls += 1
                continue
            seen_ok.add(_call_key(call.name, call.arguments))
        is_last = i >= len(messages)
        if is_last and not calls and not errors:
            stats.final_content = content
    stats.unique_ok_calls = len(seen_ok)
    return stats


def _single_answer(content: str | None) -> str | None:
    if content is None:
        return None
    answers = braced_answers(content)
    distinct: set[str] = set()
    for raw in dict.fromkeys(answers):  # each different spelling normalized once; stop at a second answer
        distinct.add(normalize_answer(raw))
        if len(distinct) > 1:
            return None
    if not distinct or not next(iter(distinct)):
        return None
    return answers[-1]


def final_answer(completion) -> str | None:
    """The single ``{{…}}`` answer of the final message; None when missing, empty or ambiguous."""
    return _single_answer(episode_stats(completion).final_content)


def make_tool_call_reward(cap: int = DEFAULT_TOOL_CALL_CAP):
    """Reward ``min(distinct successful calls, cap) / cap`` ∈ [0, 1].

    Spamming, repeating a call, or failing calls can never push it past 1.0. A search whose reply starts with
    ``tansaku.envs.tools.NO_HITS`` ran but found nothing: it earns nothing (nonsense queries are free to make).
    """
    if cap < 1:
        raise ValueError(f"tool call cap must be >= 1, got {cap}")

    def tool_call_reward(completions, **_columns) -> list[float]:
        return [min(episode_stats(c).unique_ok_calls, cap) / cap for c in completions]

    return tool_call_reward


def make_format_reward(answer_style: str = "braces", require_reasoning: bool = True, min_report_chars: int = 200):
    """Fraction of structure checks passed.

    Checks: no malformed tool call anywhere; the episode ends with a final message; that message holds
    exactly one non-empty ``{{…}}`` (``braces``) or a report of ``min_report_chars`` or more (``report``);
    every assistant turn has reasoning (when ``require_reasoning``).
    """
    if answer_style not in ("braces", "report"):
        raise ValueError(f"answer_style must be 'braces' or 'report', got {answer_style!r}")

    def format_reward(completions, **_columns) -> list[float]:
        scores = []
        for completion in completions:
            stats = episode_stats(completion)
            checks = [stats.parse_errors == 0, stats.final_content is not None]
            content = stats.final_content or ""
            if answer_style == "braces":
                checks.append(len(braced_answers(content)) == 1 and _single_answer(content) is not None)
            else:
                checks.append(len(content.strip()) >= min_report_chars and "{{" not in content)
            if require_reasoning:
                checks.append(stats.turns > 0 and stats.turns_with_reasoning == stats.turns)
            scores.append(sum(checks) / len(checks))
        return scores

    return format_reward


def as_list(value) -> list:
    """A column that may be None, a list, or a JSON string of a list."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # not JSON (or nested past the recursion limit): one plain item
            return [value]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def answer_reward(completions, answer, aliases=None, **_columns) -> list[float]:
    """1.0 when the final ``{{…}}`` answer equals ``answer`` or an alias after Japanese normalization.

    A row's ``aliases``: a list of strings, one string, None or a JSON list (parquet); anything else means no
    aliases (``tansaku.envs.answer_text.row_aliases``). A column that is not one value per completion (a bare
    string, one row's alias list) applies to every row.

    >>> answer_reward(["{{1945}}", "{{昭和20年}}"], answer=["昭和20年"] * 2, aliases=[["1945"], None])
    [1.0, 1.0]
    """
    n = len(completions)
    scores = []
    for completion, gold, alias in zip(completions, per_row(answer, n), per_row(aliases, n), strict=True):
        predicted = final_answer(completion)
        gold = gold if isinstance(gold, str) else "" if gold is None else str(gold)
        scores.append(float(predicted is not None and answers_match(predicted, gold, row_aliases(alias))))
    return scores


def mcq_reward(completions, answer_index, choices=None, **_columns) -> list[float]:
    """1.0 when the final ``{{…}}`` answer names choice ``answer_index`` (0-based) unambiguously.

    An ``answer_index`` that is no integer scores 0.0 for its row; unreadable ``choices`` mean labels only.
    """
    n = len(completions)
    scores = []
    for completion, gold, options in zip(completions, per_row(answer_index, n), per_row(choices, n), strict=True):
        predicted = final_answer(completion)
        options = [str(o) for o in as_list(options)] or None
        gold = choice_index(gold)
        scores.append(float(predicted is not None and gold is not None and parse_choice(predicted, options) == gold))
    return scores


def zh_mix_penalty(completions, **_columns) -> list[float]:
    """-1.0 when the model's own text (every step's reasoning and content, not tool results) has Chinese."""
    scores = []
    for completion in completions:
        own_text = []
        for message in as_messages(completion):
            if message.get("role") == "assistant":
                own_text.append(message["reasoning_content"] or "")
                own_text.append(message["content"])
        scores.append(-1.0 if contains_chinese("\n".join(own_text)) else 0.0)
    return scores


tool_call_reward = make_tool_call_reward()
format_reward = make_format_reward()


# What TRL's GRPO trainer hands reward functions itself next to the dataset's columns: a column of one of these
# names collides with it (TypeError) or is silently overwritten, in training as here.
TRL_REWARD_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                        "environments")


def reward_columns(rows: list[dict]) -> dict[str, list]:
    """The fields of ``rows`` as the keyword columns reward functions take (one list per field, ``None`` where a
    row lacks it), as TRL passes them. A field named like one of TRL's own arguments is ``InputError``.

    >>> reward_columns([{"answer": "a"}, {"answer": "b", "id": 1}]) == {"answer": ["a", "b"], "id": [None, 1]}
    True
    """
    keys = list(dict.fromkeys(key for row in rows for key in row))
    reserved = [key for key in keys if key in TRL_REWARD_ARGUMENTS]
    if reserved:
        raise InputError(f"field(s) {reserved} are names TRL gives reward functions itself "
                         f"({', '.join(TRL_REWARD_ARGUMENTS)}): rename them")
    return {key: [row.get(key) for row in rows] for key in keys}
