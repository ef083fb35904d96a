"""Difficulty banding of RL prompts: keep the questions the starting policy solves sometimes, not never or
always.

    # recipe
    difficulty: {samples: 4, min_pass: 0.05, max_pass: 0.95, rows: 64}

    from tansaku.trainer.difficulty import band_prompts
    bands = band_prompts(recipe, "/models/sft")   # {task: Band}; train rl does this before step 1

GRPO learns only from groups whose rewards differ: a prompt the policy always solves, or never does, gives
every completion the same advantage, 0. So before training, each task's candidate prompts (the first ``rows``
of its prompt split) are sampled ``samples`` times with the model RL starts from, through the backend training
generates with (``tansaku.trainer.readiness.readiness_model``), at the recipe's temperature; a prompt is kept
when its pass rate lies in ``[min_pass, max_pass]``. The defaults drop never-solved and always-solved prompts
for any ``samples`` below 20.

Each task's result goes to ``<output_dir>/difficulty/<task>/``: ``band.json`` (settings, the starting weights'
fingerprint, a hash of the candidate rows, kept / dropped counts by reason, every candidate's pass rate) and
the sampled ``trajectories.jsonl``. A rerun with the same start, rows and settings (a resumed run) reads
``band.json`` instead of sampling again; any change samples again. Kept rows carry ``start_pass_rate``.

TRL 1.16's GRPOTrainer has no hook to resample groups whose rewards came out equal during training (DAPO's
dynamic sampling): generation, scoring and advantages are one method, ``_generate_and_score_completions``, and
refilling a batch would mean overriding it, i.e. forking the trainer. The banding above is done before the
run instead; ``frac_reward_zero_std`` in the run report shows how much of it held.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tansaku.core import jsontext, safe_write
from tansaku.core.llm import as_client
from tansaku.core.llm.identity import weights_fingerprint
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.evaluate import NotReadyForRL, is_correct, load_rows, summarize, write_trajectories
from tansaku.envs.rollout import run_rollouts
from tansaku.trainer.readiness import readiness_model, readiness_options
from tansaku.trainer.recipe_arguments import RLTask
from tansaku.trainer.recipes import Recipe

BAND_FILE = "band.json"


@dataclass
class Band:
    """One task's banding: which candidate rows (by position in the split) are kept, with their pass rates."""

    task: str
    key: dict  # what the result depends on: start weights, candidate rows, settings (a rerun compares it)
    pass_rates: list[float]  # per candidate row, in split order
    kept: list[int]
    dropped: dict[str, int] = field(default_factory=dict)  # reason → count
    report: dict = field(default_factory=dict)  # the rollouts' eval summary (pass@1, tool calls, entropy …)

    def summary(self) -> dict:
        return {"task": self.task, "candidates": len(self.pass_rates), "kept": len(self.kept),
                "dropped": self.dropped, "start_weights": self.key["start_weights"]}


def candidate_rows(spec: RLTask, rows: int | None) -> list[dict]:
    """The task's prompt rows banding samples: the first ``rows`` of its prompt split (all when None)."""
    limits = [n for n in (rows, spec.max_rows) if n is not None]
    return load_rows(spec.data, spec.prompt_split(), min(limits) if limits else None)


