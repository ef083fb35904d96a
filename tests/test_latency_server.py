"""The bench's independent latency server (``bench/latency_server.py``): it answers in the OpenAI shape with the
stand-in model's answer, counts what it served, and draws latencies in arrival order from its seed or, with
``by="content"``, as a function of each request's body.

Run: ``pytest tests/test_latency_server.py`` (about a second; no FastAPI, no canned server)."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import statistics
import urllib.error
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "latency_server.py"
spec = importlib.util.spec_from_file_location("bench_latency_server", BENCH)
latency_server = importlib.util.module_from_spec(spec)
spec.loader.exec_module(latency_server)


def _get(url: str):
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def _chat(url: str, content: str) -> dict:
    body = json.dumps({"model": "canned", "max_tokens": 16, "messages": [{"role": "user", "content": content}]})
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=10).read())


def test_answers_in_the_openai_shape_and_counts_it():
    url, server = latency_server.serve_in_thread(slots=2, latency="fixed:0.01")
    assert _get(f"{url}/health") == {"ok": True}
    assert _get(f"{url}/v1/models")["data"][0]["id"] == "canned"

    reply = _chat(url, "ルーブリック 1")  # the egov judge prompt's marker: the stand-in's verdict JSON
    assert reply["object"] == "chat.completion"
    message = reply["choices"][0]["message"]
    assert message["role"] == "assistant" and json.loads(message["content"])["single_correct"] == 1
    assert reply["usage"]["completion_tokens"] == len(message["content"])

    stats = _get(f"{url}/stats")
    assert stats["requests"] == 1 and stats["failures"] == 0 and stats["max_in_flight"] == 1
    assert stats["busy_seconds"] == 0.01 and stats["last_at"] >= stats["first_at"]
    (arrival, start, end, sent, latency), = _get(f"{url}/stats/records")
    assert arrival <= start <= end <= sent and latency == 0.01
    assert end - start >= 0.009  # the slot is held for the drawn latency, compute included


def test_a_prompt_without_an_answer_is_a_500_and_a_failure():
    url, _ = latency_server.serve_in_thread(slots=1, latency="fixed:0")
    try:
        _chat(url, "no stand-in answer for this")
        raise AssertionError("expected HTTP 500")
    except urllib.error.HTTPError as error:
        assert error.code == 500 and "ValueError" in json.loads(error.read())["error"]["message"]
    assert _get(f"{url}/stats")["failures"] == 1


def test_latencies_follow_arrival_order_from_the_seed():
    url, _ = latency_server.serve_in_thread(slots=4, latency="lognormal:0.01,0.5", seed=3)
    for i in range(3):
        _chat(url, f"ルーブリック {i}")
    draw, rng = latency_server.parse_latency("lognormal:0.01,0.5"), random.Random(3)
    assert [r[4] for r in _get(f"{url}/stats/records")] == [draw(rng) for _ in range(3)]


def test_content_latency_is_the_same_for_the_same_body_whatever_the_order():
    url, _ = latency_server.serve_in_thread(slots=4, latency="lognormal:0.01,0.5", seed=3, by="content")
    contents = ["ルーブリック 1", "ルーブリック 2", "ルーブリック 3", "ルーブリック 1"]
    for content in contents:
        _chat(url, content)
    first = [r[4] for r in _get(f"{url}/stats/records")]
    assert first[0] == first[3] and len(set(first)) == 3  # same body, same latency; others differ

    url, _ = latency_server.serve_in_thread(slots=1, latency="lognormal:0.01,0.5", seed=3, by="content")
    for content in reversed(contents):
        _chat(url, content)
    assert [r[4] for r in _get(f"{url}/stats/records")] == first[::-1]

    url, _ = latency_server.serve_in_thread(slots=4, latency="lognormal:0.01,0.5", seed=4, by="content")
    _chat(url, contents[0])
    assert _get(f"{url}/stats/records")[0][4] != first[0]  # another seed, another draw


def test_content_latency_follows_the_distribution_over_distinct_bodies():
    latency = latency_server.content_latency("lognormal:0.5,0.8", seed=0)
    draws = [latency({"messages": [{"role": "user", "content": f"質問 {i}"}]}) for i in range(4000)]
    assert abs(statistics.median(draws) - 0.5) < 0.03  # the median's standard error here is ≈ 0.008
    logs = [math.log(d / 0.5) for d in draws]
    assert abs(statistics.pstdev(logs) - 0.8) < 0.04
    tailed = latency_server.content_latency("lognormal:0.5,0.8,tail:0.1,20", seed=0)
    ratios = [tailed({"messages": [{"role": "user", "content": f"質問 {i}"}]}) / d for i, d in enumerate(draws)]
    assert all(math.isclose(r, 1.0) or math.isclose(r, 20.0) for r in ratios)  # the same quantile
    assert 0.08 < sum(r > 2 for r in ratios) / len(ratios) < 0.12  # the tail share


def test_latency_by_must_be_arrival_or_content():
    try:
        latency_server.LatencyServer(1, "fixed:0", by="order")
        raise AssertionError("expected ValueError")
    except ValueError as error:
        assert "arrival or content" in str(error)
