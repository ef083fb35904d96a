"""`train compare --completions RUN --steps A B` (trainer/step_samples.py) and `train report --runs …`
(trainer/seeds.py, collapse onsets from trainer/collapse.py), on hand-made run folders.

Run: pytest tests/test_trainer_seeds.py
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.trainer.collapse import collapse_onsets
from tansaku.trainer.seeds import compare_seeds


def _row(step, question, answer, reward, tool=0.5):
    return {"step": step, "prompt": [{"role": "system", "content": "検索して答える"}, {"role": "user", "content": question}],
            "completion": [{"role": "assistant", "reasoning_content": "調べる", "content": "",
                            "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": question}}}]},
                           {"role": "tool", "content": "[1] 白砂市の市長は山田。"},
                           {"role": "assistant", "reasoning_content": None, "content": "{{" + answer + "}}", "tool_calls": None}],
            "answer_reward": reward, "tool_call_reward": tool, "advantage": reward - 0.5,
            "reward_inputs": json.dumps({"answer": "山田"}, ensure_ascii=False)}


def write_completions(out):
    (out / "completions").mkdir(parents=True)
    steps = {1: [_row(1, "白砂市の市長は？", "佐藤", 0.0), _row(1, "白砂市の市長は？", "山田", 1.0),
                 _row(1, "only at one", "x", 0.0)],
             3: [_row(3, "白砂市の市長は？", "山田", 1.0), _row(3, "白砂市の市長は？", "山田", 1.0, tool=None)]}
    for step, rows in steps.items():
        pq.write_table(pa.Table.from_pylist(rows), out / "completions" / f"completions_{step:05d}.parquet")


def test_compare_steps_shows_the_same_prompts_samples_with_their_rewards(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)  # the table on stderr is checked too
    write_completions(tmp_path)
    result = CliRunner().invoke(train_app, ["compare", "--completions", str(tmp_path / "completions"),
                                            "--steps", "1", "3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["steps"] == [1, 3] and data["components"] == ["answer_reward", "tool_call_reward"]
    assert (data["shared"], data["only_a"], data["only_b"]) == (1, 1, 0)
    (pair,) = data["prompts"]
    assert pair["prompt"] == "白砂市の市長は？" and pair["answer"] == "山田"
    assert [s["rewards"]["answer_reward"] for s in pair["a"]] == [0.0, 1.0]
    assert pair["b"][1]["rewards"] == {"answer_reward": 1.0, "tool_call_reward": None} and pair["b"][1]["total"] == 1.0
    assert "→ search" in pair["a"][0]["completion"] and "{{佐藤}}" in pair["a"][0]["completion"]
    assert data["mean"]["a"]["answer_reward"] == 0.5 and data["mean"]["b"]["answer_reward"] == 1.0
    assert "step 1" in result.stderr and "step 3" in result.stderr and "answer_reward" in result.stderr


def test_compare_steps_errors_are_one_line(tmp_path):
    write_completions(tmp_path)
    runner = CliRunner()
    missing = runner.invoke(train_app, ["compare", "--completions", str(tmp_path), "--steps", "1", "7"])
    assert missing.exit_code == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert missing.stderr.startswith("error: --steps: step 7 is not in") and "logged steps: 1, 3" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(train_app, ["compare", "--completions", str(tmp_path / "empty"), "--steps", "1", "2"])
    assert empty.exit_code == 2 and "no completions/completions_*.parquet" in empty.stderr
    assert len(empty.stderr.strip().splitlines()) == 1
    mixed = runner.invoke(train_app, ["compare", "a.json", "--completions", str(tmp_path), "--steps", "1", "3"])
    assert mixed.exit_code == 2 and mixed.stderr.startswith("error: give either two eval reports")


def write_run(out, collapse_at: int | None, steps: int = 16):
    """A log history whose reward and entropy hold steady, then fall to a fifth at ``collapse_at`` for 3 steps."""
    history = []
    for step in range(1, steps + 1):
        down = collapse_at is not None and collapse_at <= step < collapse_at + 3
        history.append({"step": step, "loss": 0.0, "reward": 0.2 if down else 1.0 + 0.01 * (step % 3),
                        "entropy": 0.06 if down else 0.3, "frac_reward_zero_std": 0.9 if down else 0.2,
                        "rewards/answer_reward/mean": 0.1 if down else 0.6})
    out.mkdir(parents=True)
    (out / "trainer_state.json").write_text(json.dumps({"log_history": history}), encoding="utf-8")
    return out


def test_collapse_onsets_follow_their_thresholds():
    points = [(1, 1.0), (2, 1.0), (3, 0.45), (4, 0.45), (5, 1.0)]
    assert collapse_onsets(points) == [3]
    assert collapse_onsets(points, drop=0.6) == []  # 0.45 is not 40 % of the peak
    assert collapse_onsets([(1, 1.0), (2, 0.7), (3, 0.49), (4, 0.34)], lookback=1) == []  # a slow decline


def test_report_runs_flags_a_collapse_recurring_at_the_same_step(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)  # the table on stderr is checked too
    a, b = write_run(tmp_path / "seed0", 8), write_run(tmp_path / "seed1", 9)
    out = tmp_path / "seeds.png"
    result = CliRunner().invoke(train_app, ["report", "--runs", str(a), str(b), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["collapses"] for r in data["runs"]] == [{"reward": [8], "entropy": [8]}, {"reward": [9], "entropy": [9]}]
    assert data["coincide"] is True and data["png"] == str(out)
    assert data["recurring"] == [{"signal": "reward", "step": 8, "steps": {"seed0": 8, "seed1": 9}},
                                 {"signal": "entropy", "step": 8, "steps": {"seed0": 8, "seed1": 9}}]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "seed0" in result.stderr and "recurring within ±1 steps: reward at step 8" in result.stderr
    assert compare_seeds([a, b], within=0)["coincide"] is False  # 8 and 9 are one step apart


def test_report_runs_does_not_flag_collapses_at_different_steps(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)  # the table on stderr is checked too
    runs = [write_run(tmp_path / "seed0", 5), write_run(tmp_path / "seed1", 12), write_run(tmp_path / "seed2", None)]
    result = CliRunner().invoke(train_app, ["report", "--runs", *map(str, runs), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["collapses"]["reward"] for r in data["runs"]] == [[5], [12], []]
    assert data["coincide"] is False and data["recurring"] == [] and data["png"] is None
    assert "no collapse recurs within ±1 steps" in result.stderr
    assert compare_seeds(runs, within=7)["coincide"] is True  # 5 and 12 coincide with a wide enough window


def test_report_errors_are_one_line(tmp_path):
    runner = CliRunner()
    one = runner.invoke(train_app, ["report", "--runs", str(write_run(tmp_path / "seed0", 5))])
    assert one.exit_code == 2 and one.stderr.startswith("error: give two or more runs")
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(train_app, ["report", "--runs", str(tmp_path / "seed0"), str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "no trainer_state.json log history" in empty.stderr
    single = runner.invoke(train_app, ["report", str(tmp_path / "seed0"), "--out", str(tmp_path / "c.png"), "--json"])
    assert single.exit_code == 0 and json.loads(single.stdout)["signals"]["entropy"]["min"] == 0.06
    assert (tmp_path / "c.png").is_file() and not (tmp_path / "seed0" / "run_report.json").exists()
