"""`train select`: each SFT checkpoint evaluated on a validation slice (never the held-out split), pass@1 and
entropy per checkpoint, the choice by measurement, reports reused while the weights are unchanged.

Run: pytest tests/test_select.py            (refusals, the choice rule)
     pytest tests/test_select.py -m slow    (two checkpoints of the tiny model, evaluated)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.core.errors import InputError
from tansaku.trainer import select
from tansaku.trainer.select import checkpoints, select_checkpoint

ROOT = Path(__file__).resolve().parents[1]
ENV_FIXTURES = ROOT / "tests" / "fixtures" / "envs"
DATA = ENV_FIXTURES / "multihop.jsonl"


def fake_run(root: Path, model: Path, steps: list[int], final_step: int | None) -> Path:
    """A train sft output_dir: checkpoint-<step> folders (links to ``model``'s files) and maybe a final model."""
    run = root / "run"
    run.mkdir()
    (run / "tansaku_recipe.json").write_text("{}", encoding="utf-8")
    for folder in [run / f"checkpoint-{s}" for s in steps] + ([run] if final_step is not None else []):
        folder.mkdir(exist_ok=True)
        for file in model.iterdir():
            (folder / file.name).symlink_to(file)
    if final_step is not None:
        (run / "trainer_state.json").write_text(json.dumps({"global_step": final_step}), encoding="utf-8")
    return run


def fake_run_with_model(tmp_path: Path, steps: list[int], final_step: int | None) -> Path:
    """:func:`fake_run` over a stand-in model folder (``tmp_path/m``: a config.json) in ``tmp_path/a``."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "a").mkdir()
    return fake_run(tmp_path / "a", model, steps, final_step)


def test_the_final_model_is_listed_only_when_it_is_not_the_last_checkpoint(tmp_path):
    run = fake_run_with_model(tmp_path, [4, 12, 8], final_step=12)
    assert [step for step, _ in checkpoints(run)] == [4, 8, 12]
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 14}), encoding="utf-8")
    assert [step for step, _ in checkpoints(run)] == [4, 8, 12, None]


def test_the_heldout_split_and_folders_train_did_not_make_are_refused(tmp_path, envs_index):
    with pytest.raises(InputError, match="held-out split"):
        select_checkpoint(tmp_path, "multihop_qa", DATA, envs_index, split="test")
    with pytest.raises(InputError, match="not a tansaku training run"):
        select_checkpoint(tmp_path, "multihop_qa", DATA, envs_index, split="rl")
    (tmp_path / "tansaku_recipe.json").write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(train_app, ["select", "--run", str(tmp_path), "--task", "multihop_qa", "--dataset",
                                            str(DATA), "--index", str(envs_index), "--split", "train"])
    assert result.exit_code == 2 and "no checkpoint-*" in result.output
    assert not (tmp_path / "checkpoint_selection.json").exists()


@pytest.mark.slow
def test_each_checkpoint_is_measured_and_a_rerun_reuses_the_reports(tmp_path, envs_index, tiny_model_path,
                                                                      monkeypatch):
    run = fake_run(tmp_path, Path(tiny_model_path), [1, 2], final_step=2)
    selection = select_checkpoint(run, "multihop_qa", DATA, envs_index, split="train", rows=2, max_tokens=24)
    names = [row["name"] for row in selection["checkpoints"]]
    assert names == ["checkpoint-1", "checkpoint-2"]  # the final model is checkpoint-2: not evaluated twice
    for row in selection["checkpoints"]:
        assert row["questions"] == 2 and row["entropy"] is not None and row["entropy"] > 0
        assert (run / "selection" / row["name"] / "trajectories.jsonl").is_file()
    assert selection["chosen"] == select.choose(selection["checkpoints"])
    saved = json.loads((run / "checkpoint_selection.json").read_text(encoding="utf-8"))
    assert saved["chosen"]["name"] == selection["chosen"]["name"] and saved["split"] == "train"

    def no_model(*args, **kwargs):
        raise AssertionError("a rerun with unchanged weights must not generate again")

    monkeypatch.setattr(select, "from_spec", no_model)
    again = select_checkpoint(run, "multihop_qa", DATA, envs_index, split="train", rows=2, max_tokens=24)
    assert again["checkpoints"] == selection["checkpoints"]


def test_only_checkpoint_folders_with_ascii_steps_count(tmp_path):
    """``checkpoint-²`` passes ``str.isdigit`` but not ``int``: it was a ValueError traceback; now it is no checkpoint."""
    run = fake_run_with_model(tmp_path, [4], final_step=4)
    for name in ("checkpoint-\u00b2", "checkpoint-\u0663", "checkpoint-x", "checkpoint-5.bak", "checkpoint-"):
        (run / name).mkdir()
        (run / name / "config.json").write_text("{}", encoding="utf-8")
    assert [step for step, _ in checkpoints(run)] == [4]
    only_odd = tmp_path / "odd"
    only_odd.mkdir()
    (only_odd / "tansaku_recipe.json").write_text("{}", encoding="utf-8")
    (only_odd / "checkpoint-\u00b2").mkdir()
    (only_odd / "checkpoint-\u00b2" / "config.json").write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(train_app, ["select", "--run", str(only_odd), "--task", "multihop_qa", "--dataset",
                                            str(DATA), "--index", str(tmp_path / "ix")])
    assert result.exit_code == 2 and "no checkpoint-*" in result.output, result.output


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_broken_trainer_state_lists_the_final_model(tmp_path):
    run = fake_run_with_model(tmp_path, [4], final_step=4)
    for broken in (b"[4]", DEEP, b'{"global_step": 4, "x": "\xff"}', b'{"global_step": [4]}', b"{"):
        (run / "trainer_state.json").write_bytes(broken)
        assert [step for step, _ in checkpoints(run)] == [4, None], broken[:20]


def test_a_saved_report_that_is_not_a_complete_object_is_evaluated_again(tmp_path):
    weights = {"answer_reward": 1.0, "format_reward": 0.2}
    good = {"weights": "w", "k": 1, "split": "rl", "temperature": 0.0, "selection_rows": 2, "pass@1": 0.5,
            "mean_tool_calls": 1.0, "mean_total_reward": 0.5, "questions": 2, "reward_weights": weights}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(good), encoding="utf-8")
    assert select._reusable_report(tmp_path, "w", 2, 1, 0.0, "rl", weights) == good
    assert select._reusable_report(tmp_path, "other weights", 2, 1, 0.0, "rl", weights) is None
    # a recipe that weighs the rewards otherwise (train select --config) scores mean_total_reward anew
    assert select._reusable_report(tmp_path, "w", 2, 1, 0.0, "rl", {**weights, "format_reward": 0.9}) is None
    for broken in (b"[]", b'"report"', b"3", DEEP, b'{"weights": "\xff"}',
                   json.dumps({**good, "pass@1": None}).encode()):
        path.write_bytes(broken)
        assert select._reusable_report(tmp_path, "w", 2, 1, 0.0, "rl", weights) is None, broken[:20]


def test_select_with_a_recipe_measures_the_task_rl_will_train(tmp_path, envs_index, monkeypatch):
    """train select --config: the checkpoints are scored by the recipe's task (its reward weights), over the
    recipe task's data and index; --system-prompt with it is refused."""
    import yaml

    run = fake_run_with_model(tmp_path, [1, 2], final_step=2)
    recipe = yaml.safe_load((ROOT / "trainer" / "recipes" / "rl-tiny.yaml").read_text(encoding="utf-8"))
    recipe.update(output_dir=str(tmp_path / "rl"), tasks=[{"name": "multihop_qa", "data": str(DATA),
                                                            "index": str(envs_index),
                                                            "reward_weights": {"format_reward": 0.9}}])
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    seen = []

    class Client:
        def close(self):
            pass

    def fake_eval(task, dataset, client, index, **kwargs):
        seen.append((task, Path(dataset), str(index)))
        Path(kwargs["out_dir"]).mkdir(parents=True)  # run_eval writes its report folder
        return {"pass@1": 0.5, "mean_tool_calls": 1.0, "mean_total_reward": 0.5, "questions": 2, "k": 1,
                "split": kwargs["split"], "temperature": kwargs["temperature"],
                "reward_weights": dict(task.reward_weights)}

    monkeypatch.setattr(select, "from_spec", lambda *a, **k: Client())
    monkeypatch.setattr(select, "run_eval", fake_eval)
    done = CliRunner().invoke(train_app, ["select", "--run", str(run), "--config", str(config), "--rows", "2",
                                          "--split", "train"])
    assert done.exit_code == 0, done.output
    assert len(seen) == 2 and all(t.reward_weights["format_reward"] == 0.9 for t, _, _ in seen)
    assert all(d == DATA and i == str(envs_index) for _, d, i in seen)
    saved = json.loads((run / "checkpoint_selection.json").read_text(encoding="utf-8"))
    assert saved["task"] == "multihop_qa" and saved["reward_weights"]["format_reward"] == 0.9
    refused = CliRunner().invoke(train_app, ["select", "--run", str(run), "--config", str(config),
                                             "--system-prompt", "x"])
    assert refused.exit_code == 2 and "--system-prompt and --config" in refused.output
