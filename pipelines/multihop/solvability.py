"""Stage 6: is the question solvable with the search tool? A cheap prefilter, then the agent check.

* :func:`prefilter` — both hop articles must be retrievable: hop 1's page among the top ``size`` hits for
  the question itself, hop 2's page among the top hits for the bridge name (what an agent searches
  after reading hop 1). Drops: ``hop1_not_retrievable``, ``hop2_not_retrievable``, ``no_page_ids``.
* :func:`agent_check` — the rollout runner (``tansaku.envs.rollout.run_rollouts``) answers each question ``k``
  times with the policy model and the search tools (an environment factory: one ``SearchEnvironment`` per
  episode, its tool descriptions drawn at ``reset`` as in RL); each answer is scored by the ``multihop_qa``
  answer reward. :func:`keep_rule` turns the thresholds into the window of solved counts kept. The default
  keeps questions solved *stably* — in at least half of the ``k`` tries, as the blog's pipeline did
  (「複数回解かせ、安定して解ける問題のみ採用」) — and ``max_pass_rate`` below 1 also drops the always-solved
  ones (every RL sample scores the same: zero reward variance, no gradient). Kept items carry ``pass_rate`` =
  solved / k and ``k``. Drops: ``unsolved`` (no try), ``unstable`` (some, fewer than the minimum),
  ``always_solved`` (all k, above ``max_pass_rate``), ``too_easy`` (above ``max_pass_rate``, not all k).
"""

from __future__ import annotations

from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.core.options import check_count, check_fraction, check_k_m
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.search import QueryError
from tansaku.envs.search.dsl import plain_text_query
from tansaku.envs.tasks import Task

DEFAULT_MIN_PASS_RATE = 0.5  # "stably solvable": solved in at least half of the k tries


def keep_rule(k: int, m: int | None = None, min_pass_rate: float | None = None,
              max_pass_rate: float = 1.0) -> dict:
    """The solved counts of ``k`` tries an item must fall in to be kept, checked before any work.

    ``m`` (a count of ``k``) or ``min_pass_rate`` (a share of it; default 0.5), not both; ``max_pass_rate``
    (default 1.0: keep the always-solved). The counts are the ``s`` with ``min <= s / k <= max``, compared as
    ``pass_rate`` itself is, so 0.3 of k = 10 means 3, never 4 from ``ceil(0.3 * 10)`` in floating point.

    >>> keep_rule(4)
    {'k': 4, 'm': None, 'min_pass_rate': 0.5, 'max_pass_rate': 1.0, 'min_solved': 2, 'max_solved': 4}
    >>> (keep_rule(1)["min_solved"], keep_rule(3, max_pass_rate=0.9)["max_solved"],
    ...  keep_rule(4, m=1)["min_solved"])
    (1, 2, 1)
    """
    check_count("--k", k, 1)
    if m is not None and min_pass_rate is not None:
        raise InputError("give --m (a count of --k) or --min-pass-rate (a share of it), not both")
    if m is not None:
        check_k_m(k, m)
    else:
        min_pass_rate = check_fraction("--min-pass-rate", DEFAULT_MIN_PASS_RATE if min_pass_rate is None
                                       else min_pass_rate, 0, 1)
    max_pass_rate = check_fraction("--max-pass-rate", max_pass_rate, 0, 1)
    if min_pass_rate is not None and min_pass_rate > max_pass_rate:
        raise InputError(f"--min-pass-rate {min_pass_rate} must be <= --max-pass-rate {max_pass_rate}")
    min_solved = m if m is not None else next(s for s in range(k + 1) if s / k >= min_pass_rate)
    max_solved = max(s for s in range(k + 1) if s / k <= max_pass_rate)
    if min_solved > max_solved:
        low = f"--m {m}" if m is not None else f"--min-pass-rate {min_pass_rate}"
        raise InputError(f"{low} and --max-pass-rate {max_pass_rate} keep no solved count of --k {k} "
                         f"(at least {min_solved}, at most {max_solved}): widen the range or raise --k")
    return {"k": k, "m": m, "min_pass_rate": min_pass_rate, "max_pass_rate": max_pass_rate,
            "min_solved": min_solved, "max_solved": max_solved}


def _verdict(solved: int, rule: dict) -> str | None:
    """The drop reason for ``solved`` of ``rule["k"]`` tries, None when kept."""
    if solved < rule["min_solved"]:
        return "unsolved" if solved == 0 else "unstable"
    if solved > rule["max_solved"]:
        return "always_solved" if solved == rule["k"] else "too_easy"
    return None


def _retrieved(backend, text: str, doc_id: str, size: int) -> bool:
    try:
        hits = backend.search(plain_text_query(text), size=size).hits
    except QueryError:
        return False
    return any(h.doc_id == doc_id for h in hits)


def prefilter(records: list[dict], backend, size: int = 10) -> list[dict | Drop]:
    out: list[dict | Drop] = []
    for r in records:
        page1, page2 = (r.get("page_ids") or [None, None])[:2]
        if not page1 or not page2:
            out.append(Drop("no_page_ids"))
        elif not _retrieved(backend, r["question"], page1, size):
            out.append(Drop("hop1_not_retrievable"))
        elif not _retrieved(backend, r["bridge"], page2, size):
            out.append(Drop("hop2_not_retrievable"))
        else:
            out.append({**r, "prefilter": {"size": size}})
    return out


def eval_row(record: dict) -> dict:
    """The columns the ``multihop_qa`` task reads."""
    return {"id": record.get("qid") or record["chain_id"], "question": record["question"],
            "answer": record["answer"],
            "aliases": list(record.get("aliases") or record.get("answer_aliases") or [])}


def _completion(trajectory):
    for name in ("completion", "messages"):
        value = getattr(trajectory, name, None) if not isinstance(trajectory, dict) else trajectory.get(name)
        if value is not None:
            return value
    raise TypeError(f"cannot read a completion from {type(trajectory).__name__}")


def agent_check(records: list[dict], policy, tools, task: Task, k: int = 4, m: int | None = None,
                seed: int = 0,
                max_turns: int | None = None, max_tokens: int = 1024, min_pass_rate: float | None = None,
                max_pass_rate: float = 1.0) -> list[dict | Drop]:
    """Run ``k`` rollouts per record and keep those whose solved count fits :func:`keep_rule`.

    ``tools``: ``tansaku.envs.environments.make_environment_factory(task, index)``; ``task``: the questions'
    task (``MultihopQA()``), whose answer reward scores each try.
    """

    rule = keep_rule(k, m, min_pass_rate, max_pass_rate)
    rows = [eval_row(r) for r in records]
    trajectories = run_rollouts(policy, task, rows, tools, k=k, seed=seed, score=False, max_turns=max_turns,
                                max_tokens=max_tokens)
    if len(trajectories) != k * len(rows):
        raise RuntimeError(f"run_rollouts returned {len(trajectories)} trajectories for {len(rows)} rows × "
                           f"k={k}")
    reward = task.answer_reward()
    out: list[dict | Drop] = []
    for i, (record, row) in enumerate(zip(records, rows)):
        # Trajectories come grouped per row: row i owns [i*k, (i+1)*k).
        group = trajectories[i * k:(i + 1) * k]
        scores = reward([_completion(t) for t in group], answer=[row["answer"]] * k,
                        aliases=[row["aliases"]] * k)
        solved = sum(1 for s in scores if s == 1.0)
        reason = _verdict(solved, rule)
        out.append(Drop(reason) if reason else
                   {**record, "pass_rate": solved / k, "k": k, "solvability": {"k": k, "solved": solved}})
    return out
