"""Recipes → TRL's parser → the three dataclasses and the TRL configs the trainers get, tansaku's own sections,
the one-line refusals, SFT data mixing (no model loads).

Run: pytest tests/test_trainer_recipes.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from fixtures.recipe_args import section_arg

from tansaku.trainer.data import mix_sources, normalize_conversation
from tansaku.trainer.recipe_arguments import DataSource
from tansaku.trainer.recipes import RENAMED, RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "trainer" / "recipes"
SFT_TINY = RECIPES / "sft-tiny.yaml"
SFT_FIXTURE = ROOT / "tests" / "fixtures" / "sft"
# TrainingArguments refuses bf16 on a machine without a GPU (unless use_cpu): the GPU recipes load with it off.
NO_GPU = [] if torch.cuda.is_available() else ["--bf16", "false"]


def write(tmp_path, text, name="r.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


RL_MINIMAL = """model_name_or_path: tiny
output_dir: out
use_cpu: true
tasks:
  - {name: multihop_qa, data: tests/fixtures/envs/multihop.jsonl, index: idx}
"""


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_loads_and_starts_with_its_command(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    kind = "sft" if "sft" in path.name else "rl"
    assert first.startswith(f"# train {kind} --config trainer/recipes/{path.name}")
    recipe = load_recipe(path, NO_GPU, kind=kind)
    assert recipe.kind == kind and recipe.training_args.output_dir and recipe.model_args.model_name_or_path


def test_overrides_are_trls_key_value_and_a_section_is_given_whole():
    recipe = load_recipe(SFT_TINY, [
        "--max_steps", "7", "--learning_rate", "3e-5", "--use_peft", "--lora_r", "8", "--report_to", "wandb",
        "--bf16", "yes", "--save_total_limit", "none", "--logging_first_step", "true",
        *section_arg(SFT_TINY, "data", 1, ratio=0.5),
    ], kind="sft")
    config, model = recipe.training_args, recipe.model_args
    assert config.max_steps == 7 and isinstance(config.max_steps, int) and config.learning_rate == 3e-5
    assert model.use_peft and model.lora_r == 8 and model.lora_alpha == 32  # TRL's ModelConfig defaults
    assert [src.ratio for src in recipe.script_args.data] == [2.0, 0.5]
    assert config.report_to == ["wandb"] and config.bf16 is True and config.save_total_limit is None
    assert config.logging_first_step is True


def test_bf16_is_mixed_precision_unless_the_model_dtype_says_otherwise():
    """bf16 compute keeps fp32 master weights: RL's small steps would round away in bf16 weights."""
    from tansaku.trainer.sft import model_init_kwargs, sft_config

    mixed = load_recipe(SFT_TINY, ["--bf16", "true"], kind="sft")
    assert mixed.training_args.bf16 is True and model_init_kwargs(mixed)["dtype"] == "float32"
    pure = load_recipe(SFT_TINY, ["--bf16", "true", "--dtype", "bfloat16"], kind="sft")
    assert sft_config(pure).model_init_kwargs["dtype"] == "bfloat16"
    assert pure.training_args.model_init_kwargs is None  # the recipe as parsed; the trainer's copy has the dtype


