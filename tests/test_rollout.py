"""The rollout runner with a scripted model (every stop reason, parse failures, batching) and the tiny model."""

import json
import threading
import time

import pytest
from fixtures.envs.helpers import build_fixture_index, last_user, task_rows, tool_results

from tansaku.core.llm import ChatResult, ScriptedLLM
from tansaku.core.parsing import is_tool_error
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.tasks import TASKS


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return build_fixture_index(tmp_path_factory.mktemp("envs_index"))


def search_call(query):
    return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{query}"}}}}\n</tool_call>'


def multihop_model(request):
    """Searches the product, opens the founder's page, answers from what it read."""
    results = tool_results(request)
    if not results:
        return "<think>月見坂の製造元を調べる。</think>\n" + search_call("月見坂")
    if len(results) == 1:
        return '<think>雪村製菓の創業者は雪村清一郎。出身地を読む。</think>\n<tool_call>\n{"name": "open_doc", ' \
               '"arguments": {"doc_id": "f002"}}\n</tool_call>'
    place = "白砂市" if "白砂市出身" in results[-1] else "不明"
    return f"<think>本文に{place}出身とある。</think>\n答えは{{{{{place}}}}}です。"


def test_multihop_episode_keeps_every_step(index_dir):
    task = TASKS["multihop_qa"]
    rows = task_rows("multihop")[:1]
    [trajectory] = run_rollouts(ScriptedLLM(multihop_model), task, rows, make_environment_factory(task, index_dir))
    roles = [m["role"] for m in trajectory.completion]
    assert roles == ["assistant", "tool", "assistant", "tool", "assistant"]
    reasoning = [m["reasoning_content"] for m in trajectory.completion if m["role"] == "assistant"]
    assert reasoning == ["月見坂の製造元を調べる。", "雪村製菓の創業者は雪村清一郎。出身地を読む。", "本文に白砂市出身とある。"]
    assert trajectory.completion[0]["tool_calls"][0]["function"] == {"name": "search", "arguments": {"query": "月見坂"}}
    assert "f003" in trajectory.completion[1]["content"]
    assert trajectory.stop_reason == "answer" and trajectory.tool_calls == 2 and trajectory.parse_failures == 0
    assert trajectory.rewards == {"answer_reward": 1.0, "format_reward": 1.0, "tool_call_reward": 2 / 3,
                                  "zh_mix_penalty": 0.0}
    assert trajectory.total_reward == pytest.approx(1.0 + 0.2 + 0.2 * 2 / 3)
    record = trajectory.to_record()
    assert json.loads(json.dumps(record, ensure_ascii=False))["messages"][0]["role"] == "system"


def test_malformed_call_ends_the_episode_as_in_trl_and_is_counted(index_dir):
    """TRL's loop reads a turn with a malformed call as plain text: none of its calls run, the episode ends."""
    task = TASKS["multihop_qa"]
    text = ('<tool_call>{"name": "search", "arguments": {"query": "白砂市"}}</tool_call>'
            '<tool_call>{"name": "search", "arguments": {"query": 月見坂}}</tool_call>')
    model = ScriptedLLM(lambda request: "<think>検索</think>" + text if not tool_results(request) else "{{白砂市}}")
    [t] = run_rollouts(model, task, task_rows("multihop")[:1], make_environment_factory(task, index_dir))
    assert t.stop_reason == "parse_error" and t.parse_failures == 1 and t.tool_calls == 0 and t.turns == 1
    assert t.completion == [{"role": "assistant", "content": text, "reasoning_content": "検索"}]
    assert t.rewards["answer_reward"] == 0.0 and t.rewards["format_reward"] == 0.25


