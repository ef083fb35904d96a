"""Whether ``train sft`` / ``train rl`` may write into the recipe's ``output_dir``, decided before any model
loads.

TRL writes ``output_dir/README.md`` (a model card), weights and ``checkpoint-*`` folders at every save, so an
``output_dir`` pointing at a dataset folder would lose its card. The folder must be missing, empty, or a run
of
the same kind that tansaku made: its ``tansaku_recipe.json``, which ``run_sft`` / ``run_rl`` write into it
first (``write_recipe_copy``), so a run killed at any point is still provably its own and can be resumed. A
folder holding only ``checkpoint-*`` folders (copied there to continue from) is accepted when the recipe
resumes (``resume_from_checkpoint``). The ``output_dir`` is also never one of the run's inputs (model folder,
data, corpus, index), nor inside nor around one (``tansaku.core.ownership.refuse_overlap``).

    recipe = load_recipe("trainer/recipes/sft-tiny.yaml", kind="sft")
    check_output_dir(recipe)       # InputError: one line, exit 2, nothing written
    with claimed_output_dir(recipe), full_disk_named(recipe.training_args.output_dir):
        write_recipe_copy(recipe)  # tansaku.trainer.sft: the marker, before any other write
        ...                        # train, save

Faults while a run works. One run at a time per ``output_dir``: :func:`claimed_output_dir` locks it for the
whole run (``tansaku.core.ownership.claimed``), so a second run into it is refused in one line instead of
writing its checkpoints among the first's. A checkpoint whose save was killed or stopped by a full disk has no
readable ``trainer_state.json`` (transformers writes it last): ``resume_from_checkpoint: latest`` passes over
it (:func:`latest_checkpoint`), and naming it is refused in one line. ``torch.save`` reports a full disk
without its
errno (``RuntimeError: [enforce fail at inline_container.cc:…] . unexpected pos …``): :func:`full_disk_named`
reads it as the full disk it is, one line (exit 2) instead of a traceback.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tansaku.core import ownership
from tansaku.trainer.recipes import Recipe, auto_index_dir

_CHECKPOINT = re.compile(r"checkpoint-[0-9]+")  # ASCII digits: "checkpoint-²" passes isdigit() but not int()


def checkpoint_step(name: str) -> int | None:
    """The step of a TRL ``checkpoint-<step>`` folder name, else None (any other name: ``checkpoint-²``,
    ``checkpoint-3.bak``, ``checkpoint-x``).

    >>> (checkpoint_step("checkpoint-12"), checkpoint_step("checkpoint-\u00b2"),
    ...  checkpoint_step("checkpoint-3.bak"))
    (12, None, None)
    """
    return int(name.split("-", 1)[1]) if _CHECKPOINT.fullmatch(name) else None


def run_inputs(recipe: Recipe) -> dict[str, list[str]]:
    """What the run reads, by recipe key: the model (when it is a local folder; ``tiny`` and Hub ids are not),
    the data sources, and each task's data, corpus and index (not an ``index: auto`` it builds in
    output_dir)."""
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
    return (entry.is_dir() and _CHECKPOINT.fullmatch(entry.name) is not None
            and (entry / "trainer_state.json").is_file())


def check_output_dir(recipe: Recipe) -> Path:
    """The recipe's ``output_dir`` as a Path when the run may write into it (see the module docstring);
    InputError for a dataset, an index, another kind's run, any other folder with something in it, or one of
    the run's inputs."""
    kind = recipe.kind
    resuming = recipe.training_args.resume_from_checkpoint is not None
    out = ownership.refuse_unmarked(recipe.training_args.output_dir, "output_dir", ownership.RUN_MARKER, kind,
                                    f"{kind} run", spare=lambda entry: resuming and _checkpoint(entry))
    ownership.refuse_overlap(out, run_inputs(recipe), "output_dir")
    return out


@contextmanager
def claimed_output_dir(recipe: Recipe) -> Iterator[None]:
    """The recipe's ``output_dir`` created and locked until the block ends, and checked again under the lock
    (a run that held it may have changed it); FolderBusyError (one line) while another run holds it. Only the
    main process of a distributed run (``RANK`` 0, or no ``RANK``) locks it: the others save nothing there."""
    if os.environ.get("RANK", "0") != "0":
        yield
        return
    out = Path(recipe.training_args.output_dir)
    with ownership.claimed(out, "output_dir", lambda: check_output_dir(recipe) and None):
        yield


def complete_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` is a whole checkpoint: its ``trainer_state.json``, which transformers writes last
    (and not atomically), reads back as a JSON object."""
    try:
        return isinstance(json.loads((Path(folder) / "trainer_state.json").read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest whole ``checkpoint-<step>`` in ``output_dir`` (a save that was killed or ran out of disk is
    passed over), or None."""
    found = [(step, entry) for entry in Path(output_dir).iterdir() if entry.is_dir()
             and (step := checkpoint_step(entry.name)) is not None and complete_checkpoint(entry)]
    return max(found)[1] if found else None


# torch.save's C++ writer (caffe2 inline_container): a failed write, its errno not in the message
_TORCH_WRITE = re.compile(r"PytorchStreamWriter failed|inline_container\.cc|file write failed|unexpected pos")
_NO_SPACE = 1 << 20  # bytes left on a disk that a write just failed on for want of space


@contextmanager
def full_disk_named(output_dir: str | Path) -> Iterator[None]:
    """Re-raise torch's errno-less write failure as the OSError it is (``ENOSPC`` naming ``output_dir`` when
    its disk has under 1 MiB left, ``EFBIG`` when a file in it has reached the file-size limit), which the CLI
    reports in one line; any other failure stays as it is."""
    try:
        yield
    except RuntimeError as exc:
        if not _TORCH_WRITE.search(str(exc)):
            raise
        if _at_size_limit(Path(output_dir)):
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(output_dir)) from exc
        try:
            left = (disk := os.statvfs(output_dir)).f_bavail * disk.f_frsize
        except OSError:  # output_dir unreadable now: no telling what failed
            left = _NO_SPACE
        if left >= _NO_SPACE:
            raise
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(output_dir)) from exc


def _at_size_limit(output_dir: Path) -> bool:
    """Whether a file under ``output_dir`` has reached the process's file-size limit (``ulimit -f``): the
    kernel refused the write past it."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY:
        return False
    try:
        return any(p.is_file() and p.stat().st_size >= limit for p in output_dir.rglob("*"))
    except OSError:
        return False
