"""Search-health signals (``tansaku.envs.search_health``), the evidence-grounding reward
(``tansaku.envs.grounding``), and both where they are reported: ``train eval``'s report, ``train rl``'s
per-step log and its curves.

Run: pytest tests/test_search_health.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tansaku.envs.grounding import grounded_answer_reward
from tansaku.envs.reward_registry import REWARDS, make_reward
from tansaku.envs.rewards import answer_reward
from tansaku.envs.search_health import STEP_METRICS, episode_health, health_summary, step_metrics

ROOT = Path(__file__).resolve().parents[1]
ENV_FIXTURES = ROOT / "tests" / "fixtures" / "envs"


def _call(name: str, **arguments) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def _episode(*steps, answer: str | None = None) -> list[dict]:
    """Messages of one episode: (call, result) pairs, then the final answer."""
    messages = []
    for call, result in steps:
        messages += [call, {"role": "tool", "content": result}]
    if answer is not None:
        messages.append({"role": "assistant", "content": f"<think>答える。</think>{{{{{answer}}}}}"})
    return messages


HIT = "1. [d7] 白砂市 — 月見坂を作る雪村製菓の創業者は白砂市の出身"
PAGE = "[d7] 雪村製菓の創業者、雪村清一郎は北浜県 白砂市に生まれた。"
GUESS = _episode(answer="白砂市")
READ = _episode((_call("search", query="月見坂 創業者"), HIT), (_call("open_doc", doc_id="d7"), PAGE), answer="白砂市")
REPEATS = _episode((_call("search", query="月見坂"), "No results."), (_call("search", query="月見坂 "), "No results."),
                   (_call("search", query="創業者"), "{'error': 'budget'}"), answer="東京")


def test_each_episode_reads_searches_repeats_opens_and_evidence():
    read, repeats, guess = episode_health(READ), episode_health(REPEATS), episode_health(GUESS)
    assert (read.searches, read.opens, read.opened_before_answer, read.grounded) == (1, 1, True, True)
    assert (repeats.searches, repeats.distinct_queries, repeats.repeated_queries) == (3, 2, 1)  # "月見坂 " = "月見坂"
    assert repeats.answer == "東京" and not repeats.grounded  # an error result is no evidence
    assert (guess.searches, guess.answer, guess.grounded) == (0, "白砂市", False)
    find = episode_health(_episode((_call("find", keywords=["月見坂", "創業者"]), HIT), answer="白砂市"))
    assert find.searches == 1 and find.queries == ["月見坂創業者"] and find.grounded  # interface 1 counts too


def test_the_batch_summary_is_a_distribution_not_only_a_mean():
    summary = health_summary([READ, REPEATS, GUESS, [{"role": "assistant", "content": "わからない"}]])
    searches = summary["searches_per_episode"]
    assert searches["counts"] == {0: 2, 1: 1, 3: 1} and searches["mean"] == 1.0 and searches["max"] == 3
    assert searches["share_0"] == 0.5 and searches["share_1"] == 0.25 and searches["share_2_plus"] == 0.25
    assert summary["answered_share"] == 0.75  # three answered: READ, REPEATS, GUESS
    assert summary["grounded_answer_share"] == 1 / 3 and summary["answered_without_search_share"] == 1 / 3
    assert summary["open_before_answer_share"] == 1 / 3
    assert summary["distinct_query_ratio"] == (1 + 2 / 3) / 2 and summary["episodes_repeating_a_query"] == 0.25
    metrics = step_metrics([READ, REPEATS, GUESS])
    assert set(metrics) == set(STEP_METRICS) and all(isinstance(v, float) for v in metrics.values())
    assert step_metrics([[{"role": "assistant", "content": "…"}]]).get("grounded_answer_share") is None  # not 0


def test_a_correct_guess_without_evidence_scores_lower_than_a_grounded_answer():
    answers = ["白砂市"] * 3
    assert answer_reward([GUESS, READ, REPEATS], answer=answers) == [1.0, 1.0, 0.0]  # the answer reward is blind
    assert grounded_answer_reward([GUESS, READ, REPEATS], answer=answers) == [0.0, 1.0, 0.0]
    # aliases and Japanese normalization as the answer reward: 北浜県白砂市 is in the page as "北浜県 白砂市"
    alias = _episode((_call("open_doc", doc_id="d7"), PAGE), answer="「北浜県白砂市」")
    assert grounded_answer_reward([alias], answer=["白砂市"], aliases=[["北浜県白砂市"]]) == [1.0]
    assert "grounded_answer_reward" in REWARDS
    assert make_reward(None, "grounded_answer_reward")([READ], answer=["白砂市"]) == [1.0]


def test_hostile_inputs_score_without_raising():
    junk = [None, "", "{{}}", [{"role": "tool"}], [{"role": "assistant", "content": None, "tool_calls": "x"}],
            [_call("search", query={"bool": {"must": []}}), {"role": "tool", "content": "x" * 100_000}]]
    assert grounded_answer_reward(junk, answer=[None, "", "a", 1, "b", "x"]) == [0.0] * len(junk)
    assert health_summary(junk)["episodes"] == len(junk) and health_summary([])["answered_share"] is None


def test_train_eval_reports_the_signals(tmp_path, envs_index):
    from tansaku.envs.evaluate import run_eval

    report = run_eval("multihop_qa", ENV_FIXTURES / "multihop.jsonl",
                      f"scripted:{ENV_FIXTURES / 'band_policy.py'}", envs_index, k=2, limit=3,
                      out_dir=tmp_path / "eval")
    health = report["search_health"]
    assert health["episodes"] == report["episodes"] == 6
    assert sum(health["searches_per_episode"]["counts"].values()) == 6
    written = json.loads((tmp_path / "eval" / "report.json").read_text(encoding="utf-8"))
    assert written["search_health"]["searches_per_episode"] == json.loads(json.dumps(health))["searches_per_episode"]
    trajectories = [json.loads(line) for line in (tmp_path / "eval" / "trajectories.jsonl").open(encoding="utf-8")]
    completions = [t["messages"][t["n_prompt_messages"]:] for t in trajectories]
    assert health_summary(completions) == health  # the report is the signals of the episodes it wrote


def test_logged_search_health_is_drawn_with_the_reward_curves(tmp_path):
    from tansaku.trainer.curves import learning_curves_figure
    from tansaku.trainer.report import run_report

    history = [{"step": s, "loss": 0.1, "reward": 0.5, "rewards/answer_reward/mean": 0.5,
                **{f"search_health/{k}": 0.5 for k in STEP_METRICS}} for s in (1, 2)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}), encoding="utf-8")
    report = run_report(tmp_path)
    assert report["per_step"][0]["signals"]["search_health/grounded_answer_share"] == 0.5
    labels = {t for ax in learning_curves_figure(report).axes for t in ax.get_legend_handles_labels()[1]}
    assert {"distinct-query ratio", "answer in retrieved text", "answered without a search"} <= labels
