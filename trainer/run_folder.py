"""Whether ``train sft`` / ``train rl`` may write into the recipe's ``output_dir``, decided before any model loads.

TRL writes ``output_dir/README.md`` (a model card), weights and ``checkpoint-*`` folders at every save, so an
``output_dir`` pointing at a dataset folder would lose its card. The folder must be missing, empty, or a run of
the same kind that tansaku made: its ``tansaku_recipe.json``, which ``run_sft`` / ``run_rl`` write into it first
(``write_recipe_copy``), so a run killed at any point is still provably its own and can be resumed. A folder
holding only ``checkpoint-*`` folders (copied there to continue from) is accepted when the recipe resumes
(``resume_from_checkpoint``). The ``output_dir`` is also never one of the run's inputs (model folder, data,
corpus, index), nor inside nor around one (``tansaku.core.ownership.refuse_overlap``).

    recipe = load_recipe("trainer/recipes/sft-tiny.yaml", kind="sft")
    check_output_dir(recipe)      # InputError: one line, exit 2, nothing written
    write_recipe_copy(recipe)     # tansaku.trainer.sft: the marker, before any other write
"""

from __future__ import annotations

import re
from pathlib import Path

from tansaku.core import ownership
from tansaku.trainer.recipes import Recipe, auto_index_dir

_CHECKPOINT = re.compile(r"checkpoint-[0-9]+")  # ASCII digits: "checkpoint-²" passes isdigit() but not int()


def checkpoint_step(name: str) -> int | None:
    """The step of a TRL ``checkpoint-<step>`` folder name, else None (any other name: ``checkpoint-²``,
    ``checkpoint-3.bak``, ``checkpoint-x``).

    >>> checkpoint_step("checkpoint-12"), checkpoint_step("checkpoint-\u00b2"), checkpoint_step("checkpoint-3.bak")
    (12, None, None)
    """
    return int(name.split("-", 1)[1]) if _CHECKPOINT.fullmatch(name) else None


def run_inputs(recipe: Recipe) -> dict[str, list[str]]:
    """What the run reads, by recipe key: the model (when it is a local folder; ``tiny`` and Hub ids are not),
    the data sources, and each task's data, corpus and index (not an ``index: auto`` it builds in output_dir)."""
    model, output_dir = recipe.model_args.model_name_or_path, recipe.training_args.output_dir
    inputs = {"model_name_or_path": [model] if model and Path(model).exists() else [],
              "data": [src.path for src in getattr(recipe.script_args, "data", [])]}
    for task in getattr(recipe.script_args, "tasks", []):
        inputs.setdefault("tasks.data", []).append(task.data)
        inputs.setdefault("tasks.corpus", []).extend([task.corpus] if task.corpus else [])
        if task.index and task.index != auto_index_dir(output_dir, task.name):
            inputs.setdefault("tasks.index", []).append(task.index)
    return inputs


def _checkpoint(entry: Path) -> bool:
    return entry.is_dir() and _CHECKPOINT.fullmatch(entry.name) is not None and (entry / "trainer_state.json").is_file()


def check_output_dir(recipe: Recipe) -> Path:
    """The recipe's ``output_dir`` as a Path when the run may write into it (see the module docstring); InputError for
    a dataset, an index, another kind's run, any other folder with something in it, or one of the run's inputs."""
    kind = recipe.kind
    resuming = recipe.training_args.resume_from_checkpoint is not None
    out = ownership.refuse_unmarked(recipe.training_args.output_dir, "output_dir", ownership.RUN_MARKER, kind, f"{kind} run",
                                    spare=lambda entry: resuming and _checkpoint(entry))
    ownership.refuse_overlap(out, run_inputs(recipe), "output_dir")
    return out
