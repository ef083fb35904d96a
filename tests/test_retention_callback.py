"""Retention inside training (trainer/retention_callback.py): the stop rule on a fake metric sequence, the
``retention:`` recipe section, and the callback in a tiny SFT run and a tiny RL run (slow: 2 steps each).

Run: pytest tests/test_retention_callback.py -m "not slow"
     pytest tests/test_retention_callback.py -m slow -k "sft or rl"
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState

from tansaku.trainer.recipe_sections import RetentionSpec
from tansaku.trainer.recipes import load_recipe
from tansaku.trainer.retention_callback import RetentionCallback, falls_too_far
from tansaku.trainer.typed_config import RecipeError

ROOT = Path(__file__).resolve().parents[1]
SFT_RECIPE, RL_RECIPE = (
    ROOT / "trainer" / "recipes" / "sft-tiny.yaml",
    ROOT / "trainer" / "recipes" / "rl-tiny.yaml",
)


class FakeMeasure:
    """Scores from a list, one per measurement (the first is the start); retention = value / start."""

    name = "fake"

    def __init__(self, values):
        self.values = list(values)

    def __call__(self, model, tokenizer, start):
        return {"value": self.values.pop(0)}

    @staticmethod
    def retention(value, start):
        return value / start


class FakeModel:
    training = True

    def train(self, mode=True):
        self.training = mode


def drive(values, every=2, max_drop=0.2, steps=8, tmp_path=None):
    """Run the callback's hooks as the Trainer calls them; the steps it logged and where it stopped."""
    spec = RetentionSpec(every_steps=every, max_drop=max_drop)
    callback = RetentionCallback(spec, tmp_path, measure=FakeMeasure(values), printer=lambda line: None)
    state, control, model = TrainerState(), TrainerControl(), FakeModel()
    callback.on_train_begin(None, state, control, model=model)
    for step in range(1, steps + 1):
        state.global_step = step
        callback.on_step_end(None, state, control, model=model)
        if control.should_log:
            logs = {"loss": 1.0}
            state.log_history.append({**logs, "step": step})
            callback.on_log(None, state, control, logs=logs)
            assert logs == {k: v for k, v in state.log_history[-1].items() if k != "step"}
            control.should_log = False
        if control.should_training_stop:
            break
    return callback, state


def test_the_stop_rule_stops_once_retention_falls_by_more_than_max_drop(tmp_path):
    callback, state = drive([10.0, 9.5, 8.5, 7.5, 9.9], tmp_path=tmp_path)
    assert callback.stopped_at == 6  # 0.95 at step 2, 0.85 at 4, 0.75 < 0.8 at 6: stop; 9.9 is never measured
    assert [e["retention"] for e in callback.history] == [1.0, 0.95, 0.85, 0.75]
    logged = [e for e in state.log_history if "retention/retention" in e]
    assert [e["step"] for e in logged] == [2, 4, 6] and logged[0]["retention/fake"] == 9.5
    assert logged[0]["retention/retention"] == 0.95  # the start's value rides on the first log too
    lines = (tmp_path / "retention.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 2, 4, 6]


def test_without_max_drop_training_never_stops_and_a_rise_is_fine():
    callback, _ = drive([10.0, 2.0, 1.0, 12.0, 1.0], max_drop=None)
    assert callback.stopped_at is None and len(callback.history) == 5


def test_the_stop_rule_edges():
    assert falls_too_far(0.7999, 0.2) and not falls_too_far(0.8, 0.2) and not falls_too_far(None, 0.2)
    assert not falls_too_far(0.0, None)


def test_the_retention_section_is_checked_with_the_recipe():
    ok = load_recipe(SFT_RECIPE, ["--retention", "{every_steps: 5, max_drop: 0.3}"], kind="sft")
    assert ok.script_args.retention.every_steps == 5 and ok.script_args.retention.max_drop == 0.3
    assert load_recipe(SFT_RECIPE, [], kind="sft").script_args.retention.every_steps == 0  # off by default
    with pytest.raises(RecipeError, match="retention.max_drop"):
        load_recipe(SFT_RECIPE, ["--retention", "{every_steps: 5, max_drop: 1.5}"], kind="sft")
    with pytest.raises(RecipeError, match="retention.judge"):
        load_recipe(RL_RECIPE, ["--retention", "{every_steps: 5, judge: 'scripted:x.jsonl'}"], kind="rl")


def _check_logged(output_dir: Path, steps: int) -> None:
    entries = [json.loads(line) for line in (output_dir / "retention.jsonl").read_text().splitlines()]
    assert [e["step"] for e in entries] == list(range(steps + 1)) and entries[0]["retention"] == 1.0
    assert all(math.isfinite(e["retention"]) and e["measure"] == "loglik" for e in entries)
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    assert sum("retention/retention" in e for e in history) == steps


@pytest.mark.slow
def test_retention_is_logged_in_a_tiny_sft_run(tmp_path, tiny_model_path):
    from tansaku.trainer.recipes import read_recipe_file
    from tansaku.trainer.sft import run_sft

    data = [{**src, "max_rows": 1} for src in read_recipe_file(SFT_RECIPE)["data"]]
    run_sft(
        SFT_RECIPE,
        [
            "--output_dir",
            str(tmp_path),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "1",
            "--mix_size",
            "2",
            "--data",
            json.dumps(data),
            "--max_length",
            "768",
            "--save_steps",
            "100",
            "--retention",
            "{every_steps: 1, rows: 2, max_new_tokens: 8}",
        ],
    )
    _check_logged(tmp_path, 2)


@pytest.mark.slow
def test_retention_is_logged_in_a_tiny_rl_run(tmp_path, envs_index, tiny_model_path):
    from fixtures.recipe_args import section_arg

    from tansaku.trainer.rl import run_rl

    tasks = section_arg(
        RL_RECIPE,
        "tasks",
        data=str(ROOT / "tests" / "fixtures" / "envs" / "multihop.jsonl"),
        index=str(envs_index),
    )
    run_rl(
        RL_RECIPE,
        [
            "--output_dir",
            str(tmp_path),
            "--max_steps",
            "2",
            *tasks,
            "--max_completion_length",
            "32",
            "--save_steps",
            "100",
            "--retention",
            "{every_steps: 1, rows: 2, max_new_tokens: 8}",
        ],
        skip_readiness=True,
    )
    _check_logged(tmp_path, 2)
