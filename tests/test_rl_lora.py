"""LoRA under `train rl`: the LoRA recipes load as every shipped recipe does and give the LoraConfig their comments
promise (fast); on the tiny model one GSPO step trains the adapter and nothing else, and the run's output is the
adapter, which `train merge lora` folds into the base (slow).

Run: pytest tests/test_rl_lora.py            (fast part)
     pytest tests/test_rl_lora.py -m slow    (tiny model)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fixtures.recipe_args import section_arg

from tansaku.trainer.recipes import load_recipe
from tansaku.trainer.sft import peft_config

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "trainer" / "recipes"
LORA_8B, LORA_TINY = RECIPES / "rl-qwen3-8b-lora.yaml", RECIPES / "rl-tiny-lora.yaml"
NO_GPU = [] if torch.cuda.is_available() else ["--bf16", "false"]  # TrainingArguments refuses bf16 without a GPU


@pytest.mark.parametrize("path, rank", [(LORA_8B, 32), (LORA_TINY, 8)], ids=lambda v: getattr(v, "name", v))
def test_lora_recipes_load_and_give_the_lora_config_they_name(path, rank, tmp_path):
    recipe = load_recipe(path, ["--output_dir", str(tmp_path), *NO_GPU], kind="rl")
    config = peft_config(recipe)  # what train rl hands to GRPOTrainer
    assert config is not None and config.r == rank and config.lora_alpha == rank  # alpha / r = 1
    assert config.lora_dropout == 0.0 and config.target_modules == "all-linear" and config.task_type == "CAUSAL_LM"
    args = recipe.training_args
    assert args.num_generations >= 2 and args.steps_per_generation % args.gradient_accumulation_steps == 0
    assert args.steps_per_generation > args.gradient_accumulation_steps  # more than one minibatch: the clip acts


def test_the_8b_lora_recipe_is_one_gpu_bf16_base_and_vllm_colocated(tmp_path):
    recipe = load_recipe(LORA_8B, ["--output_dir", str(tmp_path), *NO_GPU], kind="rl")
    args, model = recipe.training_args, recipe.model_args
    assert model.model_name_or_path == "Qwen/Qwen3-8B" and model.dtype == "bfloat16" and model.use_peft
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_enable_sleep_mode
    assert 0 < args.vllm_gpu_memory_utilization <= 0.5 and args.gradient_checkpointing
    assert args.max_completion_length == 4096 and args.vllm_max_model_length >= args.max_completion_length
    full = load_recipe(RECIPES / "rl-qwen3-8b.yaml", ["--output_dir", str(tmp_path / "f"), *NO_GPU], kind="rl")
    assert args.learning_rate == pytest.approx(10 * full.training_args.learning_rate)  # LoRA's ~10× rule
    # one GPU: a rollout round = per_device_train_batch_size × steps_per_generation completions, whole prompts
    assert args.per_device_train_batch_size * args.steps_per_generation % args.num_generations == 0


@pytest.mark.slow
def test_one_lora_step_trains_only_the_adapter_and_saves_it(tmp_path, envs_index, monkeypatch):
    """rl-tiny-lora through ``build_rl_trainer``, one optimizer step, generation scripted so every group has reward
    spread (a gradient for certain): the base weights are bit-identical after the step, the adapter's moved; the
    saved output is an adapter (no full weights), and ``train merge lora`` folds it into a loadable model."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tansaku.trainer.merge import run_merge
    from tansaku.trainer.rl import build_rl_trainer

    rows = [{"id": f"q{i}", "question": f"雪村製菓の創業者の出身地は？（{i}）", "answer": "白砂市"} for i in range(4)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    recipe = load_recipe(LORA_TINY, ["--output_dir", str(out), "--max_steps", "1", "--steps_per_generation", "2",
                                     "--seed", "3", "--save_steps", "100",
                                     *section_arg(LORA_TINY, "tasks", data=str(data), index=str(envs_index),
                                                  corpus=None)], kind="rl")
    trainer = build_rl_trainer(recipe)
    assert isinstance(trainer.model, PeftModel)
    tokenizer = trainer.processing_class
    right = tokenizer.encode("{{白砂市}}<|im_end|>", add_special_tokens=False)
    wrong = tokenizer.encode("{{黒松市}}<|im_end|>", add_special_tokens=False)
    monkeypatch.setattr(trainer, "_generate_single_turn", lambda prompt_ids, *a, **k: (
        [list(right if i % 2 == 0 else wrong) for i in range(len(prompt_ids))], None))
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainable = {name for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    trainer.train()
    assert trainer.state.global_step == 1
    changed = {name for name, p in trainer.model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and changed <= trainable  # the base did not move; the adapter did
    assert any("lora_B" in name for name in changed)

    trainer.save_model(str(out))  # what run_rl does at the end
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert not (out / "model.safetensors").exists()
    saved = load_file(out / "adapter_model.safetensors")
    assert saved and all("lora_" in name for name in saved) and any(t.abs().sum() > 0 for k, t in saved.items()
                                                                     if "lora_B" in k)
    config = json.loads((out / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["r"] == 8 and config["peft_type"] == "LORA"
    merged = run_merge("lora", [str(out)], str(tmp_path / "merged"))
    assert isinstance(AutoModelForCausalLM.from_pretrained(merged), torch.nn.Module)
