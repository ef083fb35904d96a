"""Difficulty banding (``train rl`` recipe ``difficulty:``): prompts the start model never or always solves are
dropped, each kept row carries its pass rate, the band is saved with the start's fingerprint and reused on a
rerun with the same settings only; a task that keeps nothing is refused with the counts.

Run: pytest tests/test_difficulty.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.recipe_args import section_arg

from tansaku.core.llm import ScriptedLLM
from tansaku.envs.evaluate import NotReadyForRL
from tansaku.trainer.difficulty import band_prompts, keep_rule
from tansaku.trainer.recipes import RecipeError, load_recipe
from tansaku.trainer.rl import build_dataset
from tansaku.trainer.rl_rewards import rl_task

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"
ENV_FIXTURES = ROOT / "tests" / "fixtures" / "envs"
ROWS = [json.loads(line) for line in (ENV_FIXTURES / "multihop.jsonl").read_text(encoding="utf-8").splitlines()]


def scripted(solved_samples: dict[int, int], calls: list):
    """Row i is answered right on its first ``solved_samples[i]`` samples, wrong on the rest."""

    def respond(request):
        row = next(i for i, r in enumerate(ROWS) if r["question"] in request.messages[-1]["content"])
        calls.append(row)
        right = request.sample_index < solved_samples[row]
        return {"content": "{{" + (ROWS[row]["answer"] if right else "わかりません") + "}}", "reasoning": "調べた。"}

    return ScriptedLLM(respond)


def task_args(envs_index) -> list[str]:
    return section_arg(RECIPE, "tasks", index=str(envs_index), data=str(ENV_FIXTURES / "multihop.jsonl"))


def recipe_for(tmp_path, envs_index, **difficulty):
    return load_recipe(RECIPE, ["--output_dir", str(tmp_path / "out"), *task_args(envs_index),
                                "--difficulty", json.dumps({"samples": 4, **difficulty})], kind="rl")


def bands_of(recipe, client):
    return band_prompts(recipe, "unused", {t.name: rl_task(t) for t in recipe.script_args.tasks}, client=client)


def test_band_keeps_sometimes_solved_rows_with_their_pass_rate_and_reuses_the_saved_band(tmp_path, envs_index):
    calls: list = []
    recipe = recipe_for(tmp_path, envs_index)
    (band,) = bands_of(recipe, scripted({0: 4, 1: 2, 2: 0, 3: 1}, calls)).values()
    assert band.pass_rates == [1.0, 0.5, 0.0, 0.25]
    assert band.kept == [1, 3] and band.dropped == {"always_solved": 1, "never_solved": 1}
    assert len(calls) == 4 * 4  # every candidate sampled K times
    saved = json.loads((tmp_path / "out" / "difficulty" / "multihop_qa" / "band.json").read_text(encoding="utf-8"))
    assert saved["kept"] == [1, 3] and saved["summary"]["candidates"] == 4 and saved["key"]["start_weights"]
    assert saved["key"]["samples"] == 4 and saved["report"]["episodes"] == 16

    dataset = build_dataset(recipe, {"multihop_qa": band})
    assert sorted(dataset["id"]) == ["mh2", "mh4"]
    assert sorted(dataset["start_pass_rate"]) == [0.25, 0.5]

    again: list = []  # same start, rows and settings: the saved band, no sampling
    (reused,) = bands_of(recipe, scripted({0: 0, 1: 0, 2: 0, 3: 0}, again)).values()
    assert reused.kept == [1, 3] and again == []

    changed: list = []  # another band: sampled again
    (narrow,) = bands_of(recipe_for(tmp_path, envs_index, min_pass=0.5),
                         scripted({0: 4, 1: 2, 2: 0, 3: 1}, changed)).values()
    assert narrow.kept == [1] and narrow.dropped["below_min_pass"] == 1 and len(changed) == 16


def test_a_task_with_no_prompt_in_the_band_is_refused_with_the_counts(tmp_path, envs_index):
    recipe = recipe_for(tmp_path, envs_index, samples=2)
    with pytest.raises(NotReadyForRL, match=r"keeps no prompt.*'always_solved': 3.*'never_solved': 1"):
        bands_of(recipe, scripted({0: 2, 1: 2, 2: 0, 3: 2}, []))


def test_candidate_rows_are_the_first_n_of_the_split(tmp_path, envs_index):
    recipe = recipe_for(tmp_path, envs_index, rows=2)
    (band,) = bands_of(recipe, scripted({0: 1, 1: 3, 2: 0, 3: 0}, [])).values()
    assert band.pass_rates == [0.25, 0.75] and band.kept == [0, 1]


@pytest.mark.parametrize("settings, message", [
    ({"samples": 1}, "difficulty.samples"),
    ({"min_pass": 0.8, "max_pass": 0.7}, "min_pass <= max_pass"),
    ({"max_pass": 1.5}, "max_pass <= 1"),
    ({"rows": 0}, "difficulty.rows"),
    ({"temperature": 0}, "difficulty.temperature"),
    ({"sample": 2}, "difficulty: unknown key 'sample' (did you mean 'samples'?)"),
])
def test_bad_band_settings_are_refused_before_any_model_loads(tmp_path, envs_index, settings, message):
    with pytest.raises(RecipeError) as err:
        recipe_for(tmp_path, envs_index, **settings)
    assert message in str(err.value)


def test_keep_rule_bounds_are_inclusive():
    assert keep_rule([0.05, 0.95, 0.5], 0.05, 0.95) == ([0, 1, 2], {})


@pytest.mark.slow
def test_train_rl_trains_only_on_the_banded_prompts(tmp_path, envs_index, tiny_model_path):
    """``train rl`` with ``difficulty:``: the band is sampled through the readiness model (here a scripted one),
    replaces the readiness check, and every prompt GSPO sees is a kept one."""
    import polars as pl

    from tansaku.trainer.rl import run_rl

    policy = f"scripted:{ENV_FIXTURES / 'band_policy.py'}:respond"
    result = run_rl(RECIPE, ["--output_dir", str(tmp_path / "out"), *task_args(envs_index),
                             "--difficulty", "{samples: 2}", "--readiness", json.dumps({"model": policy}),
                             "--max_steps", "1", "--gradient_accumulation_steps", "1",  # 1 prompt × 2 per step
                             "--steps_per_generation", "1",  # the band keeps 1 prompt: a round of 1 prompt
                             "--max_completion_length", "24"])
    assert result["difficulty"][0]["kept"] == 1 and result["difficulty"][0]["dropped"] == {
        "always_solved": 2, "never_solved": 1}
    assert result["readiness"] == []  # banding sampled every candidate: no second pre-flight pass
    completions = pl.read_parquet(tmp_path / "out" / "completions" / "completions_00001.parquet")
    asked = {message["content"] for prompt in completions["prompt"].to_list() for message in prompt
             if message["role"] == "user"}
    assert asked and all(ROWS[1]["question"] in text for text in asked)


def test_a_saved_band_that_is_no_band_is_sampled_again(tmp_path):
    """A ``band.json`` holding a list, another type per field, a missing field, 100k-deep nesting or non-UTF-8
    bytes was an AttributeError / KeyError / RecursionError; now the band is simply sampled again."""
    from tansaku.trainer.difficulty import BAND_FILE, _saved_band

    key = {"start_weights": "w", "samples": 4}
    band = {"task": "multihop_qa", "key": key, "pass_rates": [0.5], "kept": [0], "dropped": {}, "report": {}}
    path = tmp_path / BAND_FILE
    path.write_text(json.dumps({"summary": {}, **band}), encoding="utf-8")
    assert _saved_band(tmp_path, key).kept == [0]
    assert _saved_band(tmp_path, {**key, "samples": 8}) is None
    for broken in ([band], "band", {**band, "kept": None}, {k: v for k, v in band.items() if k != "report"}):
        path.write_text(json.dumps(broken), encoding="utf-8")
        assert _saved_band(tmp_path, key) is None, broken
    for broken in (b"[" * 100_000 + b"]" * 100_000, b'{"task": "\xff"}'):
        path.write_bytes(broken)
        assert _saved_band(tmp_path, key) is None
