"""Stage 5 of ``synth build deepresearch``: one rubric per instruction, validated against a JSON schema.

A rubric is a list of criteria (the ``rubric`` column, read by
``tansaku.envs.rubric_reward.make_rubric_reward``)::

    {"id": "c1", "criterion": "月見湖水質保全条例の制定年（1976年）を正しく書いている", "weight": 0.25,
     "scale": "binary", "kind": "fact", "entities": ["月見湖水質保全条例"], "source_doc_ids": ["dr0007"]}

* ``kind``: ``coverage`` (an item that must be covered for named entities), ``fact`` (a fact that must match
  a named source; needs ``source_doc_ids``), ``format`` (the requested form, e.g. a table), ``other``.
* ``scale``: ``binary`` (met / not met), ``0-2`` or ``0-3`` (graded); ``rubric_reward`` asks the judge for
  0..top points per criterion and scores points / top.
* ``weight``: the LLM's positive weight (≤ 10), normalized here so a rubric's weights sum to 1.

Rejected (drop reasons): ``rubric_schema`` (schema violation: bad weight, unknown scale or kind, missing
keys …), ``rubric_unknown_source`` (cites a doc id that is not a supporting article), ``rubric_generic``
(fewer than ``min_specific`` criteria that name an entity of the instruction, or mostly generic weight —
"cites three sources" alone is not a rubric), ``llm_bad_json``, ``llm_error``.

    python -m pytest tests/test_deepresearch_rubric.py
"""

from __future__ import annotations

import math
import re

from jsonschema import Draft202012Validator

from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.pipelines.deepresearch import ask_json, excerpt
from tansaku.pipelines.deepresearch.config import MAX_GENERIC_SHARE, MIN_SPECIFIC, RUBRIC_CHARS

SCALES = ("binary", "0-2", "0-3")
KINDS = ("coverage", "fact", "format", "other")
MAX_WEIGHT = 10.0

CRITERION_SCHEMA = {
    "type": "object",
    "required": ["criterion", "weight", "scale", "kind", "entities", "source_doc_ids"],
    "properties": {
        "id": {"type": "string"},
        "criterion": {"type": "string", "minLength": 6, "maxLength": 300},
        "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WEIGHT},
        "scale": {"enum": list(SCALES)},
        "kind": {"enum": list(KINDS)},
        "entities": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 10},
        "source_doc_ids": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 10},
    },
    "additionalProperties": False,
}
RUBRIC_SCHEMA = {
    "type": "object",
    "required": ["criteria"],
    "properties": {"criteria": {"type": "array", "items": CRITERION_SCHEMA, "minItems": 3, "maxItems": 12}},
}

# Criteria that could be written without reading the instruction: sources, length, tone, correctness.
_GENERIC = re.compile(
    r"出典|情報源|ソース|参考文献|引用|文献|件以上|つ以上|個以上|文字以上|文字数|分かりやす|わかりやす|読みや"
    r"す|正確|網羅|丁寧|論理的|簡潔|誤字|日本語|構成|見出し|まとめ|要約|結論|客観的|信頼")


class RubricError(InputError):
    """A rubric the pipeline must not keep; ``reason`` is the drop reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _validator():
    return Draft202012Validator(RUBRIC_SCHEMA)


def is_specific(criterion: dict, names: set[str]) -> bool:
    """True when the criterion names something of this instruction: one of its entities, in its text."""
    text = criterion["criterion"]
    named = {e for e in criterion["entities"] if e in names or any(e in n or n in e for n in names)}
    return any(n in text for n in names) or any(e in text for e in named)


def validate_rubric(obj: dict, supporting_doc_ids: list[str], names: list[str],
                    min_specific: int = MIN_SPECIFIC,
                    max_generic_share: float = MAX_GENERIC_SHARE) -> list[dict]:
    """The rubric's criteria, checked and normalized (ids ``c1…``, weights summing to 1).

    ``names``: the instruction's entities and supporting article titles (what a specific criterion names).
    Raises :class:`RubricError` with the drop reason.
    """
    errors = sorted(_validator().iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        raise RubricError("rubric_schema", f"rubric schema: {where}: {first.message}")
    criteria = [dict(c) for c in obj["criteria"]]
    for c in criteria:
        if not math.isfinite(float(c["weight"])):
            raise RubricError("rubric_schema", f"rubric schema: weight {c['weight']!r} is not finite")
        if c["kind"] == "fact" and not c["source_doc_ids"]:
            raise RubricError("rubric_schema", f"fact criterion without source_doc_ids: {c['criterion']!r}")
        unknown = [d for d in c["source_doc_ids"] if d not in supporting_doc_ids]
        if unknown:
            raise RubricError("rubric_unknown_source",
                              f"criterion cites {unknown}, not among supporting articles "
                              f"{supporting_doc_ids}")
    name_set = {n for n in names if n}
    specific = [is_specific(c, name_set) and not (c["kind"] == "other" and _GENERIC.search(c["criterion"]))
                for c in criteria]
    total = sum(float(c["weight"]) for c in criteria)
    generic_weight = sum(float(c["weight"]) for c, s in zip(criteria, specific) if not s)
    if sum(specific) < min_specific or generic_weight / total > max_generic_share:
        raise RubricError("rubric_generic",
                          f"only {sum(specific)} of {len(criteria)} criteria name an entity of "
                          f"the instruction (generic weight {generic_weight / total:.0%})")
    return [{"id": f"c{i + 1}", "criterion": c["criterion"].strip(),
             "weight": round(float(c["weight"]) / total, 4),
             "scale": c["scale"], "kind": c["kind"], "entities": list(c["entities"]),
             "source_doc_ids": list(c["source_doc_ids"])}
            for i, c in enumerate(criteria)]


def rubric_user_message(record: dict, docs: dict[str, dict], doc_chars: int = RUBRIC_CHARS) -> str:
    lines = [f"【指示】\n{record['instruction']}", f"【対象】{'、'.join(record['entities'])}"]
    if record.get("clarify_question"):
        lines.append(f"【確認の質問】{record['clarify_question']}\n【ユーザーの回答"
                     f"】{record['clarify_answer']}")
    lines.append("【根拠記事】")
    for doc_id in record["supporting_doc_ids"]:
        doc = docs.get(doc_id) or {}
        lines.append(f"- doc_id: {doc_id} | title: "
                     f"{doc.get('title', '')}\n{excerpt(doc.get('text', ''), doc_chars)}")
    return "\n".join(lines)


def make_rubric_stage_fn(llm, backend, min_specific: int, max_generic_share: float, doc_chars: int):
    """``batch_stage`` function: ask for a rubric per record (``doc_chars`` of each supporting article in the
    prompt), validate it (``validate_rubric``), drop what fails."""

    def rubric_batch(records: list[dict]) -> list[dict | Drop]:
        messages = []
        for r in records:
            docs = {d: backend.get(d) or {} for d in r["supporting_doc_ids"]}
            messages.append(rubric_user_message(r, docs, doc_chars))
        out: list[dict | Drop] = []
        for r, answer in zip(records,
                             ask_json(llm, "rubric", messages, max_tokens=1536, json_schema=RUBRIC_SCHEMA)):
            if isinstance(answer, Drop):
                out.append(answer)
                continue
            titles = [(backend.get(d) or {}).get("title", "") for d in r["supporting_doc_ids"]]
            try:
                rubric = validate_rubric(answer, r["supporting_doc_ids"], r["entities"] + titles,
                                         min_specific, max_generic_share)
            except RubricError as exc:
                out.append(Drop(exc.reason))
                continue
            out.append({**r, "rubric": rubric})
        return out

    return rubric_batch

