"""tansaku's search task as a ``verifiers`` environment, run by verifiers' own evaluation entry point
(``vf-eval``: ``verifiers.v1.cli.eval.main``) with its ``null`` chat harness against a scripted model behind
tansaku's canned OpenAI-compatible server: each episode's reward and reward components equal those
``train eval`` (``run_eval``) gives the same model on the same rows.

verifiers runs its harness program under ``uv`` (``uv sync --script`` fetches the program's packages once,
then caches them), so this test needs the ``verifiers`` extra and ``uv``; it is skipped without them.

Run: pytest tests/test_verifiers_env.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from fixtures.envs.helpers import HERE, task_rows

from tansaku.core.llm import ScriptedLLM
from tansaku.envs.evaluate import run_eval
from tansaku.envs.tasks import TASKS
from tansaku.testing.canned_server import ServerThread

pytest.importorskip("verifiers.v1", reason="verifiers is an optional extra: pip install 'tansaku[verifiers]'")

ROOT = Path(__file__).resolve().parents[1]
TASK = TASKS["multihop_qa"]
RIGHT = {"月見坂": "白砂市", "第十九代": "黒松", "研究船": "北浜県漁業調整規則", "白砂焼": "1978年"}


def policy(request):
    """A served model's turns (reasoning and tool calls parsed out, as vLLM returns them): one search, then
    the right answer on the first two questions and a wrong one on the others."""
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    if not any(m["role"] == "tool" for m in request.messages):
        return {"content": "", "reasoning_content": "探す",
                "tool_calls": [{"function": {"name": "search", "arguments": {"query": "白砂市"}}}]}
    key = next(key for key in RIGHT if key in question)
    answer = RIGHT[key] if key in ("月見坂", "第十九代") else "青葉市"
    return {"content": f"{{{{{answer}}}}}", "reasoning_content": "答える"}


@pytest.fixture
def taskset_module(monkeypatch):
    """The `tansaku_search` taskset module (``pip install -e examples/verifiers``) importable."""
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "verifiers"))


@pytest.fixture
def uv_on_path(monkeypatch, taskset_module):
    """verifiers' harness programs start under ``uv``: the venv's own (``pip install uv``) or one on PATH."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if shutil.which("uv") is None:
        pytest.skip("verifiers runs its harness program under uv: pip install uv")


def _vf_eval(url: str, index, out: Path) -> dict[str, dict]:
    """``vf-eval tansaku_search …`` over the multihop fixture; each row id → its trace."""
    from verifiers.v1.cli.eval.main import main

    main(["tansaku_search", "--env.taskset.tansaku-task", "multihop_qa",
          "--env.taskset.dataset", str(HERE / "multihop.jsonl"), "--env.taskset.index", str(index),
          "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
          "--model", "scripted", "--client.base-url", f"{url}/v1", "--no-push", "--no-rich",
          "--output-dir", str(out)])
    [traces] = out.glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text(encoding="utf-8").splitlines()]
    return {episode["traces"][0]["info"]["nemo_gym"]["id"]: episode["traces"][0] for episode in episodes}


def test_vf_eval_rewards_equal_train_eval(envs_index, tmp_path, uv_on_path):
    with ServerThread("scripted", responder=policy) as url:
        traces = _vf_eval(url, envs_index, tmp_path / "vf")
    report = run_eval(TASK, HERE / "multihop.jsonl", ScriptedLLM(policy), envs_index, k=1,
                      out_dir=tmp_path / "eval")
    lines = (tmp_path / "eval" / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    evaluated = [json.loads(line) for line in lines]
    rows = task_rows("multihop")
    assert sorted(traces) == sorted(row["id"] for row in rows)
    assert report["pass@1"] == 0.5  # two right answers, two wrong: the rewards differ
    for record in evaluated:
        trace = traces[rows[record["row_index"]]["id"]]
        assert trace["ok"] and trace["stop_condition"] == "agent_completed"
        [(name, reward)] = trace["rewards"].items()
        assert name == "nemo_gym" and reward["score"] == pytest.approx(record["total_reward"])
        assert trace["info"]["nemo_gym"]["reward_components"] == pytest.approx(record["rewards"])
        messages = [node["message"] for node in trace["nodes"] if node.get("message")]
        calls = [call["name"] for message in messages for call in message.get("tool_calls") or []]
        assert calls == ["search"]  # the model called tansaku's tool, served by tansaku's resources server
    total = sum(trace["rewards"]["nemo_gym"]["score"] for trace in traces.values())
    assert total / len(traces) == pytest.approx(report["mean_total_reward"])


def test_load_environment_yields_the_tasks_prompts(envs_index, taskset_module):
    from tansaku.envs.integrations.verifiers_env import load_environment

    env = load_environment(task="multihop_qa", dataset=HERE / "multihop.jsonl", index=envs_index,
                           harness={"id": "null"})
    tasks = list(env.taskset)
    rows = task_rows("multihop")
    assert [task.data.name for task in tasks] == [row["id"] for row in rows]
    prompt = TASK.build_prompt(rows[0])
    assert [(m.role, m.content) for m in tasks[0].data.prompt] == [(m["role"], m["content"]) for m in prompt]
    tools = tasks[0].data.row["responses_create_params"]["tools"]
    assert {tool["name"] for tool in tools} == {"search", "open_doc"}
