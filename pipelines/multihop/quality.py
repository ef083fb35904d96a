"""Stage 5: the quality loop — LLM judge → LLM fix → judge again, at most ``max_rounds`` fixes.

The judge (``prompts/judge.v1.md``) returns ``{ambiguous, natural (1–5), single_answer, time_dependent,
reasons}``. A question passes when it is not ambiguous, has a single answer and ``natural >= min_natural``.
A failing question is rewritten by the fixer (``prompts/fix.v1.md``) with the judge's reasons, checked
again for leaks (:func:`~.questions.question_problem`) and judged again. What the judge complained about
is counted: each record carries ``quality = {rounds, scores, reasons}``, and a record that never
passes is dropped as ``quality_<first failed criterion>`` (``quality_ambiguous``, ``quality_single_answer``,
``quality_unnatural``); an unreadable judge answer drops as ``judge_bad_json``.

    stage = batch_stage("quality", lambda rs: quality_loop(rs, llm, max_rounds=2), batch_size=32)
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core.engine import Drop, rng_for
from tansaku.core.llm import ChatRequest, ask_json
from tansaku.pipelines.multihop.chains import derivations_of
from tansaku.pipelines.multihop.questions import QUESTION_SCHEMA, question_problem

PROMPTS = Path(__file__).with_name("prompts")
JUDGE_PROMPT, FIX_PROMPT = "judge.v1.md", "fix.v1.md"
JUDGE_SCHEMA = {"type": "object", "properties": {
    "ambiguous": {"type": "boolean"}, "natural": {"type": "integer", "minimum": 1, "maximum": 5},
    "single_answer": {"type": "boolean"}, "time_dependent": {"type": "boolean"},
    "reasons": {"type": "array", "items": {"type": "string"}}},
    "required": ["ambiguous", "natural", "single_answer", "time_dependent"]}


def _fill(template: str, record: dict, **extra: str) -> str:
    (s1, r1, _), (_, r2, _) = derivations_of(record)
    values = {"question": record["question"], "subject": s1, "relation1": r1, "bridge": record["bridge"],
              "relation2": r2, "answer": record["answer"], **extra}
    for name, value in values.items():
        template = template.replace("{" + name + "}", str(value))
    return template


def _request(prompt_file: str, record: dict, schema: dict, seed: int, round_no: int, **extra: str):
    content = _fill((PROMPTS / prompt_file).read_text(encoding="utf-8"), record, **extra)
    return ChatRequest(messages=[{"role": "user", "content": content}], max_tokens=256, temperature=0.0,
                       seed=rng_for(seed, prompt_file, record["chain_id"], round_no).randrange(2**31),
                       json_schema=schema)


def parse_verdict(data: dict) -> dict | None:
    """The judge's parsed answer as a dict with typed fields, or None when it is unusable."""
    try:
        natural = int(data.get("natural"))
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf), should one get past the schema
        return None
    if not all(isinstance(data.get(k), bool) for k in ("ambiguous", "single_answer")):
        return None
    reasons = data.get("reasons") if isinstance(data.get("reasons"), list) else []
    return {"ambiguous": data["ambiguous"], "natural": max(1, min(5, natural)),
            "single_answer": data["single_answer"], "time_dependent": bool(data.get("time_dependent", False)),
            "reasons": [str(r) for r in reasons][:5]}


def failed_criterion(verdict: dict, min_natural: int) -> str | None:
    if verdict["ambiguous"]:
        return "ambiguous"
    if not verdict["single_answer"]:
        return "single_answer"
    if verdict["natural"] < min_natural:
        return "unnatural"
    return None


def quality_loop(records: list[dict], llm, max_rounds: int = 2, min_natural: int = 3, seed: int = 0
                 ) -> list[dict | Drop]:
    """Judge every record; fix and re-judge the failing ones up to ``max_rounds`` times (batched per
    round)."""

    out: list[dict | Drop | None] = [None] * len(records)
    current = {i: dict(r) for i, r in enumerate(records)}
    history: dict[int, list[dict]] = {i: [] for i in current}
    first_failure: dict[int, str] = {}
    for round_no in range(max_rounds + 1):
        pending = sorted(current)
        if not pending:
            break
        judged = ask_json(llm,
                          [_request(JUDGE_PROMPT, current[i], JUDGE_SCHEMA, seed, round_no) for i in pending],
                          bad_json="judge_bad_json")
        to_fix = []
        for i, answer in zip(pending, judged):
            verdict = answer if isinstance(answer, Drop) else parse_verdict(answer) or Drop("judge_bad_json")
            if isinstance(verdict, Drop):
                out[i] = verdict
                del current[i]
                continue
            history[i].append(verdict)
            failure = failed_criterion(verdict, min_natural)
            if failure is None:
                rec = current.pop(i)
                rec["time_dependent"] = verdict["time_dependent"]
                rec["quality"] = {"rounds": round_no, "scores": verdict,
                                  "reasons": [r for v in history[i] for r in v["reasons"]],
                                  "failed": [failed_criterion(v, min_natural) for v in history[i][:-1]]}
                out[i] = rec
            else:
                first_failure.setdefault(i, failure)
                to_fix.append(i)
        if round_no == max_rounds or not to_fix:
            for i in to_fix:
                out[i] = Drop(f"quality_{first_failure[i]}")
                current.pop(i, None)
            break
        fixed = ask_json(llm, [_request(FIX_PROMPT, current[i], QUESTION_SCHEMA, seed, round_no,
                                        reasons="; ".join(history[i][-1]["reasons"]) or first_failure[i])
                               for i in to_fix])
        for i, answer in zip(to_fix, fixed):
            question = None if isinstance(answer, Drop) else answer.get("question")
            problem = question_problem(question, current[i]) if isinstance(question, str) else "fix_bad_json"
            if problem:
                out[i] = Drop(f"fix_{problem}" if not problem.startswith("fix_") else problem)
                del current[i]
            else:
                current[i]["question"] = question.strip()
                current[i]["generator"] = current[i].get("generator", "template") + "+fix"
    return [o if o is not None else Drop("quality_unfinished") for o in out]
