"""The Chinese-mix penalty as the seed used it (issue 49): per task, from a start step, on the reasoning by default.

Each task's defaults (on for egov_mcq from step 0, logged only elsewhere), a recipe's ``tasks[]`` settings reaching
the reward ``train rl`` optimises (one task and several), the settings recorded with the run and ``train rescore``
reproducing a run whose penalty started late, and the refusals. No model loads.

    pytest tests/test_zh_mix_recipe.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tansaku.envs.tasks import TASKS
from tansaku.trainer.recipes import RecipeError, load_recipe
from tansaku.trainer.rl_rewards import build_rewards, environment_name, rl_task

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "tests" / "fixtures" / "envs" / "multihop.jsonl"
EGOV_ROWS = ROOT / "examples" / "egov_mcq_questions.jsonl"
ZH = [{"role": "assistant", "content": "<think>我们需要先搜索这个法律的相关条文。</think>{{1}}"}]
ZH_ANSWER = [{"role": "assistant", "content": "<think>条文を確認した。</think>所以答案是第一个选项。{{1}}"}]
JA = [{"role": "assistant", "content": "<think>条文を確認した。</think>{{1}}"}]


class State:
    def __init__(self, global_step):
        self.global_step = global_step


def write_recipe(tmp_path: Path, index, *tasks: dict) -> Path:
    recipe = tmp_path / "rl.yaml"
    listed = "".join(f"  - {json.dumps({'index': str(index), **t}, ensure_ascii=False)}\n" for t in tasks)
    recipe.write_text("model_name_or_path: tiny\nuse_cpu: true\nbf16: false\n"
                      f"output_dir: {tmp_path / 'run'}\ntasks:\n{listed}", encoding="utf-8")
    return recipe


def zh_function(recipe, name="zh_mix_penalty"):
    funcs, weights, _ = build_rewards(recipe)
    named = {f.__name__: (f, w) for f, w in zip(funcs, weights)}
    return named[name]


def test_task_defaults_follow_the_seed():
    egov = TASKS["egov_mcq"]
    assert (egov.reward_weights["zh_mix_penalty"], egov.zh_mix_start_step, egov.zh_mix_scope) == (0.5, 0, "reasoning")
    for name in ("multihop_qa", "multihop_qa_compact", "deepresearch"):  # logged, not optimised
        task = TASKS[name]
        assert task.reward_weights["zh_mix_penalty"] == 0.0 and task.zh_mix_start_step == 0
        assert task.describe()["zh_mix_scope"] == "reasoning"  # in manifests and eval reports


def test_a_recipe_task_sets_weight_start_step_and_scope(tmp_path, envs_index):
    config = write_recipe(tmp_path, envs_index, {
        "name": "multihop_qa", "data": str(ROWS), "reward_weights": {"zh_mix_penalty": 0.3},
        "zh_mix_start_step": 5, "zh_mix_scope": "reasoning+answer"})
    recipe = load_recipe(config, kind="rl")
    task = rl_task(recipe.script_args.tasks[0])
    settings = (task.reward_weights["zh_mix_penalty"], task.zh_mix_start_step, task.zh_mix_scope)
    assert settings == (0.3, 5, "reasoning+answer")
    fn, weight = zh_function(recipe)
    assert weight == 0.3
    assert fn([ZH, ZH_ANSWER, JA], trainer_state=State(4)) == [0.0, 0.0, 0.0]  # before the start step
    assert fn([ZH, ZH_ANSWER, JA], trainer_state=State(5)) == [-1.0, -1.0, 0.0]  # the answer too: its scope
    # recorded with the run: the recipe copy train rl writes first holds the settings as given
    record = recipe.record()["script_args"]["tasks"][0]
    assert (record["zh_mix_start_step"], record["zh_mix_scope"]) == (5, "reasoning+answer")


def test_each_task_of_a_mixed_recipe_keeps_its_own_settings(tmp_path, envs_index):
    config = write_recipe(
        tmp_path, envs_index,
        {"name": "multihop_qa", "data": str(ROWS), "reward_weights": {"zh_mix_penalty": 0.3},
         "zh_mix_start_step": 100},
        {"name": "egov_mcq", "data": str(EGOV_ROWS)})  # the task's own: from step 0, reasoning only
    recipe = load_recipe(config, kind="rl")
    multihop, w1 = zh_function(recipe, "multihop_qa/zh_mix_penalty")
    egov, w2 = zh_function(recipe, "egov_mcq/zh_mix_penalty")
    assert (w1, w2) == (0.3, 0.5)
    environment = [environment_name("multihop_qa", 0), environment_name("egov_mcq", 0)] * 2
    batch = [ZH, ZH, ZH_ANSWER, ZH_ANSWER]
    assert multihop(batch, environment=environment, trainer_state=State(50)) == [0.0, None, 0.0, None]
    assert egov(batch, environment=environment, trainer_state=State(50)) == [None, -1.0, None, 0.0]
    assert multihop(batch, environment=environment, trainer_state=State(100)) == [-1.0, None, 0.0, None]


@pytest.mark.parametrize("changes, message", [
    ({"zh_mix_scope": "answer"}, r"tasks multihop_qa: zh_mix_scope must be one of reasoning, reasoning\+answer"),
    ({"zh_mix_start_step": -3, "reward_weights": {"zh_mix_penalty": 0.3}},
     "zh_mix_start_step must be an integer >= 0"),
    ({"zh_mix_start_step": 10}, "starts a penalty that weighs 0"),
])
def test_bad_settings_are_refused_in_one_line(tmp_path, envs_index, changes, message):
    config = write_recipe(tmp_path, envs_index, {"name": "multihop_qa", "data": str(ROWS), **changes})
    recipe = load_recipe(config, kind="rl")
    with pytest.raises(RecipeError, match=message) as error:
        build_rewards(recipe)  # train rl's check_recipe, before any model loads
    assert "\n" not in str(error.value)


def test_rescore_reproduces_a_run_whose_penalty_started_late(tmp_path, envs_index):
    """train rl logs the step each batch was scored at (``trainer_step`` among the reward inputs); train rescore
    passes it back, so rows scored before the start step stay 0.0."""
    from tansaku.trainer.rescore import rescore
    from tansaku.trainer.sft import write_recipe_copy

    config = write_recipe(tmp_path, envs_index, {
        "name": "multihop_qa", "data": str(ROWS), "reward_weights": {"zh_mix_penalty": 0.3}, "zh_mix_start_step": 2})
    recipe = load_recipe(config, kind="rl")
    write_recipe_copy(recipe)
    funcs, _, _ = build_rewards(recipe)
    run = tmp_path / "run"
    (run / "completions").mkdir(parents=True)
    for step in (1, 2):  # the same Chinese completions, before and at the start step
        completions = [ZH, JA]
        columns = {"answer": ["1", "1"], "aliases": [[], []]}
        extra = {}
        table = {"step": [step] * 2, "prompt": [[{"role": "user", "content": "q"}]] * 2, "completion": completions}
        for fn in funcs:
            table[fn.__name__] = fn(completions, trainer_state=State(step), log_extra=extra.__setitem__, **columns)
        table["reward_inputs"] = extra["reward_inputs"]
        assert json.loads(extra["reward_inputs"][0])["trainer_step"] == step
        assert table["zh_mix_penalty"] == ([0.0, 0.0] if step == 1 else [-1.0, 0.0])
        pq.write_table(pa.table(table), run / "completions" / f"completions_{step:05d}.parquet")
    report = rescore(run)
    assert report["unchanged"], report["components"]["zh_mix_penalty"]
    assert report["components"]["zh_mix_penalty"]["new_mean"] == pytest.approx(-0.25)
