"""Re-score stored RL rollouts with the current reward functions, and say what changed per component.

The way to check a reward fix, or a suspected reward hack, without running RL again:

    train rescore --completions runs/rl/completions [--task multihop_qa] [--config R.yaml] \
        [--out runs/rl/rescored]

It reads TRL's ``completions/completions_<step>.parquet`` (each completion, one column per reward component as
it was scored during training) and tansaku's ``reward_inputs`` column (the row's own columns the rewards read:
``answer``, ``aliases``, ``answer_index``, ``rubric`` …, logged by ``train rl``), scores every completion
again with the task's reward functions as they are now, and reports per component: rows scored, stored and new
means, how many rows changed, the largest change and a few changed rows, and the weighted total's stored and
new means. When nothing changed, every row reproduces its stored score exactly (a None / NaN score matches
None / NaN). ``--out`` also writes ``rescored.parquet`` (the rows with ``new_<component>`` columns) and
``rescore_report.json``. The report records what scored: the task and its version, where the task came from,
its reward weights, tansaku's version, and a hash of each reward function's source.

The task is the run's own (``scoring_task``): the recipe task as ``train rl`` trained it (``rl_task``:
abstention, tools and reward weights), read from ``--config`` or else the run folder's
``tansaku_recipe.json``; ``--task`` picks one of a multi-task recipe. Only a run without a recipe copy (or a
``--task`` name alone) scores with the task's defaults.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from dataclasses import replace
from pathlib import Path

import tansaku
from tansaku.core import jsontext, ownership, safe_write
from tansaku.core.errors import InputError
from tansaku.core.redact import redact_mapping
from tansaku.envs.tasks import TASKS, Task
from tansaku.trainer.recipe_arguments import RLTask
from tansaku.trainer.recipes import RecipeError, load_recipe
from tansaku.trainer.report import completions_run, load_completions
from tansaku.trainer.rl_rewards import recipe_task, rl_task
from tansaku.trainer.typed_config import section

SHOWN_CHANGES = 5


def _score(value) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _mean(scores: list[float | None]) -> float:
    """Mean of the scores that exist (None: a component that did not apply, as TRL's nanmean)."""
    present = [x for x in scores if x is not None]
    return sum(present) / max(1, len(present))


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and a == b)


def reward_versions(task, functions: dict) -> dict:
    """What scored: task, its version, tansaku's version, a hash of each reward function's source."""
    def source_hash(fn) -> str:
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = repr(fn)
        return hashlib.sha256(source.encode()).hexdigest()[:12]

    return {"task": task.name, "task_version": task.version, "tansaku": tansaku.__version__,
            "reward_code": {name: source_hash(fn) for name, fn in functions.items()}}


def run_recipe_tasks(run: Path) -> list[RLTask] | None:
    """The RL tasks of the recipe ``run`` was trained with (its ``tansaku_recipe.json``, written by
    ``train rl`` before anything else), or None when the folder has no RL recipe copy (an older run, or
    completions copied out of their run)."""
    path = run / ownership.RUN_MARKER
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable recipe copy ({exc})") from None
    if not isinstance(record, dict) or record.get("kind") != "rl":
        return None
    try:  # the resolved values the run used, not its YAML file, which may have changed or moved since
        return section(list[RLTask], (record.get("script_args") or {}).get("tasks"), "tasks")
    except RecipeError as exc:
        raise InputError(f"{path}: {exc}") from None


def scoring_task(run: Path, task: str | Task | None, config: str | Path | None = None) -> tuple[Task, str]:
    """(the task that scores ``run``'s completions, where it came from). A ``Task`` is used as given; else the
    recipe task (``--config``, or the run's ``tansaku_recipe.json``) as ``train rl`` trained it, ``task``
    naming one of several; else ``TASKS[task]`` with its default weights."""
    if isinstance(task, Task):
        return task, "given"
    if config is not None:
        specs, where = load_recipe(config, kind="rl").script_args.tasks, f"recipe {config}"
    else:
        specs, where = run_recipe_tasks(run), f"run recipe {run / ownership.RUN_MARKER}"
    if specs:
        spec = recipe_task(specs, task, where)
        # Rewards never read the system prompt, and an @FILE it names may not exist where the run is rescored.
        return rl_task(replace(spec, system_prompt=None)), where
    if task is None:
        raise InputError(f"give --task (or --config RECIPE): {run} holds no train rl recipe copy "
                         f"({ownership.RUN_MARKER}) to read the run's task from")
    if task not in TASKS:
        raise InputError(f"--task {task!r}: one of {', '.join(sorted(TASKS))}")
    return TASKS[task], "task defaults"


