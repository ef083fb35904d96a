"""``train eval --task mt_bench`` (envs/mt_bench*.py, trainer/mt_bench_cli.py): strict verdict parsing, the
judge's requests (reference shown for math), single-answer grading through the installed CLI with a scripted
judge and with the canned OpenAI-compatible server over HTTP, pairwise grading with the position swap, the
before/after table, generation by the tiny model with and without the agentic system prompt (slow), and the
shared Japanese MT-Bench answers of a real model (realdata).

The default suite reads the fictional fixture ``tests/fixtures/mt_bench`` (4 questions, 3 categories, a math
reference); its scripted judges are ``tests/fixtures/mt_bench/judges.py``.

Run: pytest tests/test_mt_bench.py -m "not slow"      (the tiny-model generation: -m slow -k tiny)
     pytest tests/test_mt_bench.py -m realdata         (../shared/data/ja_mt_bench)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tansaku.core.errors import InputError
from tansaku.envs.mt_bench import (
    judge_requests,
    load_answers,
    load_questions,
    load_references,
    parse_rating,
    parse_verdict,
)
from tansaku.envs.mt_bench_prompts import judge_prompts
from tansaku.envs.mt_bench_score import pair_outcomes, summarize_scores, t_interval

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "mt_bench"
JUDGES = FIXTURE / "judges.py"
ANSWERS_A, ANSWERS_B = FIXTURE / "model_answer" / "model-a.jsonl", FIXTURE / "model_answer" / "model-b.jsonl"
SHARED = ROOT.parent / "shared" / "data" / "ja_mt_bench"
TRAIN = Path(sys.executable).with_name("train")


def train(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "TANSAKU_QUIET": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(TRAIN), *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, (args, done.stderr[-2000:])
    return done


def report_of(out: Path) -> dict:
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "text, rating",
    [
        ("Rating: [[8]]", 8),
        ("[[10]]", 10),
        ("[[ 3 ]]", 3),
        ("[[rating]] の形で: [[4]]", 4),
        ("[[0]]", None),
        ("[[11]]", None),
        ("[[7.5]]", None),
        ("[[7]] [[7]]", None),
        ("8/10", None),
        ("", None),
        (None, None),
    ],
)
def test_a_rating_is_one_whole_number_from_1_to_10_or_nothing(text, rating):
    assert parse_rating(text) == rating


def test_a_pairwise_verdict_is_exactly_one_of_a_b_c():
    assert [parse_verdict(t) for t in ("[[A]]", "x [[C]] y", "[[A]] [[B]]", "[[D]]", "A is better")] == [
        "A",
        "C",
        None,
        None,
        None,
    ]


def test_the_judge_sees_the_reference_for_math_and_the_whole_conversation_on_turn_two():
    questions = load_questions(FIXTURE)
    references = load_references(FIXTURE, questions)
    assert list(references) == [2]  # only the math question needs one
    _, answers = load_answers(ANSWERS_A)
    requests = judge_requests(judge_prompts(None), questions, answers, references)
    roles = {(item["question_id"], item["turn"]): role for item, role, _ in requests}
    assert roles[(2, 1)] == "single-math-v1" and roles[(2, 2)] == "single-math-v1-multi-turn"
    assert roles[(1, 1)] == "single-v1" and roles[(3, 2)] == "single-v1-multi-turn"
    math_turn_2 = next(r for item, _, r in requests if (item["question_id"], item["turn"]) == (2, 2))
    text = math_turn_2.messages[-1]["content"]
    assert "12−5=7" in text and "りんごが3個" in text and "7個です。採点不能" in text
    assert math_turn_2.temperature == 0.0 and math_turn_2.messages[0]["role"] == "system"


def test_a_judge_prompt_file_in_the_harness_format_replaces_tansakus_own():
    prompts = judge_prompts(FIXTURE / "judge_prompts.jsonl")
    _, answers = load_answers(ANSWERS_A)
    questions = load_questions(FIXTURE)
    requests = judge_requests(prompts, questions, answers, load_references(FIXTURE, questions))
    assert all(r.messages[0]["content"].startswith("FIXTURE JUDGE") for _, _, r in requests)
    assert prompts["version"].startswith("sha256:")


def test_a_judge_prompt_file_missing_a_role_is_refused(tmp_path):
    lines = (FIXTURE / "judge_prompts.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "p.jsonl").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="pair-math-v1-multi-turn"):
        judge_prompts(tmp_path / "p.jsonl")


def test_unreadable_verdicts_are_counted_and_left_out_of_the_mean():
    records = [
        {"category": "math", "turn": 1, "score": 4, "status": "ok"},
        {"category": "math", "turn": 2, "score": None, "status": "unreadable"},
        {"category": "stem", "turn": 1, "score": 8, "status": "ok"},
        {"category": "stem", "turn": 2, "score": None, "status": "error"},
    ]
    summary = summarize_scores(records)
    assert summary["overall"] == {**t_interval([4, 8]), "graded": 4, "unreadable": 1, "errors": 1}
    assert summary["categories"]["math"]["mean"] == 4 and summary["turns"]["2"]["n"] == 0


def test_cli_grades_fixture_answers_with_a_scripted_judge(tmp_path):
    out = tmp_path / "mt"
    done = train(
        "eval",
        "--task",
        "mt_bench",
        "--dataset",
        FIXTURE,
        "--answers",
        ANSWERS_A,
        "--judge",
        f"scripted:{JUDGES}",
        "--out",
        out,
        "--json",
    )
    report = json.loads(done.stdout)
    assert report == report_of(out)
    assert report["graded"] == 8 and report["unreadable"] == 2 and report["judge_errors"] == 0
    summary = report["conditions"]["answers"]
    assert sorted(summary["categories"]) == ["math", "stem", "writing"]
    assert summary["overall"]["n"] == 6 and summary["turns"]["2"]["unreadable"] == 2
    judgments = [
        json.loads(line) for line in (out / "judgments.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(judgments) == 8 and {j["status"] for j in judgments} == {"ok", "unreadable"}
    assert all(j["judgment"] for j in judgments)  # the judge's texts are kept
    _, kept = load_answers(out / "answers" / "answers.jsonl")  # reusable as --answers
    assert kept == load_answers(ANSWERS_A)[1]
    assert (out / "tansaku_eval.json").is_file() and report["judge_usage"]["cost"] == 0


def test_cli_judges_over_http_with_the_canned_server(tmp_path):
    from tansaku.testing.canned_server import ServerThread, load_responder

    out = tmp_path / "mt-http"
    with ServerThread("judge", responder=load_responder(f"{JUDGES}:respond")) as url:
        done = train(
            "eval",
            "--task",
            "mt_bench",
            "--dataset",
            FIXTURE,
            "--answers",
            ANSWERS_A,
            "--judge",
            f"http:judge@{url}",
            "--no-cache",
            "--out",
            out,
            "--judge-price-out",
            "2",
            "--judge-price-in",
            "1",
            "--json",
        )
    report = json.loads(done.stdout)
    assert report["graded"] == 8 and report["unreadable"] == 2
    usage = report["judge_usage"]
    # the canned server reports 1 prompt token per request: both prices apply
    assert usage["completion_tokens"] > 0 and usage["prompt_tokens"] == usage["requests"]
    assert usage["cost"] == pytest.approx((usage["prompt_tokens"] * 1 + usage["completion_tokens"] * 2) / 1e6)
    assert report["judge"]["backend"] == "http"


def test_pairwise_swaps_positions_so_a_position_biased_judge_decides_nothing(tmp_path):
    biased = train(
        "eval",
        "--task",
        "mt_bench",
        "--dataset",
        FIXTURE,
        "--answers",
        ANSWERS_A,
        "--pairwise",
        ANSWERS_B,
        "--judge",
        f"scripted:{JUDGES}:always_a",
        "--json",
    )
    overall = json.loads(biased.stdout)["conditions"]["answers"]["overall"]
    assert overall["pairs"] == 8 and overall["inconsistent"] == 8 and overall["win"] == overall["loss"] == 0
    assert overall["win_rate"] == 0 and overall["win_rate_adjusted"] == 0.5
    fair = train(
        "eval",
        "--task",
        "mt_bench",
        "--dataset",
        FIXTURE,
        "--answers",
        ANSWERS_A,
        "--pairwise",
        ANSWERS_B,
        "--judge",
        f"scripted:{JUDGES}:prefers_polite",
        "--json",
    )
    report = json.loads(fair.stdout)
    assert report["mode"] == "pairwise" and report["graded"] == 16  # 4 questions × 2 turns × 2 games
    overall = report["conditions"]["answers"]["overall"]
    assert overall["win"] == 8 and overall["win_rate"] == 1.0


def test_one_unreadable_game_makes_the_pair_unreadable():
    records = [
        {"question_id": 1, "turn": 1, "category": "x", "game": 1, "verdict": "A"},
        {"question_id": 1, "turn": 1, "category": "x", "game": 2, "verdict": None},
        {"question_id": 2, "turn": 1, "category": "x", "game": 1, "verdict": "C"},
        {"question_id": 2, "turn": 1, "category": "x", "game": 2, "verdict": "C"},
    ]
    assert [o["outcome"] for o in pair_outcomes(records)] == ["unreadable", "tie"]


def test_baselines_give_one_table_with_retention(tmp_path):
    args = ["eval", "--task", "mt_bench", "--dataset", FIXTURE, "--judge", f"scripted:{JUDGES}"]
    train(*args, "--answers", ANSWERS_A, "--out", tmp_path / "before")
    after = json.loads(
        train(
            *args,
            "--answers",
            ANSWERS_B,
            "--out",
            tmp_path / "after",
            "--baseline",
            tmp_path / "before",
            "--json",
        ).stdout
    )
    first, last = after["retention"]
    assert first["retention_answers"] == 1.0 and last["label"] == "this run"
    expected = after["conditions"]["answers"]["overall"]["mean"] / first["answers"]
    assert last["retention_answers"] == pytest.approx(expected, abs=1e-3)


def test_mt_bench_refuses_search_options_and_a_missing_judge(tmp_path):
    env = {**os.environ, "TANSAKU_QUIET": "1"}
    base = [str(TRAIN), "eval", "--task", "mt_bench", "--dataset", str(FIXTURE), "--answers", str(ANSWERS_A)]
    for extra, message in (
        ([], "--judge"),
        (["--judge", f"scripted:{JUDGES}", "--index", str(tmp_path)], "--index"),
    ):
        done = subprocess.run(base + extra, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.slow
def test_tiny_model_answers_with_and_without_the_agentic_system_prompt(tmp_path):
    from tansaku.envs.mt_bench_eval import run_mt_bench

    report = run_mt_bench(
        FIXTURE,
        model="transformers:tiny",
        judge=f"scripted:{JUDGES}",
        limit=2,
        max_tokens=12,
        out_dir=tmp_path / "tiny",
    )
    assert sorted(report["conditions"]) == ["agentic", "plain"]
    assert report["graded"] == 8 and all(u["requests"] == 4 for u in report["generation"].values())
    plain = [json.loads(x) for x in (tmp_path / "tiny" / "answers" / "plain.jsonl").read_text().splitlines()]
    assert len(plain) == 2 and all(len(r["choices"][0]["turns"]) == 2 for r in plain)


@pytest.mark.realdata
@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent (no shared data)")
def test_shared_gpt35_answers_graded_by_a_scripted_judge(tmp_path):
    out = tmp_path / "mt-real"
    report = json.loads(
        train(
            "eval",
            "--task",
            "mt_bench",
            "--dataset",
            SHARED,
            "--answers",
            SHARED / "model_answer" / "gpt-3.5-turbo.jsonl",
            "--judge",
            f"scripted:{JUDGES}:sometimes_unreadable",
            "--out",
            out,
            "--json",
        ).stdout
    )
    summary = report["conditions"]["answers"]
    assert report["questions"] == 80 and report["graded"] == 160 and len(summary["categories"]) == 8
    assert report["unreadable"] > 0 and summary["overall"]["n"] == 160 - report["unreadable"]
    roles = {json.loads(line)["prompt"] for line in (out / "judgments.jsonl").read_text().splitlines()}
    assert roles == {"single-v1", "single-math-v1", "single-v1-multi-turn", "single-math-v1-multi-turn"}


@pytest.mark.parametrize("option, value", [("--answers", "answers.jsonl"), ("--pairwise", "scripted:x.jsonl"),
                                           ("--judge-price-in", "2")])
def test_mt_bench_options_with_another_task_are_refused_naming_the_option(option, value, tmp_path):
    """Given with a search task, an MT-Bench option would be silently ignored: refused, one line, exit 2."""
    (tmp_path / "answers.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "x.jsonl").write_text("", encoding="utf-8")
    done = subprocess.run([str(TRAIN), "eval", "--task", "multihop_qa", "--dataset", str(tmp_path),
                           "--model", "scripted:x.jsonl", option, value], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 2 and f"{option} is for --task mt_bench" in done.stderr
