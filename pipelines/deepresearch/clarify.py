"""Stage 5 of ``synth build deepresearch``: a clarifying exchange before the report, for a share of the rows.

The seed's 追加の質問作成 → 追加の回答作成 → 追加QAの品質フィルタリング, as ChatGPT's DeepResearch does it:
the user first asks for less than the report instruction says, the assistant asks for what is missing before
it starts, and the user's answer supplies it. Three stages on the engine:

1. ``select_clarify`` (``select_for_clarification``) marks a record when its seeded draw
   (``rng_for(seed, "clarify", group_id)``) falls below ``share``: about that share of the rows, the same ones
   in a resumed or a larger run, and no barrier (each record goes on as soon as the quality judge passed it).
2. ``clarify_question`` (one call, ``prompts/clarify_question.v1.md``): given the report instruction and its
   entities, the LLM writes the user's **initial request** (the instruction with a detail left out: the
   viewpoint, period, scope or format; the subject kept) and the **assistant's clarifying question** asking
   for that detail. Filtered by rules (``question_rule_problem``), then by a judge
   (``clarify_question_judge.v1.md``).
3. ``clarify_answer`` (a second call, ``prompts/clarify_answer.v1.md``): the LLM plays the user, who holds the
   hidden details of the instruction: it sees the instruction, its own initial request and the question, and
   answers with what was left out. Filtered by rules (``answer_rule_problem``), then by a judge
   (``clarify_answer_judge.v1.md``).

The report instruction stays ``instruction`` (what the rubric and the rubric judge read); a row with an
exchange has ``dialogue`` = ``[user: initial request, assistant: clarifying question, user: answer]``, the
turns before the report (``DeepResearch.build_prompt`` puts them after the system prompt), and a row without
one ``[user: instruction]``. A record whose exchange fails keeps its instruction without it (the instruction
itself passed every filter); ``clarify_status`` says why, so the realized share can be read off the dataset:
``ok``, ``not_selected``, or ``<call>_<reason>`` with call ``question``, ``question_judge``, ``answer``,
``answer_judge`` and reason ``rejected`` (rules or judge: ``clarify_detail`` says which and why),
``llm_bad_json`` or ``llm_error``.

Columns: ``needs_clarification``, ``clarify_request``, ``clarify_question``, ``clarify_answer``,
``clarify_status``, ``clarify_detail``, ``dialogue``.
"""

from __future__ import annotations

import re

from tansaku.core.engine import Drop, rng_for
from tansaku.pipelines.deepresearch import ask_json

_KANA = re.compile(r"[\u3040-\u30ff]")
# A copied prompt label (this module's, or the writer's 【キーワード】/【根拠…】) or a tool result is a leak.
_LEAK = re.compile(r"doc_id|<tool_call>|\[\d+\]\s*doc|【(?:キーワード|根拠|指示|対象|最初の依頼|確認の質問|ユ"
                   r"ーザーの回答)")
_ASKS = re.compile(r"[?？]|ですか|ますか|でしょうか")
PENDING = "question_ok"  # between the two calls: the question passed, the answer is still to come
DETAIL_CHARS = 300


def select_for_clarification(share: float, seed: int):
    """Map stage function marking a record ``needs_clarification`` when its seeded draw is below ``share``."""
    if not 0 <= share <= 1:
        raise ValueError(f"clarify share must be within [0, 1], got {share}")

    def select(record: dict) -> dict:
        return {**record,
                "needs_clarification": rng_for(seed, "clarify", record["group_id"]).random() < share}

    return select


def _same(a: str, b: str) -> bool:
    return "".join(a.split()) == "".join(b.split())


def question_rule_problem(record: dict, request: str, question: str) -> str | None:
    """Why the first call's initial request and clarifying question fail the rules, or None when they pass.

    >>> r = {"instruction": "潮見町と蒼井町の歴史を比べ、表にまとめてください。",
    ...      "entities": ["潮見町", "蒼井町"]}
    >>> question_rule_problem(r, "潮見町と蒼井町について調べてください。",
    ...                       "どの時代を中心にしますか？") is None
    True
    >>> question_rule_problem(r, "町について調べてください。", "どの時代を中心にしますか？")
    'request names none of the entities'
    """
    instruction = record["instruction"]
    if not 4 <= len(request) <= 300:
        return "request is empty or too long"
    if _same(request, instruction) or len(request) >= len(instruction):
        return "request is not vaguer than the instruction"
    if record.get("entities") and not any(e and e in request for e in record["entities"]):
        return "request names none of the entities"
    if not 8 <= len(question) <= 300 or not _ASKS.search(question):
        return "question is not a short question"
    if not _KANA.search(request) or not _KANA.search(question):
        return "not Japanese"
    if _LEAK.search(request) or _LEAK.search(question):
        return "prompt or tool output leaked"
    if _same(question, request) or _same(question, instruction):
        return "echo"
    return None


def answer_rule_problem(record: dict, request: str, question: str, answer: str) -> str | None:
    """Why the second call's user answer fails the rules, or None when it passes.

    >>> r = {"instruction": "潮見町と蒼井町の歴史を比べ、表にまとめてください。"}
    >>> answer_rule_problem(r, "潮見町と蒼井町を調べて。", "どの観点ですか？",
    ...                     "歴史を比べて表にしてください。") is None
    True
    >>> answer_rule_problem(r, "潮見町と蒼井町を調べて。", "どの観点ですか？", "どの観点がいいですか？")
    'answer is empty, too long, or another question'
    """
    if not 2 <= len(answer) <= 300 or answer.rstrip().endswith(("?", "？")):
        return "answer is empty, too long, or another question"
    if not _KANA.search(answer):
        return "not Japanese"
    if _LEAK.search(answer):
        return "prompt or tool output leaked"
    if any(_same(answer, other) for other in (question, request, record["instruction"])):
        return "echo"
    return None


