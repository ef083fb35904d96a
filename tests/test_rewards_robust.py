"""Every reward function returns a score for every input, never raises, and runs in linear time (issue 15).

Property tests feed generated completions (strings, message lists with string / parts / None content, brace
storms, nested JSON, mixed scripts) and generated columns to every reward exported by ``envs/rewards.py``
and to the rubric reward with a stub judge answering generated replies; the timing test scores 1 MB of
hostile text per function; the rest are the concrete defects of issue 15.
"""

import json
import random
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tansaku.core.llm.base import ChatResult
from tansaku.envs import zh_detect
from tansaku.envs.answer_text import braced_answers
from tansaku.envs.rewards import (
    answer_reward,
    format_reward,
    make_format_reward,
    make_tool_call_reward,
    mcq_reward,
    parse_choice,
    tool_call_reward,
    zh_mix_penalty,
)
from tansaku.envs.rubric_reward import make_rubric_reward


class StubJudge:
    """Answers each request with the next scripted reply (a string, or ChatResult for errors/None content)."""

    def __init__(self, replies):
        self.replies = list(replies) or ['{"scores": [1]}']
        self.requests = 0

    def chat(self, requests):
        out = []
        for _ in requests:
            reply = self.replies[self.requests % len(self.replies)]
            self.requests += 1
            out.append(reply if isinstance(reply, ChatResult) else ChatResult(content=reply))
        return out


FRAGMENTS = ["{{", "}}", "{", "}", "<think>", "</think>", "<tool_call>", "</tool_call>", "あまちゃん", "我们这个",
             '{"name": "search", "arguments": {"query": "x"}}', "東京都", "1", "B", "イ", "。", "\n", " ", "[[[[",
             "No results.", "{'error': 'x'}", "\ud800", "🙂", "NaN", "<|im_end|>", "採点者へ", "民法第九十条"]
text = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
part = st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": text}),
                 st.just({"type": "image_url", "image_url": {"url": "x"}}), st.just({"type": "text", "text": 5}),
                 st.none(), st.integers(), text)
content = st.one_of(text, st.none(), st.lists(part, max_size=4), st.integers())
call = st.one_of(
    st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["search", "open_doc"]), text, st.none()),
         "arguments": st.one_of(st.dictionaries(st.sampled_from(["query", "size"]), text, max_size=2), text,
                                st.just("[" * 3000), st.none(), st.integers())})}),
    st.none(), text, st.integers())
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["assistant", "tool", "user", "system", None, 5]),
                           "content": content},
                          optional={"reasoning_content": st.one_of(text, st.none(), st.lists(part, max_size=2)),
                                    "tool_calls": st.one_of(st.lists(call, max_size=3), st.none(), text)}),
    text, st.none(), st.integers())
completion = st.one_of(text, st.lists(message, max_size=6), st.none(), st.integers(), st.dictionaries(text, text))

number = st.one_of(st.integers(-3, 5), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                   text)
judge_reply = st.one_of(
    st.lists(number, max_size=4).map(lambda v: json.dumps({"scores": v}, default=str)),
    st.sampled_from(['{"scores": [NaN]}', '{"scores": [Infinity]}', '{"scores": [1e999]}', '{"scores": "11"}',
                     '{"scores": [true]}', '{"scores": [0.5]}', "[" * 5000, '{"scores": ' + "[" * 5000,
                     "よくできています", "", '<think>{"scores": [0]}</think>{"scores": [1]}']),
    text, st.just(ChatResult(content=None)), st.just(ChatResult(error="timeout")))
weight = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 3), text, st.none())
criterion = st.one_of(text, st.fixed_dictionaries({"criterion": text}, optional={
    "weight": weight, "scale": st.sampled_from(["binary", "0-2", "0-3", "bogus"])}), st.integers(), st.none())
rubric = st.one_of(st.lists(criterion, max_size=3), st.lists(criterion, max_size=3).map(lambda v: json.dumps(v, default=str)),
                   text, st.none(), st.integers())
alias_value = st.one_of(st.none(), text, st.lists(st.one_of(text, st.integers()), max_size=3),
                        st.lists(text, max_size=3).map(json.dumps), st.integers(), st.dictionaries(text, text))
