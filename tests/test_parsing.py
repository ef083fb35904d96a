"""Parsing of <think>, <tool_call> and {{answer}}: malformed input yields error objects, never exceptions."""

import pytest

from tansaku.core.parsing import ParseError, final_answers, is_tool_error, parse_assistant_text, split_think


def test_qwen3_turn_with_reasoning_and_two_calls():
    text = (
        "<think>\nまず作品Aを調べ、次に作品Bを調べる。\n</think>\n\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": "仮面ライダー電王 放送回数"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": {"query": "あまちゃん 放送回数", "size": 3}}\n</tool_call>'
        "<|im_end|>"
    )
    turn = parse_assistant_text(text)
    assert turn.reasoning == "まず作品Aを調べ、次に作品Bを調べる。"
    assert turn.content == ""
    assert [c.arguments for c in turn.tool_calls] == [
        {"query": "仮面ライダー電王 放送回数"},
        {"query": "あまちゃん 放送回数", "size": 3},
    ]
    assert turn.errors == []


def test_final_answer_turn():
    turn = parse_assistant_text("<think>放送回数は156回が多い</think>答えは{{あまちゃん}}です。")
    assert turn.tool_calls == [] and turn.errors == []
    assert final_answers(turn.content) == ["あまちゃん"]


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ('<tool_call>{"name": "search", "arguments": {"query": "x"}</tool_call>', "bad_json"),
        ("<tool_call>search(query='x')</tool_call>", "bad_json"),
        ('<tool_call>["search", {"query": "x"}]</tool_call>', "not_object"),
        ('<tool_call>{"arguments": {"query": "x"}}</tool_call>', "missing_name"),
        ('<tool_call>{"name": "search", "arguments": "query=x"}</tool_call>', "bad_arguments"),
        ('<tool_call>{"name": "search", "arguments": [1, 2]}</tool_call>', "bad_arguments"),
        ('<tool_call>{"name": "search", "arguments": {"query": "途中', "unclosed"),
        ('{"name": "search"}</tool_call>', "unclosed"),
    ],
)
def test_malformed_calls_become_errors(raw, kind):
    turn = parse_assistant_text("<think>検索</think>" + raw)
    assert turn.tool_calls == []
    assert [e.kind for e in turn.errors] == [kind]
    assert isinstance(turn.errors[0], ParseError)
    assert turn.errors[0].as_tool_message().startswith("エラー")
    assert is_tool_error(turn.errors[0].as_tool_message())


def test_good_and_bad_calls_are_kept_apart():
    text = (
        '<tool_call>{"name": "open_doc", "arguments": {"doc_id": "wiki001"}}</tool_call>'
        "<tool_call>{oops}</tool_call>"
    )
    turn = parse_assistant_text(text)
    assert [c.name for c in turn.tool_calls] == ["open_doc"]
    assert [e.kind for e in turn.errors] == ["bad_json"]


def test_arguments_given_as_json_string_and_openai_nesting():
    text = '<tool_call>{"type": "function", "function": {"name": "search", "arguments": "{\\"query\\": \\"民法\\"}"}}</tool_call>'
    turn = parse_assistant_text(text)
    assert turn.tool_calls[0].name == "search" and turn.tool_calls[0].arguments == {"query": "民法"}


def test_truncated_think_leaves_no_content():
    assert split_think("<think>考え中で{{東京}}と書きかけ") == ("考え中で{{東京}}と書きかけ", "")


def test_answer_inside_think_is_not_content():
    turn = parse_assistant_text("<think>たぶん{{東京}}</think>わかりません")
    assert final_answers(turn.content) == []


@pytest.mark.parametrize("garbage", ["", "<think></think>", "}}{{", "<tool_call></tool_call>", "\x00\ufffd"])
def test_garbage_never_raises(garbage):
    parse_assistant_text(garbage)
