"""Stage 6: is the question solvable with the search tool? A cheap prefilter, then the agent check.

* :func:`prefilter` — both hop articles must be retrievable: hop 1's page among the top ``size`` hits for
  the question itself, hop 2's page among the top hits for the bridge name (what an agent searches
  after reading hop 1). Drops: ``hop1_not_retrievable``, ``hop2_not_retrievable``, ``no_page_ids``.
* :func:`agent_check` — the rollout runner (``tansaku.envs.rollout.run_rollouts``) answers each question ``k``
  times with the policy model and the search tools (an environment factory: one ``SearchEnvironment`` per
  episode, its tool descriptions drawn at ``reset`` as in RL); each answer is scored by the ``multihop_qa``
  answer reward; items solved at least ``m`` of ``k`` times are kept, with ``pass_rate`` = solved / k
  stored as their difficulty (``unsolved`` drop otherwise).
"""

from __future__ import annotations

from tansaku.core.engine import Drop
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.search import QueryError
from tansaku.envs.search.dsl import plain_text_query
from tansaku.envs.tasks import TASKS


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
            "answer": record["answer"], "aliases": list(record.get("aliases") or record.get("answer_aliases") or [])}


def _completion(trajectory):
    for name in ("completion", "messages"):
        value = getattr(trajectory, name, None) if not isinstance(trajectory, dict) else trajectory.get(name)
        if value is not None:
            return value
    raise TypeError(f"cannot read a completion from {type(trajectory).__name__}")


def agent_check(records: list[dict], policy, tools, k: int = 4, m: int = 1, seed: int = 0,
                max_turns: int | None = None, max_tokens: int = 1024) -> list[dict | Drop]:
    """Run ``k`` rollouts per record and keep those solved at least ``m`` times.

    ``tools``: ``tansaku.envs.environments.make_environment_factory(TASKS["multihop_qa"], index)``.
    """

    task = TASKS["multihop_qa"]
    rows = [eval_row(r) for r in records]
    trajectories = run_rollouts(policy, task, rows, tools, k=k, seed=seed, score=False, max_turns=max_turns,
                                max_tokens=max_tokens)
    if len(trajectories) != k * len(rows):
        raise RuntimeError(f"run_rollouts returned {len(trajectories)} trajectories for {len(rows)} rows × k={k}")
    reward = task.answer_reward()
    out: list[dict | Drop] = []
    for i, (record, row) in enumerate(zip(records, rows)):
        # Trajectories come grouped per row: row i owns [i*k, (i+1)*k).
        group = trajectories[i * k:(i + 1) * k]
        scores = reward([_completion(t) for t in group], answer=[row["answer"]] * k, aliases=[row["aliases"]] * k)
        solved = sum(1 for s in scores if s == 1.0)
        if solved < m:
            out.append(Drop("unsolved"))
        else:
            out.append({**record, "pass_rate": solved / k, "solvability": {"k": k, "m": m, "solved": solved}})
    return out
