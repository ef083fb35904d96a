"""Compare two ``train eval`` reports side by side: each metric's A, B and B − A.

    train compare runs/eval-base runs/eval-rl          # folders with report.json, or the report.json files

``compare_reports(a, b)`` takes two report dicts (``tansaku.envs.evaluate.run_eval`` or the ``general`` task's
retention report) and returns ``{"a", "b", "metrics": {name: {"a", "b", "delta"}}, "warnings"}``: pass@1,
pass@k, mean tool calls, parse-failure rate, tool error rate, mean total reward, zero-variance group share,
each reward component (``rewards/<name>``) and, for the ``general`` task, mean token log-prob and perplexity.
A metric only one side has gets ``None`` for the other side and for the delta. ``warnings`` names what makes
the two not comparable (another task, task version, dataset, split or k).
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from tansaku.core import jsontext
from tansaku.core.errors import InputError, MissingInputError

# Shown in this order; anything else numeric at the top level is left out on purpose (counts, settings).
HEADLINE = ("pass@1", "pass@k", "mean_tool_calls", "parse_failure_rate", "episodes_with_parse_failure",
            "tool_error_rate", "mean_total_reward", "zero_variance_group_share",
            "mean_token_logprob", "perplexity", "tokens")
SAME = ("task", "task_version", "dataset", "split", "k")


def _metrics(report: dict) -> dict[str, float]:
    out = {}
    for name in HEADLINE:
        key = f"pass@{report.get('k')}" if name == "pass@k" else name  # the report's own k
        if isinstance(report.get(key), (int, float)) and not isinstance(report[key], bool):
            out[key] = float(report[key])
    for name, value in (report.get("rewards") or {}).items():
        if isinstance(value, (int, float)):
            out[f"rewards/{name}"] = float(value)
    return out


def compare_reports(a: dict, b: dict, names: tuple[str, str] = ("A", "B")) -> dict:
    """Each metric of two eval reports with its delta (B − A).

    >>> a = {"task": "multihop_qa", "k": 4, "pass@1": 0.25, "pass@4": 0.5, "mean_tool_calls": 1.0,
    ...      "rewards": {"answer_reward": 0.25}}
    >>> b = {"task": "multihop_qa", "k": 4, "pass@1": 0.5, "pass@4": 0.75, "mean_tool_calls": 2.5,
    ...      "rewards": {"answer_reward": 0.5, "format_reward": 1.0}}
    >>> result = compare_reports(a, b)
    >>> result["metrics"]["pass@1"], result["metrics"]["mean_tool_calls"]["delta"]
    ({'a': 0.25, 'b': 0.5, 'delta': 0.25}, 1.5)
    >>> result["metrics"]["rewards/format_reward"], result["warnings"]
    ({'a': None, 'b': 1.0, 'delta': None}, [])
    >>> compare_reports(a, {**b, "task": "egov_mcq"})["warnings"]
    ["task differs: 'multihop_qa' vs 'egov_mcq'"]
    """
    ma, mb = _metrics(a), _metrics(b)
    metrics = {}
    for name in dict.fromkeys([*ma, *mb]):
        va, vb = ma.get(name), mb.get(name)
        metrics[name] = {"a": va, "b": vb, "delta": None if va is None or vb is None else vb - va}
    warnings = [f"{key} differs: {a.get(key)!r} vs {b.get(key)!r}" for key in SAME
                if key in a and key in b and a[key] != b[key]]
    return {"a": names[0], "b": names[1], "metrics": metrics, "warnings": warnings}


def load_report(path: str | Path) -> dict:
    """A ``report.json`` (or a ``train eval --out`` folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise MissingInputError(f"no eval report at {path} (write one with `train eval … --out DIR`)")
    try:
        report = jsontext.read_file(path)
    except jsontext.JSONInputError as e:  # unreadable, not UTF-8, not JSON, nested too deeply
        raise InputError(f"{path} is not JSON: {e}") from None
    if not isinstance(report, dict):
        raise InputError(f"{path} is not an eval report (expected a JSON object)")
    return report


def comparison_rows(comparison: dict) -> list[tuple[str, str, str, str]]:
    """``(metric, A, B, delta)`` strings for a table.

    >>> comparison_rows({"metrics": {"pass@1": {"a": 0.25, "b": 0.5, "delta": 0.25}}})
    [('pass@1', '0.2500', '0.5000', '+0.2500')]
    """
    def fmt(value, sign=""):
        return "–" if value is None else format(value, f"{sign}.4f")

    return [(name, fmt(m["a"]), fmt(m["b"]), fmt(m["delta"], "+")) for name,
            m in comparison["metrics"].items()]


def comparison_table(comparison: dict) -> Table:
    """A rich table of ``comparison_rows``, titled with both sides; warnings as its caption."""
    table = Table(title=f"A = {comparison['a']}   B = {comparison['b']}",
                  caption="; ".join(comparison.get("warnings") or []) or None)
    for column in ("metric", "A", "B", "B − A"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in comparison_rows(comparison):
        table.add_row(*row)
    return table