def rescore(completions: str | Path, task: str | Task | None = None, out: str | Path | None = None,
            judge=None, config: str | Path | None = None) -> dict:
    """Score the stored completions again (see the module docstring); returns the report. ``task``: a name, a
    ``Task``, or None (the run's recipe task); ``config``: the recipe whose task scores them."""
    run = completions_run(completions)
    task, source = scoring_task(run, task, config)
    if out is not None:  # before any scoring: only a folder an earlier rescore made is rewritten
        out = ownership.refuse_unmarked(out, "--out", RESCORE_MARKER, "rescore", "rescore folder")
        ownership.refuse_overlap(out, {"--completions": run})
    rows = load_completions(run)
    if rows and "reward_inputs" not in rows[0]:
        raise InputError("these completions have no reward_inputs column (a run from before tansaku logged "
                         "the rows' reward columns): they cannot be scored again")
    functions = task.scoring_functions(judge)
    prefix = "" if any(name in (rows[0] if rows else {}) for name in functions) else f"{task.name}/"
    mine = _task_rows(rows, task.name)
    new_totals = []
    for row, inputs in mine:  # one row at a time: rows of different steps log different columns
        [score] = task.score([row["completion"]], [inputs], functions=functions, logged=True)
        row.update({f"new_{name}": value for name, value in score.components.items()})
        new_totals.append(score.total)
    components = {name: _compare([_score(row.get(prefix + name)) for row, _ in mine],
                                 [row[f"new_{name}"] for row, _ in mine], [row for row, _ in mine])
                  for name in functions}
    totals = {"stored_mean": _mean([task.weighted_total({n: _score(row.get(prefix + n)) for n in functions})
                                    for row, _ in mine]),
              "new_mean": _mean(new_totals)}
    versions = {**reward_versions(task, functions), "task_source": source,
                "reward_weights": dict(task.reward_weights)}
    report = {"completions": str(completions), "rows": len(mine), "versions": versions,
              "unchanged": all(c["changed"] == 0 for c in components.values()), "components": components,
              "total": totals}
    if out is not None:
        _write(Path(out), [row for row, _ in mine], report)
    return report


def _task_rows(rows: list[dict], task_name: str) -> list[tuple[dict, dict]]:
    """``(row, its logged reward inputs)`` of the rows ``task_name`` scored (a multi-task run logs them
    all)."""
    mine = []
    for row in rows:
        inputs = json.loads(row["reward_inputs"] or "{}")
        environment = str(inputs.get("environment") or "")
        if environment and environment.split("@tools-v", 1)[0] != task_name:
            continue  # another task's row in a multi-task run
        mine.append((row, inputs))
    return mine


def _compare(stored: list[float | None], new: list[float | None], rows: list[dict]) -> dict:
    """One component's report: rows, stored and new means, how many changed, the largest change, examples."""
    changes = [{"step": row.get("step"), "row": k, "stored": before, "new": after}
               for k, (before, after, row) in enumerate(zip(stored, new, rows)) if not _same(before, after)]
    diffs = [abs(a - b) for a, b in zip(stored, new) if a is not None and b is not None]
    return {"rows": len(rows), "stored_mean": _mean(stored), "new_mean": _mean(new), "changed": len(changes),
            "max_abs_change": max(diffs, default=0.0), "examples": changes[:SHOWN_CHANGES]}


RESCORE_MARKER = ownership.RESCORE_MARKER
OUTPUTS = ["rescored.parquet", "rescore_report.json"]


def _write(out: Path, rows: list[dict], report: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    report = redact_mapping(report)  # the judge it used may name its endpoint (tansaku.core.redact)
    # The marker first and listing what it writes: a later rescore proves the folder is its own.
    ownership.write_marker(out, RESCORE_MARKER, {"kind": "rescore", "files": OUTPUTS})
    (out / "rescored.parquet").unlink(missing_ok=True)  # no stale rows beside a report of none
    if rows:
        flat = [{k: jsontext.dumps(v, default=str) if k in ("prompt", "completion") else v
                 for k, v in row.items()} for row in rows]
        with safe_write.atomic_path(out / "rescored.parquet") as tmp:
            pq.write_table(pa.Table.from_pylist(flat), tmp)
    safe_write.write_text_atomic(out / "rescore_report.json", jsontext.dumps(report, indent=1))


def format_report(report: dict) -> str:
    """The report as a few lines for the terminal."""
    versions = report["versions"]
    lines = [f"{report['rows']} completions of {versions['task']} v{versions['task_version']}: "
             + ("every stored reward reproduced" if report["unchanged"] else "rewards changed"),
             f"  weights ({versions['task_source']}): "
             + ", ".join(f"{name} {weight:g}" for name, weight in versions["reward_weights"].items())]
    for name, c in report["components"].items():
        lines.append(f"  {name}: stored {c['stored_mean']:.4f} → new {c['new_mean']:.4f}, "
                     f"{c['changed']} changed (max |Δ| {c['max_abs_change']:.4f})")
    lines.append(f"  weighted total: stored {report['total']['stored_mean']:.4f} → new "
                 f"{report['total']['new_mean']:.4f}")
    return "\n".join(lines)
