"""``synth build deepresearch``: multi-article report instructions with per-instruction rubrics.

Stages (see ``build.py``): keyword groups from the corpus (``keywords``) → an agent with the search tool
writes an instruction and confirms its supporting articles (``instructions``) → single-page judge →
quality judge (``quality``) → for a share of rows a clarifying exchange, two calls each filtered by rules and
a judge (``clarify``: the user's vaguer initial request and the assistant's question, then the user's answer)
→ rubric (``rubric``).

Shared here: the versioned prompt files and :func:`ask_json`, which puts a prompt file in front of
:func:`tansaku.core.llm.ask_json` (every failure a named :class:`~tansaku.core.engine.Drop`).

    from tansaku.pipelines.deepresearch.build import build_deepresearch
    from tansaku.pipelines.deepresearch.config import DeepResearchConfig   # every setting (config.py)
    config = DeepResearchConfig(corpus="out/corpus", index="out/index", llm="scripted:deepresearch")
    build_deepresearch(config, out="out/deepresearch")
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from tansaku.core.engine import Drop
from tansaku.core.llm import ChatRequest
from tansaku.core.llm import ask_json as llm_ask_json

PROMPTS_DIR = Path(__file__).with_name("prompts")
# Bump a file's version (new file name) whenever its wording changes; the names go to the manifest.
PROMPTS = {
    "instruction": "instruction.v1.md",
    "single_page": "single_page.v1.md",
    "quality": "quality.v1.md",
    "clarify_question": "clarify_question.v1.md",
    "clarify_question_judge": "clarify_question_judge.v1.md",
    "clarify_answer": "clarify_answer.v1.md",
    "clarify_answer_judge": "clarify_answer_judge.v1.md",
    "rubric": "rubric.v1.md",
}


@cache
def load_prompt(kind: str) -> str:
    """The system prompt for ``kind`` (a key of ``PROMPTS``)."""
    return (PROMPTS_DIR / PROMPTS[kind]).read_text(encoding="utf-8").strip()


def ask_json(llm, kind: str, user_messages: list[str], max_tokens: int = 1024,
             json_schema: dict | None = None) -> list[dict | Drop]:
    """One batched call: ``kind``'s system prompt + each user message → parsed JSON object or a Drop
    (``llm_error`` when the backend failed, ``llm_bad_json`` when the text holds no usable object)."""

    if not user_messages:
        return []
    system = load_prompt(kind)
    requests = [ChatRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": u}],
                            max_tokens=max_tokens, temperature=0.0, json_schema=json_schema)
                for u in user_messages]
    return llm_ask_json(llm, requests, json_schema)


def excerpt(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