@pytest.mark.parametrize("args, message", [
    (["--max_stpes", "3"], "unknown key 'max_stpes' (did you mean 'max_steps'?)"),
    (["--max_steps", "three"], "max_steps: invalid int value: 'three'"),
    (["--data", '[{"path": "a.jsonl", "ratio": 0}]'], "data.0.ratio: must be > 0"),
    (["--data", '[{"path": "a.jsonl", "split": "test"}]'], "data.0.split: 'test' is the held-out split"),
    (["--data", "[{ratio: 2}]"], "data.0: missing 1 required positional argument: 'path'"),
    (["--data", "[{path: a.jsonl"], "data: not valid YAML"),
    (["--data", "[]"], "data: list at least one source"),
    (["--overlong", "truncate"], "overlong: invalid choice: 'truncate'"),
    (["--dtype", "bf16"], "dtype: invalid choice: 'bf16'"),
    (["--set", "max_steps=3"], "unknown key 'set' (use TRL's --KEY VALUE"),
    (["--learning_rate", "nan"], "learning_rate: expected a finite number, got nan"),
    (["--per_device_train_batch_size", "0"], "per_device_train_batch_size: must be >= 1"),
    (["--warmup_steps", "-3"], "SFTConfig: Got warmup_steps = -3.0"),  # TRL's own check, named by its config
])
def test_bad_overrides_fail_with_the_key_named(args, message):
    with pytest.raises(RecipeError) as err:
        load_recipe(SFT_TINY, args, kind="sft")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_files_fail_clearly(tmp_path):
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "missing.yaml", kind="sft")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(write(tmp_path, "model_name_or_path: [unclosed"), kind="sft")
    with pytest.raises(RecipeError, match="is for train sft .it has data:., not train rl"):
        load_recipe(SFT_TINY, kind="rl")
    with pytest.raises(RecipeError, match="is for train rl"):
        load_recipe(RECIPES / "rl-tiny.yaml", kind="sft")
    with pytest.raises(RecipeError, match="required: --data"):
        load_recipe(write(tmp_path, "model_name_or_path: tiny\noutput_dir: o\n"), kind="sft")
    with pytest.raises(RecipeError, match="model_name_or_path: required"):
        load_recipe(write(tmp_path, "use_cpu: true\ndata: [{path: a.jsonl}]\n"), kind="sft")
    with pytest.raises(RecipeError, match="index"):
        load_recipe(write(tmp_path, RL_MINIMAL.replace(", index: idx", "")), kind="rl")
    with pytest.raises(RecipeError, match="tasks.0.split: 'test' is the held-out split"):
        load_recipe(write(tmp_path, RL_MINIMAL.replace(", index: idx", ", index: idx, split: test")), kind="rl")
    # a value outside TRL's declared choices is refused from the file as from the command line
    with pytest.raises(RecipeError, match=r"dtype: one of auto, bfloat16, float16, float32 \(got 'bf16'\)"):
        load_recipe(write(tmp_path, RL_MINIMAL + "dtype: bf16\n"), kind="rl")
    with pytest.raises(RecipeError, match="overlong: one of drop, fit, error"):
        load_recipe(write(tmp_path, "model_name_or_path: tiny\ndata: [{path: a}]\noverlong: truncate\n"),
                    kind="sft")


@pytest.mark.parametrize("key", sorted(RENAMED))
def test_one_spelling_per_key_a_nemo_rl_or_earlier_name_is_refused_with_the_trl_key(tmp_path, key):
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, RL_MINIMAL + f"{key}: 1\n"), kind="rl")
    assert f"unknown key '{key}' (use {RENAMED[key]})" in str(err.value)


