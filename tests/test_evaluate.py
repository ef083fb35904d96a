"""Evaluation on fixtures, the RL readiness check, the gold check of tasks, and the monitoring helpers."""

import json

import pytest
from fixtures.cli_checks import pid_alive
from fixtures.envs.helpers import HERE, build_fixture_index, task_rows, tool_results

from tansaku.core.llm import ScriptedLLM
from tansaku.envs.evaluate import NotReadyForRL, check_rl_readiness, pass_at_k, run_eval
from tansaku.envs.monitoring import hacking_warnings, reward_decomposition, zero_variance_share
from tansaku.envs.tasks import TASKS


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return build_fixture_index(tmp_path_factory.mktemp("envs_index"))


def half_right_model(request):
    """One search, then the right answer on even samples and a wrong one on odd samples."""
    if not tool_results(request):
        return '<think>検索する</think><tool_call>{"name": "search", "arguments": {"query": "白砂市"}}</tool_call>'
    right = {"月見坂": "白砂市", "第十九代": "黒松", "研究船": "北浜県漁業調整規則", "白砂焼": "1978年"}
    question = request.messages[1]["content"]
    answer = next(v for k, v in right.items() if k in question)
    return f"<think>答える</think>{{{{{answer if request.sample_index % 2 == 0 else '青葉市'}}}}}"


