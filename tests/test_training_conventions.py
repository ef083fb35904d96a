"""Training conventions (issue 16): trackio as an extra, TRL's own parser for TRL keys, self-contained tiny
recipes (the RL one builds its index), SFT mixing through ``datasets.interleave_datasets``. No model loads.

Run: pytest tests/test_training_conventions.py
"""

from __future__ import annotations

import json
import os
import tomllib
from collections import Counter
from pathlib import Path

import pytest
import torch
from fixtures.recipe_args import recipe_copy, section_arg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tansaku.trainer import sft as sft_module
from tansaku.trainer.data import mix_dataset, mix_sources, quotas
from tansaku.trainer.recipe_arguments import DataSource, TansakuSFTArguments
from tansaku.trainer.recipes import RecipeError, load_recipe

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from transformers import HfArgumentParser  # noqa: E402
from trl import ModelConfig, SFTConfig, TrlParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "trainer" / "recipes"
SFT_TINY = RECIPES / "sft-tiny.yaml"
RL_TINY = RECIPES / "rl-tiny.yaml"
SCHEDULERS = [a for a in HfArgumentParser(SFTConfig)._actions if a.dest == "lr_scheduler_type"][0].choices
SCHEDULERS = [s for s in SCHEDULERS if s not in ("reduce_lr_on_plateau", "greedy")]  # these need an eval strategy
NO_GPU = [] if torch.cuda.is_available() else ["--bf16", "false"]  # TrainingArguments refuses bf16 without a GPU


def sft(*args: str):
    return load_recipe(SFT_TINY, list(args), kind="sft")


# --------------------------------------------------------------------------- 1. trackio


def test_trackio_is_an_extra_and_the_gpu_recipes_log_to_it():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(req.startswith("trackio") for req in extras["track"])
    gpu_recipes = sorted(RECIPES.glob("*qwen*.yaml"))
    assert gpu_recipes
    for path in gpu_recipes:
        kind = "sft" if "sft" in path.name else "rl"
        assert load_recipe(path, NO_GPU, kind=kind).training_args.report_to == ["trackio"], path.name


def _installed(monkeypatch, *names: str) -> None:
    """transformers' availability helpers (what ``check_reporters`` asks) see exactly ``names`` installed."""
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: list(names))


def test_report_to_trackio_without_trackio_is_refused_in_one_line_naming_the_extra(monkeypatch, tmp_path):
    _installed(monkeypatch, "tensorboard")
    with pytest.raises(RecipeError, match=r"report_to: trackio is not installed; pip install 'tansaku\[track\]'") as err:
        sft_module.check_reporters(sft("--report_to", "trackio"))
    assert "\n" not in str(err.value)
    # issue 28: any logger that is not installed is refused too (the Trainer failed only after the model loaded)
    both = recipe_copy(SFT_TINY, tmp_path, report_to=["wandb", "tensorboard"])
    with pytest.raises(RecipeError, match=r"report_to: wandb is not installed; pip install wandb"):
        sft_module.check_reporters(load_recipe(both, kind="sft"))
    with pytest.raises(RecipeError, match=r"report_to: 'wandbb' is not a logger transformers knows"):
        sft_module.check_reporters(sft("--report_to", "wandbb"))
    sft_module.check_reporters(sft("--report_to", "tensorboard"))  # installed: passed through
    sft_module.check_reporters(sft("--report_to", "none"))


def test_report_to_trackio_with_trackio_installed_starts(monkeypatch):
    _installed(monkeypatch, "trackio")
    sft_module.check_reporters(sft("--report_to", "trackio"))
    assert sft_module.sft_config(sft("--report_to", "trackio")).report_to == ["trackio"]


# --------------------------------------------------------------------------- 2. TRL keys mean what TRL means


BOOL_WORDS = ["yes", "no", "true", "false", "True", "FALSE", "1", "0", "y", "n", "t", "f"]


@settings(max_examples=40, deadline=None)
@given(lr=st.floats(1e-9, 1.0, allow_nan=False), bf16=st.sampled_from(BOOL_WORDS),
       scheduler=st.sampled_from(SCHEDULERS), warmup=st.floats(0, 100, allow_nan=False),
       steps=st.integers(1, 10_000))
