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
(deepresearch: ``tansaku.envs.rubric_reward``) and ``zh_mix_penalty`` (``make_zh_mix_penalty``: a start step,
the reasoning only or the answer too). Every one returns a score (the rubric reward: or None) for any input —
parts content, None, junk columns, hostile text — and runs in time linear in it; malformed inputs are read by
``tansaku.envs.answer_text``. Tests: ``pytest tests/test_rewards.py tests/test_rewards_robust.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

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
from tansaku.envs.call_keys import normalized_call_key
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


def assistant_turns(messages: list[dict]):
    """Each assistant message with the tool results that follow it, and whether nothing follows them:
    ``(message, results, is_last)``."""
    i = 0
    while i < len(messages):
        message, results = messages[i], []
        i += 1
        while i < len(messages) and messages[i].get("role") == "tool":
            results.append(messages[i]["content"])
            i += 1
        if message.get("role") == "assistant":
            yield message, results, i >= len(messages)


def episode_stats(completion) -> EpisodeStats:
    """Count calls, failures, parse errors and collect reasoning and the final answer message."""
    stats = EpisodeStats()
    seen_ok: set[str] = set()
    for message, results, is_last in assistant_turns(as_messages(completion)):
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
        for call, result in zip(calls, results + [None] * len(calls)):
            if result is None or is_tool_error(result):
                stats.failed_calls += 1
                continue
            stats.ok_calls += 1
            if result.lstrip().startswith(NO_HITS):  # the search ran but found nothing: no credit
                stats.empty_calls += 1
                continue
            seen_ok.add(normalized_call_key(call.name, call.arguments))  # cosmetic variants: once
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
    ``tansaku.envs.tools.NO_HITS`` ran but found nothing: it earns nothing (nonsense queries are free to
    make).
    """
    if cap < 1:
        raise ValueError(f"tool call cap must be >= 1, got {cap}")

    def tool_call_reward(completions, **_columns) -> list[float]:
        return [min(episode_stats(c).unique_ok_calls, cap) / cap for c in completions]

    return tool_call_reward


def make_format_reward(answer_style: str = "braces", require_reasoning: bool = True,
                       min_report_chars: int = 200):
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
    for completion, gold, options in zip(completions, per_row(answer_index, n), per_row(choices, n),
                                         strict=True):
        predicted = final_answer(completion)
        options = [str(o) for o in as_list(options)] or None
        gold = choice_index(gold)
        scores.append(float(predicted is not None and gold is not None
                            and parse_choice(predicted, options) == gold))
    return scores


ZH_MIX_SCOPES = ("reasoning", "reasoning+answer")  # what zh_mix_penalty reads; the first is the default
# a reward-input column: the global step a logged completion was scored at (rescore)
TRAINER_STEP = "trainer_step"


def zh_mix_text(completion, scope: str = "reasoning") -> str:
    """The model's own text that ``zh_mix_penalty`` reads in ``completion``.

    ``reasoning``: every assistant turn's ``reasoning_content`` and ``<think>`` text, and the text of the
    turns before the final answer (a turn that calls a tool thinks aloud; its ``<tool_call>`` blocks left
    out). ``reasoning+answer`` adds the final answer message's text outside ``<think>`` (the one holding
    ``{{…}}``). Never
    read: tool results (文語体 law text from the search index), tool-call arguments, the prompt.

    >>> episode = [{"role": "assistant", "reasoning_content": "民法を検索する。", "content": "",
    ...             "tool_calls": [{"function": {"name": "search", "arguments": {"query": "确定日期"}}}]},
    ...            {"role": "tool", "content": "公正証書ナルトキハ其日付ヲ以テ確定日付トス"},
    ...            {"role": "assistant", "content": "<think>第五条が該当する。</think>答えは{{2}}です。"}]
    >>> zh_mix_text(episode)
    '民法を検索する。\\n第五条が該当する。'
    >>> zh_mix_text(episode, "reasoning+answer")
    '民法を検索する。\\n第五条が該当する。\\n答えは{{2}}です。'
    """
    messages = as_messages(completion)
    parts: list[str] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        think, rest = split_think(strip_end_markers(message["content"]))
        for text in dict.fromkeys((message["reasoning_content"] or "", think or "")):  # a copy in both: once
            parts.append(text)
        visible, calls, errors = _parse_turn(rest, message["tool_calls"])
        final_answer_turn = i == len(messages) - 1 and not calls and not errors
        if not final_answer_turn or scope == "reasoning+answer":
            parts.append(visible)
    return "\n".join(part for part in parts if part and part.strip())


def check_zh_mix(start_step, scope) -> None:
    """``ValueError`` naming the setting unless ``start_step`` is an integer >= 0 and ``scope`` one of
    ``ZH_MIX_SCOPES``."""
    if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
        raise ValueError(f"zh_mix_start_step must be an integer >= 0 (got {start_step!r})")
    if scope not in ZH_MIX_SCOPES:
        raise ValueError(f"zh_mix_scope must be one of {', '.join(ZH_MIX_SCOPES)} (got {scope!r})")


def _global_steps(trainer_state, logged, n: int) -> list[int | None]:
    """Each completion's global step: TRL's ``trainer_state.global_step`` (training), else the
    ``trainer_step`` column (``train rescore`` passes the step each logged completion was scored at), else
    None (evaluation, ``serve-env``, a bare call: no training step)."""
    step = getattr(trainer_state, "global_step", None) if trainer_state is not None else None
    if isinstance(step, int) and not isinstance(step, bool):
        return [step] * n
    rows = logged if isinstance(logged, list) and len(logged) == n else [None] * n
    return [s if isinstance(s, int) and not isinstance(s, bool) else None for s in rows]


def make_zh_mix_penalty(start_step: int = 0, scope: str = "reasoning", metric: str | None = None):
    """Reward −1.0 for a completion whose ``zh_mix_text`` (``scope``) has Chinese
    (``tansaku.envs.zh_detect``), else 0.0; 0.0 for every completion before global step ``start_step`` (the
    seed recipe added the penalty to its e-Gov task once Chinese appeared). Without a step (evaluation,
    ``serve-env``) the penalty always applies. ``metric`` (e.g. ``zh_mix/egov_mcq``): also log, through TRL's
    ``log_metric``, ``<metric>/detected`` (the share of the batch's completions with Chinese, before the start
    step too: the watch that tells when to start) and ``<metric>/active`` (1.0 once the penalty applies).

    >>> from types import SimpleNamespace
    >>> penalty = make_zh_mix_penalty(start_step=100)
    >>> chinese_thought = "<think>我们需要先搜索这个条文。</think>{{2}}"
    >>> penalty([chinese_thought], trainer_state=SimpleNamespace(global_step=99))
    [0.0]
    >>> penalty([chinese_thought], trainer_state=SimpleNamespace(global_step=100))
    [-1.0]
    >>> chinese_answer = "<think>条文を確認した。</think>所以答案是第二个选项。{{2}}"
    >>> zh_mix_penalty([chinese_answer]), make_zh_mix_penalty(scope="reasoning+answer")([chinese_answer])
    ([0.0], [-1.0])
    """
    check_zh_mix(start_step, scope)

    def zh_mix_penalty(completions, trainer_state=None, log_metric=None, **columns) -> list[float]:
        steps = _global_steps(trainer_state, columns.get(TRAINER_STEP), len(completions))
        found = [contains_chinese(zh_mix_text(completion, scope)) for completion in completions]
        active = [step is None or step >= start_step for step in steps]
        if metric and log_metric is not None and completions:
            log_metric(f"{metric}/detected", sum(found) / len(found))
            log_metric(f"{metric}/active", float(all(active)))
        return [-1.0 if chinese and on else 0.0 for chinese, on in zip(found, active)]

    return zh_mix_penalty


zh_mix_penalty = make_zh_mix_penalty()  # from step 0, on the reasoning: what a task's penalty is by default


@dataclass(frozen=True)
class ZhMixSettings:
    """A task's ``zh_mix_penalty`` settings (``tansaku.envs.tasks.Task`` inherits them): ``zh_mix_start_step``
    (0.0 before that global step) and ``zh_mix_scope`` (``reasoning``, or ``reasoning+answer``: the final
    answer's text too). Whether the penalty weighs at all is the task's ``reward_weights["zh_mix_penalty"]``
    (docs/tasks.md: on for ``egov_mcq`` from step 0, logged only elsewhere).

    >>> ZhMixSettings().with_zh_mix(start_step=200)
    ZhMixSettings(zh_mix_start_step=200, zh_mix_scope='reasoning')
    """

    zh_mix_start_step: int = 0
    zh_mix_scope: str = ZH_MIX_SCOPES[0]

    def zh_mix_penalty_function(self, metric: str | None = None):
        return make_zh_mix_penalty(self.zh_mix_start_step, self.zh_mix_scope, metric)

    def with_zh_mix(self, start_step: int | None = None, scope: str | None = None):
        """The same task with the penalty from global step ``start_step`` reading ``scope``; None keeps its
        own. A bad value is one ``InputError`` line (a recipe task's ``zh_mix_start_step`` /
        ``zh_mix_scope``)."""
        start_step = self.zh_mix_start_step if start_step is None else start_step
        scope = self.zh_mix_scope if scope is None else scope
        try:
            check_zh_mix(start_step, scope)
        except ValueError as exc:
            raise InputError(f"task {getattr(self, 'name', '')}: {exc}") from None
        return replace(self, zh_mix_start_step=start_step, zh_mix_scope=scope)


tool_call_reward = make_tool_call_reward()
format_reward = make_format_reward()


# What TRL's GRPO trainer hands reward functions itself next to the dataset's columns: a column of one of
# these names collides with it (TypeError) or is silently overwritten, in training as here.
TRL_REWARD_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra",
                        "log_metric", "environments")


def reward_columns(rows: list[dict], logged: bool = False) -> dict[str, list]:
    """The fields of ``rows`` as the keyword columns reward functions take (one list per field, ``None`` where
    a row lacks it), as TRL passes them. A field named like one of TRL's own arguments (or ``trainer_step``,
    the step ``train rescore`` passes) is ``InputError``; ``logged``: the rows are ``train rl``'s logged
    reward inputs, whose ``trainer_step`` is that step.

    >>> reward_columns([{"answer": "a"}, {"answer": "b", "id": 1}]) == {"answer": ["a", "b"], "id": [None, 1]}
    True
    """
    keys = list(dict.fromkeys(key for row in rows for key in row))
    # TRAINER_STEP: the step train rescore passes (zh_mix_penalty), in logged rows only
    names = TRL_REWARD_ARGUMENTS if logged else (*TRL_REWARD_ARGUMENTS, TRAINER_STEP)
    reserved = [key for key in keys if key in names]
    if reserved:
        raise InputError(f"field(s) {reserved} are names TRL gives reward functions itself "
                         f"({', '.join(TRL_REWARD_ARGUMENTS)}) or tansaku's own {TRAINER_STEP}: rename them")
    return {key: [row.get(key) for row in rows] for key in keys}