def test_the_nemo_rl_names_are_mapped_to_trl_keys_in_the_docs():
    docs = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    for nemo in ("policy_kl_penalty", "ratio_clip_min", "ratio_clip_max", "num_prompts_per_step",
                 "num_generations_per_prompt", "adam_eps"):
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{nemo}`"))
        assert f"`{RENAMED[nemo].split(' ')[0]}`" in row, row


def test_trl_validates_the_batch_and_the_generations(tmp_path):
    recipe = write(tmp_path, RL_MINIMAL)
    with pytest.raises(RecipeError, match=r"GRPOConfig: generation_batch_size \(3\) must be divisible by num_gen"):
        load_recipe(recipe, ["--per_device_train_batch_size", "3", "--num_generations", "2"], kind="rl")
    with pytest.raises(RecipeError, match="GRPOConfig: GRPO requires at least 2 generations"):
        load_recipe(recipe, ["--num_generations", "1"], kind="rl")
    config = load_recipe(recipe, ["--num_generations", "2", "--per_device_train_batch_size", "2",
                                  "--gradient_accumulation_steps", "3"], kind="rl").training_args
    # P × G = per_device_train_batch_size × processes × gradient_accumulation_steps: 3 prompts × 2 per step
    assert config.generation_batch_size == 6 and config.steps_per_generation == 3


def test_grpo_config_is_the_recipes_with_the_task_derived_values(tmp_path):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from tansaku.trainer.rl import grpo_config

    gspo = load_recipe(RECIPES / "rl-qwen3-8b.yaml", ["--output_dir", str(tmp_path / "o"), *NO_GPU], kind="rl")
    config = grpo_config(gspo, [1.0, 0.2])
    assert config.importance_sampling_level == "sequence" and config.loss_type == "grpo"
    assert (config.beta, config.epsilon, config.epsilon_high) == (0.05, 0.1, 0.1)  # the seed's clip, not GSPO's
    assert (config.learning_rate, config.adam_epsilon) == (3e-7, 1e-8) and config.num_generations == 32
    # one optimizer step = 128 completions, one rollout round = 512 = 16 prompts × 32: 4 minibatches per round
    step = config.per_device_train_batch_size * config.world_size * config.gradient_accumulation_steps
    assert step == 4 * config.world_size * 4 and config.generation_batch_size == 4 * config.world_size * 16
    assert config.use_vllm and config.vllm_mode == "colocate" and config.log_completions
    assert config.vllm_enable_sleep_mode is True and config.chat_template_kwargs == {"enable_thinking": True}
    assert config.reward_weights == [1.0, 0.2] and gspo.training_args.reward_weights is None  # the recipe as parsed

    plain = grpo_config(load_recipe(write(tmp_path, RL_MINIMAL), kind="rl"))
    assert plain.importance_sampling_level == "token" and plain.loss_type == "dapo"  # TRL's defaults
    assert plain.max_tool_calling_iterations == 8  # unset: the task's max_turns
    with pytest.raises(RecipeError, match="reward_weights: train rl weights each task's reward components"):
        from tansaku.trainer.rl import check_recipe

        check_recipe(load_recipe(write(tmp_path, RL_MINIMAL), ["--reward_weights", "1.0"], kind="rl"))


def test_trl_console_sample_table_is_off_because_malformed_tool_arguments_crash_it(tmp_path):
    """TRL 1.16's ``print_prompt_completions_sample`` json.loads each tool call's arguments: a completion whose
    arguments are not JSON raises at the log step and ends the run. tansaku turns the table off when the recipe
    leaves ``num_completions_to_print`` unset (the samples stay in completions/*.parquet); a number turns it on."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.trainer.utils import print_prompt_completions_sample

    from tansaku.trainer.rl import grpo_config

    bad = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "search", "arguments": "{q"}}]}]
    with pytest.raises(json.JSONDecodeError):  # when this stops raising, the default can go back to TRL's
        print_prompt_completions_sample([[{"role": "user", "content": "q"}]], [bad], {"r": [0.0]}, [0.0], 1, None)
    print_prompt_completions_sample([[{"role": "user", "content": "q"}]], [bad], {"r": [0.0]}, [0.0], 1, 0)  # off
    assert grpo_config(load_recipe(write(tmp_path, RL_MINIMAL), kind="rl")).num_completions_to_print == 0
    on = load_recipe(write(tmp_path, RL_MINIMAL), ["--num_completions_to_print", "2"], kind="rl")
    assert grpo_config(on).num_completions_to_print == 2


def test_sft_config_trains_assistant_turns_only(tmp_path):
    from tansaku.trainer.sft import sft_config

    config = sft_config(load_recipe(SFT_TINY, ["--output_dir", str(tmp_path), "--max_length", "512"], kind="sft"))
    assert config.assistant_only_loss and not config.completion_only_loss
    assert config.max_length == 512 and config.use_cpu and config.learning_rate == 1e-4
    with pytest.raises(RecipeError, match="assistant_only_loss: true is what train sft trains"):
        sft_config(load_recipe(SFT_TINY, ["--assistant_only_loss", "false"], kind="sft"))


def test_mixing_follows_ratios_is_deterministic_and_adds_the_system_prompt():
    sources = [DataSource(str(SFT_FIXTURE / "agentic.jsonl"), ratio=3, system_prompt="検索エージェント"),
               DataSource(str(SFT_FIXTURE / "general.jsonl"), ratio=1)]
    rows = mix_sources(sources, mix_size=40, seed=1)
    agentic = [r for r in rows if r["tools"] is not None]
    assert len(rows) == 40 and len(agentic) == 30  # 3:1, the 6 agentic rows cycled 5 times
    assert all(r["messages"][0] == {"role": "system", "content": "検索エージェント"} for r in agentic)
    assert all(r["messages"][0]["role"] == "user" for r in rows if r["tools"] is None)
    assert rows == mix_sources(sources, mix_size=40, seed=1)
    assert rows != mix_sources(sources, mix_size=40, seed=2)
    call = agentic[0]["messages"][2]["tool_calls"][0]["function"]
    assert isinstance(call["arguments"], str) and json.loads(call["arguments"])  # kept as JSON text for Arrow


@pytest.mark.parametrize("row, message", [
    ({"messages": []}, "non-empty 'messages'"),
    ({"messages": [{"role": "user", "content": "質問"}]}, "no assistant message"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "needs a role"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}]}, "without a function"),
])
def test_malformed_conversations_are_refused(row, message):
    with pytest.raises(RecipeError, match=message):
        normalize_conversation(row)


def test_missing_or_broken_sources_name_the_file(tmp_path):
    with pytest.raises(RecipeError, match="not found"):
        mix_sources([DataSource(str(tmp_path / "nope.jsonl"))])
    bad = write(tmp_path, '{"messages": [}\n', "bad.jsonl")
    with pytest.raises(RecipeError, match="bad.jsonl:1: not valid JSON"):
        mix_sources([DataSource(str(bad))])


@pytest.mark.parametrize("path", sorted(RECIPES.glob("rl-*.yaml")), ids=lambda p: p.name)
def test_every_rl_recipe_sets_its_completion_length(path):
    """A key swallowed by the comment of the line before (two edits run together) silently falls back to TRL's
    default of 256–512 tokens, too short for a multi-turn search episode: every RL recipe states its own."""
    keys = {line.split(":", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()
            if line and not line.startswith((" ", "#", "-"))}
    assert {"max_completion_length", "num_generations", "learning_rate"} <= keys, path.name
