"""Search-health signals: whether a policy still searches, and whether it answers from what it read.

Reward lags collapse: a GRPO policy that settles on one or two searches, repeats its own query, or answers
from memory can keep its reward for a while. These signals show that directly, per episode
(``episode_health``) and
over a batch (``health_summary``): searches per episode as a distribution (mean, median, p90, max, the share
of episodes with 0 / 1 / 2+ searches, and the counts), the distinct-query ratio and repeated queries, an
opened document before the answer, evidence grounding (the final answer, normalized as the answer reward
normalizes it, appears in a tool result the episode received), and answers given without any search.

``train eval`` puts ``health_summary`` in its report (``search_health``); ``train rl`` logs ``step_metrics``
each step as ``search_health/<name>`` (``tansaku.trainer.rl_rewards``), drawn beside the reward curves
(``tansaku.trainer.curves``). Calls are read as the rewards read them (``tansaku.core.parsing``): structured
``tool_calls`` and ``<tool_call>`` blocks; a failed call (error result) is no evidence, a search still counts.

    from tansaku.envs.search_health import health_summary
    health_summary([trajectory.completion for trajectory in trajectories])["searches_per_episode"]["mean"]
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field

from tansaku.core.parsing import is_tool_error, split_think, strip_end_markers
from tansaku.envs.answer_text import as_messages
from tansaku.envs.normalize import normalize_answer
from tansaku.envs.rewards import _parse_turn, assistant_turns, final_answer
from tansaku.envs.tool_interfaces import TOOL_ROLES

# How much retrieved text one episode keeps for the grounding check: a model cannot read more than its context
# either, and the check stays linear in bounded input.
MAX_EVIDENCE_CHARS = 1_000_000


@dataclass
class EpisodeHealth:
    """What one episode did with its search tools."""

    searches: int = 0  # well-formed search calls (search / find), failed ones included
    opens: int = 0  # well-formed open calls (open_doc / read) that returned a page
    queries: list[str] = field(default_factory=list)  # each search's query, normalized as answers are
    opened_before_answer: bool = False  # an open call returned a page before the final answer
    answer: str | None = None  # the final {{…}} answer (None: none, empty or ambiguous)
    grounded: bool = False  # the answer appears in a tool result the episode received
    evidence: str = ""  # the normalized text of the successful tool results (bounded)

    @property
    def distinct_queries(self) -> int:
        return len(set(self.queries))

    @property
    def repeated_queries(self) -> int:
        return len(self.queries) - self.distinct_queries


def _query_text(arguments) -> str:
    """A search call's query as one normalized string: ``query`` (search) or the joined ``keywords``
    (find)."""
    if not isinstance(arguments, dict):
        return normalize_answer(str(arguments))
    value = arguments.get("query", arguments.get("keywords", ""))
    if isinstance(value, (list, tuple)):
        value = " ".join(str(v) for v in value)
    elif not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return normalize_answer(value)


def _read_calls(health: EpisodeHealth, calls: list, results: list, evidence: list[str]) -> None:
    """Count one turn's calls with their results (one per call, in order; missing: failed)."""
    for call, result in zip(calls, results + [None] * len(calls)):
        role = TOOL_ROLES.get(call.name)
        failed = result is None or is_tool_error(result)
        if role == "search":
            health.searches += 1
            health.queries.append(_query_text(call.arguments))
        if failed:
            continue
        evidence.append(str(result))
        if role == "open":
            health.opens += 1
            health.opened_before_answer = True  # reaching here means no final answer has come yet


def episode_health(completion) -> EpisodeHealth:
    """The search-health record of one completion (TRL's messages or a string).

    >>> h = episode_health([
    ...     {"role": "assistant", "content": "",
    ...      "tool_calls": [{"name": "search", "arguments": {"query": "港"}}]},
    ...     {"role": "tool", "content": "1. [d1] 白砂港 — 白砂市の港"},
    ...     {"role": "assistant", "content": "{{白砂港}}"}])
    >>> h.searches, h.opened_before_answer, h.answer, h.grounded
    (1, False, '白砂港', True)
    """
    health, evidence = EpisodeHealth(), []
    for message, results, _ in assistant_turns(as_messages(completion)):
        _, rest = split_think(strip_end_markers(message["content"]))
        _, calls, _ = _parse_turn(rest, message["tool_calls"])
        _read_calls(health, calls, results, evidence)
    health.answer = final_answer(completion)
    health.evidence = normalize_answer("\n".join(evidence)[:MAX_EVIDENCE_CHARS])
    health.grounded = supported(health.answer, health.evidence)
    return health


