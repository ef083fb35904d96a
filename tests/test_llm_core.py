"""LLM layer without a server: parse_json, the response cache, error capture, scripted backend, specs.

Run: pytest tests/test_llm_core.py
"""

from __future__ import annotations

import json
import threading

import pytest

from tansaku.core.llm import (
    ChatRequest,
    ChatResult,
    LLMBadJSON,
    LLMClient,
    ResponseCache,
    ScriptedLLM,
    from_spec,
    parse_json,
)

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def ask(text: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kw)


@pytest.mark.parametrize("text, expected", [
    ('{"answer": "東京"}', {"answer": "東京"}),
    ('```json\n{"answer": "大阪",}\n```', {"answer": "大阪"}),
    ('<think>考える {x}</think>\n{"answer": "京都"}', {"answer": "京都"}),
    ('答えは {"answer": "奈良"} です。', {"answer": "奈良"}),
    ('{"answer": "神戸", "note": "途中で切れ', {"answer": "神戸", "note": "途中で切れ"}),
    ('{"answer": "札幌"} {"answer": "仙台"}', {"answer": "札幌"}),
])
def test_parse_json_repairs_model_output(text, expected):
    assert parse_json(text, SCHEMA) == expected


@pytest.mark.parametrize("text, message", [
    ("ごめんなさい、わかりません。", "no JSON object"),
    ('{"reason": "なし"}', "misses required keys ['answer']"),
    ("", "no JSON object"),
])
def test_parse_json_raises_with_excerpt(text, message):
    with pytest.raises(LLMBadJSON) as err:
        parse_json(text, SCHEMA)
    assert message in str(err.value) and text[:5] in str(err.value)
    assert err.value.reason == "llm_bad_json"


def test_parse_json_repairs_only_when_asked():
    assert parse_json('{"answer": "大阪",}', SCHEMA) == {"answer": "大阪"}  # teacher/judge answers: repaired
    with pytest.raises(LLMBadJSON, match="invalid JSON"):
        parse_json('{"answer": "大阪",}', SCHEMA, repair=False)
    assert parse_json('考える</think>{"answer": "京都"}', SCHEMA, repair=False) == {"answer": "京都"}


def test_rerun_is_served_from_cache_without_calling_backend(tmp_path):
    cache_path = tmp_path / "llm.sqlite"
    requests = [ask(f"質問{i}") for i in range(20)]
    first = ScriptedLLM(lambda r: "答え:" + r.messages[-1]["content"], cache=ResponseCache(cache_path))
    out1 = first.chat(requests)
    assert first.cache_stats()["misses"] == 20 and first.calls == 20 and not any(r.cached for r in out1)

    # A new process would open the same file: a new client and cache object, same model name.
    second = ScriptedLLM(lambda r: pytest.fail("backend called on a cache hit"), cache=ResponseCache(cache_path),
                         model=first.model)
    out2 = second.chat(requests)
    assert second.calls == 0 and all(r.cached for r in out2)
    assert second.cache_stats() == {"hits": 20, "misses": 0, "errors": 0, "requests": 20, "tokens": 0, "in_flight": 0}
    assert [r.content for r in out2] == [r.content for r in out1] == [f"答え:質問{i}" for i in range(20)]


def test_cache_key_ignores_backend_but_not_params():
    req = ask("同じ質問", json_schema=SCHEMA)
    assert req.cache_key("m") == ask("同じ質問", json_schema=SCHEMA).cache_key("m")
    assert req.cache_key("m") != req.cache_key("other-model")
    assert req.cache_key("m") != ask("同じ質問", json_schema=SCHEMA, max_tokens=7).cache_key("m")
    assert req.cache_key("m") != ask("同じ質問").cache_key("m")
    assert ask("q", tools=[{"type": "function"}]).cache_key("m") != ask("q").cache_key("m")


def test_errors_are_returned_counted_and_not_cached(tmp_path):
    attempts = {"n": 0}

    def flaky(req):
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise RuntimeError("サーバが落ちた")
        return "復旧"

    client = ScriptedLLM(flaky, cache=ResponseCache(tmp_path / "c.sqlite"))
    first = client.chat([ask("q")])[0]
    assert first.error == "RuntimeError: サーバが落ちた" and not first.ok
    second = client.chat([ask("q")])[0]
    assert second.content == "復旧" and not second.cached  # the error was not cached
    assert client.chat([ask("q")])[0].cached
    assert client.cache_stats() == {"hits": 1, "misses": 2, "errors": 1, "requests": 3, "tokens": 0, "in_flight": 0}


def test_a_crashing_backend_never_raises_from_chat():
    class Broken(LLMClient):
        backend = "broken"

        def _generate(self, requests):
            raise ConnectionError("no route to host")

    results = Broken("m").chat([ask("a"), ask("b")])
    assert [r.error for r in results] == ["ConnectionError: no route to host"] * 2
    assert Broken("m").describe()["backend"] == "broken"


