"""`train compare A B` (envs/compare.py) and the one-line errors of `train eval --task general`.

Run: pytest tests/test_compare.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.envs.compare import compare_reports

BASE = {"task": "multihop_qa", "task_version": "1", "dataset": "d", "split": "test", "k": 4, "pass@1": 0.25,
        "pass@4": 0.5, "mean_tool_calls": 1.0, "parse_failure_rate": 0.2, "tool_error_rate": 0.1,
        "mean_total_reward": 0.4, "questions": 10, "rewards": {"answer_reward": 0.25, "format_reward": 0.5}}
TRAINED = {**BASE, "pass@1": 0.5, "pass@4": 0.75, "mean_tool_calls": 2.5, "parse_failure_rate": 0.0,
           "tool_error_rate": 0.05, "rewards": {"answer_reward": 0.5, "format_reward": 0.75}}


def test_compare_reports_gives_each_metric_and_delta():
    result = compare_reports(BASE, TRAINED, ("base", "rl"))
    metrics = result["metrics"]
    assert list(metrics)[:6] == ["pass@1", "pass@4", "mean_tool_calls", "parse_failure_rate", "tool_error_rate",
                                 "mean_total_reward"]
    assert metrics["pass@4"] == {"a": 0.5, "b": 0.75, "delta": 0.25}
    assert metrics["parse_failure_rate"]["delta"] == pytest.approx(-0.2)
    assert metrics["rewards/format_reward"]["delta"] == 0.25
    assert "questions" not in metrics and result["warnings"] == [] and (result["a"], result["b"]) == ("base", "rl")


def test_general_reports_compare_their_likelihoods():
    before = {"task": "general", "mean_token_logprob": -2.0, "perplexity": 7.389, "tokens": 100, "rows": 8}
    after = {**before, "mean_token_logprob": -2.5, "perplexity": 12.18}
    metrics = compare_reports(before, after)["metrics"]
    assert metrics["mean_token_logprob"]["delta"] == -0.5 and set(metrics) == {"mean_token_logprob", "perplexity",
                                                                                  "tokens"}


def test_train_compare_prints_table_on_stderr_and_json_on_stdout(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)  # the table is what is checked
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "report.json").write_text(json.dumps(BASE), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps({**TRAINED, "split": "train"}), encoding="utf-8")
    result = CliRunner().invoke(train_app, ["compare", str(tmp_path / "a"), str(tmp_path / "b.json"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["metrics"]["pass@1"] == {"a": 0.25, "b": 0.5, "delta": 0.25}
    assert data["warnings"] == ["split differs: 'test' vs 'train'"]
    assert "pass@1" in result.stderr and "+0.2500" in result.stderr and "split differs" in result.stderr


def test_compare_and_general_eval_errors_are_one_line(tmp_path):
    missing = CliRunner().invoke(train_app, ["compare", str(tmp_path / "nope"), str(tmp_path / "nope2")])
    assert missing.exit_code == 2 and missing.stderr.startswith("error: no eval report at")
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "q", "answer": "a"}) + "\n", encoding="utf-8")
    http = CliRunner().invoke(train_app, ["eval", "--task", "general", "--dataset", str(tmp_path / "rows.jsonl"),
                                          "--model", "http:m@http://127.0.0.1:9"])
    assert http.exit_code == 2 and len(http.stderr.strip().splitlines()) == 1
    assert "use transformers:PATH or a model folder, not http: specs" in http.stderr
    (tmp_path / "x.jsonl").write_text('{"content": "x"}\n', encoding="utf-8")  # a scripted: file must exist
    no_index = CliRunner().invoke(train_app, ["eval", "--task", "multihop_qa", "--dataset",
                                              str(tmp_path / "rows.jsonl"), "--model", f"scripted:{tmp_path / 'x.jsonl'}"])
    assert no_index.exit_code == 2 and "give --index" in no_index.stderr