def test_unknown_tool_wrong_arguments_and_client_parsed_calls(index_dir):
    task = TASKS["multihop_qa"]
    calls = [  # as a server's tool parser sends them: wire form, arguments as JSON text
        {"id": "a", "type": "function", "function": {"name": "browse", "arguments": '{"url": "x"}'}},
        {"id": "b", "type": "function", "function": {"name": "search", "arguments": '{"q": "月見坂"}'}},
    ]

    def model(request):
        if not tool_results(request):
            return ChatResult(content="", server_reasoning="試す", server_tool_calls=calls, finish_reason="tool_calls")
        return ChatResult(content="{{白砂市}}", server_reasoning="答える", finish_reason="stop")

    [t] = run_rollouts(ScriptedLLM(model), task, task_rows("multihop")[:1], make_environment_factory(task, index_dir))
    results = [m["content"] for m in t.completion if m["role"] == "tool"]
    # Exactly TRL's tool loop: str({"error": str(exception)}) for an unknown tool or wrong argument names.
    assert results == ["{'error': 'Tool browse not found.'}",
                       str({"error": "search() got an unexpected keyword argument 'q'"})]
    assert all(is_tool_error(r) for r in results)
    assert (t.tool_calls, t.tool_errors, t.parse_failures) == (2, 2, 0)
    assert t.rewards["tool_call_reward"] == 0.0

    # A server-parsed call that is broken (no name, arguments not JSON) is validated strictly, never repaired.
    broken = [calls[0], {"type": "function", "function": {"name": "", "arguments": "{broken"}}]
    [t] = run_rollouts(ScriptedLLM(lambda r: ChatResult(server_tool_calls=broken, finish_reason="tool_calls")),
                       task, task_rows("multihop")[:1], make_environment_factory(task, index_dir))
    assert (t.stop_reason, t.tool_calls, t.parse_failures) == ("parse_error", 0, 1)
    assert t.completion[0]["content"].count("<tool_call>") == 2  # the whole turn kept as text, as TRL keeps it


def test_a_raising_tool_is_shown_as_trl_shows_it_and_counted(index_dir):
    """Unknown tool, wrong argument, bad doc id, bad size, past-the-end offset, then budget: each fails as in
    TRL (the environment raises ToolError; the runner writes TRL's {'error': …} content), counted as tool
    errors, and only the good call earns reward."""
    from dataclasses import replace

    task = replace(TASKS["multihop_qa"], max_tool_calls=4)
    calls = ['{"name": "browse", "arguments": {"url": "x"}}',  # unknown tool: no environment call
             '{"name": "search", "arguments": {"q": "月見坂"}}',  # wrong argument name: TypeError
             '{"name": "open_doc", "arguments": {"doc_id": "nope"}}',
             '{"name": "search", "arguments": {"query": "白砂市", "size": 99}}',
             '{"name": "open_doc", "arguments": {"doc_id": "f002", "offset": 100000}}',
             '{"name": "search", "arguments": {"query": "白砂市"}}',
             '{"name": "search", "arguments": {"query": "月見坂"}}']

    def model(request):
        done = len(tool_results(request))
        if done < len(calls):
            return f"<think>試す</think><tool_call>{calls[done]}</tool_call>"
        return "<think>答える</think>{{白砂市}}"

    [t] = run_rollouts(ScriptedLLM(model), task, task_rows("multihop")[:1], make_environment_factory(task, index_dir),
                       max_turns=8)
    results = [m["content"] for m in t.completion if m["role"] == "tool"]
    assert results[:2] == ["{'error': 'Tool browse not found.'}",  # what TRL writes, word for word
                           str({"error": "search() got an unexpected keyword argument 'q'"})]
    results = results[2:]
    assert results[0] == str({"error": "no document with doc_id 'nope'. Use a doc_id from the search results."})
    assert results[1] == "{'error': 'size must be between 1 and 10.'}"
    assert results[2].startswith("{'error': 'offset 100000 is past the end")
    assert "doc_id: " in results[3] and not is_tool_error(results[3])
    assert results[4] == "{'error': 'tool call budget of 4 calls is used up; answer now.'}"
    assert (t.tool_calls, t.tool_errors) == (7, 6)
    assert t.rewards["tool_call_reward"] == pytest.approx(1 / 3)  # one distinct successful call of cap 3


