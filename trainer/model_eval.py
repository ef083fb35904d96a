"""Evaluate a model folder as the demo and bench/ do, and the numbers of a report that a summary keeps.

* :func:`evaluate_model` — ``train eval`` of a model folder, generating in this machine's fast dtype
  (``tansaku.core.hardware.fast_dtype``); the ``general`` retention task reads log-probs from the weights;
* :func:`eval_numbers` — the numbers of one eval ``report.json`` that the demo's summary.json carries per
  task and stage (same values, same names);
* :func:`eval_line` — a report as one line of the summary table, and pass@1's 95 % Wilson interval
  (``tansaku.envs.intervals``): 16 questions move pass@1 in steps of 1/16.

    from tansaku.trainer.model_eval import eval_line, eval_numbers, evaluate_model
    report = evaluate_model("multihop_qa_compact", DATASET, "runs/demo/sft", INDEX, split="test", limit=16)
    line, interval = eval_line("multihop_qa_compact", report)
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core.hardware import fast_dtype
from tansaku.core.llm import from_spec
from tansaku.envs.evaluate import run_eval
from tansaku.envs.intervals import passes, wilson
from tansaku.envs.retention import TASK as GENERAL

# The eval report's numbers that summary.json carries per task and stage (plus ``pass@k``, ``answer_rate``
# and each reward component, ``format_reward`` among them).
EVAL_KEYS = ("questions", "episodes", "k", "pass@1", "mean_tool_calls", "tool_error_rate",
             "parse_failure_rate", "episodes_with_parse_failure", "mean_total_reward",
             "zero_variance_group_share")
RETENTION_KEYS = ("rows", "tokens", "mean_token_logprob", "perplexity")  # the ``general`` report's numbers


def eval_numbers(report: dict) -> dict:
    """The numbers of one eval ``report.json`` that summary.json keeps (same values, same names)."""
    numbers = {key: report[key] for key in (*EVAL_KEYS, *RETENTION_KEYS) if key in report}
    if f"pass@{report.get('k')}" in report:
        numbers[f"pass@{report['k']}"] = report[f"pass@{report['k']}"]
    if "stop_reasons" in report:  # episode tasks (the ``general`` retention report has none)
        # The share of episodes that ended with an answer (not cut by max_tokens/max_turns or a parse error).
        numbers["answer_rate"] = report["stop_reasons"].get("answer", 0) / max(report["episodes"], 1)
        numbers["stop_reasons"] = dict(report["stop_reasons"])
    numbers["rewards"] = dict(report.get("rewards") or {})
    return numbers


def eval_line(task: str, report: dict) -> tuple[str, dict]:
    """The summary table's line for ``report``, and ``{"pass@1_95": [low, high]}`` (the 95 % Wilson interval
    of pass@1) for an episode task; the ``general`` task's line gives log-prob and perplexity instead."""
    if task == GENERAL:
        return (f"log-prob/token={report['mean_token_logprob']:.3f} perplexity={report['perplexity']:.2f} on "
                f"{report['rows']} held-out general prompts"), {}
    low, high = wilson(passes(report["pass@1"], report["questions"]), report["questions"])
    interval = {"pass@1_95": [round(low, 3), round(high, 3)]}
    rewards = ", ".join(f"{k}={v:.2f}" for k, v in report.get("rewards", {}).items() if v is not None)
    line = (f"pass@1={report['pass@1']:.2f} (95 % {round(low, 3):.2f}–{round(high, 3):.2f}) "
            f"tool calls/episode={report['mean_tool_calls']:.2f} {rewards}")
    return line, interval


def evaluate_model(task: str, dataset: Path, model_dir: Path, index: Path, client_options: dict | None = None,
                   dtype: str | None = None, **options) -> dict:
    """``train eval`` of a model folder, generating in ``dtype`` (default ``fast_dtype()``). The answer cache
    keys on the weights, so checkpoints in folders of the same name never share answers.
    ``client_options``: more ``TransformersClient`` settings (``prefix_cache``)."""
    if task == GENERAL:  # retention reads the log-probs from the weights, so run_eval loads the folder itself
        return run_eval(task, dataset, f"transformers:{model_dir}", index, **options)
    client = from_spec(f"transformers:{model_dir}", dtype=dtype or fast_dtype(), batch_size=16,
                       **(client_options or {}))
    return run_eval(task, dataset, client, index, **options)
