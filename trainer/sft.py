"""`train sft`: supervised fine-tuning on tool-calling chat data with TRL's SFTTrainer.

    train sft --config trainer/recipes/sft-tiny.yaml --max_steps 5
    python -c "from tansaku.trainer.sft import run_sft; \
        run_sft('trainer/recipes/sft-tiny.yaml', ['--max_steps', '5'])"

The loss covers what the model must learn to write and nothing it reads: ``assistant_only_loss: true`` (which
every SFT recipe sets; ``false`` is refused) with a chat template that wraps each assistant turn (reasoning,
tool calls, answer, end token) in ``{% generation %}`` markers, so system, user and tool-result tokens get
label -100. The recipe's data sources are mixed by ratio (``tansaku.trainer.data``); LoRA (``use_peft``) or a
full fine-tune.
No row is truncated: rows longer than ``max_length`` are dropped, fitted or refused (``overlong``,
``tansaku.trainer.length``), counted per source in ``output_dir/tansaku_data_report.json``.

``report_to: [trackio]`` (the GPU recipes' default) needs the ``track`` extra
(``pip install 'tansaku[track]'``); ``check_reporters`` refuses any logger that is not installed (wandb,
tensorboard …: transformers' own availability helpers) in one line, where transformers would fail deep
inside the Trainer, after the model loaded. Loading the recipe runs TRL's own checks
(``SFTConfig.__post_init__``, e.g. ``warmup_steps: -3``, one line each); the model is found before anything is
written or loaded.

The helpers here (``model_init_kwargs``, ``trainer_config``, ``peft_config``, ``resume_checkpoint``) are
shared with ``train rl``: the model loads as TRL's own ``sft``/``grpo`` scripts load it, from ``ModelConfig``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from tansaku.core import ownership
from tansaku.trainer.curves import plot_loss_curve
from tansaku.trainer.data import mix_dataset
from tansaku.trainer.length import apply_overlong, write_report
from tansaku.trainer.model_card import name_base_model
from tansaku.trainer.recipes import Recipe, RecipeError, load_recipe, require_model, resolve_model
from tansaku.trainer.run_folder import (
    check_output_dir,
    claimed_output_dir,
    complete_checkpoint,
    full_disk_named,
    latest_checkpoint,
)

# What installs a report_to logger, where it is not the package of the logger's name.
REPORTER_PACKAGES = {"trackio": "'tansaku[track]'", "azure_ml": "azureml-core", "flyte": "flytekit"}


def check_reporters(recipe: Recipe) -> None:
    """Refuse a ``report_to`` logger that transformers does not know or cannot import (its own helpers:
    ``INTEGRATION_TO_CALLBACK``, ``get_available_reporting_integrations``), naming what installs it: the
    Trainer would fail only after the model loaded. ``all`` and ``none`` were expanded by transformers."""
    # transformers, trl: loaded with the trainer
    from transformers.integrations import integration_utils as integrations

    available = integrations.get_available_reporting_integrations()
    for name in recipe.training_args.report_to:
        if name not in integrations.INTEGRATION_TO_CALLBACK:
            raise RecipeError(f"report_to: {name!r} is not a logger transformers knows; use "
                              f"{', '.join(integrations.INTEGRATION_TO_CALLBACK)} (or report_to: none)")
        if name not in available:
            raise RecipeError(f"report_to: {name} is not installed; pip install "
                              f"{REPORTER_PACKAGES.get(name, name)} (or set report_to: none)")


def model_init_kwargs(recipe: Recipe) -> dict:
    """How the trainer loads the model, as TRL's own scripts build it: ``ModelConfig``'s revision, attention
    and ``dtype`` (the dtype the weights are loaded, updated and saved in), under the recipe's
    ``model_init_kwargs``."""
    model_args, training_args = recipe.model_args, recipe.training_args
    kwargs = {"revision": model_args.model_revision, "trust_remote_code": training_args.trust_remote_code,
              "attn_implementation": model_args.attn_implementation, "dtype": model_args.dtype}
    return {**kwargs, **(training_args.model_init_kwargs or {})}


def trainer_config(recipe: Recipe, **derived):
    """A copy of the recipe's TRL config for the trainer: ``model_init_kwargs`` from ``ModelConfig`` and the
    ``derived`` values tansaku computes (RL: the reward weights); the recipe itself stays as parsed."""
    config = copy.copy(recipe.training_args)
    config.model_init_kwargs = model_init_kwargs(recipe)
    if not config.push_to_hub:
        # The trainer pickles its config into every checkpoint (training_args.bin, as it is): a --hub_token it
        # never uses (nothing is pushed) stays out of the run folder.
        config.hub_token = None
    for key, value in derived.items():
        setattr(config, key, value)
    return config


def peft_config(recipe: Recipe):
    """A peft LoraConfig from ``ModelConfig`` (``use_peft``, ``lora_r`` …; TRL's ``get_peft_config``), or
    None."""
    from trl import get_peft_config  # transformers, trl: loaded with the trainer

    return get_peft_config(recipe.model_args)


def resume_checkpoint(recipe: Recipe) -> str | None:
    """``resume_from_checkpoint``: ``latest`` → newest ``checkpoint-*`` in output_dir; a path must exist."""
    value, output_dir = recipe.training_args.resume_from_checkpoint, recipe.training_args.output_dir
    if value is None:
        return None
    if value == "latest":  # the newest whole one: a save killed or stopped by a full disk is passed over
        found = latest_checkpoint(output_dir) if Path(output_dir).is_dir() else None
        if found is None:
            raise RecipeError(f"resume_from_checkpoint latest: no complete checkpoint-* folder in "
                              f"{output_dir}")
        return str(found)
    if not Path(value).is_dir():
        raise RecipeError(f"resume_from_checkpoint: {value} is not a checkpoint folder")
    if not complete_checkpoint(value):
        raise RecipeError(f"resume_from_checkpoint: {value} is an unfinished checkpoint (no readable "
                          "trainer_state.json, which is saved last: its save was killed or ran out of disk); "
                          "resume from an earlier checkpoint-* folder, or give latest")
    return value


def write_recipe_copy(recipe: Recipe) -> None:
    """Keep the resolved recipe and its kind next to the checkpoints (what exactly was run). Written first
    into ``output_dir``: it is the marker that makes the folder this run's
    (``tansaku.trainer.run_folder``)."""
    ownership.write_marker(Path(recipe.training_args.output_dir), ownership.RUN_MARKER, recipe.record(),
                           option="output_dir")


def sft_config(recipe: Recipe):
    """The TRL ``SFTConfig`` the trainer gets; a recipe that trains on more than the assistant turns is
    refused."""
    if not recipe.training_args.assistant_only_loss:
        raise RecipeError("assistant_only_loss: true is what train sft trains (assistant turns only; tool "
                          "results, system and user text get no loss); set it in the recipe")
    return trainer_config(recipe)


def build_sft_trainer(recipe: Recipe, callbacks: list | None = None):
    """An SFTTrainer ready to ``train()``: mixed dataset, model, LoRA if asked."""
    from transformers import AutoProcessor  # transformers, trl: loaded with the trainer
    from trl import SFTTrainer, get_quantization_config

    from tansaku.trainer import cpu  # torch, trl: loaded with the trainer
    from tansaku.trainer.retention_callback import attach_retention

    config = sft_config(recipe)
    name = recipe.model_args.model_name_or_path
    model = resolve_model(name)
    # what SFTTrainer would load; passed so both agree
    processing_class = AutoProcessor.from_pretrained(model)
    dataset = sft_dataset(recipe, processing_class)
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=processing_class,
                         peft_config=peft_config(recipe),
                         quantization_config=get_quantization_config(recipe.model_args), callbacks=callbacks)
    cpu.apply(trainer)  # on CPU: the LM head over the assistant turns' positions only
    # recipe retention:
    attach_retention(trainer, recipe.script_args.retention, recipe.training_args.output_dir)
    return name_base_model(trainer, name, model)  # its model card names the base model, not None


def sft_dataset(recipe: Recipe, processing_class):
    """The mixed training dataset, every row fitting ``max_length`` under the recipe's ``overlong`` policy
    (``tansaku.trainer.length``); the per-source counts go to ``output_dir/tansaku_data_report.json``."""
    script_args, training_args = recipe.script_args, recipe.training_args
    sources: list[dict] = []

    def fit(src, rows: list[dict]) -> list[dict]:
        kept, stats = apply_overlong(rows, processing_class, training_args.max_length, script_args.overlong,
                                     f"data source {src.path} ({src.split})")
        sources.append({"path": src.path, "split": src.split, **stats})
        return kept

    dataset = mix_dataset(script_args.data, script_args.mix_size, training_args.seed, fit=fit)
    write_report(training_args.output_dir,
                 {"max_length": training_args.max_length, "overlong": script_args.overlong,
                  "model": recipe.model_args.model_name_or_path, "sources": sources,
                  "mixed_rows": len(dataset)})
    # no tool schemas: TRL renders without a tools column
    if all(tools is None for tools in dataset["tools"]):
        dataset = dataset.remove_columns("tools")
    return dataset


def run_sft(config_path: str | os.PathLike, args: list[str] | None = None) -> dict:
    """Run ``train sft``: load the recipe (``args``: TRL's ``--key value`` overrides), train, save the final
    model.

    Returns ``{"output_dir", "global_step", "training_loss", "metrics"}``. Checkpoints, ``trainer_state.json``
    and the resolved recipe (``tansaku_recipe.json``) land in the recipe's ``output_dir``; the final model
    (or LoRA adapter) and ``loss_curve.png`` (``tansaku.trainer.curves``) are saved there too.
    """
    recipe = load_recipe(config_path, args, kind="sft")
    output_dir = recipe.training_args.output_dir
    check_output_dir(recipe)  # before anything is loaded or written: a dataset or a user's folder is refused
    check_reporters(recipe)
    resume = resume_checkpoint(recipe)
    sft_config(recipe)  # before anything is written or loaded
    require_model(recipe.model_args.model_name_or_path)
    with claimed_output_dir(recipe), full_disk_named(output_dir):  # one run at a time into output_dir
        write_recipe_copy(recipe)  # first: from now on the folder is provably this run's
        trainer = build_sft_trainer(recipe)
        result = trainer.train(resume_from_checkpoint=resume)
        trainer.save_model(output_dir)
        trainer.save_state()
        plot_loss_curve(output_dir)  # output_dir/loss_curve.png
    return {"output_dir": output_dir, "global_step": trainer.state.global_step,
            "training_loss": result.training_loss, "metrics": result.metrics}
