"""Recipes → dataclasses → TRL configs, NeMo-RL key mapping, --set overrides, SFT data mixing (no model loads).

Run: pytest tests/test_trainer_recipes.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tansaku.trainer.data import mix_sources, normalize_conversation
from tansaku.trainer.recipes import DataSource, RecipeError, batch_plan, load_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "trainer" / "recipes"
SFT_FIXTURE = ROOT / "tests" / "fixtures" / "sft"


def write(tmp_path, text, name="r.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


RL_MINIMAL = """kind: rl
model: tiny
output_dir: out
tasks:
  - {name: multihop_qa, data: tests/fixtures/envs/multihop.jsonl, index: idx}
"""


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_loads_and_starts_with_its_command(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    kind = "sft" if "sft" in path.name else "rl"
    assert first.startswith(f"# train {kind} --config trainer/recipes/{path.name}")
    recipe = load_recipe(path)
    assert recipe.output_dir and recipe.model


def test_overrides_coerce_types_and_reach_nested_keys(tmp_path):
    recipe = load_recipe(RECIPES / "sft-tiny.yaml", [
        "max_steps=7", "learning_rate=3e-5", "lora.r=8", "data.1.ratio=0.5", "report_to=wandb,trackio",
        "bf16=yes", "save_total_limit=none", "trl.logging_first_step=true",
    ])
    assert recipe.max_steps == 7 and isinstance(recipe.max_steps, int)
    assert recipe.learning_rate == 3e-5  # YAML 1.1 reads "3e-5" as a string: coerced by the field type
    assert recipe.lora.r == 8 and recipe.lora.alpha == 32  # section created with its defaults
    assert recipe.data[1].ratio == 0.5 and recipe.data[0].ratio == 2.0
    assert recipe.report_to == ["wandb", "trackio"] and recipe.bf16 is True and recipe.save_total_limit is None
    assert recipe.trl == {"logging_first_step": True}


def test_bf16_is_mixed_precision_unless_the_weights_dtype_says_otherwise():
    """bf16 compute keeps fp32 master weights: RL's small steps would round away in bf16 weights."""
    from tansaku.trainer.sft import training_args

    mixed = training_args(load_recipe(RECIPES / "sft-tiny.yaml", ["bf16=true"]))
    assert mixed["bf16"] is True and mixed["model_init_kwargs"] == {"dtype": "float32"}
    pure = training_args(load_recipe(RECIPES / "sft-tiny.yaml", ["bf16=true", "weights_dtype=bfloat16"]))
    assert pure["model_init_kwargs"] == {"dtype": "bfloat16"}


@pytest.mark.parametrize("override, message", [
    ("max_stpes=3", "did you mean 'max_steps'"),
    ("max_steps=three", "max_steps: expected int"),
    ("data.5.ratio=1", "not an index of a list of 2"),
    ("data.0.ratio=0", "data.0.ratio: must be > 0"),
    ("data.0.split=test", "data.0.split: 'test' is the held-out split"),  # SFT never sees held-out questions
    ("overlong=truncate", "overlong: one of drop, fit, error"),
    ("weights_dtype=bf16", "weights_dtype: one of float32, bfloat16, float16"),
    ("lora.rank=4", "lora: unknown key 'rank'"),
    ("noequals", "key=value"),
])
def test_bad_overrides_fail_with_the_key_named(override, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(RECIPES / "sft-tiny.yaml", [override])


def test_bad_files_fail_clearly(tmp_path):
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "missing.yaml")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(write(tmp_path, "kind: sft\nmodel: [unclosed"))
    with pytest.raises(RecipeError, match="is a 'sft' recipe, not 'rl'"):
        load_recipe(RECIPES / "sft-tiny.yaml", kind="rl")
    with pytest.raises(RecipeError, match="data: list at least one source"):
        load_recipe(write(tmp_path, "kind: sft\nmodel: tiny\noutput_dir: o\n"))
    with pytest.raises(RecipeError, match="index"):
        load_recipe(write(tmp_path, RL_MINIMAL.replace(", index: idx", "")))
    with pytest.raises(RecipeError, match="tasks.0.split: 'test' is the held-out split"):
        load_recipe(write(tmp_path, RL_MINIMAL.replace(", index: idx", ", index: idx, split: test")))


def test_nemo_rl_keys_map_to_trl_names(tmp_path):
    text = RL_MINIMAL + """policy_kl_penalty: 0.05
ratio_clip_min: 0.1
ratio_clip_max: 0.1
num_prompts_per_step: 16
num_generations_per_prompt: 32
learning_rate: 3e-7
adam_eps: 1e-8
"""
    recipe = load_recipe(write(tmp_path, text))
    assert (recipe.beta, recipe.epsilon, recipe.epsilon_high) == (0.05, 0.1, 0.1)
    assert (recipe.prompts_per_step, recipe.num_generations) == (16, 32)
    assert (recipe.learning_rate, recipe.adam_epsilon) == (3e-7, 1e-8)
    # --set speaks NeMo-RL too, and a clash between both spellings is refused.
    assert load_recipe(write(tmp_path, text), ["policy_kl_penalty=0.01"]).beta == 0.01
    with pytest.raises(RecipeError, match="both 'policy_kl_penalty'.*'beta'"):
        load_recipe(write(tmp_path, text + "beta: 0.2\n"))


