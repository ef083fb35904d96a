"""tansaku's search task as an OpenEnv environment, driven through OpenEnv's own client (``EnvClient`` over
its websocket) against the app served by uvicorn in a thread: a scripted policy's episodes get the tool
results and rewards ``train eval`` (``run_eval``) gives the same policy on the same rows.

Run: pytest tests/test_openenv_env.py   (needs the ``openenv`` extra; skipped without it)
"""

from __future__ import annotations

import json
import re

import pytest
from fixtures.envs.helpers import HERE, task_rows, tool_results
from test_gym_service import Served

from tansaku.core.llm import ChatRequest, ScriptedLLM
from tansaku.core.parsing import to_wire
from tansaku.envs.evaluate import run_eval
from tansaku.envs.tasks import TASKS

pytest.importorskip("openenv.core", reason="OpenEnv is an optional extra: pip install 'tansaku[openenv]'")

from tansaku.envs.integrations.openenv_env import (  # noqa: E402  (after the skip: needs openenv)
    action_class,
    build_openenv_app,
    openenv_client,
)

TASK = TASKS["multihop_qa"]
RIGHT = {"月見坂": "白砂市", "第十九代": "黒松", "研究船": "北浜県漁業調整規則", "白砂焼": "1978年"}


def searching_policy(request):
    """Search, then open a document that does not exist (a tool error), then answer: right on the first two
    questions, wrong on the others."""
    question = request.messages[1]["content"]
    done = tool_results(request)
    if not done:
        return '<think>探す</think><tool_call>{"name": "search", "arguments": {"query": "白砂市"}}</tool_call>'
    if len(done) == 1:
        return '<think>読む</think><tool_call>{"name": "open_doc", "arguments": {"doc_id": "nope"}}</tool_call>'
    key = next(key for key in RIGHT if key in question)
    answer = RIGHT[key] if key in ("月見坂", "第十九代") else "青葉市"
    return f"<think>答える</think>{{{{{answer}}}}}"


def play(client, llm, row: dict, *, structured: bool = False) -> tuple[list[dict], object]:
    """One episode through OpenEnv: the policy sees the observed messages and tools, each of its turns is a
    step. ``structured``: send the turn as a server's parsers would (reasoning and tool calls taken out)."""
    result = client.reset(row=row)
    messages, tools = list(result.observation.messages), result.observation.tools
    assert not result.done and tools
    turn = 0
    while not result.done:
        [reply] = llm.chat([ChatRequest(messages=to_wire(messages), tools=tools, seed=turn, sample_index=0,
                                        temperature=0.7, max_tokens=1024)])
        action = action_class()(content=reply.content)
        if structured:
            action = _parsed(reply.content)
        result = client.step(action)
        messages += result.observation.messages
        turn += 1
    return messages, result


def _parsed(text: str):
    """``text`` as a vLLM server's reasoning and tool-call parsers return it."""
    from tansaku.core.parsing import parse_tool_calls, split_think

    reasoning, rest = split_think(text)
    content, calls, _errors = parse_tool_calls(rest)
    wire = [{"type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in calls]
    return action_class()(content=content, reasoning_content=reasoning, tool_calls=wire)


def test_openenv_episodes_score_as_train_eval(envs_index, tmp_path):
    rows = task_rows("multihop")
    report = run_eval(TASK, HERE / "multihop.jsonl", ScriptedLLM(searching_policy), envs_index, k=1,
                      out_dir=tmp_path)
    evaluated = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert report["pass@1"] == 0.5 and report["tool_error_rate"] == 0.5  # the episodes differ in reward
    with Served(build_openenv_app(TASK, envs_index)) as url, openenv_client(url).sync() as client:
        for row, record in zip(rows, evaluated, strict=True):
            messages, result = play(client, ScriptedLLM(searching_policy), row)
            assert messages == record["messages"]  # the same prompt, tool results and parsed turns
            assert result.reward == pytest.approx(record["total_reward"])  # Task.score, as train eval scores
            assert result.observation.reward_components == pytest.approx(record["rewards"])
            assert result.observation.stop_reason == record["stop_reason"] == "answer"
            state = client.state()
            assert (state.task, state.turns, state.tool_calls) == ("multihop_qa", 3, 2)
            assert state.tool_variant == record["tool_variant"]
            # a server's parsed turns are the same episode
            parsed_messages, parsed = play(client, ScriptedLLM(searching_policy), row, structured=True)
            assert parsed.reward == pytest.approx(result.reward)
            assert [m["role"] for m in parsed_messages] == [m["role"] for m in messages]


def test_openenv_refuses_a_step_after_the_end_and_a_reset_without_a_row(envs_index):
    row = task_rows("multihop")[0]
    with Served(build_openenv_app(TASK, envs_index)) as url, openenv_client(url).sync() as client:
        with pytest.raises(RuntimeError, match="needs a row"):
            client.reset()
        result = client.reset(row=row)
        result = client.step(action_class()(content="<tool_call>{oops}</tool_call>"))
        assert result.done and result.observation.stop_reason == "parse_error"
        assert result.observation.reward_components["format_reward"] < 1.0
        with pytest.raises(RuntimeError, match="the episode is over"):
            client.step(action_class()(content="{{白砂市}}"))


def report_policy(request):
    """Search once, then write the final report (the deepresearch task's answer)."""
    if not tool_results(request):
        return '<think>調べる</think><tool_call>{"name": "search", "arguments": {"query": "白砂市"}}</tool_call>'
    return "<think>まとめる</think>白砂海岸と港町大漁祭りがある（f004）。"


def rubric_judge(request):
    """Scores the first criterion of each rubric only: a rubric score between 0 and 1."""
    [count] = {int(n) for m in request.messages for n in re.findall(r"上の (\d+) 項目", str(m["content"]))}
    return json.dumps({"scores": [1] + [0] * (count - 1)})


def test_the_rubric_judge_scores_deepresearch_as_train_eval(envs_index, tmp_path):
    task, rows = TASKS["deepresearch"], task_rows("deepresearch")
    judge = ScriptedLLM(rubric_judge)
    report = run_eval(task, HERE / "deepresearch.jsonl", ScriptedLLM(report_policy), envs_index, k=1,
                      judge=judge, out_dir=tmp_path)
    evaluated = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    with Served(build_openenv_app(task, envs_index, judge=judge)) as url, openenv_client(url).sync() as client:
        for row, record in zip(rows, evaluated, strict=True):
            messages, result = play(client, ScriptedLLM(report_policy), row)
            assert messages == record["messages"]
            assert result.observation.reward_components == pytest.approx(record["rewards"])
            assert 0 < result.observation.reward_components["rubric_reward"] < 1
            assert result.reward == pytest.approx(record["total_reward"])
    assert report["episodes"] == 2
