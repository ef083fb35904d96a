"""One task for training and measurement (issue 46): a recipe's ``tasks[]`` overrides (reward weights, abstention)
reach every place that measures the run — the readiness gate, ``train eval --config``, ``train rescore`` (from the
run's own ``tansaku_recipe.json``) and ``synth serve-env --config`` — not only the rewards ``train rl`` optimises.
Scripted models, no weights loaded.

    pytest tests/test_one_task.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.errors import InputError
from tansaku.core.llm import as_client
from tansaku.envs.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "tests" / "fixtures" / "envs" / "multihop.jsonl"
DEFAULTS = TASKS["multihop_qa"].reward_weights
# The recipe's task: two weights changed and the abstention reward added. Each differs from the defaults.
EXPECTED = {**DEFAULTS, "format_reward": 0.9, "zh_mix_penalty": 0.05, "abstention_reward": 0.5}
MODEL = '''def respond(request):
    """Answers every question with the first fixture answer, in the task's format, with reasoning."""
    return {"content": "{{白砂市}}", "reasoning": "創業者の出身地を調べた。"}
'''


def write_recipe(tmp_path: Path, index, **task_changes) -> Path:
    task = {"name": "multihop_qa", "data": str(ROWS), "index": str(index),
            "reward_weights": {"format_reward": 0.9, "zh_mix_penalty": 0.05}, "abstention_weight": 0.5, **task_changes}
    recipe = tmp_path / "rl.yaml"
    recipe.write_text("model_name_or_path: tiny\nuse_cpu: true\nbf16: false\n"
                      f"output_dir: {tmp_path / 'run'}\ntasks:\n  - {json.dumps(task, ensure_ascii=False)}\n"
                      "readiness: {rows: 2, k: 1, min_pass_at_k: 0.0}\n", encoding="utf-8")
    return recipe


def weighted(report: dict, weights: dict) -> float:
    return sum(w * (report["rewards"].get(name) or 0.0) for name, w in weights.items())


def check_eval_report(report: dict) -> None:
    """The report weighs with the recipe's weights: named in it, and its mean total reward is their sum."""
    assert report["reward_weights"] == EXPECTED
    assert set(report["rewards"]) == set(EXPECTED)
    assert report["mean_total_reward"] == pytest.approx(weighted(report, EXPECTED))
    assert report["mean_total_reward"] != pytest.approx(weighted(report, DEFAULTS))  # the defaults would differ


def write_run(run: Path, task) -> None:
    """Completions as ``train rl`` logs them, scored by ``task``'s reward functions."""
    from tansaku.trainer.rl_rewards import reward_inputs

    (run / "completions").mkdir(parents=True)
    completions = [[{"role": "assistant", "content": "<think>調べた。</think>{{" + answer + "}}"}]
                   for answer in ("白砂市", "見当違い", "白砂市", "分かりません")]
    columns = {"answer": ["白砂市"] * 4, "aliases": [[]] * 4}
    table = {"step": [1] * 4, "prompt": [[{"role": "user", "content": "q"}]] * 4, "completion": completions,
             "reward_inputs": reward_inputs(columns, 4)}
    for name, fn in zip(task.reward_weights, task.reward_functions()):
        table[name] = fn(completions, **columns)
    pq.write_table(pa.table(table), run / "completions" / "completions_00001.parquet")


def test_every_measurement_uses_the_recipe_task(tmp_path, envs_index, monkeypatch):
    from tansaku.trainer.readiness import check_readiness
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rescore import rescore
    from tansaku.trainer.rl_rewards import build_rewards, rl_task
    from tansaku.trainer.sft import write_recipe_copy

    assert EXPECTED != DEFAULTS
    config = write_recipe(tmp_path, envs_index)
    recipe = load_recipe(config, kind="rl")
    task = rl_task(recipe.script_args.tasks[0])
    assert task.reward_weights == EXPECTED
    funcs, weights, _ = build_rewards(recipe)  # what train rl optimises: the same weights, one source
    assert dict(zip((f.__name__ for f in funcs), weights)) == EXPECTED
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")

    # 1. the readiness gate
    (report,) = check_readiness(recipe, "unused", client=as_client(f"scripted:{tmp_path / 'model.py'}:respond"))
    check_eval_report(report)

    # 2. train eval --config: data and index from the recipe
    result = CliRunner().invoke(train_app, ["eval", "--config", str(config), "--model",
                                            f"scripted:{tmp_path / 'model.py'}:respond", "--k", "1", "--limit", "2",
                                            "--out", str(tmp_path / "eval"), "--json", "-q"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    report = json.loads(result.stdout)
    check_eval_report(report)
    assert json.loads((tmp_path / "eval" / "report.json").read_text(encoding="utf-8"))["reward_weights"] == EXPECTED

    # 3. train rescore: the run folder's own recipe copy names the task; no --task needed
    run = tmp_path / "run"
    write_recipe_copy(recipe)
    write_run(run, task)
    report = rescore(run)
    assert report["versions"]["reward_weights"] == EXPECTED and "tansaku_recipe.json" in report["versions"]["task_source"]
    assert set(report["components"]) == set(EXPECTED) and report["unchanged"]
    stored = {name: c["stored_mean"] for name, c in report["components"].items()}
    assert report["total"]["new_mean"] == pytest.approx(sum(EXPECTED[n] * v for n, v in stored.items()))
    cli = CliRunner().invoke(train_app, ["rescore", "--completions", str(run / "completions"), "--json", "-q"])
    assert cli.exit_code == 0 and json.loads(cli.stdout)["versions"]["reward_weights"] == EXPECTED, cli.stderr
    explicit = rescore(run, config=config)  # --config RECIPE: the same task, named explicitly
    assert explicit["versions"]["reward_weights"] == EXPECTED and explicit["versions"]["task_source"].startswith("recipe ")

    # 4. synth serve-env --config: the served app's task and /health
    served = {}
    monkeypatch.setattr("tansaku.envs.gym_service.uvicorn.run", lambda app, **kw: served.update(app=app, **kw))
    result = CliRunner().invoke(synth_app, ["serve-env", "--config", str(config), "--port", "18732"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    app = served["app"]
    assert app.state.task.reward_weights == EXPECTED and served["port"] == 18732
    health = next(route.endpoint for route in app.routes if getattr(route, "path", None) == "/health")()
    assert health["reward_weights"] == EXPECTED and health["task"] == "multihop_qa"


def test_with_reward_weights_refuses_what_build_rewards_refused():
    task = TASKS["multihop_qa"]
    assert list(task.with_reward_weights({"format_reward": 0.5}).reward_weights) == list(task.reward_weights)
    with pytest.raises(InputError, match=r"reward_weights for unknown components \['answr_reward'\]; the task has"):
        task.with_reward_weights({"answr_reward": 2})
    with pytest.raises(InputError, match="finite"):
        task.with_reward_weights({"format_reward": float("nan")})
    # an override may not let an abstention outweigh the answer (with_abstention's cap, kept after the override)
    with pytest.raises(InputError, match=r"abstention weight 0.5 must be in \(0, 0.3\]"):
        task.with_abstention(0.5).with_reward_weights({"answer_reward": 0.3})


def test_conflicts_with_the_recipe_are_one_line(tmp_path, envs_index):
    config = write_recipe(tmp_path, envs_index)
    (tmp_path / "x.jsonl").write_text('{"content": "x"}\n', encoding="utf-8")  # a scripted: file must exist
    model = ["--model", f"scripted:{tmp_path / 'x.jsonl'}"]
    cases = [
        (train_app, ["eval", "--config", str(config), "--task", "egov_mcq", *model], "--task egov_mcq is not a task of"),
        (train_app, ["eval", "--config", str(config), "--system-prompt", "x", *model], "--system-prompt and --config"),
        (train_app, ["eval", "--config", str(config), "--interface-variants", "2", *model],
         "--interface-variants and --config"),
        (train_app, ["eval", *model], "give --task and --dataset, or --config"),
        (synth_app, ["serve-env", "--config", str(config), "--task", "egov_mcq"], "--task egov_mcq is not a task of"),
        (synth_app, ["serve-env", "--config", str(config), "--task", "nope"], "--task 'nope': choose one of"),
        (synth_app, ["serve-env", "--task", "multihop_qa"], "give --task and --index, or --config"),
    ]
    auto = tmp_path / "auto"
    auto.mkdir()
    auto_config = write_recipe(auto, "auto", corpus=str(ROWS))
    cases.append((train_app, ["eval", "--config", str(auto_config), *model], "is not there yet; run train rl first"))
    for app, args, expected in cases:
        result = CliRunner().invoke(app, args)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and expected in lines[0], (args, result.stderr)
    assert not (auto / "run").exists()  # the auto index was not built into the run's output_dir


def test_rescore_refuses_a_task_the_run_did_not_train(tmp_path, envs_index):
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rescore import rescore
    from tansaku.trainer.rl_rewards import rl_task
    from tansaku.trainer.sft import write_recipe_copy

    recipe = load_recipe(write_recipe(tmp_path, envs_index), kind="rl")
    write_recipe_copy(recipe)
    write_run(tmp_path / "run", rl_task(recipe.script_args.tasks[0]))
    with pytest.raises(InputError, match="--task egov_mcq is not a task of run recipe"):
        rescore(tmp_path / "run", "egov_mcq")
    assert rescore(tmp_path / "run", "multihop_qa")["versions"]["reward_weights"] == EXPECTED
