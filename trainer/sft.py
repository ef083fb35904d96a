"""`train sft`: supervised fine-tuning on tool-calling chat data with TRL's SFTTrainer.

    train sft --config trainer/recipes/sft-tiny.yaml --set max_steps=5
    python -c "from tansaku.trainer.sft import run_sft; run_sft('trainer/recipes/sft-tiny.yaml', ['max_steps=5'])"

The loss covers what the model must learn to write and nothing it reads: ``assistant_only_loss=True``
with a chat template that wraps each assistant turn (reasoning, tool calls, answer, end token) in
``{% generation %}`` markers, so system, user and tool-result tokens get label -100. The recipe's data
sources are mixed by ratio (``tansaku.trainer.data``); LoRA on all linear layers or a full fine-tune.
No row is truncated: rows longer than ``max_length`` are dropped, fitted or refused (``overlong``,
``tansaku.trainer.length``), counted per source in ``output_dir/tansaku_data_report.json``.

``report_to: [trackio]`` (the GPU recipes' default) needs the ``track`` extra
(``pip install 'tansaku[track]'``); ``check_reporters`` refuses any logger that is not installed (wandb,
tensorboard …: transformers' own availability helpers) in one line, where transformers would fail deep
inside the Trainer, after the model loaded. Before anything is written or loaded, ``run_sft`` also builds TRL's
``SFTConfig`` (its ``__post_init__`` checks, e.g. ``warmup_steps: -3``, are one line each) and finds the model.

The helpers here (``training_args``, ``make_trl_config``, ``peft_config``, ``resume_checkpoint``) map the
recipe fields shared with ``train rl`` onto TRL config keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path

from tansaku.core import ownership
from tansaku.trainer.data import mix_dataset
from tansaku.trainer.length import apply_overlong, write_report
from tansaku.trainer.model_card import name_base_model
from tansaku.trainer.recipes import (
    RecipeError,
    SFTRecipe,
    TrainCommon,
    load_recipe,
    require_model,
    resolve_model,
)
from tansaku.trainer.report import plot_loss_curve
from tansaku.trainer.run_folder import check_output_dir, recipe_kind

# Recipe fields copied verbatim onto transformers' TrainingArguments (same names, same meaning).
SHARED_KEYS = (
    "output_dir", "learning_rate", "adam_epsilon", "weight_decay", "lr_scheduler_type", "warmup_steps",
    "max_grad_norm", "num_train_epochs", "max_steps", "gradient_accumulation_steps", "gradient_checkpointing",
    "bf16", "use_cpu", "seed", "logging_steps", "save_steps", "save_total_limit",
)


# What installs a report_to logger, where it is not the package of the logger's name.
REPORTER_PACKAGES = {"trackio": "'tansaku[track]'", "azure_ml": "azureml-core", "flyte": "flytekit"}


def check_reporters(recipe: TrainCommon) -> None:
    """Refuse a ``report_to`` logger that transformers does not know or cannot import (its own helpers:
    ``INTEGRATION_TO_CALLBACK``, ``get_available_reporting_integrations``), naming what installs it: the
    Trainer would fail only after the model loaded. ``[all]`` and ``[none]`` mean what they mean to transformers."""
    from transformers.integrations import integration_utils as integrations

    if recipe.report_to in (["all"], ["none"]):
        return
    available = integrations.get_available_reporting_integrations()
    for name in recipe.report_to:
        if name not in integrations.INTEGRATION_TO_CALLBACK:
            raise RecipeError(f"report_to: {name!r} is not a logger transformers knows; use "
                              f"{', '.join(integrations.INTEGRATION_TO_CALLBACK)} (or report_to: [])")
        if name not in available:
            raise RecipeError(f"report_to: {name} is not installed; pip install {REPORTER_PACKAGES.get(name, name)} "
                              f"(or set report_to: [])")


def training_args(recipe: TrainCommon) -> dict:
    """The TrainingArguments part of a recipe, as keyword arguments."""
    kwargs = {key: getattr(recipe, key) for key in SHARED_KEYS}
    kwargs["report_to"] = list(recipe.report_to) or "none"
    if recipe.per_device_train_batch_size is not None:
        kwargs["per_device_train_batch_size"] = recipe.per_device_train_batch_size
    # Same seed for the data order too, so a resumed run replays the same batches.
    kwargs["data_seed"] = recipe.seed
    kwargs["model_init_kwargs"] = {"dtype": recipe.weights_dtype}
    return kwargs


def make_trl_config(config_cls, recipe: TrainCommon, kwargs: dict):
    """``config_cls(**kwargs, **recipe.trl)``; ``trl:`` keys must be real config fields not set elsewhere."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    recipe_names = {f.name for f in dataclasses.fields(recipe)}
    for key in recipe.trl:
        if key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=1)
            raise RecipeError(f"trl.{key}: not a {config_cls.__name__} field" + (f" (did you mean '{close[0]}'?)" if close else ""))
        if key in recipe_names:
            raise RecipeError(f"trl.{key}: set it as the top-level recipe key '{key}' instead")
    merged = {**kwargs, **recipe.trl}
    if "model_init_kwargs" in recipe.trl:  # merge, so trl.model_init_kwargs.attn_implementation keeps dtype
        merged["model_init_kwargs"] = {**kwargs.get("model_init_kwargs", {}), **recipe.trl["model_init_kwargs"]}
    try:
        return config_cls(**merged)
    except ValueError as exc:  # TRL's / transformers' own checks (__post_init__): their message names the key
        raise RecipeError(f"{config_cls.__name__}: {(str(exc).strip().splitlines() or [''])[0]}") from None


