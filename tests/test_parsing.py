"""Parsing of <think>, <tool_call> and {{answer}}: malformed input yields error objects, never exceptions."""

import pytest

from tansaku.core.parsing import ParseError, ToolCall, final_answers, parse_assistant_text, split_think


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


def test_good_and_bad_calls_are_kept_apart():
    text = (
        '<tool_call>{"name": "open_doc", "arguments": {"doc_id": "wiki001"}}</tool_call>'
        "<tool_call>{oops}</tool_call>"
    )
    turn = parse_assistant_text(text)
    assert [c.name for c in turn.tool_calls] == ["open_doc"]
    assert [e.kind for e in turn.errors] == ["bad_json"]


def test_written_calls_are_read_as_trl_reads_them():
    # transformers' parse_response (TRL's GRPO loop) takes only flat {"name", "arguments": {...}} in the text.
    nested = '<tool_call>{"type": "function", "function": {"name": "search", "arguments": {"query": "民法"}}}</tool_call>'
    as_text = '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"民法\\"}"}</tool_call>'
    assert [e.kind for e in parse_assistant_text(nested).errors] == ["missing_name"]
    assert [e.kind for e in parse_assistant_text(as_text).errors] == ["bad_arguments"]
    # TRL ignores "parameters" and keeps the name as written: the call runs and fails, as it does there.
    turn = parse_assistant_text('<tool_call>{"name": " search ", "parameters": {"query": "x"}}</tool_call>')
    assert turn.tool_calls == [ToolCall(" search ", {})] and turn.errors == []
    # JSON repair never happens for the policy's calls.
    broken = parse_assistant_text('<tool_call>{name: "search", "arguments": {"query": "東京",}}</tool_call>')
    assert broken.tool_calls == [] and [e.kind for e in broken.errors] == ["bad_json"]


def test_truncated_think_leaves_no_content():
    assert split_think("<think>考え中で{{東京}}と書きかけ") == ("考え中で{{東京}}と書きかけ", "")


def test_answer_inside_think_is_not_content():
    turn = parse_assistant_text("<think>たぶん{{東京}}</think>わかりません")
    assert final_answers(turn.content) == []


@pytest.mark.parametrize("garbage", ["", "<think></think>", "}}{{", "<tool_call></tool_call>", "\x00\ufffd"])
def test_garbage_never_raises(garbage):
    parse_assistant_text(garbage)


def test_to_hf_and_to_wire_are_the_one_conversion():
    from tansaku.core.parsing import to_hf, to_wire

    hf = [{"role": "user", "content": "q"},
          {"role": "assistant", "content": "", "reasoning_content": "r",
           "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "search", "arguments": {"query": "東京"}}},
                          {"type": "function", "function": {"name": "open_doc", "arguments": {}}}]}]
    wire = to_wire(hf)
    assert wire[1]["tool_calls"][0] == {"id": "c0", "type": "function",
                                        "function": {"name": "search", "arguments": '{"query": "東京"}'}}
    assert "id" not in wire[1]["tool_calls"][1] and wire[0] is hf[0] and hf[1]["tool_calls"][0]["function"]["arguments"] == {"query": "東京"}
    assert to_hf(wire) == hf and to_hf(hf) == hf and to_wire(wire) == wire
    # Text is kept byte for byte (stored trajectories are compared byte-wise); flat calls get nested.
    spaced = [{"role": "assistant", "tool_calls": [{"name": "search", "arguments": '{"query" : "x"}'}]}]
    assert to_wire(spaced)[0]["tool_calls"][0]["function"]["arguments"] == '{"query" : "x"}'
    with pytest.raises(ValueError, match="message 0"):
        to_hf([{"role": "assistant", "tool_calls": [{"function": {"name": "search", "arguments": "{broken"}}]}])
    with pytest.raises(ValueError, match="without a function name"):
        to_wire([{"role": "assistant", "tool_calls": [{"function": {}}]}])


def test_hostile_tool_call_json_is_a_parse_error_not_a_crash():
    from tansaku.core.parsing import parse_tool_calls

    for raw in ("[" * 100_000, '{"name": "search", "arguments": {"n": ' + "9" * 5000 + "}}"):
        rest, calls, errors = parse_tool_calls(f"<tool_call>{raw}</tool_call>")
        assert calls == [] and [e.kind for e in errors] == ["bad_json"]
    # a brace storm after the answer: the same spans as the lazy regex, found in one linear pass
    assert final_answers("答え{{a}}" + "{{" * 100_000) == ["a"]
    assert final_answers("{{" * 100_000) == []
