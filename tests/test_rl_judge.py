"""The rubric judge as a recipe setting (issue 29): ``judge:`` in an RL recipe or ``train rl --judge``, one score
scale in the judge prompt, and a judge that fails, answers garbage or out of range gives no score (None, counted),
never a stopped run. No model loads here: the trainer is replaced by a trap once the recipe has passed its checks.

    pytest tests/test_rl_judge.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fixtures.cli_checks import Reached, refused, trap_rl_model
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.core.llm import ScriptedLLM
from tansaku.core.llm.base import ChatResult
from tansaku.envs.rubric_reward import judge_messages, make_rubric_reward
from tansaku.trainer.recipes import RecipeError, load_recipe

ENVS = Path(__file__).resolve().parent / "fixtures" / "envs"
REPORT = [{"role": "assistant", "content": "<think>調べた</think>白砂海岸と臨時列車について。" * 20}]



def write_recipe(path: Path, index, **extra) -> Path:
    recipe = {"model_name_or_path": "tiny", "output_dir": str(path.parent / "run"), "use_cpu": True,
              "tasks": [{"name": "deepresearch", "data": str(ENVS / "deepresearch.jsonl"), "index": str(index)}],
              "num_generations": 2, "max_steps": 1, "report_to": "none", **extra}
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture
def trap(monkeypatch):
    trap_rl_model(monkeypatch)


def test_judge_is_a_spec_or_a_mapping_with_client_options(tmp_path, envs_index):
    plain = load_recipe(write_recipe(tmp_path / "a.yaml", envs_index, judge="scripted:judge.jsonl"), kind="rl")
    judge = plain.script_args.judge
    assert judge.model == "scripted:judge.jsonl" and judge.client_options() == {"cache": False}
    full = load_recipe(write_recipe(tmp_path / "b.yaml", envs_index, judge={
        "model": "http:judge@http://localhost:8001", "concurrency": 4, "api_key": "sk-x", "timeout": 30,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}, "cache": True}), kind="rl")
    assert full.script_args.judge.client_options() == {
        "cache": "default", "timeout": 30.0, "max_concurrency": 4, "api_key": {"*": "sk-x"},
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    overridden = load_recipe(tmp_path / "a.yaml", ["--judge", "scripted:other.jsonl"], kind="rl")
    assert overridden.script_args.judge.model == "scripted:other.jsonl"
    section = load_recipe(tmp_path / "a.yaml", ["--judge", "{model: 'http:j@http://h:1', timeout: 5}"], kind="rl")
    assert (section.script_args.judge.model, section.script_args.judge.timeout) == ("http:j@http://h:1", 5.0)


@pytest.mark.parametrize("judge, expected", [
    ({"model": "scripted:j.jsonl", "api_key": "sk"}, "apply to http: judges only"),
    ({"model": "http:j@http://h:1", "concurrency": 0}, "judge.concurrency: must be >= 1"),
    ({"model": "http:j@http://h:1", "timeout": 0}, "judge.timeout: must be > 0"),
    ({"modle": "http:j@http://h:1"}, "unknown key"),
])
def test_a_bad_judge_section_is_one_recipe_error(judge, expected, tmp_path, envs_index):
    with pytest.raises(RecipeError, match=expected):
        load_recipe(write_recipe(tmp_path / "r.yaml", envs_index, judge=judge), kind="rl")


def test_a_deepresearch_recipe_without_a_judge_is_refused_before_any_model_loads(tmp_path, envs_index, trap):
    result = CliRunner().invoke(train_app, ["rl", "--config", str(write_recipe(tmp_path / "r.yaml", envs_index))])
    assert not isinstance(result.exception, Reached)
    refused(result, "deepresearch", "--judge", "judge:")
    assert not (tmp_path / "run").exists()


def test_train_rl_judge_option_reaches_the_run_and_its_recipe_copy(tmp_path, envs_index, trap):
    replies = tmp_path / "judge.jsonl"
    replies.write_text(json.dumps({"content": '{"scores": [1, 1, 1, 1]}'}) + "\n", encoding="utf-8")
    config = write_recipe(tmp_path / "r.yaml", envs_index)
    result = CliRunner().invoke(train_app, ["rl", "--config", str(config), "--judge", f"scripted:{replies}"])
    assert isinstance(result.exception, Reached), (result.exit_code, result.output)
    copy = json.loads((tmp_path / "run" / "tansaku_recipe.json").read_text(encoding="utf-8"))
    # the recipe copy names the judge the run used
    assert copy["script_args"]["judge"]["model"] == f"scripted:{replies}"


def test_the_judge_prompt_states_each_criterions_scale_once_and_never_contradicts_it():
    system, user = judge_messages("比較せよ", ["面積を挙げる", "表で比べる"], "レポート", [3, 1])
    assert "0 または 1" not in system["content"] and "1、満たしていなければ 0" not in system["content"]
    assert "（0〜3 点）面積を挙げる" in user["content"] and "（0〜1 点）表で比べる" in user["content"]


@pytest.mark.parametrize("reply, reason", [
    (ChatResult(content=None, error="connection refused"), "judge_error"),  # the judge is down
    ('{"scores": [4]}', "unreadable_verdict"),  # out of the criterion's 0-3 range
    ("I think it is good", "unreadable_verdict"),  # garbage
])
def test_a_failing_judge_gives_no_score_counted_and_logged(reply, reason):
    judge = ScriptedLLM(lambda req: reply) if isinstance(reply, str) else _Down(reply)
    reward = make_rubric_reward(judge)
    metrics: dict[str, float] = {}
    rubric = [[{"criterion": "面積を挙げる", "scale": "0-3"}]] * 2
    scores = reward([REPORT, REPORT], rubric=rubric, instruction=["比較せよ"] * 2,
                    log_metric=lambda k, v: metrics.__setitem__(k, v))
    assert scores == [None, None] and reward.failures[reason] == 2
    assert metrics["rubric/judge_failures"] == 2.0 and metrics["rubric/judged"] == 2.0
    assert metrics["rubric/judge_seconds"] >= 0.0


class _Down:
    """A judge whose every reply is the given error result."""

    def __init__(self, result):
        self.result = result

    def chat(self, requests):
        return [self.result for _ in requests]
