"""Evaluate a model with the search environment over a dataset split, and the RL readiness check.

``run_eval`` runs ``k`` episodes per question through ``tansaku.envs.rollout``, writes ``trajectories.jsonl``
and ``report.json``, and returns the report: pass@1, pass@k, mean tool calls, parse-failure rate, each reward
component's mean and the weights ``mean_total_reward`` sums them with (``reward_weights``), stop reasons, the
share of zero-variance groups, and parse failures, tool errors and pass@1 per tool description variant ×
interface (``by_tool_variant``: ``{"d0-i0": {…}, …}``). The task is a name (its defaults) or a ``Task``
object: a recipe's task as ``train rl`` trains it (``rl_task``), so a measurement scores the task that was
trained. ``check_rl_readiness(report)`` raises ``NotReadyForRL`` with the numbers when RL would learn nothing
(pass@k ≈ 0, or every group has zero reward variance so every GRPO advantage is 0).

    from tansaku.envs.evaluate import run_eval, check_rl_readiness
    report = run_eval("multihop_qa", "out/multihop", "http:Qwen/Qwen3-8B@http://gpu1:8000", "out/index",
                      split="test", k=4, out_dir="runs/eval1")
    check_rl_readiness(report)
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from tansaku.core import jsontext, ownership, safe_write
from tansaku.core.errors import InputError, TansakuError
from tansaku.core.llm import LLMOptions, as_client
from tansaku.core.options import check_count, check_limit, read_system_prompt
from tansaku.core.redact import redact_mapping
from tansaku.core.store import read_records
from tansaku.envs.environments import make_environment_factory, open_backend
from tansaku.envs.retention import TASK as GENERAL_TASK
from tansaku.envs.retention import general_report
from tansaku.envs.rewards import reward_columns
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.search_health import health_summary
from tansaku.envs.tasks import TASKS, Task
from tansaku.envs.tool_interfaces import variant_label


class NotReadyForRL(TansakuError, RuntimeError):
    """RL on this data/model would have no learning signal; the message carries the numbers."""

    multiline = True


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct (Chen et al. 2021).

    >>> pass_at_k(4, 0, 4), pass_at_k(4, 1, 1), pass_at_k(4, 1, 4)
    (0.0, 0.25, 1.0)
    """
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def is_correct(task, trajectory, pass_threshold: float = 1.0) -> bool:
    """Whether an episode passes: its correctness reward (the task's answer reward) reaches
    ``pass_threshold``."""
    value = trajectory.rewards.get(task.answer_reward_name)
    return value is not None and value >= pass_threshold - 1e-9


def write_trajectories(path: str | Path, trajectories) -> None:
    """One ``Trajectory.to_record()`` per line (``trajectories.jsonl``)."""
    with safe_write.open_atomic(path) as f:  # a fresh temp name renamed onto path: a planted link is replaced
        for trajectory in trajectories:
            f.write(jsontext.dumps(trajectory.to_record(), default=str) + "\n")


