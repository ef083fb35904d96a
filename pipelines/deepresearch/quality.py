"""Stage 3 of ``synth build deepresearch``: an LLM judge scores each instruction against the written
rubric in ``prompts/quality.v1.md`` (specificity, multi_source, verifiability, clarity, safety; 1–5 each).

An instruction is kept when the mean score reaches ``threshold`` **and** no criterion is below
``floor`` (a safe but vague instruction must not pass on its other scores). Drops: ``low_quality``,
``llm_bad_json`` (no JSON or a missing/non-numeric score), ``llm_error``.
"""

from __future__ import annotations

from tansaku.core.engine import Drop
from tansaku.pipelines.deepresearch import ask_json

CRITERIA = ("specificity", "multi_source", "verifiability", "clarity", "safety")


def quality_message(record: dict) -> str:
    return (f"【指示】\n{record['instruction']}\n【対象】{'、'.join(record['entities'])}\n"
            f"【根拠記事の数】{len(record['supporting_doc_ids'])}")


def read_scores(answer: dict) -> dict[str, float] | None:
    """The five scores as floats in [1, 5], or None when any is missing or out of range."""
    raw = answer.get("scores")
    if not isinstance(raw, dict):
        return None
    scores = {}
    for name in CRITERIA:
        try:
            value = float(raw[name])
        except (KeyError, TypeError, ValueError):
            return None
        if not 1 <= value <= 5:
            return None
        scores[name] = value
    return scores


def make_quality_stage_fn(llm, threshold: float, floor: float):
    """``batch_stage`` function: keep a record whose mean score reaches ``threshold`` and none is below
    ``floor`` (the config's ``quality_threshold`` / ``quality_floor``)."""

    def judge_quality(records: list[dict]) -> list[dict | Drop]:
        out: list[dict | Drop] = []
        for r, answer in zip(records, ask_json(llm, "quality", [quality_message(r) for r in records], 384)):
            if isinstance(answer, Drop):
                out.append(answer)
                continue
            scores = read_scores(answer)
            if scores is None:
                out.append(Drop("llm_bad_json"))
                continue
            mean = sum(scores.values()) / len(scores)
            if mean < threshold or min(scores.values()) < floor:
                out.append(Drop("low_quality"))
                continue
            out.append({**r, "quality_score": round(mean, 3),
                        "quality_scores": [scores[c] for c in CRITERIA]})
        return out

    return judge_quality
