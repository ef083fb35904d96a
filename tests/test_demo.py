"""The README's main job, reduced: `synth demo --small` runs every step on the tiny model and resumes;
its summary.json carries the table's numbers, equal to the eval reports they come from."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.demo import EVAL_KEYS, Summary, _trained_numbers, eval_numbers

STEP_KEYS = {"step", "artifact", "seconds", "rss_mb", "peak_rss_mb"}


def _check_summary(out, reports: dict) -> dict:
    """summary.json has every step with its seconds and memory, and per task the eval numbers of report.json."""
    summary = json.loads((out / "summary.json").read_text())
    assert {"steps", "eval", "peak_rss_mb", "sizes", "wall_seconds", "learning_curves"} <= set(summary)
    assert summary["complete"] is True
    assert set(summary["peak_rss_mb"]) == {"self", "children", "sampled_tree"}
    assert summary["peak_rss_mb"]["self"] > 0
    names = [s["step"] for s in summary["steps"]]
    assert names[0] == "tiny model" and "train sft" in names and "train rl (GSPO)" in names
    for step in summary["steps"]:
        assert STEP_KEYS <= set(step) and step["seconds"] >= 0, step
    # Steps run one after another: each row times its own step only (the GSPO row once included the SFT eval).
    assert sum(s["seconds"] for s in summary["steps"]) <= summary["wall_seconds"] + 1
    for step in summary["steps"]:
        if step["step"].startswith("synth build"):
            assert step["rows"] == sum(step["splits"].values()) > 0
    for (when, task), report in reports.items():
        numbers = summary["eval"][task][when]
        assert numbers == eval_numbers(report)
        assert numbers["pass@1"] == report["pass@1"] and numbers["rewards"] == report["rewards"]
        assert numbers["mean_tool_calls"] == report["mean_tool_calls"] and 0 <= numbers["answer_rate"] <= 1
        step = next(s for s in summary["steps"] if s["step"] == f"eval {when} {task}")
        assert {k: step[k] for k in numbers} == numbers
    assert summary["learning_curves"] == "learning_curves.png" and (out / "learning_curves.png").stat().st_size > 0
    # the table, a blank line, and one line per pass@1 change (base → SFT, SFT → RL) saying whether it is noise
    assert (out / "summary.md").read_text().count("\n") == len(names) + 2 + 3
    changes = summary["pass_at_1_changes"]
    assert len(changes) == 2 and all("95 % interval" in c and "noise" in c for c in changes)
    for step in summary["steps"]:
        if step["step"].startswith("eval ") and "pass@1" in step:
            low, high = step["pass@1_95"]
            assert low <= step["pass@1"] <= high
    return summary


def test_eval_numbers_and_summary_files(tmp_path):
    report = {"questions": 2, "episodes": 4, "k": 2, "pass@1": 0.25, "pass@2": 0.5, "mean_tool_calls": 1.5,
              "tool_error_rate": 0.0, "parse_failure_rate": 0.1, "episodes_with_parse_failure": 0.25,
              "mean_total_reward": 0.3, "zero_variance_group_share": 0.5, "task": "multihop_qa",
              "rewards": {"answer_reward": 0.25, "format_reward": 0.75}, "stop_reasons": {"answer": 3, "max_tokens": 1}}
    numbers = eval_numbers(report)
    assert set(EVAL_KEYS) <= set(numbers) and numbers["pass@2"] == 0.5 and numbers["answer_rate"] == 0.75
    assert numbers["rewards"]["format_reward"] == 0.75 and "task" not in numbers
    summary = Summary()
    summary.add("eval before multihop_qa", tmp_path, "pass@1=0.25 | x", 1.234, **numbers)
    data = summary.write(tmp_path, eval={"multihop_qa": {"before": numbers}})
    assert json.loads((tmp_path / "summary.json").read_text()) == data
    assert data["steps"][0]["seconds"] == 1.23 and data["steps"][0]["rss_mb"] > 0
    assert "pass@1=0.25 \\| x" in (tmp_path / "summary.md").read_text()


@pytest.mark.slow
def test_demo_small_end_to_end_and_resume(tmp_path, tiny_model_path):
    out = tmp_path / "demo"
    result = CliRunner().invoke(synth_app, ["demo", "--out", str(out), "--small", "--quiet"])
    assert result.exit_code == 0, result.output
    for dataset in ("corpus", "egov", "egov/articles", "multihop", "general", "trajectories"):
        manifest = json.loads((out / dataset / "manifest.json").read_text())
        assert sum(manifest["splits"].values()) > 0 and (out / dataset / "README.md").exists()
    assert (out / "sft" / "model.safetensors").exists() and (out / "rl" / "model.safetensors").exists()
    assert list((out / "rl" / "completions").glob("*.parquet"))
    rl_recipe = yaml.safe_load((out / "recipes" / "rl.yaml").read_text())  # RL prompts SFT never saw, off-policy
    assert rl_recipe["tasks"][0]["split"] == "rl"
    assert rl_recipe["steps_per_generation"] == 2 * rl_recipe["gradient_accumulation_steps"]
    reports = {}
    for when in ("before", "sft", "after"):
        report = json.loads((out / "eval" / when / "multihop_qa_compact" / "report.json").read_text())
        assert report["episodes"] > 0 and "pass@1" in report and report["rewards"]
        assert report["split"] == "test"  # the held-out questions, never trained on
        reports[when, "multihop_qa_compact"] = report
    summary = _check_summary(out, reports)
    # The general half of the switch: the tiny model's own answers, no system prompt, mixed into the SFT set;
    # retention is scored on its held-out prompts.
    general = json.loads((out / "general" / "manifest.json").read_text())
    assert general["pipeline"] == "general" and general["splits"]["train"] > 0
    mixed = json.loads((out / "trajectories" / "manifest.json").read_text())
    assert any(i["path"] == str(out / "general") for i in mixed["inputs"])
    if general["splits"].get("test"):
        for when in ("before", "sft", "after"):
            report = json.loads((out / "eval" / when / "general" / "report.json").read_text())
            assert report["split"] == "test" and 0 < report["rows"] <= general["splits"]["test"]
        assert set(summary["retention"]) == {"sft", "after"} and all(r > 0 for r in summary["retention"].values())
    # The model-loading steps ran in child processes, which gave their memory back.
    isolated = [s for s in summary["steps"] if s.get("isolated")]
    assert {s["step"] for s in isolated} >= {"tiny model", "train sft", "train rl (GSPO)",
                                            "eval after multihop_qa_compact"}
    assert all(s["child_peak_rss_mb"] > 0 for s in isolated)
    # Rerunning resumes: nothing is rebuilt or retrained, the datasets keep their versions.
    versions = {d: json.loads((out / d / "manifest.json").read_text())["version"] for d in ("multihop", "trajectories")}
    mtime = (out / "rl" / "model.safetensors").stat().st_mtime
    again = CliRunner().invoke(synth_app, ["demo", "--out", str(out), "--small", "--quiet"])
    assert again.exit_code == 0, again.output
    assert (out / "rl" / "model.safetensors").stat().st_mtime == mtime
    assert versions == {d: json.loads((out / d / "manifest.json").read_text())["version"] for d in versions}
    again_summary = _check_summary(out, reports)  # rewritten from the reused reports: the same numbers
    assert again_summary["eval"] == summary["eval"]
    trained = [s for s in again_summary["steps"] if s["step"].startswith("train ")]
    assert all(s["reused"] for s in trained)
    # a reused run still reports its steps and loss (read back from its trainer_state.json)
    assert [s["global_step"] for s in trained] == [2, 2] and all(s["training_loss"] is not None for s in trained)


def test_summary_is_written_after_every_step_and_reused_runs_keep_their_numbers(tmp_path):
    partial = Summary(folder=tmp_path)
    partial.add("synth build corpus", tmp_path / "corpus", "3 rows", 0.5, rows=3)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["complete"] is False and [s["step"] for s in written["steps"]] == ["synth build corpus"]
    # A run trained earlier (resume) reports the step count and loss its trainer_state.json recorded.
    run = tmp_path / "sft"
    run.mkdir()
    (run / "trainer_state.json").write_text(json.dumps(
        {"global_step": 12, "log_history": [{"loss": 0.9, "step": 1}, {"train_loss": 0.42, "step": 12}]}))
    numbers = _trained_numbers({"output_dir": str(run), "skipped": "already trained"}, 12)
    assert numbers == {"max_steps": 12, "global_step": 12, "training_loss": 0.42, "reused": True}
    fresh = _trained_numbers({"output_dir": str(run), "global_step": 3, "training_loss": 1.5}, 3)
    assert fresh == {"max_steps": 3, "global_step": 3, "training_loss": 1.5, "reused": False}
