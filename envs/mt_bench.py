"""Japanese MT-Bench, the seed's measure of general ability: questions, answers, the judge's requests and its
strictly read verdicts.

A dataset is a folder in the FastChat ``llm_judge`` layout (``question.jsonl``: ``question_id``, ``category``,
``turns`` (two); ``reference_answer/*.jsonl`` and ``model_answer/*.jsonl``: ``question_id`` and
``choices[0].turns``), e.g. ``../shared/data/ja_mt_bench``. The model under test answers both turns (the
second with the first exchange as context), with or without a system prompt (the agentic one: the switch), at
MT-Bench's per-category temperatures; ``--answers FILE`` takes pre-generated answers in the ``model_answer``
format instead. The judge grades each turn (``judge_requests``: single-answer, the reference shown for math,
reasoning and coding) or each pair of answers twice, positions swapped (``pairwise_requests``).

Verdicts are read strictly, never guessed: ``parse_rating`` takes exactly one ``[[N]]`` with N an integer
1–10, ``parse_verdict`` exactly one of ``[[A]]`` / ``[[B]]`` / ``[[C]]``; anything else is ``None``
(counted as unreadable by ``tansaku.envs.mt_bench_score``).

    from tansaku.envs.mt_bench import load_questions, parse_rating
    questions = load_questions("../shared/data/ja_mt_bench")
    parse_rating("良い回答です。Rating: [[8]]")     # 8
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.jsonl import iter_jsonl
from tansaku.core.llm import ChatRequest
from tansaku.envs.mt_bench_prompts import judge_messages

TASK = "mt_bench"
TASK_VERSION = 1
NEED_REFERENCE = ("math", "reasoning", "coding")  # MT-Bench shows the judge a reference for these
# MT-Bench's sampling temperature per category (FastChat's temperature_config); other categories: 0.7
TEMPERATURES = {
    "writing": 0.7,
    "roleplay": 0.7,
    "extraction": 0.0,
    "math": 0.0,
    "coding": 0.0,
    "reasoning": 0.0,
    "stem": 0.1,
    "humanities": 0.1,
}
JUDGE_MAX_TOKENS = 2048  # FastChat's judge budget: an explanation, then the verdict
_NUMBER_IN_BRACKETS = re.compile(r"\[\[\s*([-+]?\d+(?:\.\d*)?)\s*\]\]")
_VERDICT = re.compile(r"\[\[([ABC])\]\]")


def parse_rating(text: str | None) -> int | None:
    """The one ``[[N]]`` rating of a judgment (N an integer 1–10); None when there is none, several, or one
    out of range or not whole.

    >>> parse_rating("簡潔で正確。Rating: [[8]]"), parse_rating("[[8.5]]"), parse_rating("[[7]] … [[9]]")
    (8, None, None)
    >>> parse_rating("Rating: [[rating]] → [[10]]"), parse_rating("[[11]]"), parse_rating("8/10")
    (10, None, None)
    """
    found = _NUMBER_IN_BRACKETS.findall(text or "")
    if len(found) != 1 or not re.fullmatch(r"\+?\d+", found[0]):
        return None
    value = int(found[0])
    return value if 1 <= value <= 10 else None


def parse_verdict(text: str | None) -> str | None:
    """``A``, ``B`` or ``C`` (tie): the one verdict of a pairwise judgment; None for none or several.

    >>> parse_verdict("B is clearer. [[B]]"), parse_verdict("[[A]] or [[B]]"), parse_verdict("A")
    ('B', None, None)
    """
    found = _VERDICT.findall(text or "")
    return found[0] if len(found) == 1 else None


def question_file(dataset: str | Path) -> Path:
    """``question.jsonl`` of a dataset folder, or the file itself."""
    path = Path(dataset)
    path = path / "question.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise MissingInputError(
            f"--dataset {dataset}: no question.jsonl (an MT-Bench folder: question.jsonl, reference_answer/)"
        )
    return path


def load_questions(dataset: str | Path, limit: int | None = None) -> list[dict]:
    """The questions (``question_id``, ``category``, ``turns``: two), in file order; the first ``limit``."""
    questions = []
    for line, record in iter_jsonl(question_file(dataset)):
        turns = record.get("turns")
        if (
            "question_id" not in record
            or not isinstance(turns, list)
            or len(turns) != 2
            or not all(isinstance(t, str) for t in turns)
        ):
            raise InputError(f"{question_file(dataset)}:{line}: needs question_id, category and two turns")
        questions.append(
            {
                "question_id": record["question_id"],
                "category": str(record.get("category") or "general"),
                "turns": turns,
            }
        )
    if not questions:
        raise InputError(f"{question_file(dataset)}: no questions")
    return questions[:limit] if limit else questions


def load_answers(path: str | Path) -> tuple[str, dict]:
    """``(model_id, {question_id: [turn 1, turn 2]})`` of a ``model_answer``-format file."""
    answers, model_id = {}, Path(path).stem
    for line, record in iter_jsonl(path):
        choices = record.get("choices")
        turns = (
            choices[0].get("turns")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict)
            else None
        )
        if (
            "question_id" not in record
            or not isinstance(turns, list)
            or not all(isinstance(t, str) for t in turns)
        ):
            raise InputError(
                f"{path}:{line}: needs question_id and choices[0].turns (the model_answer format)"
            )
        answers[record["question_id"]] = turns
        model_id = str(record.get("model_id") or model_id)
    return model_id, answers


def load_references(dataset: str | Path, questions: list[dict]) -> dict:
    """``{question_id: [turn 1, turn 2]}`` of the questions that need a reference (``NEED_REFERENCE``), from
    the dataset's ``reference_answer/`` (its one file, or ``gpt-4.jsonl``); a missing one is refused."""
    needed = [q["question_id"] for q in questions if q["category"] in NEED_REFERENCE]
    if not needed:
        return {}
    folder = (Path(dataset) if Path(dataset).is_dir() else Path(dataset).parent) / "reference_answer"
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if len(files) > 1:
        files = [f for f in files if f.name == "gpt-4.jsonl"] or files[:0]
    if len(files) != 1:
        raise InputError(
            f"{folder}: needs one reference file (or gpt-4.jsonl) for the {', '.join(NEED_REFERENCE)} "
            "questions"
        )
    _, references = load_answers(files[0])
    missing = [qid for qid in needed if qid not in references]
    if missing:
        raise InputError(f"{files[0]}: no reference answer for question(s) {missing[:10]}")
    return references