def summarize(task, trajectories, k: int, pass_threshold: float = 1.0) -> dict:
    """Aggregate trajectories (with ``rewards`` filled) into the eval report dict."""
    correctness = task.answer_reward_name
    groups: dict[int, list] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.row_index, []).append(trajectory)
    correct = [sum(is_correct(task, t, pass_threshold) for t in g) for g in groups.values()]
    pass1 = [pass_at_k(len(g), c, 1) for g, c in zip(groups.values(), correct)]
    passk = [pass_at_k(len(g), c, min(k, len(g))) for g, c in zip(groups.values(), correct)]
    zero_variance = [len({round(t.total_reward or 0.0, 9) for t in g}) == 1 for g in groups.values()]
    attempts = sum(t.tool_calls + t.parse_failures for t in trajectories)
    components = {}
    for name in task.reward_weights:
        values = [t.rewards.get(name) for t in trajectories if t.rewards.get(name) is not None]
        components[name] = sum(values) / len(values) if values else None
    n = max(len(trajectories), 1)
    entropies = [t.token_entropy for t in trajectories if t.token_entropy is not None]
    return {
        "task": task.name,
        "task_version": task.version,
        "questions": len(groups),
        "episodes": len(trajectories),
        "k": k,
        "correctness_reward": correctness,
        "reward_weights": dict(task.reward_weights),  # what mean_total_reward weighs: the task as trained
        "pass_threshold": pass_threshold,
        "pass@1": sum(pass1) / max(len(pass1), 1),
        f"pass@{k}": sum(passk) / max(len(passk), 1),
        "mean_tool_calls": sum(t.tool_calls for t in trajectories) / n,
        "tool_error_rate": sum(t.tool_errors for t in trajectories)
        / max(sum(t.tool_calls for t in trajectories), 1),
        "parse_failure_rate": sum(t.parse_failures for t in trajectories) / max(attempts, 1),
        "episodes_with_parse_failure": sum(1 for t in trajectories if t.parse_failures) / n,
        "mean_total_reward": sum(t.total_reward or 0.0 for t in trajectories) / n,
        "rewards": components,
        "zero_variance_group_share": sum(zero_variance) / max(len(zero_variance), 1),
        "mean_generated_tokens": sum(t.generated_tokens for t in trajectories) / n,
        # mean over episodes of each episode's mean token entropy (None: the backend does not report it)
        "mean_token_entropy": sum(entropies) / len(entropies) if entropies else None,
        "stop_reasons": dict(Counter(t.stop_reason for t in trajectories)),
        "tool_call_distribution": dict(sorted(Counter(t.tool_calls for t in trajectories).items())),
        "by_tool_variant": by_tool_variant(task, trajectories, pass_threshold),
        # searches per episode (distribution), query repeats, open/grounding before answering:
        # envs/search_health
        "search_health": health_summary([t.completion for t in trajectories]),
    }


def by_tool_variant(task, trajectories, pass_threshold: float = 1.0) -> dict[str, dict]:
    """Per (description variant, interface) the episodes showed, ``"d<n>-i<k>"``: episodes, parse failures and
    tool errors (counts and the report's rates) and pass@1 (the share of those episodes that pass; a row's k
    samples share its draw, so this is the mean of its rows' pass@1)."""
    cells: dict[str, list] = {}
    for t in trajectories:
        cells.setdefault(variant_label(t.tool_variant, t.tool_interface), []).append(t)
    out = {}
    for label, group in sorted(cells.items()):
        calls, failures = sum(t.tool_calls for t in group), sum(t.parse_failures for t in group)
        errors = sum(t.tool_errors for t in group)
        out[label] = {"episodes": len(group), "parse_failures": failures, "tool_errors": errors,
                      "parse_failure_rate": failures / max(calls + failures, 1),
                      "tool_error_rate": errors / max(calls, 1),
                      "pass@1": sum(is_correct(task, t, pass_threshold) for t in group) / len(group)}
    return out


def check_rl_readiness(report: dict, min_pass_at_k: float = 0.02,
                       max_zero_variance_share: float = 0.999) -> None:
    """Refuse (raise ``NotReadyForRL``) when pass@k ≈ 0 or (nearly) every group has zero reward variance."""
    k = report["k"]
    problems = []
    if report[f"pass@{k}"] < min_pass_at_k:
        problems.append(f"pass@{k} = {report[f'pass@{k}']:.3f} < {min_pass_at_k} (the model almost never "
                        "answers correctly: no positive reward to learn from)")
    if k > 1 and report["zero_variance_group_share"] > max_zero_variance_share:
        problems.append(f"zero-variance groups = {report['zero_variance_group_share']:.3f} of "
                        f"{report['questions']} (every GRPO advantage would be 0)")
    if problems:
        raise NotReadyForRL(
            f"not ready for RL on {report['task']} v{report['task_version']} ({report['questions']} "
            f"questions × {k} samples; pass@1 = {report['pass@1']:.3f}, mean tool calls = "
            f"{report['mean_tool_calls']:.2f}, parse failures = {report['parse_failure_rate']:.3f}): "
            + "; ".join(problems) + ". Use easier data, SFT first, or a stronger starting model."
        )


def load_rows(dataset: str | Path, split: str = "test", limit: int | None = None) -> list[dict]:
    """Rows of a dataset folder written by ``tansaku.core.store`` (or a ``.jsonl``/``.json``/``.parquet``
    file).

    No fallback to another split: evaluating on rows the model trained on would overstate it."""

    if Path(dataset).is_dir() and not any((Path(dataset) / "data").glob(f"{split}-*.parquet")):
        held = sorted({f.name.split("-")[0] for f in (Path(dataset) / "data").glob("*-*.parquet")})
        hint = ("rebuild it with --heldout-share > 0 for a held-out 'test' split, or name one of its splits "
                "with --split" if split == "test"
                else "name one of its splits with --split (or a dataset that has this one)")
        raise InputError(f"--dataset {dataset} has no '{split}' split (it holds: "
                         f"{', '.join(held) or 'none'}): {hint}")
    rows = read_records(dataset, split=split)
    return rows[:limit] if limit else rows