def test_run_eval_reports_and_writes_trajectories(index_dir, tmp_path):
    report = run_eval("multihop_qa", HERE / "multihop.jsonl", ScriptedLLM(half_right_model), index_dir, k=2,
                      out_dir=tmp_path, temperature=1.0)
    assert report["questions"] == 4 and report["episodes"] == 8
    assert report["pass@1"] == 0.5 and report["pass@2"] == 1.0
    assert report["mean_tool_calls"] == 1.0 and report["parse_failure_rate"] == 0.0
    assert report["rewards"]["answer_reward"] == 0.5 and report["rewards"]["format_reward"] == 1.0
    assert report["zero_variance_group_share"] == 0.0
    assert report["stop_reasons"] == {"answer": 8} and report["tool_call_distribution"] == {1: 8}
    lines = (tmp_path / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 8 and json.loads(lines[0])["messages"][2]["role"] == "assistant"
    assert all(json.loads(line)["tool_variant"] in range(4) for line in lines)  # the variant each episode showed
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["pass@2"] == 1.0
    check_rl_readiness(report)  # has signal: does not raise


def test_readiness_refuses_with_numbers_when_never_correct(index_dir):
    never = ScriptedLLM(lambda request: "<think>わからない</think>{{青葉市}}")
    report = run_eval("multihop_qa", HERE / "multihop.jsonl", never, index_dir, k=2)
    with pytest.raises(NotReadyForRL) as info:
        check_rl_readiness(report)
    message = str(info.value)
    assert "pass@2 = 0.000" in message and "zero-variance groups = 1.000" in message and "4 questions" in message


def test_readiness_refuses_when_every_group_has_zero_variance():
    report = {"task": "multihop_qa", "task_version": "1", "questions": 10, "k": 4, "pass@1": 0.5, "pass@4": 0.5,
              "mean_tool_calls": 1.0, "parse_failure_rate": 0.0, "zero_variance_group_share": 1.0}
    with pytest.raises(NotReadyForRL, match="every GRPO advantage would be 0"):
        check_rl_readiness(report)


def test_parse_failures_are_reported(index_dir):
    broken = ScriptedLLM(lambda request: "<tool_call>{oops}</tool_call>" if not tool_results(request)
                         else "{{白砂市}}")
    report = run_eval("multihop_qa", HERE / "multihop.jsonl", broken, index_dir, k=1, limit=2)
    assert report["parse_failure_rate"] == 1.0 and report["episodes_with_parse_failure"] == 1.0


def test_run_eval_closes_a_backend_it_opened_and_leaves_a_given_one_open(index_dir, monkeypatch):
    """``train select`` evaluates checkpoint after checkpoint: a backend opened from the path per call must not
    leave its worker processes behind."""
    from tansaku.envs.search.embedded import EmbeddedBackend

    opened, init = [], EmbeddedBackend.__init__

    def init_with_workers(self, *args, **kwargs):  # as if an expensive query had started its workers
        init(self, *args, **kwargs)
        self.workers().start()
        opened.append((self, self.workers().pids()))

    monkeypatch.setattr(EmbeddedBackend, "__init__", init_with_workers)
    model = ScriptedLLM(lambda request: "{{白砂市}}")
    run_eval("multihop_qa", HERE / "multihop.jsonl", model, index_dir, k=1, limit=1)
    [(backend, pids)] = opened
    assert pids and backend._workers is None and not any(pid_alive(pid) for pid in pids)
    given = EmbeddedBackend(index_dir)
    run_eval("multihop_qa", HERE / "multihop.jsonl", model, given, k=1, limit=1)
    assert given._workers is not None and all(pid_alive(pid) for pid in opened[-1][1])  # the caller's to close
    given.close()


def test_run_eval_rejects_bad_inputs(index_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown task"):
        run_eval("nope", HERE / "multihop.jsonl", ScriptedLLM(lambda r: "{{x}}"), index_dir)
    with pytest.raises(ValueError, match="lacks column"):
        run_eval("egov_mcq", HERE / "multihop.jsonl", ScriptedLLM(lambda r: "{{x}}"), index_dir)
    with pytest.raises(FileNotFoundError):
        run_eval("multihop_qa", tmp_path / "missing.jsonl", ScriptedLLM(lambda r: "{{x}}"), index_dir)


def test_pass_at_k_estimator():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 0, 5) == 0.0 and pass_at_k(10, 6, 5) == 1.0


# ---------------------------------------------------------------- gold check
def test_fixture_gold_answers_score_one():
    for name, fixture in [("multihop_qa", "multihop"), ("egov_mcq", "egov_mcq"), ("deepresearch", "deepresearch")]:
        assert TASKS[name].gold_failures(task_rows(fixture)) == []


def test_gold_check_names_bad_rows():
    rows = [
        {"question": "q", "answer": "白砂市"},
        {"question": "q", "answer": "a}}b"},  # cannot be written inside {{…}}
        {"question": "q", "answer": "白砂市", "aliases": ["北浜県白砂市", ""]},  # an empty alias can never score
        {"question": "q", "answer": ""},
    ]
    assert [i for i, _ in TASKS["multihop_qa"].gold_failures(rows)] == [1, 2, 3]
    drops = TASKS["multihop_qa"].finalize(rows)  # what a question pipeline keeps: the good row only
    assert [type(row).__name__ for row in drops] == ["dict", "Drop", "Drop", "Drop"]
    mcq = [{"question": "q", "choices": ["a", "b", "c", "d"], "answer_index": 4},
           {"question": "q", "choices": ["a", "a", "c", "d"], "answer_index": 0}]
    assert [i for i, _ in TASKS["egov_mcq"].gold_failures(mcq)] == [0]
    research = [{"instruction": "x", "rubric": []}, {"instruction": "x", "rubric": '[{"criterion": "", "weight": 1}]'}]
    assert [i for i, _ in TASKS["deepresearch"].gold_failures(research)] == [0, 1]


def test_each_task_is_its_own_class_owning_prompt_gold_and_rewards():
    from tansaku.envs.tasks import DeepResearch, EgovMCQ, MultihopQA, task_for_dataset

    assert {type(t) for t in TASKS.values()} == {MultihopQA, EgovMCQ, DeepResearch} and TASKS["egov_mcq"] == EgovMCQ()
    assert [TASKS[n].version for n in ("multihop_qa", "egov_mcq", "deepresearch")] == ["1", "1", "2"]  # scoring unchanged
    mcq = {"question": "期間は？", "choices": ["十日", "二十日", "三十日", "六十日"], "answer_index": 2}
    assert TASKS["egov_mcq"].build_prompt(mcq, 0)[1]["content"].endswith("3. 三十日\n4. 六十日")
    assert TASKS["egov_mcq"].gold_completion(mcq)[0]["content"] == "{{3}}"
    assert TASKS["multihop_qa"].gold_completion({"answer": "白砂市"})[0]["content"] == "{{白砂市}}"
    with pytest.raises(ValueError, match="rubric"):
        TASKS["deepresearch"].gold_completion({"instruction": "x"})
    with pytest.raises(ValueError, match="judge"):
        TASKS["deepresearch"].answer_reward()
    assert TASKS["multihop_qa"].answer_reward().__name__ == "answer_reward"
    assert (TASKS["deepresearch"].pass_threshold, TASKS["multihop_qa"].pass_threshold) == (0.5, 1.0)
    # which task a dataset is for: its pipeline, else the most specific task whose columns it has
    assert task_for_dataset("egov_mcq", None).name == "egov_mcq" and task_for_dataset("multihop", {}).name == "multihop_qa"
    assert task_for_dataset(None, {**mcq, "answer": "三十日"}).name == "egov_mcq"
    assert task_for_dataset(None, {"title": "x"}) is None


def test_correctness_has_the_largest_weight():
    for task in TASKS.values():
        weights = task.reward_weights
        assert max(weights, key=weights.get) == task.answer_reward_name


# ---------------------------------------------------------------- monitoring
def _history(steps, answer, tool):
    return [{"step": s, "rewards/answer_reward/mean": answer(s), "rewards/tool_call_reward/mean": tool(s),
             "tools/call_frequency": 1.0 + tool(s) * 5, "loss": 0.1} for s in range(steps)]


def test_warning_when_a_component_rises_while_correctness_is_flat():
    hacked = reward_decomposition(_history(12, answer=lambda s: 0.1, tool=lambda s: s / 12))
    warnings = hacking_warnings(hacked, "answer_reward")
    assert any(w.startswith("tool_call_reward rose") for w in warnings)
    assert any(w.startswith("tool calls per completion grew") for w in warnings)
    healthy = reward_decomposition(_history(12, answer=lambda s: s / 12, tool=lambda s: s / 12))
    assert hacking_warnings(healthy, "answer_reward") == []


def test_zh_mix_penalty_and_zero_variance_share(index_dir, tmp_path):
    from tansaku.envs.environments import make_environment_factory
    from tansaku.envs.rollout import run_rollouts

    task = TASKS["multihop_qa"]

    def model(request):
        if not tool_results(request):
            return '<think>所以我们需要搜索这个问题。</think><tool_call>{"name": "search", "arguments": {"query": "白砂市"}}' \
                   "</tool_call>"
        return "<think>答える</think>{{白砂市}}"

    trajectories = run_rollouts(ScriptedLLM(model), task, task_rows("multihop")[:2], make_environment_factory(task, index_dir))
    assert [t.tool_calls for t in trajectories] == [1, 1]
    assert [t.rewards["zh_mix_penalty"] for t in trajectories] == [-1.0, -1.0]
    assert zero_variance_share([[1.0, 1.0], [0.0, 1.0]]) == 0.5


def test_train_eval_interface_variants(index_dir, tmp_path):
    """``--interface-variants 2``: episodes draw find/read too, the demo teacher speaks them (no tool errors), the
    report breaks them out; a value that is no interface count is one line, exit 2, before any episode."""
    from pathlib import Path

    from typer.testing import CliRunner

    from tansaku.trainer.cli import train_app

    teacher = Path(__file__).resolve().parents[1] / "examples" / "teacher_script.py"
    args = ["eval", "--task", "multihop_qa", "--dataset", str(HERE / "multihop.jsonl"), "--model",
            f"scripted:{teacher}", "--index", str(index_dir), "--k", "1", "--no-cache"]
    result = CliRunner().invoke(train_app, [*args, "--interface-variants", "2", "--out", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "e" / "report.json").read_text(encoding="utf-8"))
    cells = report["by_tool_variant"]
    assert {label[-2:] for label in cells} == {"i0", "i1"} and report["tool_error_rate"] == 0.0
    for line in (tmp_path / "e" / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        names = {c["function"]["name"] for m in record["messages"] for c in m.get("tool_calls") or []}
        assert names and names <= ({"find", "read"} if record["tool_interface"] else {"search", "open_doc"})
    for bad in ("0", "3"):
        result = CliRunner().invoke(train_app, [*args, "--interface-variants", bad])
        lines = result.stderr.strip().splitlines()
        # refused while the options are parsed (tansaku.core.cli_types), naming the option as given
        assert result.exit_code == 2 and len(lines) == 1 and "--interface-variants" in lines[0], result.stderr


@pytest.mark.parametrize("options", [{"limit": -1}, {"limit": 0}, {"k": 0}])
def test_eval_options_are_checked_before_any_work(options):
    from tansaku.core.errors import InputError

    with pytest.raises(InputError, match="must be a whole number >= 1"):
        run_eval("multihop_qa", "no-such-dataset", None, None, **options)
