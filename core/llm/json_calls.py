"""Ask an LLM for JSON objects: one batched call, and every failure becomes a named ``Drop``.

    answers = ask_json(client, requests, schema)   # [dict | Drop("llm_error") | Drop("llm_bad_json"), …]

Every pipeline stage that wants structured answers goes through here, so a backend error and an
unreadable answer are told apart and counted the same way everywhere. Stages with their own drop names
(a judge's ``judge_error`` / ``judge_bad_json``) pass them as ``error`` / ``bad_json``.

>>> from tansaku.core.llm import ChatRequest, ScriptedLLM
>>> llm = ScriptedLLM(lambda request: request.messages[-1]["content"])
>>> answers = ask_json(llm, [ChatRequest(messages=[{"role": "user", "content": t}]) for t in ('{"a": 1}', "nope")])
>>> answers[0], answers[1].reason, "nope" in answers[1].detail
({'a': 1}, 'llm_bad_json', True)
"""

from __future__ import annotations

from collections.abc import Iterable

from tansaku.core.engine import Drop

from .base import ChatRequest, ChatResult, LLMBadJSON, parse_json


def json_answer(result: ChatResult, schema: dict | None = None, *, error: str = "llm_error",
                bad_json: str = "llm_bad_json") -> dict | Drop:
    """The JSON object in one result, or ``Drop(error)`` (backend failed) / ``Drop(bad_json)`` (no usable
    object, or ``schema``'s ``required`` keys missing). The backend's error or the parser's message is the
    Drop's ``detail`` (for the rejected split)."""
    if result.error:
        return Drop(error, detail=str(result.error))
    try:
        return parse_json(result.content, schema)
    except LLMBadJSON as exc:
        return Drop(bad_json, detail=str(exc))


def json_answers(results: Iterable[ChatResult], schema: dict | None = None, *, error: str = "llm_error",
                 bad_json: str = "llm_bad_json") -> list[dict | Drop]:
    """:func:`json_answer` for each result, in order."""
    return [json_answer(r, schema, error=error, bad_json=bad_json) for r in results]


def ask_json(llm, requests: list[ChatRequest], schema: dict | None = None, *, error: str = "llm_error",
             bad_json: str = "llm_bad_json") -> list[dict | Drop]:
    """One batched ``llm.chat(requests)``; per request the parsed object or a Drop (see :func:`json_answer`)."""
    if not requests:
        return []
    return json_answers(llm.chat(requests), schema, error=error, bad_json=bad_json)