def question_message(record: dict) -> str:
    """The first call: the report instruction and its entities (the LLM writes the request and the
    question)."""
    return f"【指示】\n{record['instruction']}\n【対象】{'、'.join(record['entities'])}"


def question_judge_message(record: dict, request: str, question: str) -> str:
    return f"【指示】\n{record['instruction']}\n【最初の依頼】\n{request}\n【確認の質問】\n{question}"


def answer_message(record: dict) -> str:
    """The second call: the user's hidden instruction, what the user first asked, the assistant's question."""
    return (f"【指示】\n{record['instruction']}\n【最初の依頼】\n{record['clarify_request']}\n"
            f"【確認の質問】\n{record['clarify_question']}")


def answer_judge_message(record: dict, answer: str) -> str:
    return f"{answer_message(record)}\n【ユーザーの回答】\n{answer}"


def _with(record: dict, status: str, request: str | None = None, question: str | None = None,
          answer: str | None = None, detail: str | None = None) -> dict:
    """``record`` with its clarify columns; ``dialogue`` holds the exchange only when ``status`` is ``ok``,
    and the
    texts are kept only while they can still become one (``ok``, ``PENDING``): a rejected exchange leaves its
    reason in ``clarify_detail`` and nothing a later stage (the rubric writer) could take for a real one."""
    if status not in ("ok", PENDING):
        request = question = answer = None
    if status == "ok":
        dialogue = [{"role": "user", "content": request}, {"role": "assistant", "content": question},
                    {"role": "user", "content": answer}]
    else:
        dialogue = [{"role": "user", "content": record["instruction"]}]
    return {**record, "clarify_request": request, "clarify_question": question, "clarify_answer": answer,
            "clarify_status": status,
            "clarify_detail": detail if detail is None else str(detail)[:DETAIL_CHARS], "dialogue": dialogue}


def _verdict(verdict: dict, keys: tuple[str, ...]) -> str | None:
    """None when the judge said true to every key, else what it rejected and why."""
    failed = [k for k in keys if verdict.get(k) is not True]
    if not failed:
        return None
    return f"judge: {', '.join(failed)}" + (f" ({verdict['reason']})" if verdict.get("reason") else "")


def make_question_stage_fn(llm):
    """``batch_stage`` function ``clarify_question``: the initial request and the clarifying question of every
    marked record, filtered by rules then by the judge. A passed record is ``PENDING`` its answer."""

    def clarify_question(records: list[dict]) -> list[dict]:
        marked = [i for i, r in enumerate(records) if r["needs_clarification"]]
        out = [_with(r, "not_selected") for r in records]
        drafts = ask_json(llm, "clarify_question", [question_message(records[i]) for i in marked], 512)
        to_judge = []
        for i, draft in zip(marked, drafts):
            if isinstance(draft, Drop):
                out[i] = _with(records[i], f"question_{draft.reason}", detail=draft.detail)
                continue
            request, question = (str(draft.get("request") or "").strip(),
                                 str(draft.get("question") or "").strip())
            problem = question_rule_problem(records[i], request, question)
            if problem:
                out[i] = _with(records[i], "question_rejected", request, question, detail=f"rules: {problem}")
                continue
            to_judge.append((i, request, question))
        verdicts = ask_json(llm, "clarify_question_judge",
                            [question_judge_message(records[i], r, q) for i, r, q in to_judge], 256)
        for (i, request, question), verdict in zip(to_judge, verdicts):
            if isinstance(verdict, Drop):
                out[i] = _with(records[i], f"question_judge_{verdict.reason}", request, question,
                               detail=verdict.detail)
            elif problem := _verdict(verdict, ("request_ok", "question_ok")):
                out[i] = _with(records[i], "question_rejected", request, question, detail=problem)
            else:
                out[i] = _with(records[i], PENDING, request, question)
        return out

    return clarify_question


def make_answer_stage_fn(llm):
    """``batch_stage`` function ``clarify_answer``: the user's answer to every ``PENDING`` record's question
    (the answer call sees the question the first call wrote), filtered by rules then by the judge; ``ok`` rows
    get the exchange as their ``dialogue``. Other records pass unchanged."""

    def clarify_answer(records: list[dict]) -> list[dict]:
        pending = [i for i, r in enumerate(records) if r.get("clarify_status") == PENDING]
        out = list(records)
        drafts = ask_json(llm, "clarify_answer", [answer_message(records[i]) for i in pending], 384)
        to_judge = []
        for i, draft in zip(pending, drafts):
            r = records[i]
            asked = (r["clarify_request"], r["clarify_question"])
            if isinstance(draft, Drop):
                out[i] = _with(r, f"answer_{draft.reason}", *asked, detail=draft.detail)
                continue
            answer = str(draft.get("answer") or "").strip()
            problem = answer_rule_problem(r, *asked, answer)
            if problem:
                out[i] = _with(r, "answer_rejected", *asked, answer, detail=f"rules: {problem}")
                continue
            to_judge.append((i, answer))
        verdicts = ask_json(llm, "clarify_answer_judge",
                            [answer_judge_message(records[i], a) for i, a in to_judge], 256)
        for (i, answer), verdict in zip(to_judge, verdicts):
            r = records[i]
            asked = (r["clarify_request"], r["clarify_question"])
            if isinstance(verdict, Drop):
                out[i] = _with(r, f"answer_judge_{verdict.reason}", *asked, answer, detail=verdict.detail)
            elif problem := _verdict(verdict, ("answer_ok",)):
                out[i] = _with(r, "answer_rejected", *asked, answer, detail=problem)
            else:
                out[i] = _with(r, "ok", *asked, answer)
        return out

    return clarify_answer