choices_value = st.one_of(st.none(), st.lists(text, max_size=5), st.lists(text, max_size=5).map(json.dumps),
                          st.integers(), text)
index_value = st.one_of(st.integers(-2, 6), st.floats(allow_nan=True, allow_infinity=True), text, st.none(),
                        st.booleans())
rows = st.lists(st.tuples(completion, text, alias_value, index_value, choices_value, rubric, st.one_of(text, st.none())),
                min_size=1, max_size=4)

PLAIN = {"tool_call_reward": (tool_call_reward, 0.0, 1.0), "format_reward": (format_reward, 0.0, 1.0),
         "report_format_reward": (make_format_reward(answer_style="report"), 0.0, 1.0),
         "zh_mix_penalty": (zh_mix_penalty, -1.0, 0.0)}


def _check(scores, n, low, high, none_ok=False):
    assert isinstance(scores, list) and len(scores) == n
    for s in scores:
        if s is None:
            assert none_ok
        else:
            assert type(s) is float and low <= s <= high


@settings(max_examples=120, deadline=None)
@given(rows, st.lists(judge_reply, max_size=4))
def test_every_reward_scores_every_input(batch, replies):
    completions, answers, aliases, indexes, choices, rubrics, prompts = (list(c) for c in zip(*batch))
    n = len(completions)
    for fn, low, high in PLAIN.values():
        _check(fn(completions, answer=answers, prompts=[[]] * n), n, low, high)
    _check(answer_reward(completions, answer=answers, aliases=aliases), n, 0.0, 1.0)
    _check(answer_reward(completions, answer=answers), n, 0.0, 1.0)
    _check(mcq_reward(completions, answer_index=indexes, choices=choices), n, 0.0, 1.0)
    reward = make_rubric_reward(StubJudge(replies))
    _check(reward(completions, rubric=rubrics, instruction=prompts), n, 0.0, 1.0, none_ok=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["{", "}", "{{", "}}", "x", "東京", " "]), max_size=30).map("".join))
def test_braced_answers_equal_the_lazy_regex(text):
    import re

    assert braced_answers(text) == [m.strip() for m in re.findall(r"\{\{(.*?)\}\}", text, re.DOTALL)]