def test_trl_keys_are_read_exactly_as_trls_own_parser_reads_them(lr, bf16, scheduler, warmup, steps):
    args = ["--learning_rate", repr(lr), "--bf16", bf16, "--lr_scheduler_type", scheduler,
            "--warmup_steps", repr(warmup), "--max_steps", str(steps)]
    recipe = sft(*args)
    _, trl, model = TrlParser((TansakuSFTArguments, SFTConfig, ModelConfig)).parse_args_and_config(
        ["--config", str(SFT_TINY), *args])
    assert recipe.training_args.to_dict() == trl.to_dict() and recipe.model_args == model
    assert recipe.training_args.learning_rate == lr and recipe.training_args.max_steps == steps


@pytest.mark.parametrize("args, message", [
    (["--lr_scheduler_type", "cosin"], "lr_scheduler_type: invalid choice: 'cosin'"),  # TRL's choices
    (["--bf16", "maybe"], "bf16: Truthy value expected: got maybe"),
    (["--max_steps", "1e3"], "max_steps: invalid int value: '1e3'"),  # TRL's int parser refuses it
    (["--logging_first_stpe", "true"], "unknown key 'logging_first_stpe' (did you mean 'logging_first_step'?)"),
    (["--dataset_num_proc", "two"], "dataset_num_proc: invalid int value: 'two'"),
    (["--max_stpes", "3"], "unknown key 'max_stpes' (did you mean 'max_steps'?)"),
])
def test_bad_trl_values_fail_with_trls_reason(args, message):
    with pytest.raises(RecipeError) as err:
        sft(*args)
    assert message in str(err.value)


def test_a_files_value_outside_trls_choices_is_refused_as_the_command_lines_is(tmp_path):
    with pytest.raises(RecipeError, match=r"lr_scheduler_type: one of linear, cosine.* \(got 'cosin'\)"):
        load_recipe(recipe_copy(SFT_TINY, tmp_path, lr_scheduler_type="cosin"), kind="sft")


def test_every_trl_key_is_top_level_and_belongs_to_the_kinds_config():
    rl = load_recipe(RECIPES / "rl-qwen3-8b.yaml", [*NO_GPU, "--vllm_enable_sleep_mode", "no",
                                                    "--num_iterations", "2", "--top_k", "50"], kind="rl")
    config = rl.training_args
    assert config.vllm_enable_sleep_mode is False and config.num_iterations == 2 and config.top_k == 50
    assert config.chat_template_kwargs == {"enable_thinking": True}  # mappings pass through
    assert (config.beta, config.num_generations) == (0.05, 32)
    with pytest.raises(RecipeError, match="unknown key 'dataset_text_field'"):
        load_recipe(RECIPES / "rl-qwen3-8b.yaml", [*NO_GPU, "--dataset_text_field", "text"], kind="rl")  # SFTConfig's
    recipe = sft("--dtype", "bfloat16", "--overlong", "fit")
    assert recipe.model_args.dtype == "bfloat16" and recipe.script_args.overlong == "fit"


# --------------------------------------------------------------------------- 3. self-contained tiny recipes


def test_tiny_recipes_name_only_shipped_examples(monkeypatch):
    monkeypatch.chdir(ROOT)
    for src in sft().script_args.data:
        assert src.path.startswith("examples/") and Path(src.path).is_file(), src.path
    rl = load_recipe(RL_TINY, kind="rl")
    for task in rl.script_args.tasks:
        assert task.data.startswith("examples/") and Path(task.data).is_file()
        assert task.corpus.startswith("examples/") and Path(task.corpus).is_file()
        assert task.index == str(Path(rl.training_args.output_dir) / "index" / task.name)
    assert "tests/" not in SFT_TINY.read_text(encoding="utf-8") + RL_TINY.read_text(encoding="utf-8")


def test_tiny_recipes_find_the_shipped_examples_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # e.g. an installed wheel, run from a project folder without examples/
    paths = [src.path for src in sft().script_args.data]
    task = load_recipe(RL_TINY, kind="rl").script_args.tasks[0]
    for path in [*paths, task.data, task.corpus]:
        assert Path(path).is_file() and Path(path).parent == ROOT / "examples", path
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "general_chat.jsonl").write_text("", encoding="utf-8")
    assert sft().script_args.data[1].path == "examples/general_chat.jsonl"  # the user's own file wins


