"""tansaku's own MT-Bench judge prompts, and reading a judge-prompt file in the harness's
``judge_prompts.jsonl`` format instead (``train eval --task mt_bench --judge-prompts FILE``).

The conventions are MT-Bench's (FastChat ``llm_judge``): single-answer grading on a 1–10 scale with the
verdict written as ``[[rating]]``; pairwise grading with ``[[A]]`` / ``[[B]]`` / ``[[C]]`` (tie); the
reference answer shown for the categories that have one to check against (math, reasoning, coding); a
second-turn prompt that shows the whole two-turn conversation and asks about the second answer. The wording
here is tansaku's own.

Each prompt has a role name (the harness's names, so a file in its format plugs in), a ``system_prompt`` and a
``prompt_template`` whose placeholders are filled with ``str.format``:

    single-v1                  {question} {answer}
    single-math-v1             {question} {ref_answer_1} {answer}
    single-v1-multi-turn       {question_1} {answer_1} {question_2} {answer_2}
    single-math-v1-multi-turn  … and {ref_answer_1} {ref_answer_2}
    pair-v2                    {question} {answer_a} {answer_b}
    pair-math-v1               … and {ref_answer_1}
    pair-v2-multi-turn         {question_1} {question_2} {answer_a_1} {answer_a_2} {answer_b_1} {answer_b_2}
    pair-math-v1-multi-turn    … and {ref_answer_1} {ref_answer_2}

    from tansaku.envs.mt_bench_prompts import judge_prompts
    prompts = judge_prompts(None)      # tansaku's own; judge_prompts("judge_prompts.jsonl") reads a file
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tansaku.core.errors import InputError
from tansaku.core.jsonl import iter_jsonl

PROMPTS_VERSION = "tansaku-mt-bench-judge-v1"
ROLES = (
    "single-v1",
    "single-math-v1",
    "single-v1-multi-turn",
    "single-math-v1-multi-turn",
    "pair-v2",
    "pair-math-v1",
    "pair-v2-multi-turn",
    "pair-math-v1-multi-turn",
)

_LANGUAGE = (
    "Also judge whether the answer is written in the language of the question (usually Japanese here) "
    "and reads fluently and naturally in it. "
)
_RATE = (
    "Start with a short, objective explanation. Then rate the answer on a scale of 1 to 10, written exactly "
    'as "[[rating]]" (for example: "Rating: [[6]]"), and write that rating only once.'
)
_GENERAL = "Judge how helpful, relevant, accurate, deep, creative and detailed the answer is. " + _LANGUAGE
_MATH = (
    "Judge whether the answer is correct and helpful. " + _LANGUAGE + "A reference answer is given: compare "
    "the assistant's answer with it and point out any mistake. "
)
_SECOND = "Judge the assistant's answer to the second user message; the first exchange is context. "
_PAIR = (
    "Two AI assistants answered the same user request. Decide which one follows the instructions and answers "
    "better. "
)
_FAIR = (
    "The order in which the answers are shown must not sway you, nor their length, nor the assistants' "
    'names. Start with a short comparison. Then give your verdict written exactly as "[[A]]" if assistant A '
    'is better, "[[B]]" if assistant B is better, or "[[C]]" for a tie, and write it only once.'
)
_JUDGE = "You judge the answers of AI assistants impartially."


def _block(title: str, key: str) -> str:
    return f"[{title} — start]\n{{{key}}}\n[{title} — end]"


def _conversation(who: str, answer_1: str, answer_2: str) -> str:
    return (
        f"<<{who}: conversation — start>>\n\n### User:\n{{question_1}}\n\n### {who}:\n{{{answer_1}}}\n\n"
        f"### User:\n{{question_2}}\n\n### {who}:\n{{{answer_2}}}\n\n<<{who}: conversation — end>>"
    )


_REFERENCE_TURNS = (
    "<<Reference answers — start>>\n\n### User:\n{question_1}\n\n### Reference:\n{ref_answer_1}"
    "\n\n### User:\n{question_2}\n\n### Reference:\n{ref_answer_2}\n\n<<Reference answers — end>>"
)

TANSAKU_PROMPTS: dict[str, dict] = {
    "single-v1": {
        "type": "single",
        "system_prompt": _JUDGE,
        "prompt_template": (
            "[Instruction]\n"
            + _GENERAL
            + _RATE
            + "\n\n"
            + _block("Question", "question")
            + "\n\n"
            + _block("Assistant's answer", "answer")
        ),
    },
    "single-math-v1": {
        "type": "single",
        "system_prompt": _JUDGE,
        "prompt_template": (
            "[Instruction]\n"
            + _MATH
            + _RATE
            + "\n\n"
            + _block("Question", "question")
            + "\n\n"
            + _block("Reference answer", "ref_answer_1")
            + "\n\n"
            + _block("Assistant's answer", "answer")
        ),
    },
    "single-v1-multi-turn": {
        "type": "single",
        "system_prompt": _JUDGE + " " + _GENERAL + _SECOND + _RATE,
        "prompt_template": _conversation("Assistant", "answer_1", "answer_2"),
    },
    "single-math-v1-multi-turn": {
        "type": "single",
        "system_prompt": _JUDGE + " " + _MATH + _SECOND + _RATE,
        "prompt_template": _REFERENCE_TURNS + "\n\n\n" + _conversation("Assistant", "answer_1", "answer_2"),
    },
    "pair-v2": {
        "type": "pairwise",
        "system_prompt": _PAIR + _GENERAL + _FAIR,
        "prompt_template": (
            _block("Question", "question")
            + "\n\n"
            + _block("Assistant A's answer", "answer_a")
            + "\n\n"
            + _block("Assistant B's answer", "answer_b")
        ),
    },
    "pair-math-v1": {
        "type": "pairwise",
        "system_prompt": _PAIR + _MATH + _FAIR,
        "prompt_template": (
            _block("Question", "question")
            + "\n\n"
            + _block("Reference answer", "ref_answer_1")
            + "\n\n"
            + _block("Assistant A's answer", "answer_a")
            + "\n\n"
            + _block("Assistant B's answer", "answer_b")
        ),
    },
    "pair-v2-multi-turn": {
        "type": "pairwise",
        "system_prompt": _PAIR + _GENERAL + _SECOND + _FAIR,
        "prompt_template": _conversation("Assistant A", "answer_a_1", "answer_a_2")
        + "\n\n\n"
        + _conversation("Assistant B", "answer_b_1", "answer_b_2"),
    },
    "pair-math-v1-multi-turn": {
        "type": "pairwise",
        "system_prompt": _PAIR + _MATH + _SECOND + _FAIR,
        "prompt_template": _REFERENCE_TURNS
        + "\n\n\n"
        + _conversation("Assistant A", "answer_a_1", "answer_a_2")
        + "\n\n\n"
        + _conversation("Assistant B", "answer_b_1", "answer_b_2"),
    },
}

# Every placeholder a template may use: filled for every request (str.format ignores those it does not use).
PLACEHOLDERS = (
    "question",
    "answer",
    "question_1",
    "question_2",
    "answer_1",
    "answer_2",
    "ref_answer_1",
    "ref_answer_2",
    "answer_a",
    "answer_b",
    "answer_a_1",
    "answer_a_2",
    "answer_b_1",
    "answer_b_2",
)


def judge_prompts(path: str | Path | None) -> dict:
    """``{"source", "version", "prompts": {role: {"system_prompt", "prompt_template"}}}``: tansaku's own
    (``path`` None) or the roles of a harness-format ``judge_prompts.jsonl`` (each line ``name``,
    ``system_prompt``, ``prompt_template``); a file must hold every role, each template formattable."""
    if path is None:
        return {"source": "tansaku", "version": PROMPTS_VERSION, "prompts": TANSAKU_PROMPTS}
    path = Path(path)
    prompts = {}
    for line, record in iter_jsonl(path):
        if not isinstance(record.get("prompt_template"), str):
            raise InputError(f"--judge-prompts {path}: line {line} has no prompt_template")
        if record.get("name") in ROLES:
            prompts[record["name"]] = {
                "system_prompt": str(record.get("system_prompt") or ""),
                "prompt_template": record["prompt_template"],
            }
    missing = [role for role in ROLES if role not in prompts]
    if missing:
        raise InputError(
            f"--judge-prompts {path}: no prompt named {', '.join(missing)} (needs {', '.join(ROLES)})"
        )
    for role, prompt in prompts.items():
        try:
            prompt["prompt_template"].format(**dict.fromkeys(PLACEHOLDERS, ""))
        except (KeyError, IndexError, ValueError) as exc:
            raise InputError(
                f"--judge-prompts {path}: {role}'s template does not format ({exc!r}): "
                f"it may use {', '.join(PLACEHOLDERS)}"
            ) from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return {"source": str(path), "version": f"sha256:{digest}", "prompts": prompts}


def judge_messages(prompts: dict, role: str, **values: str) -> list[dict]:
    """The judge's chat: the role's system prompt (when it has one), its filled template as the user turn."""
    prompt = prompts["prompts"][role]
    filled = prompt["prompt_template"].format(**{**dict.fromkeys(PLACEHOLDERS, ""), **values})
    system = [{"role": "system", "content": prompt["system_prompt"]}] if prompt["system_prompt"] else []
    return [*system, {"role": "user", "content": filled}]
