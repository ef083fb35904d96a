"""Ask an LLM for JSON objects: one batched call, and every failure becomes a named ``Drop``.

    answers = ask_json(client, requests, schema)
    # [dict | Drop("llm_error" | "llm_bad_json" | "llm_bad_output"), …]

This is the one validated path for LLM JSON: every pipeline stage that wants structured answers goes
through here (or through :func:`checked_json` when it already holds the text), so a backend error, an
unreadable answer and a hostile one are told apart and counted the same way everywhere:

* ``llm_error``: the backend failed (its message is the detail);
* ``llm_bad_json``: no JSON object in the text, or a ``required`` key missing;
* ``llm_bad_output``: JSON that must not reach a stage — nested too deep, a non-finite or overlong number,
  a lone surrogate, an overlong string or list, a field of the wrong type or an integer out of its range
  (``tansaku.core.llm.validate``). The schema is the one the call site declares next to its stage (by
  default each request's own ``json_schema``), never a registry.

Stages with their own drop names (a judge's ``judge_error`` / ``judge_bad_json``) pass them as ``error`` /
``bad_json``. A build whose LLM answers were all unusable ends with 0 rows, which the store refuses in one
line (``tansaku.core.out_folder.refuse_empty``, which names these reasons).

>>> from tansaku.core.llm import ChatRequest, ScriptedLLM
>>> llm = ScriptedLLM(lambda request: request.messages[-1]["content"])
>>> texts = ('{"a": 1}', "nope", '{"a": 1e999}')
>>> answers = ask_json(llm, [ChatRequest(messages=[{"role": "user", "content": t}]) for t in texts])
>>> answers[0], answers[1].reason, "nope" in answers[1].detail, answers[2].reason, answers[2].detail
({'a': 1}, 'llm_bad_json', True, 'llm_bad_output', '$.a: inf is not a finite number')
"""

from __future__ import annotations

from collections.abc import Iterable

from tansaku.core.engine import Drop
from tansaku.core.parsing import LLMBadOutput

from .base import ChatRequest, ChatResult, LLMBadJSON, parse_json
from .validate import output_problem


def checked_json(text: str, schema: dict | None = None, *, bad_json: str = "llm_bad_json",
                 bad_output: str = "llm_bad_output") -> dict | Drop:
    """The validated JSON object in a model's text, or ``Drop(bad_json)`` / ``Drop(bad_output)`` whose
    detail says what was wrong."""
    try:
        value = parse_json(text, schema)
    except LLMBadOutput as exc:
        return Drop(bad_output, detail=str(exc))
    except LLMBadJSON as exc:
        return Drop(bad_json, detail=str(exc))
    problem = output_problem(value, schema)
    return Drop(bad_output, detail=problem) if problem else value


def json_answer(result: ChatResult, schema: dict | None = None, *, error: str = "llm_error",
                bad_json: str = "llm_bad_json", bad_output: str = "llm_bad_output") -> dict | Drop:
    """The JSON object in one result, or ``Drop(error)`` (backend failed) / ``Drop(bad_json)`` (no usable
    object, or ``schema``'s ``required`` keys missing) / ``Drop(bad_output)`` (fails the safety and
    ``schema`` checks). The backend's error or the problem found is the Drop's ``detail`` (for the rejected
    split)."""
    if result.error:
        return Drop(error, detail=str(result.error))
    return checked_json(result.content, schema, bad_json=bad_json, bad_output=bad_output)


def json_answers(results: Iterable[ChatResult], schema: dict | None = None, *, error: str = "llm_error",
                 bad_json: str = "llm_bad_json", bad_output: str = "llm_bad_output") -> list[dict | Drop]:
    """:func:`json_answer` for each result, in order."""
    return [json_answer(r, schema, error=error, bad_json=bad_json, bad_output=bad_output) for r in results]


def ask_json(llm, requests: list[ChatRequest], schema: dict | None = None, *, error: str = "llm_error",
             bad_json: str = "llm_bad_json", bad_output: str = "llm_bad_output") -> list[dict | Drop]:
    """One batched ``llm.chat(requests)``; per request the checked object or a Drop (see :func:`json_answer`).
    Without ``schema`` each answer is checked against its request's ``json_schema``."""
    if not requests:
        return []
    return [json_answer(result, schema or request.json_schema, error=error, bad_json=bad_json,
                        bad_output=bad_output)
            for request, result in zip(requests, llm.chat(requests), strict=True)]