def peft_config(recipe: TrainCommon):
    """A peft LoraConfig from ``recipe.lora``, or None for a full fine-tune."""
    if recipe.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=recipe.lora.r, lora_alpha=recipe.lora.alpha, lora_dropout=recipe.lora.dropout,
                      target_modules=recipe.lora.target_modules, task_type="CAUSAL_LM")


def resume_checkpoint(recipe: TrainCommon) -> str | None:
    """``resume_from_checkpoint``: ``latest`` → newest ``checkpoint-*`` in output_dir; a path must exist."""
    value = recipe.resume_from_checkpoint
    if value is None:
        return None
    if value == "latest":
        from transformers.trainer_utils import get_last_checkpoint

        found = get_last_checkpoint(recipe.output_dir) if Path(recipe.output_dir).is_dir() else None
        if found is None:
            raise RecipeError(f"resume_from_checkpoint=latest: no checkpoint-* folder in {recipe.output_dir}")
        return found
    if not Path(value).is_dir():
        raise RecipeError(f"resume_from_checkpoint: {value} is not a checkpoint folder")
    return value


def write_recipe_copy(recipe, output_dir: str) -> None:
    """Keep the resolved recipe and its kind next to the checkpoints (what exactly was run). Written first into
    ``output_dir``: it is the marker that makes the folder this run's (``tansaku.trainer.run_folder``)."""
    ownership.write_marker(Path(output_dir), ownership.RUN_MARKER,
                           {"kind": recipe_kind(recipe), **dataclasses.asdict(recipe)}, option="output_dir")


def sft_config(recipe: SFTRecipe):
    """The TRL ``SFTConfig`` of a recipe (assistant-only loss always on)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import SFTConfig

    kwargs = training_args(recipe)
    kwargs.update(assistant_only_loss=True, max_length=recipe.max_length, packing=recipe.packing,
                  shuffle_dataset=True)
    return make_trl_config(SFTConfig, recipe, kwargs)


def build_sft_trainer(recipe: SFTRecipe, callbacks: list | None = None):
    """An SFTTrainer ready to ``train()``: mixed dataset, model, LoRA if asked."""
    from transformers import AutoProcessor
    from trl import SFTTrainer

    config = sft_config(recipe)
    model = resolve_model(recipe.model)
    processing_class = AutoProcessor.from_pretrained(model)  # what SFTTrainer would load; passed so both agree
    dataset = sft_dataset(recipe, processing_class)
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=processing_class,
                         peft_config=peft_config(recipe), callbacks=callbacks)
    return name_base_model(trainer, recipe.model, model)  # its model card names the base model, not None


def sft_dataset(recipe: SFTRecipe, processing_class):
    """The mixed training dataset, every row fitting ``max_length`` under the recipe's ``overlong`` policy
    (``tansaku.trainer.length``); the per-source counts go to ``output_dir/tansaku_data_report.json``."""
    sources: list[dict] = []

    def fit(src, rows: list[dict]) -> list[dict]:
        kept, stats = apply_overlong(rows, processing_class, recipe.max_length, recipe.overlong,
                                     f"data source {src.path} ({src.split})")
        sources.append({"path": src.path, "split": src.split, **stats})
        return kept

    dataset = mix_dataset(recipe.data, recipe.mix_size, recipe.seed, fit=fit)
    write_report(recipe.output_dir, {"max_length": recipe.max_length, "overlong": recipe.overlong,
                                     "model": recipe.model, "sources": sources, "mixed_rows": len(dataset)})
    if all(tools is None for tools in dataset["tools"]):  # no tool schemas: TRL renders without a tools column
        dataset = dataset.remove_columns("tools")
    return dataset


def run_sft(config_path: str | os.PathLike, overrides: list[str] | None = None) -> dict:
    """Run ``train sft``: load the recipe (+ ``--set`` overrides), train, save the final model.

    Returns ``{"output_dir", "global_step", "training_loss", "metrics"}``. Checkpoints, ``trainer_state.json``
    and the resolved recipe (``tansaku_recipe.json``) land in the recipe's ``output_dir``; the final model
    (or LoRA adapter) and ``loss_curve.png`` (``tansaku.trainer.report``) are saved there too.
    """
    recipe = load_recipe(config_path, overrides, kind="sft")
    check_output_dir(recipe)  # before anything is loaded or written: a dataset or a user's folder is refused
    check_reporters(recipe)
    resume = resume_checkpoint(recipe)
    sft_config(recipe)  # TRL's own checks, and the model below, before anything is written or loaded
    require_model(recipe.model)
    write_recipe_copy(recipe, recipe.output_dir)  # first: from now on the folder is provably this run's
    trainer = build_sft_trainer(recipe)
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(recipe.output_dir)
    trainer.save_state()
    plot_loss_curve(recipe.output_dir)  # output_dir/loss_curve.png
    return {"output_dir": recipe.output_dir, "global_step": trainer.state.global_step,
            "training_loss": result.training_loss, "metrics": result.metrics}
