"""Local transformers backend with the tiny model: batched left-padded generation, caching, JSON hint.

Run: pytest tests/test_llm_transformers.py -m slow
"""

from __future__ import annotations

import pytest

from tansaku.core.llm import ChatRequest, ResponseCache, from_spec

pytestmark = pytest.mark.slow


def ask(text: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def test_batched_left_padding_matches_one_by_one_and_caches(tiny_model_path, tmp_path):
    # Prompts of different lengths force padding inside the batch.
    requests = [ask("Hi.", max_tokens=10), ask("Write one sentence about the sea and the sky.", max_tokens=10),
                ask("What is two plus two?", max_tokens=6)]
    batched = from_spec("transformers:tiny", cache=ResponseCache(tmp_path / "c.sqlite"), batch_size=3)
    single = from_spec("transformers:tiny", cache=False, batch_size=1)
    out_batched = batched.chat(requests)
    out_single = single.chat(requests)
    assert [r.error for r in out_batched] == [None, None, None]
    assert [r.content for r in out_batched] == [r.content for r in out_single]
    assert all(r.content for r in out_batched)
    assert out_batched[2].finish_reason in ("stop", "length")
    again = batched.chat(requests)
    assert all(r.cached for r in again) and batched.cache_stats()["hits"] == 3
    assert batched.describe()["model"] == "smollm2-135m-instruct"


def test_json_schema_hint_and_bad_template_input_is_an_error(tiny_model_path):
    client = from_spec("transformers:tiny", cache=False, batch_size=2)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ok, broken = client.chat([
        ask("Name a city.", max_tokens=12, json_schema=schema),
        ChatRequest(messages=[{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}],
                    max_tokens=4, temperature=0.5, seed=1),
    ])
    assert ok.ok and ok.content
    assert broken.error and "name" in broken.error  # the template needs a tool name; reported, not raised