def test_sampled_requests_are_cached_only_with_seed_or_sample_index(tmp_path):
    counter = iter(range(1000))
    client = ScriptedLLM(lambda r: f"draw {next(counter)}", cache=ResponseCache(tmp_path / "c.sqlite"))
    unseeded = [ask("詩を書いて", temperature=0.8)] * 2
    assert [r.content for r in client.chat(unseeded)] == ["draw 0", "draw 1"]
    assert [r.content for r in client.chat(unseeded)] == ["draw 2", "draw 3"]  # fresh draws, not cached
    indexed = [ask("詩を書いて", temperature=0.8, sample_index=i) for i in range(2)]
    first = [r.content for r in client.chat(indexed)]
    assert [r.content for r in client.chat(indexed)] == first and first[0] != first[1]
    seeded = ask("詩を書いて", temperature=0.8, seed=7)
    assert client.chat([seeded])[0].content == client.chat([seeded])[0].content


def test_cache_is_safe_for_concurrent_threads(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    client = ScriptedLLM(lambda r: r.messages[-1]["content"] * 2, cache=cache)
    errors = []

    def worker(offset):
        try:
            for i in range(10):
                assert client.chat([ask(f"{offset}-{i}-{j}") for j in range(5)])[0].ok
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 8 * 10 * 5
    assert client.cache_stats()["misses"] == 400


def test_scripted_jsonl_matches_then_cycles(tmp_path):
    path = tmp_path / "responses.jsonl"
    lines = [
        {"match": "天気", "content": "晴れ"},
        {"match": "検索", "content": "", "tool_calls": [{"name": "search", "arguments": '{"query": "x"}'}]},
        {"content": "一番目"},
        {"content": "二番目", "reasoning": "理由"},
    ]
    path.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n", encoding="utf-8")
    client = from_spec(f"scripted:{path}")
    out = client.chat([ask("明日の天気は"), ask("検索して"), ask("a"), ask("b"), ask("c")])
    assert [r.content for r in out] == ["晴れ", "", "一番目", "二番目", "一番目"]
    # A dict answers like a server's message: its tool calls/reasoning are kept apart as given, never repaired.
    assert out[1].server_tool_calls == [{"name": "search", "arguments": '{"query": "x"}'}]
    assert out[3].server_reasoning == "理由" and client.cache is None


def test_scripted_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"content": "ok"}\n{broken\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:2: not valid JSON"):
        from_spec(f"scripted:{path}")
    with pytest.raises(FileNotFoundError):
        from_spec(f"scripted:{tmp_path / 'missing.jsonl'}")


def test_from_spec_parses_and_rejects(tmp_path):
    client = from_spec("http:org/model-7b@http://a:8000,http://b:8000/v1/", cache=tmp_path / "c.sqlite")
    info = client.describe()
    assert info["backend"] == "http" and info["model"] == "org/model-7b"
    assert info["params"]["base_urls"] == ["http://a:8000/v1", "http://b:8000/v1"]
    assert info["cache"] == str(tmp_path / "c.sqlite")
    assert from_spec("http:m@http://a:1", cache=False).cache is None
    for bad in ("http:model-without-url", "nonsense", "gpt:foo"):
        with pytest.raises(ValueError):
            from_spec(bad)
    with pytest.raises(FileNotFoundError):
        from_spec(f"transformers:{tmp_path / 'nope'}", cache=False)


def test_chat_result_roundtrip():
    result = ChatResult(content="答え", server_reasoning="r", server_tool_calls=[{"type": "function"}],
                        finish_reason="stop")
    assert ChatResult.from_json(result.to_json(), cached=True) == ChatResult(
        content="答え", server_reasoning="r", server_tool_calls=[{"type": "function"}], finish_reason="stop",
        cached=True)


def test_cache_entries_from_before_raw_text_are_not_trusted_with_tool_calls(tmp_path):
    # Older entries stored what a backend had split off (tool calls possibly repaired): those are generated again.
    cache = ResponseCache(tmp_path / "c.sqlite")
    calls, plain = ask("検索して"), ask("答えて")
    repaired = {"content": "", "reasoning": None, "finish_reason": "tool_calls",
                "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "東京"}}}]}
    answer = {"content": "{{東京}}", "reasoning": "考えた", "tool_calls": [], "finish_reason": "stop"}
    cache.put_many([(calls.cache_key("m"), json.dumps(repaired)), (plain.cache_key("m"), json.dumps(answer))])
    client = ScriptedLLM(lambda r: "新しい答え", cache=cache, model="m")
    fresh, kept = client.chat([calls, plain])
    assert (fresh.content, fresh.cached) == ("新しい答え", False)
    assert (kept.content, kept.server_reasoning, kept.cached) == ("{{東京}}", "考えた", True)
