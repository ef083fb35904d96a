"""`train select`: choose the RL start among an SFT run's checkpoints by measurement on a validation slice.

    train select --run runs/sft --task multihop_qa_compact --dataset runs/multihop --index runs/index \
        --rows 32
    python -c "from tansaku.trainer.select import select_checkpoint; \
        select_checkpoint('runs/sft', 'multihop_qa', …)"

The lowest SFT loss is not the best RL start: a model trained to loss 0.007 is near-deterministic on its data,
so most GRPO groups have equal rewards and no gradient. Each ``checkpoint-*`` of the run (and the final model
in the run folder) is evaluated with ``run_eval`` on the first ``rows`` questions of a split the SFT data
never held — the dataset's ``rl`` split by default; the held-out ``test`` split is refused, it stays for the
final comparison. Per checkpoint the table gives pass@1 (greedy unless ``temperature`` > 0, then the mean over
``k`` samples), the mean token entropy of what it generated (``ChatResult.entropy``: how deterministic it is),
tool calls per episode and the mean task reward.

The chosen start is the highest pass@1; ties go to the higher entropy (equal skill, more room to explore).
``<run>/checkpoint_selection.json`` holds the table and the choice; each evaluation's report and trajectories
are in ``<run>/selection/<checkpoint>/``, reused on a rerun while the checkpoint's weights are unchanged.
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import jsontext, ownership, safe_write
from tansaku.core.errors import InputError
from tansaku.core.hardware import fast_dtype
from tansaku.core.heldout import HELDOUT_SPLITS
from tansaku.core.llm import from_spec
from tansaku.core.llm.identity import weights_fingerprint
from tansaku.core.redact import redact_mapping
from tansaku.envs.evaluate import run_eval
from tansaku.envs.tasks import Task, task_named
from tansaku.trainer.run_folder import checkpoint_step

SELECTION_FILE = "checkpoint_selection.json"
RUN_MARKER = ownership.RUN_MARKER  # written by train sft / train rl: the folder is a tansaku training run
# what a reused report must hold
_TABLE_NUMBERS = ("pass@1", "mean_tool_calls", "mean_total_reward", "questions")


def checkpoints(run: Path) -> list[tuple[int | None, Path]]:
    """``(step, folder)`` of each saved checkpoint in step order, then the final model (step None) if saved
    and not the same step as a checkpoint (``trainer_state.json`` says which step it is; listed when that file
    is missing or unreadable). Only ``checkpoint-<ASCII digits>`` folders count
    (``run_folder.checkpoint_step``)."""
    found = sorted((step, p) for p in run.glob("checkpoint-*")
                   if (step := checkpoint_step(p.name)) is not None and (p / "config.json").is_file())
    if (run / "config.json").is_file():
        final_step = jsontext.read_object(run / "trainer_state.json", {}).get("global_step")
        if type(final_step) is not int or final_step not in {step for step, _ in found}:
            found.append((None, run))
    return found


def choose(table: list[dict]) -> dict:
    """The row with the highest pass@1, ties to the higher entropy (then the earlier step).

    >>> choose([{"name": "a", "pass@1": 0.5, "entropy": 0.1}, {"name": "b", "pass@1": 0.5, "entropy": 0.3},
    ...         {"name": "c", "pass@1": 0.4, "entropy": 0.9}])["name"]
    'b'
    """
    return max(table, key=lambda r: (r["pass@1"], r["entropy"] if r["entropy"] is not None else -1.0))


def _check_run(run: Path, split: str) -> None:
    if split in HELDOUT_SPLITS:
        raise InputError(f"--split {split}: a held-out split measures the final models; choose the RL "
                         "start on the 'rl' split (or another split the SFT data did not use)")
    ownership.require_named(run, "--run")  # select writes into the run: a folder others may write is refused
    if not (run / RUN_MARKER).is_file():
        raise InputError(f"{run}: not a tansaku training run (no {RUN_MARKER}); train select writes into the "
                         "run folder, so it only works on one train sft made")
    if not checkpoints(run):
        raise InputError(f"{run}: no checkpoint-* folder and no final model; set save_steps in the SFT "
                         f"recipe")


def select_checkpoint(
    run: str | Path, task: str | Task, dataset: str | Path, index, split: str = "rl", rows: int = 32,
    k: int = 1, temperature: float = 0.0, max_tokens: int = 1024, seed: int = 0,
    system_prompt: str | None = None, dtype: str | None = None, batch_size: int = 16) -> dict:
    """Evaluate every checkpoint of ``run`` on ``rows`` questions of ``split``; write and return the
    selection.

    ``task``: a ``TASKS`` name or a ``Task`` (``train select --config``: a recipe's ``rl_task``, with its
    reward weights). ``dtype``/``batch_size``: how the transformers backend generates (default: bf16 where it
    is native, ~2x faster than fp32 there, else fp32).
    """
    run = Path(run)
    _check_run(run, split)
    # a recipe's task (train select --config) as it is
    task = task_named(task) if isinstance(task, str) else task
    weights = dict(task.reward_weights)
    table = []
    for step, folder in checkpoints(run):
        name = folder.name if step is not None else "final"
        report_dir = run / "selection" / name
        fingerprint = weights_fingerprint(folder)
        report = _reusable_report(report_dir, fingerprint, rows, k, temperature, split, weights)
        if report is None:
            client = from_spec(f"transformers:{folder}", dtype=dtype or fast_dtype(), batch_size=batch_size)
            report = run_eval(task, dataset, client, index, split=split, k=k, limit=rows, out_dir=report_dir,
                              max_tokens=max_tokens, temperature=temperature, seed=seed,
                              system_prompt=system_prompt)
            client.close()
            report.update(weights=fingerprint, selection_rows=rows)
            report = redact_mapping(report)  # what is recorded holds no secret (tansaku.core.redact)
            safe_write.write_text_atomic(report_dir / "report.json",
                                         jsontext.dumps(report, indent=2, default=str))
        table.append({"name": name, "step": step, "path": str(folder), "weights": fingerprint,
                      "pass@1": report["pass@1"], "entropy": report.get("mean_token_entropy"),
                      "tool_calls": report["mean_tool_calls"], "reward": report["mean_total_reward"],
                      "questions": report["questions"]})
    chosen = choose(table)
    selection = {"run": str(run), "task": task.name, "reward_weights": weights, "dataset": str(dataset),
                 "split": split, "rows": rows, "k": k,
                 "temperature": temperature, "criterion": "max pass@1, ties to higher entropy",
                 "chosen": chosen, "checkpoints": table}
    selection = redact_mapping(selection)
    safe_write.write_text_atomic(run / SELECTION_FILE, jsontext.dumps(selection, indent=2))
    return selection


def _reusable_report(report_dir: Path, fingerprint: str, rows: int, k: int, temperature: float, split: str,
                     reward_weights: dict):
    """The report a previous selection wrote for these weights and settings; None (evaluate again) when there
    is none, it was made for other weights, settings or reward weights, or ``report.json`` is not a JSON
    object."""
    report = jsontext.read_object(report_dir / "report.json")
    if report is None:
        return None
    same = (report.get("weights") == fingerprint and report.get("k") == k and report.get("split") == split
            and report.get("temperature") == temperature and report.get("selection_rows") == rows
            and report.get("reward_weights") == reward_weights)
    complete = all(type(report.get(key)) in (int, float) for key in _TABLE_NUMBERS)
    return report if same and complete else None


def selection_table(selection: dict) -> str:
    """The selection as a markdown table (the CLI prints it)."""
    lines = ["| checkpoint | pass@1 | entropy | tool calls | reward |", "|---|---|---|---|---|"]
    for row in selection["checkpoints"]:
        mark = " ←" if row["name"] == selection["chosen"]["name"] else ""
        entropy = f"{row['entropy']:.3f}" if row["entropy"] is not None else "–"
        lines.append(f"| {row['name']}{mark} | {row['pass@1']:.3f} | {entropy} | {row['tool_calls']:.2f} "
                     f"| {row['reward']:.3f} |")
    return "\n".join(lines)
