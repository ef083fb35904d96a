"""Stage 4 of ``synth build deepresearch``: clarifying Q/A for a share of the instructions.

``select_for_clarification`` marks each record on its own, when its seeded draw
(``rng_for(seed, "clarify", group_id)``) falls below ``share``: about that share of the rows, the same ones in
a resumed run or a larger one, and no barrier: a record's clarifying Q/A is asked for as soon as it passed the
quality judge, while other records are still being written. For a marked record the LLM writes the assistant's clarifying
question and a plausible user answer; both are filtered, first by rules (a question that asks, an
answer that does not, Japanese text, no doc ids or search output leaking in), then by an LLM judge.

A record whose Q/A fails a filter keeps its instruction without the Q/A (the instruction itself passed
every filter), with the reason in ``clarify_status`` (``rejected_rules``, ``rejected_judge``,
``llm_bad_json``, ``llm_error``), so the realized share can be read off the dataset.
Columns: ``needs_clarification``, ``clarify_question``, ``clarify_answer``, ``clarify_status``
(``ok`` / ``not_selected`` / a rejection) and ``dialogue``: the turns before the report
(``[user instruction]`` or ``[user, assistant question, user answer]``).
"""

from __future__ import annotations

import re

from tansaku.core.engine import Drop, rng_for
from tansaku.pipelines.deepresearch import ask_json

_KANA = re.compile(r"[\u3040-\u30ff]")
_LEAK = re.compile(r"doc_id|<tool_call>|\[\d+\]\s*doc|【キーワード】|【根拠")
_ASKS = re.compile(r"[?？]|ですか|ますか|でしょうか")


def select_for_clarification(share: float, seed: int):
    """Map stage function marking a record ``needs_clarification`` when its seeded draw is below ``share``."""
    if not 0 <= share <= 1:
        raise ValueError(f"clarify share must be within [0, 1], got {share}")

    def select(record: dict) -> dict:
        return {**record, "needs_clarification": rng_for(seed, "clarify", record["group_id"]).random() < share}

    return select


def rule_problem(instruction: str, question: str, answer: str) -> str | None:
    """Why a Q/A pair fails the rules, or None when it passes."""
    if not 8 <= len(question) <= 300 or not _ASKS.search(question):
        return "question is not a short question"
    if not 2 <= len(answer) <= 300 or answer.rstrip().endswith(("?", "？")):
        return "answer is empty, too long, or another question"
    if not _KANA.search(question) or not _KANA.search(answer):
        return "not Japanese"
    if _LEAK.search(question) or _LEAK.search(answer):
        return "prompt or tool output leaked"
    if question.strip() == answer.strip() or question.strip() == instruction.strip():
        return "echo"
    return None


def clarify_message(record: dict) -> str:
    return f"【調査依頼】\n{record['instruction']}\n【対象】{'、'.join(record['entities'])}"


def judge_message(record: dict, question: str, answer: str) -> str:
    return f"【調査依頼】\n{record['instruction']}\n【確認の質問】{question}\n【ユーザーの回答】{answer}"


def _with(record: dict, status: str, question: str | None = None, answer: str | None = None) -> dict:
    dialogue = [{"role": "user", "content": record["instruction"]}]
    if question is not None:
        dialogue += [{"role": "assistant", "content": question}, {"role": "user", "content": answer}]
    return {**record, "clarify_question": question, "clarify_answer": answer, "clarify_status": status,
            "dialogue": dialogue}


def make_clarify_stage_fn(llm):
    def clarify(records: list[dict]) -> list[dict | Drop]:
        marked = [i for i, r in enumerate(records) if r["needs_clarification"]]
        out: list[dict | Drop] = [_with(r, "not_selected") for r in records]
        drafts = ask_json(llm, "clarify", [clarify_message(records[i]) for i in marked], 512)
        to_judge = []
        for i, draft in zip(marked, drafts):
            if isinstance(draft, Drop):
                out[i] = _with(records[i], draft.reason)
                continue
            question, answer = str(draft.get("question") or "").strip(), str(draft.get("answer") or "").strip()
            if rule_problem(records[i]["instruction"], question, answer):
                out[i] = _with(records[i], "rejected_rules")
                continue
            to_judge.append((i, question, answer))
        verdicts = ask_json(llm, "clarify_judge", [judge_message(records[i], q, a) for i, q, a in to_judge], 256)
        for (i, question, answer), verdict in zip(to_judge, verdicts):
            if isinstance(verdict, Drop):
                out[i] = _with(records[i], verdict.reason)
            elif verdict.get("question_ok") is True and verdict.get("answer_ok") is True:
                out[i] = _with(records[i], "ok", question, answer)
            else:
                out[i] = _with(records[i], "rejected_judge")
        return out

    return clarify
