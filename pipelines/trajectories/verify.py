"""Byte-identity of tool calls and tool results through rewriting, and replay against the search index.

A trajectory is a list of HF chat messages; tool-call ``arguments`` are JSON *strings* (fixed once by the
teacher stage), so "byte-identical" is a plain string comparison. Rewriting may only change assistant
``reasoning_content``; everything else must match the teacher's messages exactly:

    problem = identity_violation(teacher_messages, rewritten)
    # None, or ("tool_result_altered", "message 4")
    problem = replay_violation(rewritten, make_environment_factory(task, "out/index"), row)

Run the tests: ``pytest tests/test_trajectories_verify.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from tansaku.core import jsontext
from tansaku.core.engine import map_stage
from tansaku.envs.environments import call_tool, tool_methods
from tansaku.pipelines.trajectories.records import fail


def arguments_text(arguments) -> str:
    """The one spelling of tool-call arguments stored in trajectories: JSON text, key order kept."""
    if isinstance(arguments, str):
        return arguments
    return jsontext.dumps(arguments)


def tool_calls_of(message: dict) -> list[tuple[str, str]]:
    """``[(name, arguments JSON text), …]`` of an assistant message."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        calls.append((str(fn.get("name", "")), arguments_text(fn.get("arguments", {}))))
    return calls


def identity_violation(original: list[dict], rewritten: list[dict],
                       prompt_messages: int = 0) -> tuple[str, str] | None:
    """``(reason, detail)`` when ``rewritten`` is not ``original`` with only assistant reasoning changed;
    None when it is.

    Reasons (checked per message, first difference wins): ``message_count_changed``, ``role_changed``,
    ``tool_call_altered``, ``tool_result_altered``, ``content_altered`` (user/system text or the
    assistant's visible content), ``empty_reasoning`` (an assistant step lost its reasoning).

    The first ``prompt_messages`` messages are the episode's prompt (a deepresearch row's clarifying exchange
    holds an assistant turn there: the question the row's dialogue asked, never rewritten): each stays exactly
    as it was, reasoning included, and needs none.
    """
    if len(original) != len(rewritten):
        return "message_count_changed", f"{len(original)} -> {len(rewritten)}"
    for i, (before, after) in enumerate(zip(original, rewritten)):
        where = f"message {i}"
        if before.get("role") != after.get("role"):
            return "role_changed", where
        role = before.get("role")
        if role == "assistant":
            if tool_calls_of(before) != tool_calls_of(after):
                return ("tool_call_altered",
                        f"{where}: {tool_calls_of(before)} -> {tool_calls_of(after)}"[:300])
            if (before.get("content") or "") != (after.get("content") or ""):
                return "content_altered", where
            if i < prompt_messages:
                if (before.get("reasoning_content") or "") != (after.get("reasoning_content") or ""):
                    return "content_altered", f"{where} (a prompt turn)"
            elif not str(after.get("reasoning_content") or "").strip():
                return "empty_reasoning", where
        elif role == "tool":
            if before.get("content") != after.get("content") or before.get("name") != after.get("name"):
                return "tool_result_altered", where
        elif before.get("content") != after.get("content"):
            return "content_altered", where
    return None


def tool_results_after(messages: list[dict], i: int) -> list[dict]:
    """The ``tool`` messages that directly follow message ``i`` (the results of its calls)."""
    results = []
    for later in messages[i + 1:]:
        if later.get("role") != "tool":
            break
        results.append(later)
    return results


def call_pairs(messages: list[dict]) -> Iterator[tuple[str, str, dict | None]]:
    """``(name, arguments text, tool message or None)`` for every tool call, paired with its result.

    Results follow their assistant message in call order (``tool_call_id`` is used when present).
    """
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        results = tool_results_after(messages, i)
        calls = message.get("tool_calls") or []
        by_id = {r.get("tool_call_id"): r for r in results if r.get("tool_call_id")}
        for k, call in enumerate(calls):
            name, args = tool_calls_of({"tool_calls": [call]})[0]
            call_id = call.get("id")
            result = by_id[call_id] if call_id in by_id else (results[k] if k < len(results) else None)
            yield name, args, result


def replay_violation(messages: list[dict], environment_factory,
                     row: dict | None = None) -> tuple[str, str] | None:
    """Run every tool call again, in order, on a fresh environment from ``environment_factory`` (reset with
    ``row``: the same call budget as the episode) and compare with the stored result, as the runner wrote it
    (``environments.call_tool``: a failed call's stored content is ``{'error': …}``). ``None`` when all match,
    else ``(reason, call)`` with reason ``replay_mismatch``, ``replay_missing_result`` or
    ``replay_unexecutable``.
    """
    environment = environment_factory()
    # The episode's own prompt turns stand in for a row's prompt (the environment refuses a row without one).
    environment.reset(**{"prompt": [m for m in messages if m.get("role") in ("system", "user")],
                         **(row or {})})
    functions = tool_methods(environment)
    for name, args, result in call_pairs(messages):
        call = f"{name}({args[:120]})"
        if result is None:
            return "replay_missing_result", call
        try:
            parsed = jsontext.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            parsed = None
        if name not in functions or not isinstance(parsed, dict):
            # A call the model could not have executed: its stored result must be the runner's error text,
            # which replay cannot reproduce; such trajectories are not SFT material.
            return "replay_unexecutable", call
        fresh, _failed = call_tool(functions, name, parsed)
        if fresh != result.get("content"):
            return "replay_mismatch", call
    return None


def verify_stage(tools):
    """Map stage ``verify``: byte-identity with the teacher's messages, then replay on a fresh environment
    from ``tools`` (an environment factory, ``teacher.make_tools``)."""

    def check(record: dict) -> dict:
        problem = identity_violation(record["teacher_messages"], record["messages"],
                                     record.get("n_prompt") or 0)
        if problem is None:
            problem = replay_violation(record["messages"], tools, record.get("row"))
        return fail(record, *problem) if problem else record

    return map_stage("verify", check)
