"""Run report and learning curves from a hand-made TRL output folder (trainer_state.json + completions parquet).

Run: pytest tests/test_trainer_report.py
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tansaku.trainer.curves import plot_learning_curves, plot_loss_curve
from tansaku.trainer.report import write_run_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assistant(*calls):
    return [{"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls]},
            {"role": "tool", "content": "hits"}]


def _row(step, prompt, answer, fmt, calls):
    return {"step": step, "prompt": [{"role": "user", "content": prompt}], "completion": _assistant(*calls),
            "answer_reward": answer, "format_reward": fmt, "advantage": 0.0, "tool_variant": 1}


def write_run(out, steps=10, flat_answer=True):
    """Two groups of 2 per step: group p has zero variance, group q differs; one episode of q spams a search."""
    history = []
    (out / "completions").mkdir(parents=True)
    for step in range(1, steps + 1):
        fmt = 0.1 * step  # format reward rises every step …
        answer = 0.0 if flat_answer else 0.1 * step  # … while correctness stays flat (or rises too)
        history.append({"step": step, "loss": 0.1, "reward": answer + fmt, "rewards/answer_reward/mean": answer,
                        "rewards/format_reward/mean": fmt, "tools/call_frequency": 1.5,
                        "tools/failure_frequency": 0.0, "frac_reward_zero_std": 0.5})
        rows = [_row(step, "p", 0.0, 0.5, [("search", {"query": "a"})]),
                _row(step, "p", 0.0, 0.5, [("search", {"query": "b"})]),
                _row(step, "q", 1.0, 0.5, [("search", {"query": "c"}), ("open_doc", {"doc_id": "d"})]),
                _row(step, "q", 0.0, 0.0, [("search", {"query": "x"}), ("search", {"query": "x"})])]
        pq.write_table(pa.Table.from_pylist(rows), out / "completions" / f"completions_{step:05d}.parquet")
    (out / "trainer_state.json").write_text(json.dumps({"log_history": history}), encoding="utf-8")


def test_report_counts_zero_variance_groups_spread_and_spam(tmp_path):
    write_run(tmp_path)
    report = write_run_report(tmp_path)
    assert json.loads((tmp_path / "run_report.json").read_text(encoding="utf-8")) == report
    assert report["steps"] == 10 and len(report["per_step"]) == 10
    step = report["per_step"][0]
    assert step["groups"] == 2 and step["zero_variance_group_share"] == 0.5
    # q's totals are 1.5 and 0.0 (weights 1): std 0.75; p's std is 0 → mean 0.375, min 0, max 0.75
    assert step["group_reward_std"] == {"mean": 0.375, "std": 0.375, "min": 0.0, "max": 0.75, "n": 2}
    assert step["calls_per_episode"]["distribution"] == {"1": 2, "2": 2}
    assert step["episodes_with_repeated_calls"] == 1 and step["repeated_call_share"] == 0.25
    assert step["logged"]["format_reward"] == pytest.approx(0.1)
    overall = report["overall"]
    assert overall["groups"] == 20 and overall["zero_variance_group_share"] == 0.5
    checks = {c["name"]: c["ok"] for c in report["checks"]}
    assert checks == {"reward_variance": True, "zero_variance_groups": True, "tool_call_spam": False,
                      "reward_hacking": False, "reasoning_collapse": True} and report["ok"] is False
    assert any("format_reward rose" in w for w in overall["hacking_warnings"])


def test_weights_change_the_group_totals(tmp_path):
    write_run(tmp_path, steps=2)
    # with format_reward weighted 0, q's totals are 1.0 and 0.0: std 0.5
    report = write_run_report(tmp_path, weights={"format_reward": 0.0})
    assert report["per_step"][0]["group_reward_std"]["max"] == 0.5


def test_no_hacking_warning_when_correctness_rises(tmp_path):
    write_run(tmp_path, flat_answer=False)
    report = write_run_report(tmp_path)
    assert report["overall"]["hacking_warnings"] == []


def test_learning_curves_and_loss_curve_are_pngs(tmp_path):
    write_run(tmp_path, steps=3)
    png = plot_learning_curves(tmp_path)
    assert png == tmp_path / "learning_curves.png" and png.read_bytes()[:8] == PNG_MAGIC
    assert png.stat().st_size > 10_000  # four panels with lines, not an empty canvas
    loss = plot_loss_curve(tmp_path, tmp_path / "loss.png")
    assert loss.read_bytes()[:8] == PNG_MAGIC


def test_report_without_completions_uses_the_log_history_only(tmp_path):
    write_run(tmp_path, steps=2)
    for path in (tmp_path / "completions").iterdir():
        path.unlink()
    report = write_run_report(tmp_path)
    assert report["steps"] == 2 and "groups" not in report["per_step"][0]
    assert [c["name"] for c in report["checks"]] == ["reward_hacking", "reasoning_collapse"]
