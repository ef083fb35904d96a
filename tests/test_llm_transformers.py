"""Local transformers backend with the tiny model: batched left-padded generation, caching, JSON hint.

Run: pytest tests/test_llm_transformers.py -m slow
"""

from __future__ import annotations

import pytest

from tansaku.core.llm import ChatRequest, ResponseCache, from_spec

pytestmark = pytest.mark.slow

AGENT_SYSTEM = {"role": "system", "content": "あなたは検索エージェントです。{{答え}} の形で答えてください。"}
SEARCH_TOOLS = [{"type": "function", "function": {"name": "search", "description": "文書を検索する", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}]


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


def test_entropy_and_tokens_are_those_of_the_generated_tokens(tiny_model_path):
    """``ChatResult.entropy`` is the mean entropy of softmax(logits) over the generated tokens (the end token
    included), as transformers' own ``output_logits`` give them for the same greedy generation."""
    import torch

    client = from_spec("transformers:tiny", cache=False, batch_size=2)
    requests = [ask("Hi.", max_tokens=8), ask("Write one sentence about the sea and the sky.", max_tokens=8)]
    results = client.chat(requests)
    model, tokenizer = client._load()
    for request, result in zip(requests, results):
        assert result.tokens and 0 < result.tokens <= 8 and result.entropy is not None and result.entropy > 0
        prompt = tokenizer(client._prompt(request), add_special_tokens=False, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**prompt, max_new_tokens=8, do_sample=False, temperature=None, top_p=None,
                                 top_k=None, output_logits=True, return_dict_in_generate=True,
                                 pad_token_id=tokenizer.pad_token_id)
        ids = out.sequences[0, prompt["input_ids"].shape[1]:].tolist()
        n = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else len(ids)
        assert result.tokens == n
        logp = torch.log_softmax(torch.stack(out.logits[:n])[:, 0].float(), dim=-1)
        assert result.entropy == pytest.approx(float(-(logp.exp() * logp).sum(-1).mean()), rel=0.05)


def test_the_shared_system_turn_comes_from_its_kv_cache_and_changes_no_output(tiny_model_path):
    """fp32, greedy: a batch sharing the system turn (with tool schemas) generates exactly what the plain
    left-padded batch generates; the turn is tokenized once, and a batch without a shared first turn (or with
    prefix_cache off) goes the plain way."""
    system, tools = AGENT_SYSTEM, SEARCH_TOOLS
    questions = ["白砂市の市長は誰？", "北浜県の県庁所在地はどこですか？ 詳しく教えてください。", "Hi"]
    requests = [ChatRequest(messages=[system, {"role": "user", "content": q}], tools=tools, max_tokens=12)
                for q in questions]
    cached = from_spec("transformers:tiny", cache=False, batch_size=3)
    plain = from_spec("transformers:tiny", cache=False, batch_size=3, prefix_cache=False)
    with_cache, without = cached.chat(requests), plain.chat(requests)
    assert [r.content for r in with_cache] == [r.content for r in without] and all(r.content for r in with_cache)
    assert [r.entropy for r in with_cache] == pytest.approx([r.entropy for r in without], rel=1e-3)
    assert len(cached._prefixes) == 1 and None not in cached._prefixes.values() and not plain._prefixes
    (prefix,) = cached._prefixes
    assert prefix.startswith("<|im_start|>system") and "search" in prefix and questions[0] not in prefix
    again = cached.chat([ChatRequest(messages=[system, {"role": "user", "content": "月見坂とは？"}], tools=tools,
                                     max_tokens=4)])
    assert again[0].ok and len(cached._prefixes) == 1  # the same system turn: served from the cache
    mixed = cached.chat([ask("Hi.", max_tokens=4), requests[0]])  # two first turns: batched apart
    assert all(r.ok for r in mixed) and prefix in cached._prefixes


def test_chats_without_a_system_prompt_batch_together(tiny_model_path):
    """A chat without a system prompt starts with its own user turn, which no other request shares: such
    requests are batched in input order, batch_size at a time (the general set once ran one per generate call),
    while a system turn two requests share still gets a batch of its own."""
    users = [ChatRequest(messages=[{"role": "user", "content": q}], max_tokens=4)
             for q in ("Subtract 11 from 66.", "Name a colour.", "Hi", "月見坂とは？", "Write a haiku.")]
    system = {"role": "system", "content": "あなたは検索エージェントです。"}
    agents = [ChatRequest(messages=[system, {"role": "user", "content": q}], max_tokens=4) for q in ("A?", "B?")]
    requests = [*users[:2], *agents, *users[2:]]

    def batches(batch_size):
        client = from_spec("transformers:tiny", cache=False, batch_size=batch_size)
        client._load()
        return [b for _, b in client._batches(requests, [client._prompt(r) for r in requests])]

    assert batches(5) == [[0, 1, 4, 5, 6], [2, 3]]  # the five user-first chats together; the shared turn apart
    # Grouping never adds a batch (each decodes as long): where it would, the call batches in input order.
    assert batches(4) == [[0, 1, 2, 3], [4, 5, 6]]
    assert batches(8) == [list(range(7))]


def test_requests_are_batched_by_first_turn_and_length_without_changing_outputs(tiny_model_path):
    """Episodes drawing among tool-description variants interleave two system turns: with the prefix cache each
    batch holds one (and shares its cached turn), sorted by length; outputs are the plain batches' (fp32, greedy),
    in request order."""
    systems = [{"role": "system", "content": f"あなたは検索エージェント{v}です。"} for v in ("A", "B")]
    questions = ["白砂市の市長は誰？", "北浜県の県庁所在地はどこですか？ 詳しく教えてください。", "Hi", "月見坂とは？"]
    requests = [ChatRequest(messages=[systems[i % 2], {"role": "user", "content": q}], max_tokens=8)
                for i, q in enumerate(questions * 2)]
    cached = from_spec("transformers:tiny", cache=False, batch_size=4)  # 2 groups of 4: no batch added
    plain = from_spec("transformers:tiny", cache=False, batch_size=4, prefix_cache=False)
    cached._load()
    prompts = [cached._prompt(r) for r in requests]
    batches = [b for _, b in cached._batches(requests, prompts)]
    assert sorted(i for b in batches for i in b) == list(range(8))
    assert all(len({i % 2 for i in b}) == 1 for b in batches)  # one system turn per batch
    assert all([len(prompts[i]) for i in b] == sorted(len(prompts[i]) for i in b) for b in batches)
    assert [b for _, b in plain._batches(requests, prompts)] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # input order
    with_cache, without = cached.chat(requests), plain.chat(requests)
    assert [r.content for r in with_cache] == [r.content for r in without]
    assert len(cached._prefixes) == 2 and None not in cached._prefixes.values()


def test_the_next_turn_reuses_the_last_calls_caches_and_changes_no_output(tiny_model_path):
    """fp32, greedy: a second turn (each episode's context + its answer + a tool result, sent in another order
    and batched differently) generates what the plain client generates, while its prefill covers only what
    follows each episode's first prompt."""
    import functools

    system, tools = AGENT_SYSTEM, SEARCH_TOOLS
    questions = ["白砂市の市長は誰？", "北浜県の県庁所在地はどこですか？ 詳しく教えてください。", "月見坂とは？"]
    first = [ChatRequest(messages=[system, {"role": "user", "content": q}], tools=tools, max_tokens=12)
             for q in questions]

    def two_turns(**options):
        client = from_spec("transformers:tiny", cache=False, batch_size=2, **options)
        client._load()
        answers = client.chat(first)
        second = [ChatRequest(messages=[*r.messages, {"role": "assistant", "content": a.content},
                                        {"role": "tool", "content": "白砂市の市長は山田太郎です。" * (i + 1)}],
                              tools=tools, max_tokens=12) for i, (r, a) in enumerate(zip(first, answers))][::-1]
        widths, forward = [], client._model.forward

        @functools.wraps(forward)
        def counting(*args, **kwargs):
            widths.append(kwargs["input_ids"].shape[1])
            return forward(*args, **kwargs)

        client._model.forward = counting
        return client, second, [a.content for a in answers], [r.content for r in client.chat(second)], widths

    client, second, answers, replies, widths = two_turns()
    _, _, plain_answers, plain_replies, plain_widths = two_turns(turn_cache=False)
    assert answers == plain_answers and replies == plain_replies and all(replies)
    tokens = [len(client._tokenizer(client._prompt(r), add_special_tokens=False)["input_ids"]) for r in first]
    grown = [len(client._tokenizer(client._prompt(r), add_special_tokens=False)["input_ids"]) for r in second]
    new = max(g - t for g, t in zip(grown, tokens[::-1]))
    assert max(widths) <= new < max(plain_widths)  # no batch prefilled an earlier prompt again
    assert len(client._turns.kept) == 2 and not client._turns.keeping  # this call's batches, kept for the next
