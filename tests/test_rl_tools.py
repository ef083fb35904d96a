"""RL-run tools of issue 20: ``train rescore``, the abstention reward, per-reward normalisation as a recipe key,
and the collapse watch of the run report.

    pytest tests/test_rl_tools.py -q
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures.recipe_args import section_arg
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.core.errors import InputError
from tansaku.envs.reward_registry import REWARDS, plain
from tansaku.envs.tasks import TASKS
from tansaku.trainer.collapse import collapse_warnings
from tansaku.trainer.recipes import RecipeError, load_recipe
from tansaku.trainer.report import run_report
from tansaku.trainer.rescore import rescore
from tansaku.trainer.rl_rewards import build_rewards, reward_inputs

TASK = TASKS["multihop_qa"]


def _completion(answer: str, query: str = "雪村製菓", reasoning: str = "雪村製菓の創業者を検索して確かめる。") -> list[dict]:
    return [{"role": "assistant", "content": f"<think>{reasoning}</think>",
             "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": query}}}]},
            {"role": "tool", "content": "1. 雪村製菓 (f001)\n雪村清一郎が創業した。"},
            {"role": "assistant", "content": f"<think>{reasoning}</think>{{{{{answer}}}}}"}]


def write_run(out, rows_per_step=4, steps=3):
    """A run folder as ``train rl`` writes it: per step, completions scored by the task's reward functions."""
    (out / "completions").mkdir(parents=True)
    functions = dict(zip(TASK.reward_weights, TASK.reward_functions()))
    for step in range(1, steps + 1):
        completions = [_completion("雪村清一郎" if i % 2 else "見当違い", query=f"雪村製菓 {i}")
                       for i in range(rows_per_step)]
        columns = {"answer": ["雪村清一郎"] * rows_per_step, "aliases": [[]] * rows_per_step,
                   "trainer_state": object()}
        table = {"step": [step] * rows_per_step, "prompt": [[{"role": "user", "content": "雪村製菓の創業者は？"}]] * rows_per_step,
                 "completion": completions, "reward_inputs": reward_inputs(columns, rows_per_step),
                 "advantage": [0.0] * rows_per_step}
        for name, fn in functions.items():
            table[name] = fn(completions, **{k: v for k, v in columns.items() if k != "trainer_state"})
        pq.write_table(pa.table(table), out / "completions" / f"completions_{step:05d}.parquet")
    return out


def test_rescore_reproduces_stored_rewards_when_nothing_changed(tmp_path):
    run = write_run(tmp_path / "run")
    report = rescore(run / "completions", "multihop_qa", out=tmp_path / "rescored")
    assert report["rows"] == 12 and report["unchanged"]
    assert all(c["changed"] == 0 and c["stored_mean"] == c["new_mean"] for c in report["components"].values())
    assert report["components"]["answer_reward"]["stored_mean"] == 0.5
    assert set(report["versions"]["reward_code"]) == set(TASK.reward_weights)
    assert (tmp_path / "rescored" / "rescored.parquet").is_file()
    assert json.loads((tmp_path / "rescored" / "rescore_report.json").read_text(encoding="utf-8")) == report