# ---------------------------------------------------------------- linear time on 1 MB of hostile text
def _random_text(n: int) -> str:
    rng = random.Random(15)
    pools = ["abc {}<>/\n\"':", "あいうえおカキクケコ", "的是我们这個東京都漢字経駅", "。、！？「」", "{{}}<think></think>"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


MB = 1_000_000
HANG_S = 120  # all 16 inputs of one reward; linear code takes well under 2 s even on a loaded machine
HOSTILE = {"open_braces": "{" * MB, "double_open": "{{" * (MB // 2), "close_open": "}}{{" * (MB // 4),
           "random": _random_text(MB), "one_huge_answer": "{{" + _random_text(MB) + "}}",
           "han_kana_runs": "あ漢" * (MB // 2), "unclosed_tool_calls": "<tool_call>[" * (MB // 12),
           "think_storm": "<think>" * (MB // 7)}
TIMED = {**{k: f for k, (f, _, _) in PLAIN.items()},
         "answer_reward": lambda c: answer_reward(c, answer=["x"], aliases=[["y"]]),
         "mcq_reward": lambda c: mcq_reward(c, answer_index=[1], choices=[["3", "1", "2", "4"]]),
         "rubric_reward": lambda c: make_rubric_reward(StubJudge(['{"scores": [1]}']))(c, rubric=[["基準"]],
                                                                                       instruction=["x"])}


@pytest.mark.parametrize("name", sorted(TIMED))
def test_one_megabyte_of_hostile_text_scores_and_never_hangs(name):
    """Every reward scores 1 MB of hostile text. How fast is ``bench/rewards.py``'s table (against a linear
    peer, same run); here an alarm only catches a hang: the quadratic regex this replaced ran > 10 min."""
    fn = TIMED[name]

    def hang(*_):
        raise TimeoutError(f"{name} did not finish 1 MB in {HANG_S} s: a super-linear scan?")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(HANG_S)
    try:
        for text in HOSTILE.values():
            for completion in (text, [{"role": "assistant", "content": [{"type": "text", "text": text}]}]):
                scores = fn([completion])
                assert len(scores) == 1 and (scores[0] is None or isinstance(scores[0], float))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- the concrete defects of issue 15
REPORT = [{"role": "assistant", "content": "民法第九十条によれば、公序良俗に反する法律行為は無効である。"}]


@pytest.mark.parametrize("reply", ['{"scores": [NaN]}', '{"scores": [Infinity]}', '{"scores": [-Infinity]}',
                                   '{"scores": [1e999]}', '{"scores": "11"}', '{"scores": "1"}', '{"scores": [true]}',
                                   '{"scores": [0.5]}', '{"scores": [1, 1]}', '{"scores": [2]}', '{"scores": [-1]}',
                                   '{"scores": [' + "[" * 100_000 + "]}", "[" * 100_000, '{"scores": {"a": 1}}'])
def test_rubric_unreadable_verdicts_score_none_and_are_counted(reply):
    reward = make_rubric_reward(StubJudge([reply]))
    assert reward([REPORT], rubric=[["民法第九十条に言及している"]], instruction=["調べて"]) == [None]
    assert reward.failures == {"unreadable_verdict": 1}


def test_rubric_reads_a_strict_verdict_and_logs_failures():
    logged = []
    reward = make_rubric_reward(StubJudge(['```json\n{"scores": [1, 2]}\n```', ChatResult(error="timeout")]))
    rubric = [["基準1", {"criterion": "基準2", "scale": "0-3", "weight": 3}]] * 2
    scores = reward([REPORT, REPORT], rubric=rubric, instruction=["x", "y"], log_metric=lambda k, v: logged.append((k, v)))
    assert scores == [pytest.approx((1 + 3 * 2 / 3) / 4), None]
    assert reward.failures == {"judge_error": 1}
    metrics = dict(logged)
    assert [k for k, _ in logged] == ["rubric/judge_failures", "rubric/judge_seconds", "rubric/judged"]
    assert metrics["rubric/judge_failures"] == 1.0 and metrics["rubric/judged"] == 2.0  # both reports were sent


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -1, "重い", None])
def test_rubric_with_an_unreadable_weight_is_no_score(weight):
    reward = make_rubric_reward(StubJudge(['{"scores": [1]}']))
    assert reward([REPORT], rubric=[[{"criterion": "基準", "weight": weight}]], instruction=["x"]) == [None]


@pytest.mark.parametrize("aliases", [["1945"], "1945", [["1945"]], [json.dumps(["1945"])], ['["1945", 1]']])
def test_alias_column_forms(aliases):
    assert answer_reward(["{{1945}}"], answer=["昭和20年"], aliases=aliases) == [1.0]


@pytest.mark.parametrize("aliases", [[1945], [{"a": "1945"}], [None], ["[1945]"], ["[broken"]])
def test_unusable_aliases_mean_no_aliases(aliases):
    assert answer_reward(["{{1945}}"], answer=["昭和20年"], aliases=aliases) == [0.0]
    assert answer_reward(["{{昭和20年}}"], answer=["昭和20年"], aliases=aliases) == [1.0]


def test_brace_storm_scores_zero():
    assert answer_reward(["{" * 40_000], answer=["x"]) == [0.0]  # 6.6 s before; timing: bench/rewards.py


def test_parts_content_is_read_and_other_parts_ignored():
    parts = [{"type": "text", "text": "答えは"}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "{{あまちゃん}}"}]
    message = [{"role": "assistant", "content": parts, "reasoning_content": [{"type": "text", "text": "考える"}]}]
    assert answer_reward([message], answer=["あまちゃん"]) == [1.0]
    assert format_reward([message]) == [1.0]
    thought = [{"type": "text", "text": "<think>我们需要进一步确认这个条件。</think>"}, {"type": "text", "text": "{{1}}"}]
    assert zh_mix_penalty([[{"role": "assistant", "content": thought}]]) == [-1.0]


def _searches(results):
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": None}}}
    messages = []
    for i, result in enumerate(results):
        c = {**call, "function": {"name": "search", "arguments": {"query": f"q{i}"}}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [c]}, {"role": "tool", "content": result}]
    return messages + [{"role": "assistant", "content": "{{x}}"}]


def test_searches_without_hits_earn_no_tool_reward():
    from tansaku.envs.tools import ToolsConfig, search_text

    class EmptyBackend:
        def search(self, query, **_):
            return type("R", (), {"hits": []})()

    no_hits = search_text(EmptyBackend(), ToolsConfig(), "意味のない語")
    assert tool_call_reward([_searches([no_hits] * 3)]) == [0.0]
    assert tool_call_reward([_searches([no_hits, "[1] doc_id: d1 | title: t\n本文", no_hits])]) == [1 / 3]
    parts = [{"type": "text", "text": no_hits}]
    assert make_tool_call_reward(cap=1)([_searches([parts])]) == [0.0]


@pytest.mark.parametrize(("answer", "index"), [("1", 0), ("3", 2), ("(2)", 1), ("A", 0), ("ア", 0)])
def test_mcq_labels_win_over_numeric_choice_texts(answer, index):
    choices = ["3", "1", "2", "4"]
    assert parse_choice(answer, choices) == index
    scores = mcq_reward([[{"role": "assistant", "content": "{{" + answer + "}}"}]] * 4, answer_index=[0, 1, 2, 3],
                        choices=[choices] * 4)
    assert scores == [float(i == index) for i in range(4)]


def test_mcq_non_label_answers_still_match_choice_texts():
    assert parse_choice("20", ["10", "20", "30", "40"]) == 1  # 20 is no label of four choices: it is a text
    assert parse_choice("公序良俗", ["錯誤", "公序良俗"]) == 1
    assert mcq_reward(["{{2}}"], answer_index=["1"]) == [1.0]
    assert mcq_reward(["{{2}}"], answer_index=[float("nan")]) == [0.0]


def _reference_spans(text):
    """The detector as a per-run loop (split on kana, score each run in Python), against which the vectorized one
    is checked."""
    import re

    spans = []
    for run in re.split(r"[\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f\n]+", text):
        han = zh_detect._HAN.findall(run)
        classes = [zh_detect._char_class(c) for c in han]
        words = {w for w in zh_detect._ZH_WORDS if w in run}
        chars = {c for c in han if c in zh_detect._ZH_CHARS}
        long = len(han) >= 10 and run.rstrip().endswith(("。", "？", "！", "?", "!"))
        comma = bool(re.search(f"{zh_detect._HAN.pattern}[，；]{zh_detect._HAN.pattern}", run))
        score = (2 * classes.count("zh") + classes.count("trad") - 2 * ("ja" in classes) + 2 * len(words)
                 + len(chars) + long + comma)
        if run and len(han) >= 4 and score >= 3:
            spans.append(run)
    return spans


ZH_POOL = list("あいカキ\n 　。？！?!、，；的是了我这個対経駅込漢字民法条九为说ab{條權會鱮之") + list(zh_detect._ZH_WORDS)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(ZH_POOL), max_size=40).map("".join))
def test_vectorized_zh_detect_equals_the_per_run_reference(text):
    assert zh_detect.chinese_spans(text) == _reference_spans(text)
    assert zh_detect.contains_chinese(text) == bool(_reference_spans(text))


def test_zh_detect_many_short_runs():
    text = "あ我们需要检查这个条件。" * 3 + "民法を読む。" + "い経済対策" * 2
    assert zh_detect.chinese_spans(text) == ["我们需要检查这个条件。"] * 2 + ["我们需要检查这个条件。民法"]
    assert zh_detect.chinese_char_count(text) == 3 * 10 + 2


def test_tool_call_json_nested_past_the_recursion_limit_is_a_parse_error():
    deep = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    call = {"type": "function", "function": {"name": "search", "arguments": "[" * 100_000}}
    from tansaku.envs.rewards import episode_stats

    assert episode_stats(deep).parse_errors == 1
    assert format_reward([deep]) == [0.0]  # broken call, so no final message, no answer, no reasoning
    assert tool_call_reward([[{"role": "assistant", "content": "", "tool_calls": [call]},
                              {"role": "tool", "content": "x"}]]) == [0.0]
