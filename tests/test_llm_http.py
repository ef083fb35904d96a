"""HTTP backend against real local servers: a canned OpenAI-compatible server (retries, concurrency,
round-robin, timeouts) and `transformers serve` with the tiny model (slow).

Run: pytest tests/test_llm_http.py            (fast part)
     pytest tests/test_llm_http.py -m slow    (transformers serve + tiny model)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tansaku.core.llm import ChatRequest, ResponseCache, from_spec, parse_json
from tansaku.testing.canned_server import ServerThread, free_port


def http_json(url: str, method: str = "GET", timeout: float = 5) -> dict:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def ask(text: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kw)


@pytest.fixture(scope="module")
def canned_urls():
    with ServerThread("a") as url_a, ServerThread("b") as url_b:
        yield url_a, url_b


@pytest.fixture
def stats(canned_urls):
    for url in canned_urls:
        http_json(f"{url}/stats/reset", "POST")
    return lambda url: http_json(f"{url}/stats")


def client_for(urls, **options):
    return from_spec("http:canned@" + ",".join(urls), cache=False, backoff_base=0.01, **options)


def test_answers_in_order_and_round_robin(canned_urls, stats):
    client = client_for(canned_urls)
    results = client.chat([ask(f"質問{i}") for i in range(10)])
    assert [r.content.split(": ", 1)[1] for r in results] == [f"質問{i}" for i in range(10)]
    assert all(r.ok and r.finish_reason == "stop" for r in results)
    assert stats(canned_urls[0])["requests"] == 5 and stats(canned_urls[1])["requests"] == 5
    client.close()


def test_concurrency_bound_is_respected(canned_urls, stats):
    client = client_for(canned_urls[:1], max_concurrency=3)
    results = client.chat([ask(f"待つ{i} sleep=0.1") for i in range(12)])
    assert all(r.ok for r in results)
    assert stats(canned_urls[0])["max_in_flight"] == 3  # 12 requests, never more than 3 at once
    client.close()


def test_slots_are_per_endpoint_and_the_least_busy_endpoint_gets_the_next_request(canned_urls, stats):
    """--concurrency is per endpoint: two servers × 3 slots = 6 in flight, never more than 3 at one server; a new
    request goes to the endpoint with the fewest requests out."""
    client = client_for(canned_urls, max_concurrency=3)
    assert client.slots == 6
    results = client.chat([ask(f"並ぶ{i} sleep=0.1") for i in range(24)])
    assert all(r.ok for r in results)
    assert [stats(u)["max_in_flight"] for u in canned_urls] == [3, 3]
    client.close()

    client = client_for(canned_urls, max_concurrency=3)
    client._assigned = [5, 1]  # endpoint 0 has five requests out, endpoint 1 one: a new request goes to 1
    assert asyncio.run(client._next_open(0, least_busy=True)) == 1
    assert asyncio.run(client._next_open(0)) == 0  # a retry moves on in order instead (failover)
    client.close()


def test_retries_5xx_and_429_then_succeeds(canned_urls, stats):
    client = client_for(canned_urls[:1], max_retries=3)
    results = client.chat([ask("不安定 fail=2"), ask("混雑 fail=3 status=429"), ask("普通")])
    assert [r.error for r in results] == [None, None, None]
    assert results[0].content == "a: 不安定 fail=2"
    assert stats(canned_urls[0])["failures"] == 5 and client.retries == 5
    assert client.cache_stats()["errors"] == 0
    client.close()


def test_gives_up_after_max_retries_and_does_not_retry_client_errors(canned_urls, stats):
    client = client_for(canned_urls[:1], max_retries=2)
    down, bad = client.chat([ask("壊れた fail=9"), ask("不正 fail=1 status=400")])
    assert down.error.startswith("gave up after 3 attempts: HTTP 500") and not down.content
    assert bad.error.startswith("HTTP 400") and "injected failure 1" in bad.error
    assert stats(canned_urls[0])["failures"] == 4  # 3 for the 500s, 1 for the 400 (not retried)
    assert client.cache_stats()["errors"] == 2
    client.close()


def test_timeout_is_an_error_not_a_hang(canned_urls):
    client = client_for(canned_urls[:1], timeout=0.2, max_retries=1)
    started = time.monotonic()
    result = client.chat([ask("遅い sleep=3")])[0]
    assert "APITimeoutError" in result.error and time.monotonic() - started < 2.5


def test_dead_url_is_skipped_by_retrying_on_the_next(canned_urls):
    dead = f"http://127.0.0.1:{free_port()}"
    client = client_for([dead, canned_urls[0]], max_retries=2)
    results = client.chat([ask(f"q{i}") for i in range(6)])
    assert all(r.ok for r in results) and client.retries >= 3


def test_json_schema_goes_as_response_format(canned_urls):
    client = client_for(canned_urls[:1])
    schema = {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]}
    result = client.chat([ask("東京", json_schema=schema)])[0]
    assert parse_json(result.content, schema) == {"server": "a", "echo": "東京"}


def test_raw_text_comes_back_as_sent_never_repaired(canned_urls):
    # A server without tool/reasoning parsers hands back the raw text; the backend keeps it for core.parsing.
    text = '<think>調べる</think><tool_call>{name: "search", "arguments": {"query": "東京",}}</tool_call>'
    result = client_for(canned_urls[:1]).chat([ask(text)])[0]
    assert result.content == f"a: {text}"
    assert (result.server_reasoning, result.server_tool_calls) == (None, [])


def test_sync_chat_works_inside_a_running_event_loop(canned_urls, tmp_path):
    client = from_spec(f"http:canned@{canned_urls[0]}", cache=tmp_path / "c.sqlite")

    async def pipeline_step():
        return client.chat([ask("ループ内")])

    assert asyncio.run(pipeline_step())[0].content == "a: ループ内"
    assert client.chat([ask("ループ内")])[0].cached
    client.close()


# --- transformers serve with the tiny model -------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_server(tiny_model_path, tmp_path_factory):
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = open(tmp_path_factory.mktemp("serve") / "serve.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformers.cli.transformers", "serve", str(tiny_model_path), "--port", str(port),
         "--host", "127.0.0.1", "--device", "cpu", "--dtype", "float32"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                http_json(f"{url}/health", timeout=1)
                break
            except (urllib.error.URLError, OSError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"transformers serve did not start:\n{log.read()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.slow
def test_tiny_model_over_transformers_serve(tiny_server, tiny_model_path, tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    # transformers serve names the model by its path and ignores `response_format`.
    client = from_spec(f"http:{tiny_model_path}@{tiny_server}", cache=cache, structured_output=False,
                       max_concurrency=2)
    requests = [ask("What is the capital of France?", max_tokens=12),
                ask("Name a color.", max_tokens=8),
                ask("Give JSON with key answer.", max_tokens=16,
                    json_schema={"type": "object", "required": ["answer"]})]
    first = client.chat(requests)
    assert [r.error for r in first] == [None, None, None]
    assert all(r.content.strip() for r in first)
    assert first[0].finish_reason in ("stop", "length")

    second = client.chat(requests)
    assert all(r.cached for r in second) and [r.content for r in second] == [r.content for r in first]
    stats = client.cache_stats()
    assert {k: stats[k] for k in ("hits", "misses", "errors", "requests", "in_flight")} == {
        "hits": 3, "misses": 3, "errors": 0, "requests": 6, "in_flight": 0}
    assert stats["tokens"] > 0  # the server's usage.completion_tokens, summed over the 3 fresh answers

    # The same greedy requests through the local transformers backend give the same text: the
    # cache key is backend-independent, so check it against a fresh cache-free client.
    local = from_spec("transformers:tiny", cache=False, batch_size=1)
    assert [r.content for r in local.chat(requests[:2])] == [r.content for r in first[:2]]

    tools = [{"type": "function", "function": {"name": "search", "description": "Search documents",
                                                "parameters": {"type": "object", "properties": {}}}}]
    with_tools = client.chat([ask("Search for Tokyo.", max_tokens=8, tools=tools)])[0]
    assert with_tools.ok and (with_tools.content or with_tools.server_tool_calls)

    # A model the server cannot load (offline, not on disk) comes back as an error, never an exception.
    missing = from_spec(f"http:no-such-org/no-such-model@{tiny_server}", cache=False, max_retries=0)
    failed = missing.chat([requests[1]])[0]
    assert failed.error and not failed.content and missing.cache_stats()["errors"] == 1
    client.close()
    missing.close()


def _parsed_by_the_server(request):
    """A server whose reasoning and tool-call parsers split the answer (vLLM with both parsers on)."""
    return {"content": "答えは{{東京}}", "reasoning": "県庁所在地を調べた",
            "tool_calls": [{"id": "call_7", "name": "search", "arguments": {"query": "北暁瀬県 県庁所在地"}}]}


def test_the_body_and_the_result_are_those_of_chat_completions_create():
    # The backend posts the body itself (create's type walk costs CPU on every agent turn): the server must
    # see the body create sends, and the result must read what create's parsed response says.
    import openai

    extra = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}
    tools = [{"type": "function", "function": {"name": "search", "description": "検索する",
              "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
    messages = [{"role": "system", "content": "検索して答える"}, {"role": "user", "content": "北暁瀬県の県庁所在地は?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "search", "arguments": '{"query": "北暁瀬県"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "[1] 北暁瀬県 …"}]
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    with ServerThread("w", responder=_parsed_by_the_server) as url:
        client = from_spec(f"http:canned@{url}", cache=False, extra_body=extra)
        ours = client.chat([ChatRequest(messages=messages, tools=tools, seed=3, json_schema=schema, max_tokens=77,
                                        temperature=0.3, top_p=0.9)])[0]
        client.close()
        our_body = http_json(f"{url}/stats/last")["body"]

        async def via_create():
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0) as raw:
                return await raw.chat.completions.create(
                    model="canned", messages=messages, max_tokens=77, temperature=0.3, top_p=0.9, seed=3, tools=tools,
                    response_format={"type": "json_schema", "json_schema": {"name": "response", "schema": schema}},
                    extra_body=extra)

        theirs = asyncio.run(via_create())
        assert http_json(f"{url}/stats/last")["body"] == our_body
    message = theirs.choices[0].message
    assert ours.content == message.content == "答えは{{東京}}"
    assert ours.server_reasoning == message.reasoning_content == "県庁所在地を調べた"
    assert ours.server_tool_calls == [call.model_dump() for call in message.tool_calls]
    assert (ours.finish_reason, ours.tokens) == (theirs.choices[0].finish_reason, theirs.usage.completion_tokens)


def test_an_answer_of_the_wrong_shape_is_an_error_result_or_passes_to_the_parser():
    from tansaku.core.llm.http_backend import _to_result

    assert "no JSON object" in _to_result("<html>502 Bad Gateway</html>").error
    assert _to_result({"choices": []}).error == "server returned no choices"
    assert "without a message" in _to_result({"choices": [{"message": None}]}).error
    odd = _to_result({"choices": [{"message": {"content": 5, "tool_calls": {"name": "x"}}}], "usage": "lots"})
    # values of the wrong type reach tansaku.core.parsing, which counts them as the model's mistakes
    assert (odd.error, odd.content, odd.server_tool_calls, odd.tokens) == (None, 5, {"name": "x"}, None)