def test_rl_tiny_builds_its_index_once_and_its_questions_are_answerable(tmp_path, monkeypatch):
    from tansaku.envs.search import open_index
    from tansaku.envs.tasks import TASKS
    from tansaku.trainer.rl import build_dataset, build_environments, ensure_indexes, task_rows

    monkeypatch.chdir(ROOT)
    recipe = load_recipe(RL_TINY, ["--output_dir", str(tmp_path / "run")], kind="rl")
    index = tmp_path / "run" / "index" / "multihop_qa"
    assert ensure_indexes(recipe) == [str(index)]
    assert (index / "tansaku_index.json").is_file()
    assert ensure_indexes(recipe) == []  # found, not rebuilt
    spec = recipe.script_args.tasks[0]
    corpus = Path(spec.corpus).read_text(encoding="utf-8")
    rows = task_rows(spec, TASKS["multihop_qa"])
    assert len(rows) >= 8 and all(r["answer"] in corpus for r in rows)
    hits = open_index(index).search({"query": {"match": {"text": "雫光製菓"}}}, size=3).hits
    assert any(hit.title == "雫光製菓" for hit in hits), "the built index finds the first hop's article"
    # What `train rl` builds before the model loads: the prompt mix and one environment factory per variant.
    assert len(build_dataset(recipe)) == len(rows)
    assert all(factory() is not None for factory in build_environments(recipe).values())


def test_auto_index_never_overwrites_a_folder_it_did_not_make(tmp_path, monkeypatch):
    from tansaku.trainer.rl import ensure_indexes

    monkeypatch.chdir(ROOT)
    recipe = load_recipe(RL_TINY, ["--output_dir", str(tmp_path)], kind="rl")
    stranger = tmp_path / "index" / "multihop_qa"
    stranger.mkdir(parents=True)
    (stranger / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(RecipeError, match="exists but is not a finished index"):
        ensure_indexes(recipe)
    assert (stranger / "notes.txt").read_text(encoding="utf-8") == "mine"
    with pytest.raises(RecipeError, match="'auto' builds the index from the task's corpus"):
        load_recipe(RL_TINY, section_arg(RL_TINY, "tasks", corpus=None), kind="rl")


# --------------------------------------------------------------------------- 4. streaming SFT mixing


def write_source(folder: Path, name: str, n: int) -> str:
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"{name}-{i}"},
                                                     {"role": "assistant", "content": "ok"}]}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return str(path)


def source_of(row) -> str:
    return row["messages"][0]["content"].split("-")[0]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.tuples(st.integers(1, 7), st.integers(1, 7)), ratios=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       total=st.one_of(st.none(), st.integers(1, 30)), seed=st.integers(0, 2**16))
def test_mixing_keeps_exact_per_source_counts_and_is_deterministic(tmp_path, sizes, ratios, total, seed):
    sources = [DataSource(write_source(tmp_path, name, n), ratio=r) for name, n, r in zip("ab", sizes, ratios)]
    mixed = mix_dataset(sources, total, seed)
    counts = Counter(source_of(r) for r in mixed)
    want = quotas(list(sizes), list(ratios), total)
    assert [counts["a"], counts["b"]] == want
    for name, n, quota in zip("ab", sizes, want):  # cycling: no row twice before every row once
        drawn = Counter(r["messages"][0]["content"] for r in mixed if source_of(r) == name)
        assert len(drawn) == min(n, quota) and max(drawn.values()) - min(drawn.values()) <= 1
    assert mixed.to_list() == mix_dataset(sources, total, seed).to_list()
    streamed = list(mix_dataset(sources, total, seed, streaming=True))
    assert Counter(json.dumps(r, sort_keys=True) for r in streamed) == \
        Counter(json.dumps(r, sort_keys=True) for r in mixed)


def test_mix_is_an_interleaved_dataset_not_a_list_and_follows_the_ratio(tmp_path):
    from datasets import Dataset, IterableDataset

    sources = [DataSource(write_source(tmp_path, "a", 5), ratio=3), DataSource(write_source(tmp_path, "b", 40))]
    mixed = mix_dataset(sources, 400, seed=3)
    assert isinstance(mixed, Dataset) and len(mixed) == 400
    assert Counter(source_of(r) for r in mixed) == {"a": 300, "b": 100}
    assert isinstance(mix_dataset(sources, 400, seed=3, streaming=True), IterableDataset)
    assert mix_dataset(sources, 400, seed=3).to_list() != mix_dataset(sources, 400, seed=4).to_list()
    rows = mix_sources(sources, 8, seed=1)
    assert rows[0]["messages"][0].keys() == {"role", "content"}  # Arrow's None fillers removed in the list form