def answer_record(question_id, turns: list[str], model_id: str) -> dict:
    """One line of the ``model_answer`` format (what ``--answers`` reads)."""
    digest = hashlib.sha256(f"{model_id}\n{question_id}\n{turns}".encode()).hexdigest()[:22]
    return {
        "question_id": question_id,
        "answer_id": digest,
        "model_id": model_id,
        "choices": [{"index": 0, "turns": list(turns)}],
        "tstamp": time.time(),
    }


def generate_answers(
    client, questions: list[dict], system_prompt: str | None = None, max_tokens: int = 1024, seed: int = 0
) -> tuple[dict, dict]:
    """Both turns of every question from ``client`` (turn 2 sees turn 1's exchange), with ``system_prompt``
    first when given, at MT-Bench's per-category temperature: ``({question_id: [a1, a2]}, usage)``."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    conversations = {
        q["question_id"]: [*system, {"role": "user", "content": q["turns"][0]}] for q in questions
    }
    answers: dict = {q["question_id"]: [] for q in questions}
    usage = {"requests": 0, "completion_tokens": 0, "errors": 0}
    for turn in (0, 1):
        if turn == 1:
            for q in questions:
                conversations[q["question_id"]] += [
                    {"role": "assistant", "content": answers[q["question_id"]][0]},
                    {"role": "user", "content": q["turns"][1]},
                ]
        requests = [
            ChatRequest(
                messages=conversations[q["question_id"]],
                max_tokens=max_tokens,
                temperature=TEMPERATURES.get(q["category"], 0.7),
                seed=seed,
            )
            for q in questions
        ]
        for q, result in zip(questions, client.chat(requests)):
            # a failed generation is an empty answer, graded as such (and counted): the judge sees what came
            answers[q["question_id"]].append(result.content if result.ok else "")
            usage["errors"] += not result.ok
            usage["completion_tokens"] += result.tokens or 0
        usage["requests"] += len(requests)
    return answers, usage


def _values(question: dict, reference: list[str] | None) -> dict:
    values = {
        "question": question["turns"][0],
        "question_1": question["turns"][0],
        "question_2": question["turns"][1],
    }
    if reference:
        values.update(ref_answer_1=reference[0], ref_answer_2=reference[1] if len(reference) > 1 else "")
    return values


def _role(kind: str, question: dict, turn: int) -> str:
    math = question["category"] in NEED_REFERENCE
    base = {
        "single": "single-math-v1" if math else "single-v1",
        "pair": "pair-math-v1" if math else "pair-v2",
    }[kind]
    return base + ("-multi-turn" if turn == 2 else "")


def judge_requests(
    prompts: dict, questions: list[dict], answers: dict, references: dict
) -> list[tuple[dict, str, ChatRequest]]:
    """``(item, role, request)`` per question and turn for single-answer grading; ``item`` names the question,
    category and turn. A question with no answer in ``answers`` is refused (a partial answer file)."""
    missing = [q["question_id"] for q in questions if len(answers.get(q["question_id"]) or []) < 2]
    if missing:
        raise InputError(
            f"no two-turn answer for question(s) {missing[:10]} ({len(missing)} of {len(questions)})"
        )
    out = []
    for q in questions:
        a1, a2 = answers[q["question_id"]][:2]
        values = {
            **_values(q, references.get(q["question_id"])),
            "answer": a1,
            "answer_1": a1,
            "answer_2": a2,
        }
        for turn in (1, 2):
            role = _role("single", q, turn)
            item = {"question_id": q["question_id"], "category": q["category"], "turn": turn}
            out.append((item, role, judge_request(prompts, role, values)))
    return out


def judge_request(prompts: dict, role: str, values: dict) -> ChatRequest:
    """One greedy judge call: the ``role`` prompt filled with ``values``."""
    return ChatRequest(messages=judge_messages(prompts, role, **values), max_tokens=JUDGE_MAX_TOKENS,
                       temperature=0.0)


def pairwise_requests(
    prompts: dict, questions: list[dict], answers_a: dict, answers_b: dict, references: dict
) -> list[tuple[dict, str, ChatRequest]]:
    """Two requests per question and turn: model A's answer shown first (``game`` 1), then B's (``game`` 2,
    positions swapped), so a judge that favours a position cannot favour a model."""
    for name, answers in (("A", answers_a), ("B", answers_b)):
        missing = [q["question_id"] for q in questions if len(answers.get(q["question_id"]) or []) < 2]
        if missing:
            raise InputError(f"model {name}: no two-turn answer for question(s) {missing[:10]}")
    out = []
    for q in questions:
        base = _values(q, references.get(q["question_id"]))
        for game, (first, second) in ((1, (answers_a, answers_b)), (2, (answers_b, answers_a))):
            x, y = first[q["question_id"]], second[q["question_id"]]
            values = {
                **base,
                "answer_a": x[0],
                "answer_b": y[0],
                "answer_a_1": x[0],
                "answer_a_2": x[1],
                "answer_b_1": y[0],
                "answer_b_2": y[1],
            }
            for turn in (1, 2):
                role = _role("pair", q, turn)
                item = {
                    "question_id": q["question_id"],
                    "category": q["category"],
                    "turn": turn,
                    "game": game,
                }
                out.append((item, role, judge_request(prompts, role, values)))
    return out


def judge_all(judge, requests: list[tuple[dict, str, ChatRequest]], pairwise: bool = False) -> list[dict]:
    """Send every request to ``judge`` (one call: the client's concurrency, retries and cache) and read each
    verdict strictly: one record per request with ``score`` (or ``verdict``), ``status`` (ok | unreadable |
    error), the judge's text and tokens."""
    results = judge.chat([request for _, _, request in requests])
    records = []
    for (item, role, _), result in zip(requests, results):
        value = (parse_verdict if pairwise else parse_rating)(result.content) if result.ok else None
        status = "error" if not result.ok else "ok" if value is not None else "unreadable"
        records.append(
            {
                **item,
                "prompt": role,
                ("verdict" if pairwise else "score"): value,
                "status": status,
                "judgment": result.content if result.ok else None,
                "error": result.error,
                "tokens": result.tokens,
                "prompt_tokens": result.prompt_tokens,
                "cached": result.cached,
            }
        )
    return records