def test_rescore_reports_what_a_changed_reward_function_changes(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run")
    # a changed reward is a changed registry entry (envs/reward_registry.py: one line per reward)
    monkeypatch.setitem(REWARDS, "answer_reward", plain(lambda completions, **_: [1.0] * len(completions)))
    report = rescore(run, "multihop_qa")
    answer = report["components"]["answer_reward"]
    assert not report["unchanged"] and answer["changed"] == 6 and answer["new_mean"] == 1.0
    assert answer["max_abs_change"] == 1.0 and answer["examples"][0] == {"step": 1, "row": 0, "stored": 0.0, "new": 1.0}
    assert all(c["changed"] == 0 for name, c in report["components"].items() if name != "answer_reward")


def test_train_rescore_cli_and_its_refusals(tmp_path):
    run = write_run(tmp_path / "run")
    result = CliRunner().invoke(train_app, ["rescore", "--completions", str(run / "completions"), "--task", "multihop_qa",
                                            "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["unchanged"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep", encoding="utf-8")
    for args in (["--completions", str(tmp_path / "none"), "--task", "multihop_qa"],
                 ["--completions", str(run), "--task", "nope"],
                 ["--completions", str(run), "--task", "multihop_qa", "--out", str(tmp_path / "mine")]):
        refused = CliRunner().invoke(train_app, ["rescore", *args])
        assert refused.exit_code == 2 and refused.stderr.startswith("error: "), (args, refused.stderr)
    assert (tmp_path / "mine" / "notes.txt").read_text(encoding="utf-8") == "keep"



def test_rescore_out_is_checked_before_scoring_and_only_its_own_folder_is_rewritten(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run")
    (tmp_path / "mine").mkdir()  # a user's folder that merely holds a file of the same name
    (tmp_path / "mine" / "rescore_report.json").write_text("mine", encoding="utf-8")
    with pytest.raises(InputError, match="no tansaku rescore folder made it"):
        rescore(run, "multihop_qa", out=tmp_path / "mine")
    assert (tmp_path / "mine" / "rescore_report.json").read_text(encoding="utf-8") == "mine"
    with pytest.raises(InputError, match="is inside the input --completions"):
        rescore(run, "multihop_qa", out=run / "rescored")
    rescore(run, "multihop_qa", out=tmp_path / "ours")
    first = (tmp_path / "ours" / "rescore_report.json").read_text(encoding="utf-8")
    rescore(run, "multihop_qa", out=tmp_path / "ours")  # its own folder: rewritten
    assert (tmp_path / "ours" / "rescore_report.json").read_text(encoding="utf-8") == first
    (tmp_path / "ours" / "notes.txt").write_text("added", encoding="utf-8")
    monkeypatch.setattr("tansaku.trainer.rescore.load_completions", lambda run: pytest.fail("scored before the check"))
    with pytest.raises(InputError, match="files added since"):
        rescore(run, "multihop_qa", out=tmp_path / "ours")


# ---------------------------------------------------------------- abstention


def _total(task, completion, row) -> float:
    return task.score([completion], [row])[0].total


def test_abstaining_everywhere_cannot_beat_answering():
    task = TASK.with_abstention(0.5)
    rows = [{"answer": "雪村清一郎", "answerable": True}] * 3 + [{"answer": "", "answerable": False}] * 2
    abstain = [_completion("分かりません") for _ in rows]
    honest = [_completion("雪村清一郎") if row["answerable"] else _completion("分かりません") for row in rows]
    guess = [_completion("雪村清一郎") for _ in rows]  # answers the unanswerable ones confidently too
    totals = {name: sum(_total(task, c, r) for c, r in zip(policy, rows))
              for name, policy in (("abstain", abstain), ("honest", honest), ("guess", guess))}
    assert totals["honest"] > totals["guess"] and totals["honest"] > totals["abstain"]
    for row in rows[:3]:  # on a findable question abstaining earns less than the right answer
        assert _total(task, _completion("分かりません"), row) < _total(task, _completion("雪村清一郎"), row)
    all_answerable = [{"answer": "雪村清一郎", "answerable": True}] * 5  # and even then, never more
    assert sum(_total(task, _completion("分かりません"), r) for r in all_answerable) < \
        sum(_total(task, _completion("雪村清一郎"), r) for r in all_answerable)


def test_abstention_is_opt_in_and_capped_at_the_answer_weight(tmp_path):
    assert "abstention_reward" not in TASK.reward_weights
    assert TASK.with_abstention(1.0).reward_weights["abstention_reward"] == 1.0
    for bad in (0.0, -1.0, 1.5):
        with pytest.raises(Exception, match="abstention weight"):
            TASK.with_abstention(bad)
    recipe_file = tmp_path / "rl.yaml"
    recipe_file.write_text("model_name_or_path: tiny\nuse_cpu: true\ntasks:\n"
                           "  - {name: multihop_qa, data: d, index: i, abstention_weight: 0.5}\n"
                           f"output_dir: {tmp_path / 'o'}\n", encoding="utf-8")
    funcs, weights, _ = build_rewards(load_recipe(recipe_file, kind="rl"))
    assert [f.__name__ for f in funcs][-1] == "abstention_reward" and weights[-1] == 0.5
    with pytest.raises(RecipeError, match="abstention weight"):
        build_rewards(load_recipe(recipe_file, section_arg(recipe_file, "tasks", abstention_weight=2.0), kind="rl"))


def test_reward_aggregation_is_trls_multi_objective_aggregation(tmp_path):
    from tansaku.trainer.rl import grpo_config

    recipe_file = tmp_path / "rl.yaml"
    recipe_file.write_text("model_name_or_path: tiny\nuse_cpu: true\ntasks:\n  - {name: multihop_qa, data: d, index: i}\n"
                           f"output_dir: {tmp_path / 'o'}\n", encoding="utf-8")
    assert grpo_config(load_recipe(recipe_file, kind="rl")).multi_objective_aggregation == "sum_then_normalize"
    gdpo = grpo_config(load_recipe(recipe_file, ["--multi_objective_aggregation", "normalize_then_sum"], kind="rl"))
    assert gdpo.multi_objective_aggregation == "normalize_then_sum"  # GDPO: normalise each component first
    with pytest.raises(RecipeError, match="unknown key 'reward_aggregation' .use multi_objective_aggregation"):
        load_recipe(recipe_file, ["--reward_aggregation", "normalize_then_sum"], kind="rl")


# ---------------------------------------------------------------- collapse watch


def _collapsing_run(out, collapse: bool):
    """Six steps: the reward rises; with ``collapse`` the reasoning shrinks into an English loop, searches stop."""
    (out / "completions").mkdir(parents=True)
    for step in range(1, 7):
        late = collapse and step > 3
        reasoning = "ok ok ok ok ok ok ok ok ok ok" if late else "雪村製菓の創業者を検索し、結果の本文で名前を確かめてから答える。"
        completion = ([{"role": "assistant", "content": f"<think>{reasoning}</think>{{{{雪村清一郎}}}}"}] if late
                      else _completion("雪村清一郎", reasoning=reasoning))
        rows = [{"step": step, "prompt": [{"role": "user", "content": f"q{i}"}], "completion": completion,
                 "answer_reward": 0.1 * step, "advantage": 0.0} for i in range(4)]
        pq.write_table(pa.Table.from_pylist(rows), out / "completions" / f"completions_{step:05d}.parquet")
    return out


def test_the_collapse_watch_fires_on_a_collapsing_run_only(tmp_path):
    report = run_report(_collapsing_run(tmp_path / "bad", collapse=True))
    warnings = report["overall"]["collapse_warnings"]
    assert any("reasoning length collapsed" in w for w in warnings)
    assert any("non-Japanese reasoning rose" in w for w in warnings)
    assert any("reasoning repetition rose" in w for w in warnings)
    assert any("tool calls per episode collapsed" in w for w in warnings)
    assert not next(c for c in report["checks"] if c["name"] == "reasoning_collapse")["ok"]
    assert [s["step"] for s in report["collapse"]] == [1, 2, 3, 4, 5, 6]

    healthy = run_report(_collapsing_run(tmp_path / "good", collapse=False))
    assert healthy["overall"]["collapse_warnings"] == []
    assert next(c for c in healthy["checks"] if c["name"] == "reasoning_collapse")["ok"]


def test_no_collapse_warning_when_the_reward_falls_too():
    series = [{"step": s, "reward": 1.0 - 0.1 * s, "reasoning_chars": 100.0 / s, "repetition": 0.0,
               "non_japanese_share": 0.0, "tool_calls": 2.0} for s in range(1, 7)]
    assert collapse_warnings(series) == []
    rising = [{**s, "reward": 0.1 * s["step"]} for s in series]
    assert collapse_warnings(rising) and "reasoning length collapsed" in collapse_warnings(rising)[0]