def supported(answer: str | None, evidence: str) -> bool:
    """Whether ``answer`` (normalized as the answer reward normalizes) occurs in ``evidence`` (normalized
    already: ``EpisodeHealth.evidence``).

    >>> supported("「白砂港」", normalize_answer("白砂 港は…")), supported("東京", "大阪")
    (True, False)
    """
    needle = normalize_answer(answer) if answer else ""
    return bool(needle) and needle in evidence


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _distribution(counts: list[int]) -> dict:
    """Mean, median, p90, max and the shares of 0 / 1 / 2+ of per-episode counts, with the counts
    themselves."""
    if not counts:
        return {"mean": None, "median": None, "p90": None, "max": None, "share_0": None, "share_1": None,
                "share_2_plus": None, "counts": {}}
    ordered = sorted(counts)
    return {"mean": sum(counts) / len(counts), "median": float(statistics.median(ordered)),
            "p90": float(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]), "max": ordered[-1],
            "share_0": _share([c == 0 for c in counts]), "share_1": _share([c == 1 for c in counts]),
            "share_2_plus": _share([c >= 2 for c in counts]), "counts": dict(sorted(Counter(counts).items()))}


def health_summary(completions) -> dict:
    """The batch's signals (shares are None when nothing qualifies: no episode answered, none searched).

    ``distinct_query_ratio``: distinct / all queries over episodes that searched (mean per episode);
    ``open_before_answer_share``, ``grounded_answer_share``, ``answered_without_search_share``: over the
    episodes that gave an answer.
    """
    records = [episode_health(c) for c in completions]
    searched = [h for h in records if h.searches]
    answered = [h for h in records if h.answer is not None]
    ratios = [h.distinct_queries / h.searches for h in searched]
    return {
        "episodes": len(records),
        "searches_per_episode": _distribution([h.searches for h in records]),
        "opens_per_episode": _distribution([h.opens for h in records])["mean"],
        "distinct_query_ratio": sum(ratios) / len(ratios) if ratios else None,
        "repeated_queries_per_episode": (sum(h.repeated_queries for h in records) / len(records)
                                         if records else None),
        "episodes_repeating_a_query": _share([h.repeated_queries > 0 for h in records]),
        "answered_share": _share([h.answer is not None for h in records]),
        "open_before_answer_share": _share([h.opened_before_answer for h in answered]),
        "grounded_answer_share": _share([h.grounded for h in answered]),
        "answered_without_search_share": _share([h.searches == 0 for h in answered]),
    }


# The per-step scalars train rl logs (``search_health/<name>``), in the order the curves draw them.
STEP_METRICS = ("searches_mean", "searches_p90", "searches_share_0", "searches_share_1",
                "distinct_query_ratio",
                "repeated_queries_per_episode", "open_before_answer_share", "grounded_answer_share",
                "answered_without_search_share")


def step_metrics(completions) -> dict[str, float]:
    """``health_summary`` flattened to the scalars one training step logs; a signal with nothing to measure
    (no answer in the batch) is left out, never logged as 0.

    >>> step_metrics(["{{東京}}"])["answered_without_search_share"]
    1.0
    """
    summary = health_summary(completions)
    searches = summary["searches_per_episode"]
    values = {"searches_mean": searches["mean"], "searches_p90": searches["p90"],
              "searches_share_0": searches["share_0"], "searches_share_1": searches["share_1"],
              **{k: summary[k] for k in STEP_METRICS if k in summary}}
    return {k: float(values[k]) for k in STEP_METRICS if values.get(k) is not None}