def run_eval(task: str | Task, dataset: str | Path, model, index, split: str = "test", k: int = 4,
             limit: int | None = None, out_dir: str | Path | None = None, max_turns: int | None = None,
             max_tokens: int = 1024, temperature: float = 0.7, seed: int = 0, judge=None,
             pass_threshold: float | None = None, system_prompt: str | None = None,
             interface_variants: int | None = None, llm_options: LLMOptions | None = None) -> dict:
    """Evaluate ``model`` on ``task`` over ``dataset``'s ``split``; return (and write) the report.

    Args:
        task: a key of ``tansaku.envs.tasks.TASKS`` (``multihop_qa``, ``egov_mcq``, ``deepresearch``), or a
            ``Task`` object as a recipe trains it (``Task.configured``,
            ``tansaku.trainer.rl_rewards.rl_task``: its system prompt, tools and reward weights, which
            ``mean_total_reward`` and the report's ``reward_weights`` then use).
            Or ``general``: retention on chat rows (``tansaku.envs.retention``; ``transformers:`` models
            only).
        dataset: dataset folder (``tansaku.core.store`` layout) or a ``.jsonl`` file of rows.
        model: an LLM spec for ``tansaku.core.llm.from_spec`` (``http:…``, ``vllm:…``, ``transformers:…``,
            ``scripted:…``) or a client object.
        index: search index folder / OpenSearch target for ``tansaku.envs.search.open_index`` (opened here and
            closed at the end, worker processes and all), or an opened backend (left open: the caller's).
        split: dataset split to read. ``limit``: first N rows only.
        k: samples per question (pass@k; also the group size of the zero-variance check).
        out_dir: where ``trajectories.jsonl`` and ``report.json`` go (None: write nothing): missing, empty or
            an eval folder tansaku made, checked before the model loads (:func:`eval_out`).
        max_turns, max_tokens, temperature, seed: rollout settings (max_turns defaults to the task's).
        judge: LLM spec or client for rubric tasks (``deepresearch``).
        pass_threshold: correctness reward value that counts as a pass (default: the task's
            ``pass_threshold``).
        system_prompt: text (or ``@FILE``) instead of the task's system prompts — the one the model was
            trained under (``synth build trajectories --system-prompt``, a recipe task's ``system_prompt``).
        interface_variants: tool interfaces drawn per episode (``Task.configured`` tools; 2: ``find``/``read``
            too,
            ``tansaku.envs.tool_interfaces``); None: the task's own ``tools_config``.
        llm_options: the command's ``--api-key`` / ``--extra-body`` / ``--concurrency`` / ``--no-cache`` for
            the clients built here from specs (``LLMOptions``).
    """
    check_limit(limit)
    check_count("--k", k)
    out = eval_out(out_dir, dataset, index)  # before any model loads
    if isinstance(task, str) and task == GENERAL_TASK:
        return _general_eval(model, dataset, split, limit, out, interface_variants)
    spec = eval_task(task, system_prompt, interface_variants)
    if index is None:
        raise InputError(f"task {spec.name} runs episodes over a search index: give --index")
    rows = _task_rows(spec, dataset, split, limit)
    model_arg, judge_arg = model, judge
    model, judge = as_client(model, llm_options=llm_options), as_client(judge, llm_options=llm_options)
    if pass_threshold is None:
        pass_threshold = spec.pass_threshold  # the task owns it: 1.0 for exact answers, 0.5 for rubrics
    # Scored by spec.score: the task as configured, its weights in mean_total_reward.
    trajectories = _episodes(model, spec, rows, index, judge, k=k, max_turns=max_turns, max_tokens=max_tokens,
                             temperature=temperature, seed=seed)
    report = summarize(spec, trajectories, k, pass_threshold)
    report.update({"dataset": str(dataset), "split": split, "model": getattr(model, "describe", dict)(),
                   "temperature": temperature, "max_tokens": max_tokens, "seed": seed})
    for spec_or_client, client in ((model_arg, model), (judge_arg, judge)):
        if isinstance(spec_or_client, str):  # made here from a spec: release its weights/connections now
            client.close()
    if out is not None:
        write_out(out, report, trajectories)
    return report


