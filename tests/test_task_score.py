"""A task is configured once and scores once: ``Task.configured`` is the task a recipe means, and
``Task.score`` is the one scoring path, so a recipe override (here ``reward_weights: {format_reward: 0.5}``)
changes the total alike in rollout scoring and ``train eval``, the NeMo Gym ``/verify`` route, and ``train
rescore``. Scripted model, the fixture index; no weights loaded.

    pytest tests/test_task_score.py -q
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tansaku.core.errors import InputError
from tansaku.core.llm import ScriptedLLM
from tansaku.envs.evaluate import run_eval
from tansaku.envs.gym_service import build_app, completion_from_response
from tansaku.envs.rollout import Trajectory, score_trajectories
from tansaku.envs.tasks import TASKS
from tansaku.testing.canned_server import free_port
from tansaku.trainer.recipe_arguments import RLTask
from tansaku.trainer.rescore import rescore
from tansaku.trainer.rl_rewards import reward_inputs, rl_task
from tansaku.trainer.typed_config import RecipeError

ROWS = Path(__file__).resolve().parent / "fixtures" / "envs" / "multihop.jsonl"
ROW = json.loads(ROWS.read_text(encoding="utf-8").splitlines()[0])  # 月見坂 … → 白砂市
REASONING = "創業者の出身地を調べた。"
OVERRIDE = {"format_reward": 0.5}


def recipe_task():
    """The task a recipe with a reward-weight override trains, as ``train rl`` builds it."""
    return rl_task(RLTask(name="multihop_qa", data=str(ROWS), reward_weights=OVERRIDE))


def eval_total(task, index, tmp_path: Path) -> tuple[float, list[dict]]:
    """``train eval``'s mean total over one episode, and that episode's completion."""
    model = ScriptedLLM(lambda request: f"<think>{REASONING}</think>{{{{{ROW['answer']}}}}}")
    report = run_eval(task, ROWS, model, index, k=1, limit=1, out_dir=tmp_path / "eval")
    lines = (tmp_path / "eval" / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    assert report["reward_weights"] == task.reward_weights
    return report["mean_total_reward"], record["messages"][record["n_prompt_messages"]:]


def verify_total(task, index, completion: list[dict]) -> float:
    """The total ``/verify`` answers for ``completion`` (sent as a Responses API output), over real HTTP."""
    import uvicorn

    [message] = completion
    summary = [{"type": "summary_text", "text": message["reasoning_content"]}]
    output = [{"type": "reasoning", "summary": summary},
              {"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": message["content"]}]}]
    assert completion_from_response({"output": output})[0]["content"] == message["content"]
    port = free_port()
    config = uvicorn.Config(build_app(task, index), host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        body = json.dumps({"responses_create_params": {"input": []}, "response": {"output": output}, **ROW},
                          ensure_ascii=False).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/verify", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["reward"]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def rescore_total(task, completion: list[dict], run: Path) -> float:
    """``train rescore``'s new mean total of ``completion`` logged as ``train rl`` logs it (stored scores: the
    task defaults')."""
    (run / "completions").mkdir(parents=True)
    columns = {"answer": [ROW["answer"]], "aliases": [ROW["aliases"]]}
    table = {"step": [1], "prompt": [[{"role": "user", "content": ROW["question"]}]],
             "completion": [completion], "reward_inputs": reward_inputs(columns, 1)}
    defaults = TASKS["multihop_qa"]
    for name, fn in zip(defaults.reward_weights, defaults.reward_functions()):
        table[name] = fn([completion], **columns)
    pq.write_table(pa.table(table), run / "completions" / "completions_00001.parquet")
    report = rescore(run, task)
    assert report["versions"]["reward_weights"] == task.reward_weights
    return report["total"]["new_mean"]


