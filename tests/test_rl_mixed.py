"""One RL run over three tasks at once (issue 29): ``trainer/recipes/rl-tiny-mixed.yaml`` — multi-hop, e-Gov MCQ and
deepresearch prompts from examples/ in one GSPO run, the deepresearch reports scored by a judge served over HTTP.

Fast: the recipe loads and passes ``check_recipe`` with a judge; without one it is refused in one line naming
``--judge``, before any model loads. Slow: 2 GSPO steps on the tiny model with the judge served by the canned server
(``tansaku.testing.canned_server``, responder ``examples/stand_in_llm.py``) on a free local port.

    pytest tests/test_rl_mixed.py            (fast part)
    pytest tests/test_rl_mixed.py -m slow    (2 steps on the tiny model: 945 s on 2 cores shared with other jobs)
"""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path

import pytest
from fixtures.cli_checks import Reached, refused, trap_rl_model
from fixtures.recipe_args import recipe_copy
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.trainer import rl as rl_module
from tansaku.trainer.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[1]
MIXED = ROOT / "trainer" / "recipes" / "rl-tiny-mixed.yaml"
TASKS = {  # each task's reward components with the task's default weights, and the recipe's one override
    "multihop_qa": {"answer_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.0},
    "egov_mcq": {"mcq_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.5},
    "deepresearch": {"rubric_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.4, "zh_mix_penalty": 0.0},
}



@pytest.fixture
def trap(monkeypatch):
    trap_rl_model(monkeypatch)


def test_the_mixed_recipe_mixes_three_tasks_with_per_task_weights_and_passes_its_checks(tmp_path):
    from tansaku.trainer.rl_rewards import build_rewards, task_of_environment

    recipe = load_recipe(MIXED, ["--output_dir", str(tmp_path / "run")], kind="rl")
    script_args, config = recipe.script_args, recipe.training_args
    assert [t.name for t in script_args.tasks] == list(TASKS) and script_args.judge.model.startswith("http:")
    judge = rl_module.judge_client(recipe)
    try:
        rl_module.check_recipe(recipe, judge)
        funcs, weights, _ = build_rewards(recipe, judge)
        assert dict(zip((f.__name__ for f in funcs), weights)) == {
            f"{task}/{component}": weight for task, components in TASKS.items() for component, weight in components.items()}
        tasks = [task_of_environment(e) for e in rl_module.build_dataset(recipe)["environment"]]
    finally:
        judge.close()
    # 2 rows per task: 2 steps of 3 prompts are one epoch of TRL's sampler, so each task occurs in 2 steps
    assert sorted(tasks) == sorted(list(TASKS) * 2)
    completions = config.per_device_train_batch_size * config.gradient_accumulation_steps
    assert completions == 3 * 2 and config.num_generations == 2 and len(tasks) == 2 * 3


def test_the_mixed_recipe_builds_every_index_and_reaches_training_with_a_judge(tmp_path, trap):
    result = CliRunner().invoke(train_app, ["rl", "--config", str(MIXED), "--output_dir", str(tmp_path / "run"),
                                            "--skip-readiness", "--judge", "http:judge@http://127.0.0.1:9"])
    assert isinstance(result.exception, Reached), (result.exit_code, result.output)
    for task in TASKS:  # index: auto, built from each task's shipped corpus
        assert (tmp_path / "run" / "index" / task / "tansaku_index.json").is_file()


def test_the_mixed_recipe_without_a_judge_is_refused_in_one_line_naming_judge(tmp_path, trap):
    no_judge = recipe_copy(MIXED, tmp_path, judge=None)
    result = CliRunner().invoke(train_app, ["rl", "--config", str(no_judge), "--output_dir", str(tmp_path / "run"),
                                            "--skip-readiness"])
    assert not isinstance(result.exception, Reached)
    refused(result, "deepresearch", "--judge")
    assert not (tmp_path / "run").exists()


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


@pytest.mark.slow
def test_two_mixed_gspo_steps_score_every_task_and_judge_over_http(tmp_path, tiny_model_path):
    import polars as pl

    from tansaku.examples.stand_in_llm import respond
    from tansaku.testing.canned_server import ServerThread
    from tansaku.trainer.rl import run_rl

    out = tmp_path / "run"
    with ServerThread("judge", responder=respond) as url:
        result = run_rl(MIXED, ["--output_dir", str(out), "--max_steps", "2"], skip_readiness=True,
                        judge=f"http:judge@{url}")
        with urllib.request.urlopen(f"{url}/stats", timeout=5) as resp:
            served = json.loads(resp.read())
    assert result["global_step"] == 2 and (out / "run_report.json").is_file()

    steps = [e for e in json.loads((out / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
             if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2]
    # one rollout round (6 prompts × 2 generations) trained as 2 minibatches: its metrics come with step 1
    rounds = [e for e in steps if "reward" in e]
    assert [e["step"] for e in rounds] == [1] and all("clip_ratio/region_mean" in e for e in steps)
    for task, components in TASKS.items():
        for component in components:
            key = f"rewards/{task}/{component}/mean"
            assert all(key in e for e in rounds), key
            # TRL logs every reward's mean each round (NaN when no row of the task was in it): the task occurred
            assert any(_finite(e[key]) for e in rounds), (key, [e[key] for e in rounds])
    judged = sum(e.get("rubric/judged", 0.0) for e in steps)
    assert judged > 0 and served["requests"] == judged and served["failures"] == 0
    assert all(e.get("rubric/judge_failures", 0.0) == 0.0 for e in steps)  # one score per criterion, each in range

    rollouts = pl.concat([pl.read_parquet(p) for p in sorted((out / "completions").glob("*.parquet"))],
                         how="diagonal_relaxed")
    assert len(rollouts) == 12  # 1 round × 6 prompts × 2 generations
    for task in TASKS:  # each task's answer reward scored its own completions (and only those)
        answer = f"{task}/{next(iter(TASKS[task]))}"
        assert rollouts[answer].drop_nans().drop_nulls().len() >= 2, answer