def test_every_episode_shows_and_records_its_own_description_variant(index_dir):
    """Tool-description augmentation through the runner: 40 rows → several variants in the schemas the model
    receives; each episode's requests carry exactly its recorded variant's descriptions."""
    from tansaku.envs.tools import OPEN_SUMMARIES, SEARCH_SUMMARIES

    task = TASKS["multihop_qa"]
    rows = [{"id": f"r{i}", "question": f"白砂市の質問{i}", "answer": "白砂市"} for i in range(40)]
    seen: dict[str, list] = {}

    def model(request):
        question = request.messages[1]["content"]
        seen.setdefault(question, []).append(request.tools)
        if not tool_results(request):
            return "<think>検索</think>" + search_call("白砂市")
        return "<think>答える</think>{{白砂市}}"

    trajectories = run_rollouts(ScriptedLLM(model), task, rows, make_environment_factory(task, index_dir))
    variants = [t.tool_variant for t in trajectories]
    assert len(set(variants)) > 1
    for row, t in zip(rows, trajectories):
        for tools in seen[row["question"]]:  # every turn of the episode
            described = {s["function"]["name"]: s["function"]["description"] for s in tools}
            assert described == {"search": SEARCH_SUMMARIES[t.tool_variant], "open_doc": OPEN_SUMMARIES[t.tool_variant]}
        assert t.to_record()["tool_variant"] == t.tool_variant and "tools" not in t.to_record()
    shown = {s["function"]["description"] for tools_list in seen.values() for tools in tools_list for s in tools}
    assert len(shown & set(SEARCH_SUMMARIES)) > 1
    again = run_rollouts(ScriptedLLM(model), task, rows, make_environment_factory(task, index_dir), score=False)
    assert [t.tool_variant for t in again] == variants  # stable per row and seed
    other = run_rollouts(ScriptedLLM(model), task, rows, make_environment_factory(task, index_dir, seed=1),
                         score=False)
    assert [t.tool_variant for t in other] != variants


def test_a_shared_environment_instance_is_refused(index_dir):
    task = TASKS["multihop_qa"]
    with pytest.raises(TypeError, match="environment factory"):
        run_rollouts(ScriptedLLM(multihop_model), task, task_rows("multihop")[:1],
                     make_environment_factory(task, index_dir)())


def test_stop_reasons_llm_error_max_turns_max_tokens(index_dir):
    task = TASKS["multihop_qa"]
    rows = [{"question": "ずっと検索する", "answer": "x"}, {"question": "途中で壊れる", "answer": "x"},
            {"question": "長すぎる", "answer": "x"}]

    def model(request):
        question = request.messages[1]["content"]
        if question == "途中で壊れる" and tool_results(request):
            raise RuntimeError("server died")
        if question == "長すぎる":
            return ChatResult(content="<think>とても長い考え", finish_reason="length")
        return "<think>もう一度</think>" + search_call(f"白砂市 {len(tool_results(request))}")

    trajectories = run_rollouts(ScriptedLLM(model), task, rows, make_environment_factory(task, index_dir), max_turns=4)
    assert [t.stop_reason for t in trajectories] == ["max_turns", "llm_error", "max_tokens"]
    assert trajectories[0].tool_calls == 4 and trajectories[0].rewards["tool_call_reward"] == 1.0
    assert "server died" in trajectories[1].error and len(trajectories[1].completion) == 2  # first step kept
    assert trajectories[2].completion[0]["reasoning_content"] == "とても長い考え"
    assert all(t.rewards["answer_reward"] == 0.0 for t in trajectories)


