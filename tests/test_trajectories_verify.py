"""Byte-identity of tool calls/results through rewriting, the LLM-echo check, and replay on a real index.

Run: pytest tests/test_trajectories_verify.py
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from tansaku.pipelines.trajectories.rewrite import apply_rewrite
from tansaku.pipelines.trajectories.verify import identity_violation, replay_violation


def _fixture_dataset_module():
    path = Path(__file__).parent / "fixtures" / "search" / "dataset.py"
    spec = importlib.util.spec_from_file_location("search_fixture_dataset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """The environment factory replay runs on (a fresh environment per replayed trajectory)."""
    from tansaku.envs.environments import make_environment_factory
    from tansaku.envs.search import build_index
    from tansaku.envs.tasks import TASKS

    base = tmp_path_factory.mktemp("verify")
    build_index(_fixture_dataset_module().write_dataset(base / "docs"), base / "index")
    return make_environment_factory(TASKS["multihop_qa"], base / "index")


def trajectory(tools) -> list[dict]:
    environment = tools()
    environment.reset(prompt=[{"role": "user", "content": "雪村製菓の創業者の出身地は？"}])
    first = environment.search("雪村製菓")
    page = environment.open_doc("f002")
    return [
        {"role": "user", "content": "雪村製菓の創業者の出身地は？"},
        {"role": "assistant", "content": "", "reasoning_content": "Search the company.",
         "tool_calls": [{"id": "c0", "type": "function",
                         "function": {"name": "search", "arguments": '{"query": "雪村製菓"}'}}]},
        {"role": "tool", "name": "search", "tool_call_id": "c0", "content": first},
        {"role": "assistant", "content": "", "reasoning_content": "Open the founder.",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "open_doc", "arguments": '{"doc_id": "f002"}'}}]},
        {"role": "tool", "name": "open_doc", "tool_call_id": "c1", "content": page},
        {"role": "assistant", "content": "{{白砂市}}", "reasoning_content": "Done."},
    ]


def test_reasoning_only_change_passes_and_replays(tools):
    original = trajectory(tools)
    rewritten = copy.deepcopy(original)
    for m in rewritten:
        if m["role"] == "assistant":
            m["reasoning_content"] = "日本語で考える。"
    assert identity_violation(original, rewritten) is None
    assert replay_violation(rewritten, tools) is None


@pytest.mark.parametrize("index, key, value, reason", [
    (2, "content", "[1] doc_id: f001 | title: 雪村製菓\n改ざん", "tool_result_altered"),
    (4, "content", None, "tool_result_altered"),  # one character appended below
    (1, "tool_calls", '{"query": "雪村製菓 創業者"}', "tool_call_altered"),
    (3, "tool_calls", '{"doc_id": "f002" }', "tool_call_altered"),  # same JSON value, different bytes
    (5, "content", "{{港町}}", "content_altered"),
    (5, "reasoning_content", "  ", "empty_reasoning"),
])
def test_identity_catches_each_alteration(tools, index, key, value, reason):
    original = trajectory(tools)
    altered = copy.deepcopy(original)
    if key == "tool_calls":
        altered[index]["tool_calls"][0]["function"]["arguments"] = value
    elif value is None:
        altered[index][key] += "。"
    else:
        altered[index][key] = value
    problem = identity_violation(original, altered)
    assert problem is not None and problem[0] == reason and f"message {index}" in problem[1]


def test_identity_catches_dropped_or_reordered_messages(tools):
    original = trajectory(tools)
    assert identity_violation(original, original[:-1])[0] == "message_count_changed"
    swapped = original[:1] + [original[2], original[1]] + original[3:]
    assert identity_violation(original, swapped)[0] == "role_changed"


def test_replay_catches_a_result_the_index_does_not_give(tools):
    altered = trajectory(tools)
    altered[2]["content"] = altered[2]["content"].replace("雪村製菓", "雪村製薬", 1)
    assert replay_violation(altered, tools)[0] == "replay_mismatch"
    missing = trajectory(tools)[:2]
    assert replay_violation(missing, tools)[0] == "replay_missing_result"
    unknown = trajectory(tools)
    unknown[1]["tool_calls"][0]["function"]["name"] = "browse"
    assert replay_violation(unknown, tools)[0] == "replay_unexecutable"


def test_replay_reproduces_failed_calls_as_the_runner_stored_them(tools):
    """A failed call's stored result is TRL's {'error': …} text (what run_rollouts writes): replay gives the
    same bytes, budget included; the old "Error: …" spelling no longer matches."""
    from dataclasses import replace

    from tansaku.core.llm import ScriptedLLM
    from tansaku.envs.environments import make_environment_factory
    from tansaku.envs.rollout import run_rollouts
    from tansaku.envs.tasks import TASKS

    calls = ['{"name": "open_doc", "arguments": {"doc_id": "nope"}}', '{"name": "search", "arguments": {"query": "雪村製菓"}}',
             '{"name": "search", "arguments": {"query": "白砂市"}}']

    def model(request):
        done = sum(1 for m in request.messages if m["role"] == "tool")
        return f"<think>t</think><tool_call>{calls[done]}</tool_call>" if done < 3 else "<think>t</think>{{白砂市}}"

    task = replace(TASKS["multihop_qa"], max_tool_calls=2)
    factory = make_environment_factory(task, tools.backend)
    [t] = run_rollouts(ScriptedLLM(model), task, [{"question": "q", "answer": "白砂市"}], factory, score=False)
    messages = [m if m["role"] != "assistant" or not m.get("tool_calls") else
                {**m, "tool_calls": [{**c, "function": {**c["function"],
                                                        "arguments": json.dumps(c["function"]["arguments"],
                                                                                ensure_ascii=False)}}
                                     for c in m["tool_calls"]]} for m in t.messages]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert results[0].startswith("{'error'") and "budget of 2" in results[2]
    assert replay_violation(messages, factory, {"question": "q"}) is None
    old_spelling = copy.deepcopy(messages)
    old_spelling[3]["content"] = "Error: no document with doc_id 'nope'. Use a doc_id from the search results."
    assert replay_violation(old_spelling, factory)[0] == "replay_mismatch"


def _echo(messages, **changes) -> str:
    steps = []
    for m in messages:
        if m["role"] == "assistant":
            calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                     for c in m.get("tool_calls") or []]
            steps.append({"reasoning": "日本語の思考。", "tool_calls": calls})
    for i, step in changes.items():
        steps[int(i[1:])] = step
    return json.dumps({"steps": steps}, ensure_ascii=False)


def test_apply_rewrite_keeps_teacher_bytes_and_rejects_changed_echo(tools):
    original = trajectory(tools)
    # Key order / spacing of the echo is not a change, and the stored bytes stay the teacher's.
    echoed = _echo(original).replace('{"query": "雪村製菓"}', '{ "query" : "雪村製菓" }')
    out = apply_rewrite(original, echoed)
    assert isinstance(out, list) and identity_violation(original, out) is None
    assert out[1]["tool_calls"] == original[1]["tool_calls"] and out[1]["reasoning_content"] == "日本語の思考。"
    changed = _echo(original, s0={"reasoning": "x", "tool_calls": [{"name": "search", "arguments": {"query": "別"}}]})
    assert apply_rewrite(original, changed)[0] == "tool_call_altered"
    dropped_call = _echo(original, s1={"reasoning": "x", "tool_calls": []})
    assert apply_rewrite(original, dropped_call)[0] == "tool_call_altered"
    assert apply_rewrite(original, json.dumps({"steps": [{"reasoning": "a"}]}))[0] == "step_count_changed"
    assert apply_rewrite(original, _echo(original, s2={"reasoning": "", "tool_calls": []}))[0] == "empty_reasoning"
    assert apply_rewrite(original, "I refuse.")[0] == "llm_bad_json"
