"""Learning curves and the run report of a training run, read back from its ``output_dir``.

``train rl`` and ``train sft`` call these when training ends; they also work on any finished (or running)
TRL output folder:

    from tansaku.trainer.curves import plot_learning_curves
    from tansaku.trainer.report import write_run_report
    report = write_run_report("runs/demo/rl")          # -> runs/demo/rl/run_report.json
    plot_learning_curves("runs/demo/rl")               # -> runs/demo/rl/learning_curves.png

Two sources, both written by TRL: ``trainer_state.json`` (``log_history``: one entry per logged step with
``rewards/<name>/mean``, ``tools/call_frequency``, ``tools/failure_frequency``, ``frac_reward_zero_std``,
``loss``) and, with ``log_completions=True``, ``completions/completions_<step>.parquet`` (each completion's
prompt, messages, one column per reward component, advantage). The parquet files give what the logged
means cannot: the reward spread *within* each group (GRPO learns only from groups whose rewards differ),
tool calls per episode as a distribution, and identical calls repeated inside one episode.

The report runs the seed recipe's troubleshooting checks, per step and overall:

- ``reward_variance``: the within-group reward std (mean / std / min / max over groups); near 0 means
  no advantage, no gradient;
- ``zero_variance_groups``: the share of groups whose rewards are all equal;
- ``reward_hacking``: a component rising while correctness stays flat (``envs.monitoring.hacking_warnings``,
  the same watch as ``trainer.monitor``);
- ``tool_call_spam``: calls per episode (distribution, max) and episodes repeating an identical call;
- ``reasoning_collapse``: reasoning length, repetition, non-Japanese share and tool calls per step, and a
  warning when one collapses while the reward rises (``tansaku.trainer.collapse``).

It also carries the training signals TRL logs (``tansaku.trainer.signals``: loss, ``kl``, clip ratios,
entropy, completion lengths, ``frac_reward_zero_std``, the sampler–trainer gap, the rubric judge's metrics):
each step's values in ``per_step[i]["signals"]``, ``signals: {name: {first, last, min, max, mean, n}}`` over
the run, and ``judge: {steps, judged, failures, failure_share, seconds_mean, seconds_total}`` (None without a
judge). A signal the run did not log is absent. The curves are drawn by ``tansaku.trainer.curves``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from pathlib import Path

from tansaku.core import jsontext, safe_write
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.parsing import parse_tool_calls
from tansaku.core.redact import redact_mapping
from tansaku.envs.call_keys import tool_call_key
from tansaku.envs.monitoring import LOGGED_SERIES, hacking_warnings, reward_decomposition, zero_variance_share
from tansaku.envs.tasks import TASKS
from tansaku.trainer.collapse import collapse_series, collapse_warnings
from tansaku.trainer.run_folder import checkpoint_step
from tansaku.trainer.signals import judge_summary, signal_summary, step_signals

REPORT_FILE = "run_report.json"
CURVES_FILE = "learning_curves.png"
LOSS_FILE = "loss_curve.png"
# Checks fail above these (the seed recipe's rules of thumb: most groups must carry signal, and an agent
# that repeats the very same search in one episode is farming the tool-call reward or stuck in a loop).
MAX_ZERO_VARIANCE_SHARE = 0.5
MIN_GROUP_STD = 1e-3
MAX_REPEATED_CALL_SHARE = 0.1
CORRECTNESS_NAMES = {task.answer_reward_name for task in TASKS.values()}
_NON_REWARD_COLUMNS = {"step", "prompt", "completion", "advantage", "tool_variant", "environment",
                       "reward_inputs"}


def load_log_history(output_dir: str | Path) -> list[dict]:
    """``log_history`` of ``output_dir/trainer_state.json`` (else of the latest ``checkpoint-*``); [] if none.
    A state file that is unreadable or not a JSON object counts as none (``jsontext.read_object``)."""
    out = Path(output_dir)
    saved = sorted(((step, p) for p in out.glob("checkpoint-*/trainer_state.json")
                    if (step := checkpoint_step(p.parent.name)) is not None), reverse=True)
    for path in [out / "trainer_state.json", *(p for _, p in saved)]:
        state = jsontext.read_object(path)
        if state is not None:
            history = state.get("log_history", [])
            return ([entry for entry in history if isinstance(entry, dict)] if isinstance(history, list)
                    else [])
    return []


def completions_run(path: str | Path) -> Path:
    """The run folder of ``path`` (a run folder, or its ``completions`` folder) that holds TRL's completions;
    MissingInputError / InputError (one line) for no folder or no ``completions/completions_*.parquet``."""
    path = Path(path)
    if not path.exists():
        raise MissingInputError(f"no run folder at {path}")
    if path.name == "completions" or any(path.glob("completions_*.parquet")):
        path = path.parent
    if not any((path / "completions").glob("completions_*.parquet")):
        raise InputError(f"{path}: no completions/completions_*.parquet (train rl writes them with "
                         f"log_completions)")
    return path


def load_completions(output_dir: str | Path) -> list[dict]:
    """All rows of ``output_dir/completions/completions_*.parquet`` (plain Python values), in step order."""
    import pyarrow.parquet as pq

    rows = []
    for path in sorted(Path(output_dir, "completions").glob("completions_*.parquet")):
        step = int(re.sub(r"\D", "", path.stem) or 0)
        for row in pq.read_table(path).to_pylist():
            row.setdefault("step", step)
            rows.append(row)
    return rows


def episode_calls(completion) -> list[str]:
    """Each tool call of one completion as ``name(canonical JSON arguments)``.

    >>> episode_calls([{"role": "assistant", "tool_calls": [
    ...     {"function": {"name": "search", "arguments": '{"query": "a", "size": 3}'}},
    ...     {"function": {"name": "search", "arguments": {"size": 3, "query": "a"}}}]},
    ...     {"role": "tool", "content": "…"}])
    ['search({"query": "a", "size": 3})', 'search({"query": "a", "size": 3})']
    >>> episode_calls("<tool_call>{\\"name\\": \\"open_doc\\", "
    ...               "\\"arguments\\": {\\"doc_id\\": \\"d1\\"}}</tool_call>")
    ['open_doc({"doc_id": "d1"})']
    """
    if isinstance(completion, str):  # a non-conversational completion: parse the text as the rollout does
        return [tool_call_key(c.name, c.arguments) for c in parse_tool_calls(completion)[1]]
    calls = []
    for message in completion or []:
        for call in (message or {}).get("tool_calls") or []:
            function = call.get("function") or call
            calls.append(tool_call_key(function.get("name"), function.get("arguments")))
    return calls


def _stats(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values), "min": min(values),
            "max": max(values), "n": len(values)}


def _total(row: dict, names: list[str], weights: dict[str, float]) -> float:
    # TRL's total reward: weighted nansum over components (a component returns None on other tasks' rows).
    total = 0.0
    for name in names:
        value = row.get(name)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            total += weights.get(name, 1.0) * float(value)
    return total


def group_rewards(rows: list[dict], weights: dict[str, float] | None = None) -> list[list[float]]:
    """Total rewards grouped by prompt (a GRPO group = the completions of one prompt in one step).

    >>> group_rewards([{"step": 1, "prompt": "p", "a": 1.0}, {"step": 1, "prompt": "p", "a": 0.0},
    ...                {"step": 1, "prompt": "q", "a": 0.5, "b": float("nan")}])
    [[1.0, 0.0], [0.5]]
    """
    names = reward_columns(rows)
    groups: dict[str, list[float]] = {}
    for row in rows:
        key = json.dumps([row.get("step"), row.get("prompt")], ensure_ascii=False, sort_keys=True,
                         default=str)
        groups.setdefault(key, []).append(_total(row, names, weights or {}))
    return list(groups.values())


def reward_columns(rows: list[dict]) -> list[str]:
    names = dict.fromkeys(k for row in rows for k in row if k not in _NON_REWARD_COLUMNS)
    return [n for n in names if all(isinstance(r.get(n), (int, float, type(None))) for r in rows)]


def completion_checks(rows: list[dict], weights: dict[str, float] | None = None) -> dict:
    """Within-group reward spread and tool-call spam for one set of completions (one step, or all)."""
    groups = group_rewards(rows, weights)
    calls = [episode_calls(row.get("completion")) for row in rows]
    repeated = [max(Counter(c).values()) > 1 if c else False for c in calls]
    counts = [len(c) for c in calls]
    return {
        "episodes": len(rows),
        "groups": len(groups),
        "zero_variance_group_share": zero_variance_share(groups),
        "group_reward_std": _stats([statistics.pstdev(g) for g in groups if len(g) > 1]),
        "calls_per_episode": {**_stats([float(n) for n in counts]),
                              "distribution": {str(k): v for k, v in sorted(Counter(counts).items())}},
        "episodes_with_repeated_calls": sum(repeated),
        "repeated_call_share": sum(repeated) / len(rows) if rows else 0.0,
    }


def _watch_groups(names: list[str]) -> dict[str, tuple[list[str], str | None]]:
    """``{task: (its component names, its correctness component)}`` from logged names (``task/component``
    with several tasks, bare ``component`` with one)."""
    tasks: dict[str, list[str]] = {}
    for name in names:
        tasks.setdefault(name.rsplit("/", 1)[0] if "/" in name else "", []).append(name)
    return {task: (members, next((n for n in members if n.rsplit("/", 1)[-1] in CORRECTNESS_NAMES), None))
            for task, members in tasks.items()}


def hacking_checks(log_history: list[dict], window: int = 5) -> list[str]:
    """The reward watch over a whole run: a component rising while its task's correctness stays flat."""
    rows = reward_decomposition(log_history)
    names = list(dict.fromkeys(k for row in rows for k in row if k not in LOGGED_SERIES))
    window = max(1, min(window, len(rows) // 2))
    warnings = []
    for task, (members, correctness) in _watch_groups(names).items():
        if correctness is None:
            continue
        keep = set(members) | {"step", "tools/call_frequency"}
        task_rows = [{k: v for k, v in r.items() if k in keep} for r in rows]
        warnings += [f"[{task}] {w}" if task else w for w in hacking_warnings(task_rows, correctness, window)]
    return warnings


def run_report(output_dir: str | Path, weights: dict[str, float] | None = None) -> dict:
    """The report dict (see the module docstring); ``weights``: reward weight per component (default 1)."""
    history = load_log_history(output_dir)
    completions = load_completions(output_dir)
    logged = {row["step"]: row for row in reward_decomposition(history)}
    signals = step_signals(history)
    by_step: dict[int, list[dict]] = {}
    for row in completions:
        by_step.setdefault(int(row["step"]), []).append(row)
    per_step = []
    for step in sorted(set(logged) | set(by_step) | set(signals)):
        entry = {"step": step, "logged": {k: v for k, v in logged.get(step, {}).items() if k != "step"},
                 "signals": signals.get(step, {})}
        if step in by_step:
            entry.update(completion_checks(by_step[step], weights))
        per_step.append(entry)
    overall = completion_checks(completions, weights) if completions else {}
    warnings = hacking_checks(history)
    checks = []
    if overall:
        std = overall["group_reward_std"]["mean"]
        checks.append({"name": "reward_variance", "ok": std is not None and std >= MIN_GROUP_STD,
                       "detail": f"mean within-group reward std {std if std is None else round(std, 4)}"})
        share = overall["zero_variance_group_share"]
        checks.append({"name": "zero_variance_groups", "ok": share <= MAX_ZERO_VARIANCE_SHARE,
                       "detail": f"{share:.2f} of {overall['groups']} groups have zero reward variance"})
        checks.append(
            {"name": "tool_call_spam", "ok": overall["repeated_call_share"] <= MAX_REPEATED_CALL_SHARE,
             "detail": f"{overall['episodes_with_repeated_calls']} of {overall['episodes']} episodes "
                       f"repeat an identical call; max {overall['calls_per_episode']['max']} calls"})
    checks.append({"name": "reward_hacking", "ok": not warnings, "detail": "; ".join(warnings) or "none"})
    names = reward_columns(completions)
    collapse = (collapse_series(completions, lambda row: _total(row, names, weights or {})) if completions
                else [])
    collapsed = collapse_warnings(collapse)
    checks.append({"name": "reasoning_collapse", "ok": not collapsed,
                   "detail": "; ".join(collapsed) or "none"})
    return {"output_dir": str(output_dir), "steps": len(per_step), "checks": checks,
            "ok": all(c["ok"] for c in checks),
            "overall": {**overall, "hacking_warnings": warnings, "collapse_warnings": collapsed},
            "signals": signal_summary(signals), "judge": judge_summary(signals),
            "per_step": per_step, "collapse": collapse}


def write_run_report(output_dir: str | Path, weights: dict[str, float] | None = None) -> dict:
    """``run_report`` written to ``output_dir/run_report.json``; returns the dict (redacted: judge errors name
    their endpoint, ``tansaku.core.redact``)."""
    report = redact_mapping(run_report(output_dir, weights))
    safe_write.write_text_atomic(Path(output_dir, REPORT_FILE), jsontext.dumps(report, indent=2))
    return report