def _nested_dict(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def _server_call(arguments) -> ChatResult:
    return ChatResult(content="", server_tool_calls=[{"type": "function",
                                                      "function": {"name": "search", "arguments": arguments}}])


@pytest.mark.parametrize("response", [
    _server_call("[" * 50_000 + "]" * 50_000),  # RecursionError in json.loads before issue 28
    _server_call(_nested_dict(50_000)),  # RecursionError in json.dumps
    {"content": 5},  # AttributeError: 'int' object has no attribute 'replace'
    {"content": "", "reasoning": ["考える"]},
    {"tool_calls": 5},
], ids=["deep_text_arguments", "deep_dict_arguments", "int_content", "list_reasoning", "int_tool_calls"])
def test_a_malformed_response_is_a_counted_parse_failure_not_a_crash(index_dir, response):
    task = TASKS["multihop_qa"]
    [t] = run_rollouts(ScriptedLLM(lambda request: response), task, task_rows("multihop")[:1],
                       make_environment_factory(task, index_dir))
    assert t.stop_reason == "parse_error" and t.parse_failures == 1 and t.tool_calls == 0 and t.turns == 1
    assert t.rewards["answer_reward"] == 0.0
    json.dumps(t.to_record(), ensure_ascii=False).encode("utf-8")  # the record is storable as it is


def test_a_lone_surrogate_in_model_output_is_read_as_the_replacement_character(index_dir):
    """A server's JSON may carry ``"\\ud800"``; it reached a UTF-8 encoder (the cache key, the record file)."""
    task = TASKS["multihop_qa"]
    calls = [{"type": "function", "function": {"name": "search", "arguments": '{"query": "\\ud800月見坂"}'}}]

    def model(request):
        if not tool_results(request):
            return ChatResult(content="<think>\ud800</think>", server_tool_calls=calls)
        return '<tool_call>{"name": "open_doc", "arguments": {"doc_id": "\\udc00"}}</tool_call>' \
            if len(tool_results(request)) == 1 else "{{白砂市\udfff}}"

    [t] = run_rollouts(ScriptedLLM(model), task, task_rows("multihop")[:1], make_environment_factory(task, index_dir))
    assert t.stop_reason == "answer" and t.tool_calls == 2 and t.parse_failures == 0
    assert t.completion[0]["reasoning_content"] == "\ufffd"
    assert t.completion[0]["tool_calls"][0]["function"]["arguments"] == {"query": "\ufffd月見坂"}
    assert t.completion[2]["tool_calls"][0]["function"]["arguments"] == {"doc_id": "\ufffd"}
    assert t.completion[-1]["content"] == "{{白砂市\ufffd}}"
    json.dumps(t.to_record(), ensure_ascii=False).encode("utf-8")


def test_one_batched_chat_call_per_turn(index_dir):
    task = TASKS["multihop_qa"]
    client = ScriptedLLM(multihop_model)
    batch_sizes = []
    original = client.chat
    client.chat = lambda requests: (batch_sizes.append(len(requests)), original(requests))[1]
    rows = task_rows("multihop")
    trajectories = run_rollouts(client, task, rows, make_environment_factory(task, index_dir), k=3, temperature=1.0)
    assert batch_sizes == [12, 12, 12]
    assert [(t.row_index, t.sample_index) for t in trajectories][:4] == [(0, 0), (0, 1), (0, 2), (1, 0)]


class SlottedLLM(ScriptedLLM):
    """A scripted model behind 'server slots' (as an HTTP client has): the first episode's first answer is held
    until 10 later turns of other episodes have been sent, or 20 s pass (a client that makes episodes wait for
    each other's turns holds it the full 20 s; a fixed sleep would test the machine's speed instead); the turns
    each request started during are recorded."""

    slots = 8

    def __init__(self, respond):
        super().__init__(respond)
        self.lock, self.events = threading.Lock(), []

    def chat(self, requests):
        first_turn_of_slow = len(requests) == 1 and requests[0].sample_index == 0 and \
            last_user(requests[0]).endswith(ROW0_END) and not tool_results(requests[0])
        with self.lock:
            self.events.append(("sent", len(tool_results(requests[0])), first_turn_of_slow))
        if first_turn_of_slow:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self._later_turns_sent() < 10:
                time.sleep(0.01)
        return super().chat(requests)

    def _later_turns_sent(self) -> int:
        with self.lock:
            return sum(1 for e in self.events if e[1] >= 1)


ROW0_END = task_rows("multihop")[0]["question"][-8:]


def test_with_server_slots_each_episode_runs_its_own_turns(index_dir):
    """An HTTP-like client: episodes do not wait for each other's turns (the slow episode's first answer is
    still out while the others send their later turns), and the trajectories equal the batched loop's."""
    task = TASKS["multihop_qa"]
    rows = task_rows("multihop")
    env = make_environment_factory(task, index_dir)
    slotted = SlottedLLM(multihop_model)
    concurrent = run_rollouts(slotted, task, rows, env, k=3, temperature=1.0)
    batched = run_rollouts(ScriptedLLM(multihop_model), task, rows, env, k=3, temperature=1.0)
    assert [t.to_record() for t in concurrent] == [t.to_record() for t in batched]
    slow_at = next(i for i, e in enumerate(slotted.events) if e[2])
    later_turns_meanwhile = [e for e in slotted.events[slow_at + 1:] if e[1] >= 1]
    assert len(later_turns_meanwhile) >= 10, slotted.events


def test_egov_and_deepresearch_tasks_run_through_the_runner(index_dir):
    egov = TASKS["egov_mcq"]

    def mcq_model(request):
        if not tool_results(request):
            return "<think>条例を検索する。</think>" + search_call("北浜県文化財保護条例")
        assert "1. " in last_user(request) and "4. " in last_user(request)
        return "<think>第七条は管理義務。</think>{{2}}"

    rows = task_rows("egov_mcq")
    trajectories = run_rollouts(ScriptedLLM(mcq_model), egov, rows, make_environment_factory(egov, index_dir))
    assert [t.rewards["mcq_reward"] for t in trajectories] == [1.0, 1.0, 0.0]

    research = TASKS["deepresearch"]
    report = ("## 白砂市の観光\n白砂海岸（f013）は夏に海水浴客で賑わい、青葉鉄道白砂線の臨時列車で訪れることができる。"
              "十月には港町大漁祭り（f014）が開かれる。" * 3)

    def research_model(request):
        if not tool_results(request):
            return "<think>観光資源を探す。</think>" + search_call("白砂市 観光")
        return f"<think>まとめる。</think>{report}"

    judge = ScriptedLLM(lambda request: '{"scores": [1, 1, 1, 1]}' if "4 項目" in last_user(request)
                        else '{"scores": [1, 0, 1]}')
    trajectories = run_rollouts(ScriptedLLM(research_model), research, task_rows("deepresearch"),
                                make_environment_factory(research, index_dir), judge=judge)
    assert [t.rewards["rubric_reward"] for t in trajectories] == [1.0, 0.75]
    assert all(t.rewards["format_reward"] == 1.0 for t in trajectories)


@pytest.mark.slow
def test_tiny_model_tool_loop_mechanics(index_dir, tiny_model_path):
    from tansaku.core.llm import from_spec

    task = TASKS["multihop_qa"]
    client = from_spec(f"transformers:{tiny_model_path}", cache=False)
    trajectories = run_rollouts(client, task, task_rows("multihop")[:2], make_environment_factory(task, index_dir),
                                k=2, max_turns=3, max_tokens=48, temperature=1.0)
    assert len(trajectories) == 4
    for t in trajectories:
        assert t.stop_reason in {"answer", "max_turns", "max_tokens"}, t.error
        assert t.turns >= 1 and t.completion[0]["role"] == "assistant"
        assert set(t.rewards) == set(task.reward_weights)
        assert 0.0 <= t.rewards["tool_call_reward"] <= 1.0