def test_a_recipe_override_changes_every_total_alike(tmp_path, envs_index):
    task = recipe_task()
    defaults = TASKS["multihop_qa"]
    assert task.reward_weights == {**defaults.reward_weights, **OVERRIDE}
    assert task == defaults.configured({"reward_weights": OVERRIDE})  # one function applies the recipe

    evaluated, completion = eval_total(task, envs_index, tmp_path)
    trajectory = Trajectory(0, 0, prompt=[], completion=completion)
    score_trajectories(task, [ROW], [trajectory])
    totals = {"train eval": evaluated, "rollout": trajectory.total_reward,
              "/verify": verify_total(task, envs_index, completion),
              "train rescore": rescore_total(task, completion, tmp_path / "run")}

    [score] = task.score([completion], [ROW])
    [default] = defaults.score([completion], [ROW])
    assert score.components == default.components == {
        "answer_reward": 1.0, "format_reward": 1.0, "tool_call_reward": 0.0, "zh_mix_penalty": 0.0}
    # the format weight 0.5 against the default 0.2
    assert score.total == pytest.approx(1.5) and default.total == pytest.approx(1.2)
    assert totals == {path: pytest.approx(score.total) for path in totals}, totals


def test_configured_applies_every_override_kind():
    task = TASKS["multihop_qa"].configured({
        "system_prompt": "日本語で考えて答えてください。", "abstention_weight": 0.5, "tools": {"interface_variants": 2},
        "reward_weights": {"zh_mix_penalty": 0.3}, "zh_mix_start_step": 10,
        "zh_mix_scope": "reasoning+answer"})
    assert task.system_prompts == ("日本語で考えて答えてください。",)
    assert task.reward_weights["abstention_reward"] == 0.5 and task.reward_weights["zh_mix_penalty"] == 0.3
    assert task.tools_config["interface_variants"] == 2
    assert (task.zh_mix_start_step, task.zh_mix_scope) == (10, "reasoning+answer")
    # a recipe's RLTask gives the same task as the mapping of its overrides; unset ones change nothing
    spec = RLTask(name="multihop_qa", data="unused", reward_weights={"zh_mix_penalty": 0.3},
                  zh_mix_start_step=10)
    assert TASKS["multihop_qa"].configured(spec) == TASKS["multihop_qa"].configured(
        {"reward_weights": {"zh_mix_penalty": 0.3}, "zh_mix_start_step": 10})
    assert TASKS["multihop_qa"].configured({}) == TASKS["multihop_qa"]


@pytest.mark.parametrize("overrides, message", [
    ({"reward_weight": {"format_reward": 0.5}}, r"unknown task override\(s\) \['reward_weight'\]"),
    ({"tools": {"no_such_setting": 1}}, "task multihop_qa: tools: bad tools config"),
    ({"zh_mix_start_step": 10}, "starts a penalty that weighs 0"),
    ({"abstention_weight": 2.0}, r"abstention weight 2.0 must be in \(0, 1.0\]"),
])
def test_configured_refuses_in_one_line(overrides, message):
    with pytest.raises(InputError, match=message) as error:
        TASKS["multihop_qa"].configured(overrides)
    assert "\n" not in str(error.value)


def test_a_recipe_problem_names_the_recipe_task_once():
    with pytest.raises(RecipeError, match=r"^tasks multihop_qa: tools: bad tools config") as error:
        rl_task(RLTask(name="multihop_qa", data="unused", tools={"no_such_setting": 1}))
    assert str(error.value).count("multihop_qa") == 1


def test_score_reads_logged_inputs_and_refuses_trl_names_in_rows():
    completion = [{"role": "assistant", "content": "{{白砂市}}", "reasoning_content": REASONING}]
    task = TASKS["multihop_qa"]
    with pytest.raises(InputError, match="trainer_step"):
        task.score([completion], [{"answer": "白砂市", "trainer_step": 3}])
    [logged] = task.score([completion], [{"answer": "白砂市", "trainer_step": 3}], logged=True)
    assert logged.components["answer_reward"] == 1.0
    nan_reward = {name: (lambda completions, **_: [float("nan")]) for name in task.reward_weights}
    [missing] = task.score([completion], [{"answer": "白砂市"}], functions=nan_reward)
    # NaN is no score, as TRL reads it
    assert set(missing.components.values()) == {None} and missing.total == 0.0
