"""MT-Bench numbers from the judge's records: means with 95 % intervals per category, turn and overall;
pairwise win rates after the position swap; the judge's tokens and cost; retention against earlier reports.

Intervals: Student's t over the graded turns (``mean ± t₀.₉₇₅,n−1 · s/√n``, clipped to 1–10; none for fewer
than 2 scores).
Unreadable verdicts and judge errors are counted beside each mean and left out of it (never guessed).

Pairwise, per question and turn, from model A's side: game 1 shows A first, game 2 shows B first. Both games
agree → ``win`` / ``loss`` / ``tie``; they disagree → ``inconsistent`` (a position-biased judge: an "always
the first" judge gives only these); either unreadable → ``unreadable``. ``win_rate`` = wins / decided pairs,
``win_rate_adjusted`` = (wins + ½ (ties + inconsistent)) / decided pairs, as FastChat reports it.

Retention per condition (with and without the agentic system prompt): mean after / mean before.

    from tansaku.envs.mt_bench_score import summarize_scores, t_interval
    t_interval([7, 8, 6, 9])
"""

from __future__ import annotations

import math
from collections import Counter
from statistics import NormalDist, mean, stdev

from tansaku.envs.intervals import wilson


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom; otherwise Hill's (1970) expansion refined
    by Newton steps on the t distribution (its density integrated by Simpson's rule).

    >>> [round(t_quantile(0.975, df), 3) for df in (1, 2, 3, 9, 30, 159)]
    [12.706, 4.303, 3.182, 2.262, 2.042, 1.975]
    """
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    x = z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
    for _ in range(3):
        x -= (_t_cdf(x, df) - p) / _t_density(x, df)
    return x


def _t_density(x: float, df: int) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf(x: float, df: int, steps: int = 2000) -> float:
    h = x / steps
    inner = sum((4 if i % 2 else 2) * _t_density(i * h, df) for i in range(1, steps))
    return 0.5 + h / 3 * (_t_density(0.0, df) + inner + _t_density(x, df))


def t_interval(scores: list[float], scale: tuple[float, float] = (1.0, 10.0)) -> dict:
    """``{"mean", "low", "high", "n"}`` (95 %, clipped to the rating ``scale``); low/high None under 2 scores,
    mean None with none.

    >>> t_interval([7, 8, 6, 9])
    {'mean': 7.5, 'low': 5.446, 'high': 9.554, 'n': 4}
    """
    n = len(scores)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    centre = mean(scores)
    if n < 2:
        return {"mean": round(centre, 3), "low": None, "high": None, "n": 1}
    half = t_quantile(0.975, n - 1) * stdev(scores) / math.sqrt(n)
    low, high = max(scale[0], centre - half), min(scale[1], centre + half)
    return {"mean": round(centre, 3), "low": round(low, 3), "high": round(high, 3), "n": n}


def _group(records: list[dict]) -> dict:
    scores = [r["score"] for r in records if r["status"] == "ok"]
    counts = Counter(r["status"] for r in records)
    return {
        **t_interval(scores),
        "graded": len(records),
        "unreadable": counts["unreadable"],
        "errors": counts["error"],
    }


def summarize_scores(records: list[dict]) -> dict:
    """One condition's single-answer grades: ``overall``, ``turns`` (1, 2) and ``categories``, each a mean
    with its 95 % interval, the scored count ``n``, and the ``unreadable`` / ``errors`` left out."""
    categories = sorted({r["category"] for r in records})
    return {
        "overall": _group(records),
        "turns": {str(t): _group([r for r in records if r["turn"] == t]) for t in (1, 2)},
        "categories": {c: _group([r for r in records if r["category"] == c]) for c in categories},
    }


_FROM_A = {1: {"A": "win", "B": "loss", "C": "tie"}, 2: {"A": "loss", "B": "win", "C": "tie"}}


def pair_outcomes(records: list[dict]) -> list[dict]:
    """One outcome per question and turn, from model A's side, combining its two games (module docstring)."""
    games: dict[tuple, dict] = {}
    for r in records:
        games.setdefault((r["question_id"], r["turn"]), {"category": r["category"]})[r["game"]] = r
    out = []
    for (qid, turn), pair in games.items():
        g1, g2 = pair.get(1), pair.get(2)
        if not g1 or not g2 or g1["verdict"] is None or g2["verdict"] is None:
            outcome = "unreadable"
        else:
            first, second = _FROM_A[1][g1["verdict"]], _FROM_A[2][g2["verdict"]]
            outcome = first if first == second else "inconsistent"
        out.append({"question_id": qid, "turn": turn, "category": pair["category"], "outcome": outcome})
    return out


def _rates(outcomes: list[dict]) -> dict:
    counts = Counter(o["outcome"] for o in outcomes)
    decided = len(outcomes) - counts["unreadable"]
    wins, ties = counts["win"], counts["tie"] + counts["inconsistent"]
    low, high = wilson(wins, decided)
    return {
        "pairs": len(outcomes),
        "win": wins,
        "loss": counts["loss"],
        "tie": counts["tie"],
        "inconsistent": counts["inconsistent"],
        "unreadable": counts["unreadable"],
        "win_rate": round(wins / decided, 3) if decided else None,
        "win_rate_95": [round(low, 3), round(high, 3)] if decided else None,
        "win_rate_adjusted": round((wins + ties / 2) / decided, 3) if decided else None,
    }


def summarize_pairs(records: list[dict]) -> dict:
    """Pairwise grades: ``overall``, ``turns`` and ``categories`` of the outcomes, with the game-level count
    of unreadable verdicts and judge errors."""
    outcomes = pair_outcomes(records)
    categories = sorted({o["category"] for o in outcomes})
    statuses = Counter(r["status"] for r in records)
    return {
        "overall": _rates(outcomes),
        "turns": {str(t): _rates([o for o in outcomes if o["turn"] == t]) for t in (1, 2)},
        "categories": {c: _rates([o for o in outcomes if o["category"] == c]) for c in categories},
        "games": len(records),
        "unreadable_verdicts": statuses["unreadable"],
        "judge_errors": statuses["error"],
    }


def judge_usage(records: list[dict], price_in: float = 0.0, price_out: float = 0.0) -> dict:
    """The judge's requests and tokens (the client's usage; cache hits keep their first tokens) and the cost
    of the uncached requests at ``price_in`` / ``price_out`` per 1M prompt / completion tokens. A backend that
    does not report prompt tokens (local ones) leaves a cost with a prompt price None, said so; with no
    prices the cost is 0 (not priced)."""
    fresh = [r for r in records if not r.get("cached")]
    prompt_known = all(isinstance(r.get("prompt_tokens"), int) for r in records)
    usage = {
        "requests": len(records),
        "cache_hits": len(records) - len(fresh),
        "completion_tokens": sum(r.get("tokens") or 0 for r in records),
        "prompt_tokens": sum(r["prompt_tokens"] for r in records) if prompt_known else None,
        "price_in_per_1m": price_in,
        "price_out_per_1m": price_out,
    }
    if price_in and not prompt_known:
        return {**usage, "cost": None,
                "cost_note": "the judge's backend did not report prompt tokens: no cost with a prompt price"}
    cost_in = sum(r["prompt_tokens"] for r in fresh) * price_in / 1e6 if price_in else 0.0
    cost_out = sum(r.get("tokens") or 0 for r in fresh) * price_out / 1e6
    note = ("not priced (give --judge-price-in / --judge-price-out)" if not (price_in or price_out)
            else "prompt and completion tokens of uncached requests")
    return {**usage, "cost": round(cost_in + cost_out, 6), "cost_note": note}


def retention_table(rows: list[dict]) -> list[dict]:
    """``rows``: ``{"label", "report"}`` in order, the first the start (before SFT / RL). Per row and
    condition the overall mean and its retention = mean / the first row's mean for the same condition."""
    first = rows[0]["report"]["conditions"] if rows else {}
    table = []
    for row in rows:
        conditions = row["report"].get("conditions") or {}
        line = {"label": row["label"], "judge": (row["report"].get("judge") or {}).get("model")}
        for name, summary in conditions.items():
            value = summary["overall"]["mean"]
            before = ((first.get(name) or {}).get("overall") or {}).get("mean")
            line[name] = value
            line[f"{name}_95"] = [summary["overall"]["low"], summary["overall"]["high"]]
            line[f"retention_{name}"] = round(value / before, 3) if value is not None and before else None
        table.append(line)
    return table