def band_key(recipe: Recipe, spec: RLTask, rows: list[dict], model_path: str) -> dict:
    """Everything a band depends on; a saved band is reused only when all of it matches."""
    difficulty = recipe.script_args.difficulty
    rows_hash = hashlib.sha256(jsontext.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
    return {"start_model": str(model_path), "start_weights": weights_fingerprint(Path(model_path)),
            "rows_sha256": rows_hash[:16], "split": spec.prompt_split(), "system_prompt": spec.system_prompt,
            "samples": difficulty.samples, "min_pass": difficulty.min_pass, "max_pass": difficulty.max_pass,
            "max_tokens": difficulty.max_tokens,
            "temperature": difficulty.temperature or recipe.training_args.temperature,
            "seed": recipe.training_args.seed, "sampler": readiness_model(recipe, str(model_path))}


def keep_rule(pass_rates: list[float], min_pass: float, max_pass: float) -> tuple[list[int], dict[str, int]]:
    """Indices of rows whose pass rate lies in ``[min_pass, max_pass]``, and the dropped counts by reason.

    >>> keep_rule([0.0, 0.25, 1.0, 0.5, 0.0], 0.05, 0.95)
    ([1, 3], {'never_solved': 2, 'always_solved': 1})
    >>> keep_rule([0.25, 0.75], 0.5, 0.95)
    ([1], {'below_min_pass': 1})
    """
    kept, dropped = [], {}
    for i, rate in enumerate(pass_rates):
        if min_pass - 1e-9 <= rate <= max_pass + 1e-9:
            kept.append(i)
            continue
        reason = ("never_solved" if rate == 0 else "below_min_pass") if rate < min_pass else (
            "always_solved" if rate == 1 else "above_max_pass")
        dropped[reason] = dropped.get(reason, 0) + 1
    return kept, dropped


_BAND_FIELDS = {"task": str, "key": dict, "pass_rates": list, "kept": list, "dropped": dict, "report": dict}


def _saved_band(folder: Path, key: dict) -> Band | None:
    """The band ``folder`` holds for ``key``; None (sample again) when there is none, it was made for another
    key, or its ``band.json`` is no band (unreadable, not a JSON object, a field missing or of another
    type)."""
    data = jsontext.read_object(folder / BAND_FILE)
    if (data is None or data.get("key") != key
            or not all(isinstance(data.get(k), t) for k, t in _BAND_FIELDS.items())):
        return None
    return Band(**{k: data[k] for k in _BAND_FIELDS})


def band_task(recipe: Recipe, spec: RLTask, task, model_path: str, client, judge=None) -> Band:
    """Sample each candidate row of ``spec`` ``samples`` times with ``client``; keep the rows in the band."""
    difficulty = recipe.script_args.difficulty
    rows = candidate_rows(spec, difficulty.rows)
    key = band_key(recipe, spec, rows, model_path)
    folder = Path(recipe.training_args.output_dir) / "difficulty" / spec.name
    saved = _saved_band(folder, key)
    if saved is not None:
        return saved
    trajectories = run_rollouts(
        client, task, rows, make_environment_factory(task, spec.index), k=difficulty.samples,
        max_tokens=difficulty.max_tokens, temperature=key["temperature"], top_p=recipe.training_args.top_p,
        seed=recipe.training_args.seed, judge=judge, quiet=True)
    passes = [0] * len(rows)
    for t in trajectories:
        passes[t.row_index] += is_correct(task, t, task.pass_threshold)
    pass_rates = [c / difficulty.samples for c in passes]
    kept, dropped = keep_rule(pass_rates, difficulty.min_pass, difficulty.max_pass)
    report = summarize(task, trajectories, difficulty.samples, task.pass_threshold)
    band = Band(spec.name, key, pass_rates, kept, dropped, report)
    safe_write.ensure_dir(folder)
    write_trajectories(folder / "trajectories.jsonl", trajectories)
    # band.json last: its presence means a finished band (a killed run samples again)
    safe_write.write_text_atomic(folder / BAND_FILE,
                                 jsontext.dumps({"summary": band.summary(), **asdict(band)},
                                                indent=2, default=str))
    return band


def band_prompts(recipe: Recipe, model_path: str, tasks: dict, judge=None, client=None) -> dict[str, Band]:
    """Band every recipe task (``tasks``: name → the Task object RL uses); raise ``NotReadyForRL`` when a task
    keeps no prompt (the counts say whether they were all too easy or all too hard)."""
    own = client is None
    client = client if client is not None else as_client(readiness_model(recipe, model_path),
                                                        **readiness_options(recipe))
    bands = {}
    try:
        for spec in recipe.script_args.tasks:
            bands[spec.name] = band = band_task(recipe, spec, tasks[spec.name], model_path, client, judge)
            if not band.kept:
                raise NotReadyForRL(
                    f"difficulty: task {spec.name} keeps no prompt: of {len(band.pass_rates)} candidates "
                    f"sampled {recipe.script_args.difficulty.samples} times by {model_path}, {band.dropped} "
                    f"fell outside pass rate [{recipe.script_args.difficulty.min_pass}, "
                    f"{recipe.script_args.difficulty.max_pass}]. Widen the band, sample more "
                    "candidates (difficulty.rows), or start from another checkpoint.")
    finally:
        if own:
            client.close()
    return bands


def banded_rows(rows: list[dict], band: Band) -> list[dict]:
    """The kept rows of ``rows`` (the same candidates, in split order), each with its ``start_pass_rate``."""
    if len(rows) < len(band.pass_rates):
        raise ValueError(f"task {band.task}: {len(rows)} prompt rows but the band has {len(band.pass_rates)}")
    return [{**rows[i], "start_pass_rate": band.pass_rates[i]} for i in band.kept]