@pytest.mark.parametrize("prompts, gens, micro, procs, expected", [
    (16, 32, None, 1, {"per_device_train_batch_size": 32, "gradient_accumulation_steps": 16}),
    (16, 32, 8, 4, {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 16}),
    (2, 2, None, 1, {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}),
    (1, 8, 4, 1, {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}),
])
def test_batch_plan_gives_prompts_times_generations_completions_per_step(tmp_path, prompts, gens, micro, procs,
                                                                        expected):
    recipe = load_recipe(write(tmp_path, RL_MINIMAL), [f"prompts_per_step={prompts}", f"num_generations={gens}",
                                                       f"per_device_train_batch_size={micro}"])
    plan = batch_plan(recipe, processes=procs)
    assert {k: plan[k] for k in expected} == expected
    assert plan["per_device_train_batch_size"] * procs * plan["gradient_accumulation_steps"] == prompts * gens
    assert plan["steps_per_generation"] == plan["gradient_accumulation_steps"]


def test_batch_plan_refuses_a_batch_that_does_not_divide(tmp_path):
    with pytest.raises(RecipeError, match="completions per step must divide"):
        load_recipe(write(tmp_path, RL_MINIMAL), ["prompts_per_step=3", "num_generations=2",
                                                  "per_device_train_batch_size=4"])
    with pytest.raises(RecipeError, match="num_generations: GRPO needs >= 2"):
        load_recipe(write(tmp_path, RL_MINIMAL), ["num_generations_per_prompt=1"])
    with pytest.raises(RecipeError, match="algorithm: one of grpo, gspo"):
        load_recipe(write(tmp_path, RL_MINIMAL), ["algorithm=ppo"])


def test_grpo_config_maps_algorithm_batch_and_nemo_keys(tmp_path):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from tansaku.trainer.rl import grpo_config

    # bf16 off: TrainingArguments refuses bf16 on a machine without a GPU; the rest maps as on a GPU.
    gspo = load_recipe(RECIPES / "rl-qwen3-8b.yaml", ["output_dir=" + str(tmp_path / "o"), "bf16=false"])
    config = grpo_config(gspo, [1.0, 0.2])
    assert config.importance_sampling_level == "sequence" and config.loss_type == "grpo"
    assert (config.beta, config.epsilon, config.epsilon_high) == (0.05, 0.1, 0.1)  # the seed's clip, not GSPO's
    assert (config.learning_rate, config.adam_epsilon) == (gspo.learning_rate, 1e-8)
    assert config.num_generations == 32
    completions = config.per_device_train_batch_size * config.world_size * config.gradient_accumulation_steps
    assert completions == 16 * 32 and config.generation_batch_size == 16 * 32
    assert config.use_vllm and config.vllm_mode == "colocate" and config.log_completions
    assert config.reward_weights == [1.0, 0.2]

    plain = load_recipe(write(tmp_path, RL_MINIMAL), ["algorithm=grpo", "use_cpu=true"])
    config = grpo_config(plain)
    assert config.importance_sampling_level == "token" and (config.epsilon, config.epsilon_high) == (0.2, 0.28)
    assert config.max_tool_calling_iterations == 8  # the task's max_turns
    gspo_default = grpo_config(load_recipe(write(tmp_path, RL_MINIMAL), ["use_cpu=true"]))
    assert (gspo_default.epsilon, gspo_default.epsilon_high) == (3e-4, 4e-4)
    with pytest.raises(RecipeError, match="trl.beta: set it as the top-level recipe key"):
        grpo_config(load_recipe(write(tmp_path, RL_MINIMAL), ["trl.beta=0.1"]))
    with pytest.raises(RecipeError, match="trl.num_iteration: not a GRPOConfig field.*num_iterations"):
        grpo_config(load_recipe(write(tmp_path, RL_MINIMAL), ["trl.num_iteration=2"]))


def test_trl_console_sample_table_is_off_because_malformed_tool_arguments_crash_it(tmp_path):
    """TRL 1.16's ``print_prompt_completions_sample`` json.loads each tool call's arguments: a completion whose
    arguments are not JSON raises at the log step and ends the run. tansaku turns the table off by default (the
    samples stay in completions/*.parquet); ``trl.num_completions_to_print`` turns it back on."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.trainer.utils import print_prompt_completions_sample

    from tansaku.trainer.rl import grpo_config

    bad = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "search", "arguments": "{q"}}]}]
    with pytest.raises(json.JSONDecodeError):  # when this stops raising, the default can go back to TRL's
        print_prompt_completions_sample([[{"role": "user", "content": "q"}]], [bad], {"r": [0.0]}, [0.0], 1, None)
    print_prompt_completions_sample([[{"role": "user", "content": "q"}]], [bad], {"r": [0.0]}, [0.0], 1, 0)  # off
    assert grpo_config(load_recipe(write(tmp_path, RL_MINIMAL), ["use_cpu=true"])).num_completions_to_print == 0
    on = load_recipe(write(tmp_path, RL_MINIMAL), ["use_cpu=true", "trl.num_completions_to_print=2"])
    assert grpo_config(on).num_completions_to_print == 2


def test_sft_config_trains_assistant_turns_only(tmp_path):
    from tansaku.trainer.sft import sft_config

    config = sft_config(load_recipe(RECIPES / "sft-tiny.yaml", [f"output_dir={tmp_path}", "max_length=512"]))
    assert config.assistant_only_loss and not config.completion_only_loss
    assert config.max_length == 512 and config.use_cpu and config.learning_rate == 1e-4


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