def eval_task(task: str | Task, system_prompt: str | None = None,
              interface_variants: int | None = None) -> Task:
    """The task an evaluation scores: ``TASKS[task]`` or the ``Task`` given (a recipe's, already configured),
    ``Task.configured`` with ``system_prompt`` (text or ``@FILE``) and ``interface_variants`` when given.

    >>> eval_task("multihop_qa", interface_variants=2).tools_config["interface_variants"]
    2
    """
    if isinstance(task, str) and task not in TASKS:
        raise InputError(f"unknown task {task!r}; choose one of {sorted(TASKS) + [GENERAL_TASK]}")
    spec = TASKS[task] if isinstance(task, str) else task
    tools = {} if interface_variants is None else {"interface_variants": interface_variants}
    return spec.configured({"system_prompt": read_system_prompt(system_prompt), "tools": tools})


def _episodes(client, task: Task, rows: list[dict], index, judge, **settings) -> list:
    """``run_rollouts`` over ``index``: a backend opened here from a path is closed after (its workers
    too)."""
    backend = open_backend(index)
    try:
        return run_rollouts(client, task, rows, make_environment_factory(task, backend), judge=judge,
                            **settings)
    finally:
        if backend is not index and hasattr(backend, "close"):
            backend.close()


def _general_eval(model, dataset, split: str, limit: int | None, out: Path | None,
                  interface_variants: int | None) -> dict:
    """Retention: likelihood of reference chat answers, no environment (``tansaku.envs.retention``)."""
    if interface_variants is not None:
        raise InputError(f"task {GENERAL_TASK} runs no tools: --interface-variants is for a search task")
    report = general_report(model, load_rows(dataset, split, limit))
    report.update({"dataset": str(dataset), "split": split})
    if out is not None:
        write_out(out, report)
    return report


def _task_rows(task: Task, dataset, split: str, limit: int | None) -> list[dict]:
    """The rows to evaluate on, refused (``InputError``) before any rollout when there are none, when a column
    the task needs is missing, or when a column is named like one of TRL's reward arguments."""
    rows = load_rows(dataset, split, limit)
    if not rows:
        raise InputError(f"no rows in {dataset} (split {split!r})")
    missing = sorted({c for row in rows for c in task.columns if c not in row})
    if missing:
        raise InputError(f"{dataset} lacks column(s) {missing} that task {task.name} needs ({task.columns})")
    reward_columns(rows)
    return rows


def eval_out(out_dir: str | Path | None, dataset, index) -> Path | None:
    """``out_dir`` as a Path when an evaluation may write into it: missing, empty or an eval folder tansaku
    made (``tansaku_eval.json``, or an older tansaku's report); InputError for anything else — a user's
    folder, a dataset or index — and for a folder that is, lies in or holds the dataset or index it reads."""
    if out_dir is None:
        return None
    out = ownership.refuse_unmarked(out_dir, "--out", ownership.EVAL_MARKER, "eval", "eval folder")
    ownership.refuse_overlap(out, {"--dataset": dataset, "--index": index})
    return out


def write_out(out: Path, report: dict, trajectories=None) -> None:
    """The eval marker first (a killed evaluation's folder stays provably its own), then the trajectories,
    then ``report.json``: its presence means the evaluation finished. The report names the model and judge (an
    endpoint's user:pass@, ?api-key=): it is redacted (``tansaku.core.redact``)."""
    report = redact_mapping(report)
    ownership.write_marker(out, ownership.EVAL_MARKER, {"kind": "eval", "task": report.get("task"),
                                                        "dataset": report.get("dataset"),
                                                        "files": ["trajectories.jsonl", "report.json"]})
    if trajectories is not None:
        write_trajectories(out / "trajectories.jsonl", trajectories)
    else:  # a retention eval has none: an earlier run's episodes must not pass for this report's
        (out / "trajectories.jsonl").unlink(missing_ok=True)
    safe_write.write_text_atomic(out / "report.json", jsontext.dumps(report, indent=2, default=str))
