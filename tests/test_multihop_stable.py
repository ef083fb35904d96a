"""Issue 26 item 4: keep only questions the agent solves *stably* (the blog's 「複数回解かせ、安定して解ける問題
のみ採用」). A scripted policy solves each mini-wiki question a fixed number of its k = 4 tries (the tries are told
apart by ``ChatRequest.sample_index``): the default keeps solved ≥ half of k, ``--max-pass-rate`` below 1 also
drops the always-solved ones (zero reward variance in RL), every kept row carries ``pass_rate`` and ``k``, and bad
ranges are one line, exit 2, before any folder is written."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.core.llm import ScriptedLLM
from tansaku.core.store import StoreError, read_manifest, read_rows
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.search import build_index
from tansaku.envs.tasks import TASKS
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.multihop.solvability import agent_check, keep_rule

MINIWIKI = Path(__file__).parent / "fixtures" / "miniwiki" / "miniwiki.jsonl"
SOLVED = (4, 2, 1, 0)  # tries solved of k = 4, dealt round the questions in order
POLICY = '''import json
PLAN = json.loads({plan!r})

def respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    answer, solved = PLAN[question]
    return {{"content": "{{{{" + (answer if request.sample_index < solved else "わからない") + "}}}}"}}
'''


def _question(request) -> str:
    return next(m["content"] for m in request.messages if m["role"] == "user")


def scripted(plan: dict[str, tuple[str, int]]) -> ScriptedLLM:
    """Answers question q right on its first ``plan[q][1]`` tries, wrong on the others."""
    def respond(request):
        answer, solved = plan[_question(request)]
        return {"content": "{{" + (answer if request.sample_index < solved else "わからない") + "}}"}
    return ScriptedLLM(respond, model="scripted:stable")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The mini-wiki corpus, its index, and the no-policy build's questions with a solved count each."""
    from tansaku.pipelines.corpus.build import build_corpus

    base = tmp_path_factory.mktemp("stable")
    build_corpus(CorpusConfig(input=MINIWIKI, format="jsonl"), base / "corpus", BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    build_multihop(MultihopConfig(corpus=base / "corpus", index=base / "index"), base / "plain", BuildContext(quiet=True))
    rows = read_rows(base / "plain") + read_rows(base / "plain", "test")
    questions = sorted(rows, key=lambda r: r["question"])
    plan = {r["question"]: (r["answer"], SOLVED[i % len(SOLVED)]) for i, r in enumerate(questions)}
    assert len(plan) >= 8, "too few questions to hold every solved count twice"
    return base, plan


def build(world, out: str, **options):
    base, plan = world
    config = MultihopConfig(corpus=base / "corpus", index=base / "index", policy=scripted(plan), **options)
    manifest = build_multihop(config, base / out, BuildContext(quiet=True))
    return manifest, read_rows(base / out) + read_rows(base / out, "test")


def counts(plan) -> Counter:
    return Counter(solved for _, solved in plan.values())


def solve_stage(manifest) -> dict:
    return next(s for s in manifest["stages"] if s["name"] == "solve")


def test_default_keeps_questions_solved_at_least_half_of_k(world):
    _, plan = world
    manifest, rows = build(world, "default")
    n = counts(plan)
    assert sorted(plan[r["question"]][1] for r in rows) == sorted([4] * n[4] + [2] * n[2])
    for row in rows:
        assert row["k"] == 4 and row["pass_rate"] == plan[row["question"]][1] / 4
    assert solve_stage(manifest)["dropped"] == {"unstable": n[1], "unsolved": n[0]}
    rule = {"k": 4, "m": None, "min_pass_rate": 0.5, "max_pass_rate": 1.0, "min_solved": 2, "max_solved": 4}
    assert manifest["config"]["solvability"] == rule
    # stage params (the fingerprint): the options as given, and the solved counts they mean
    assert solve_stage(manifest)["params"] == {**rule, "min_pass_rate": None, "batch_size": 16}


def test_max_pass_rate_drops_the_always_solved(world):
    base, plan = world
    manifest, rows = build(world, "rl", max_pass_rate=0.9)
    n = counts(plan)
    assert {plan[r["question"]][1] for r in rows} == {2} and len(rows) == n[2]
    assert solve_stage(manifest)["dropped"] == {"always_solved": n[4], "unstable": n[1], "unsolved": n[0]}
    with pytest.raises(StoreError, match=r"stage 'solve' param max_pass_rate 0\.9 → 1\.0"):
        build_multihop(MultihopConfig(corpus=base / "corpus", index=base / "index", policy=scripted(plan)), base / "rl", BuildContext(quiet=True))


def test_an_explicit_m_is_a_count_of_k(world):
    _, plan = world
    manifest, rows = build(world, "m1", m=1)
    assert {plan[r["question"]][1] for r in rows} == {4, 2, 1}
    assert manifest["config"]["solvability"]["min_solved"] == 1 and manifest["config"]["solvability"]["m"] == 1


def test_agent_check_names_every_drop(world):
    base, plan = world
    questions = sorted(plan)[:4]
    local = {q: (plan[q][0], solved) for q, solved in zip(questions, (4, 3, 1, 0))}
    records = [{"chain_id": q, "question": q, "answer": local[q][0]} for q in questions]
    tools = make_environment_factory(TASKS["multihop_qa"], base / "index")
    out = agent_check(records, scripted(local), tools, TASKS["multihop_qa"], k=4, max_pass_rate=0.6)
    assert [o.reason for o in out] == ["always_solved", "too_easy", "unstable", "unsolved"]
    kept = agent_check(records, scripted(local), tools, TASKS["multihop_qa"], k=4, min_pass_rate=0.25)
    assert [o.reason if isinstance(o, Drop) else o["pass_rate"] for o in kept] == [1.0, 0.75, 0.25, "unsolved"]
    assert all(o["k"] == 4 for o in kept if not isinstance(o, Drop))


@pytest.mark.parametrize("options, message", [
    ({"min_pass_rate": 0.8, "max_pass_rate": 0.5}, "--min-pass-rate 0.8 must be <= --max-pass-rate 0.5"),
    ({"min_pass_rate": -0.1}, "--min-pass-rate must be a finite number within [0, 1], got -0.1"),
    ({"max_pass_rate": 1.5}, "--max-pass-rate must be a finite number within [0, 1], got 1.5"),
    ({"min_pass_rate": float("nan")}, "--min-pass-rate must be a finite number within [0, 1], got nan"),
    ({"m": 2, "min_pass_rate": 0.5}, "give --m (a count of --k) or --min-pass-rate (a share of it), not both"),
    ({"min_pass_rate": 0.6, "max_pass_rate": 0.7}, "keep no solved count of --k 4"),
    ({"m": 4, "max_pass_rate": 0.9}, "keep no solved count of --k 4"),
])
def test_keep_rule_refuses_bad_ranges(options, message):
    with pytest.raises(InputError) as refused:
        keep_rule(4, **options)
    assert message in str(refused.value)


def test_cli_defaults_max_pass_rate_and_bad_ranges(world, tmp_path):
    base, plan = world
    script = tmp_path / "policy.py"
    script.write_text(POLICY.format(plan=json.dumps(plan, ensure_ascii=False)), encoding="utf-8")
    args = ["build", "multihop", "--corpus", str(base / "corpus"), "--index", str(base / "index"), "-q",
            "--policy", f"scripted:{script}"]
    done = CliRunner().invoke(synth_app, [*args, "--out", str(tmp_path / "cli"), "--max-pass-rate", "0.75"])
    assert done.exit_code == 0, (done.stderr, done.exception)
    rows = read_rows(tmp_path / "cli") + read_rows(tmp_path / "cli", "test")
    assert {(r["pass_rate"], r["k"]) for r in rows} == {(0.5, 4)}
    assert read_manifest(tmp_path / "cli")["config"]["solvability"]["max_solved"] == 3
    for bad in (["--min-pass-rate", "0.9", "--max-pass-rate", "0.8"], ["--m", "1", "--min-pass-rate", "0.5"],
                ["--max-pass-rate", "2"]):
        refused = CliRunner().invoke(synth_app, [*args, "--out", str(tmp_path / "bad"), *bad])
        lines = refused.stderr.strip().splitlines()
        assert refused.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), refused.stderr
        assert not (tmp_path / "bad").exists()
