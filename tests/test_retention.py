"""General-behaviour retention (envs/retention.py): the log-likelihood math on a tiny random Llama (fast),
``run_eval(task="general")`` and retention of the tiny model against itself (slow).

Run: pytest tests/test_retention.py            (fast part)
     pytest tests/test_retention.py -m slow    (tiny model)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tansaku.core.errors import InputError
from tansaku.envs.retention import (
    answer_loglik,
    encode,
    resolve_model_dir,
    retention,
    self_answers,
    split_row,
)
from tansaku.examples import __file__ as examples_init

GENERAL = Path(examples_init).with_name("general_chat.jsonl")
ROWS = [{"prompt": "日本で一番高い山は？", "answer": "富士山です。"},
        {"messages": [{"role": "system", "content": "ignored"}, {"role": "user", "content": "12×8は？"},
                      {"role": "assistant", "content": "96です。標高ではなく数です。"}]},
        {"prompt": "hi", "answer": "Hello! How can I help you today?"}]


@pytest.fixture(scope="module")
def tiny_random():
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from tansaku.core.tiny_model import tiny_model_dir

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval(), tokenizer


def manual_loglik(model, tokenizer, rows):
    """One row at a time, no padding: Σ log p(answer token | everything before) / answer tokens."""
    import torch

    total, tokens = 0.0, 0
    for row in rows:
        prompt_ids, answer_ids = encode(tokenizer, *split_row(row))
        ids = torch.tensor([prompt_ids + answer_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        for position in range(len(prompt_ids), len(prompt_ids) + len(answer_ids)):
            total += logprobs[position - 1, ids[0, position]].item()
        tokens += len(answer_ids)
    return total / tokens, tokens


def test_answer_tokens_are_the_assistant_turn_only(tiny_random):
    _, tokenizer = tiny_random
    prompt_ids, answer_ids = encode(tokenizer, *split_row(ROWS[1]))
    assert tokenizer.decode(answer_ids) == "96です。標高ではなく数です。<|im_end|>"
    assert "ignored" not in tokenizer.decode(prompt_ids)  # no system prompt
    assert tokenizer.decode(prompt_ids).endswith("<|im_start|>assistant\n")


def test_batched_loglik_equals_row_by_row_computation(tiny_random):
    model, tokenizer = tiny_random
    expected, tokens = manual_loglik(model, tokenizer, ROWS)
    for batch_size in (1, 3):  # right padding must not change any number
        result = answer_loglik(model, ROWS, batch_size=batch_size, tokenizer=tokenizer)
        assert result["tokens"] == tokens and result["rows"] == 3
        assert result["mean_token_logprob"] == pytest.approx(expected, abs=1e-4)
        assert result["perplexity"] == pytest.approx(math.exp(-expected), rel=1e-4)


def test_uniform_model_gives_log_vocab(tiny_random):
    import torch

    model, tokenizer = tiny_random
    lm_head = model.lm_head.weight.detach().clone()
    try:
        with torch.no_grad():
            model.lm_head.weight.zero_()  # every logit 0: p = 1/V for every token
        result = answer_loglik(model, ROWS, tokenizer=tokenizer)
    finally:
        with torch.no_grad():
            model.lm_head.weight.copy_(lm_head)
    assert result["mean_token_logprob"] == pytest.approx(-math.log(len(tokenizer)), abs=1e-4)
    assert result["perplexity"] == pytest.approx(len(tokenizer), rel=1e-3)


def test_self_answers_and_retention_against_itself(tiny_random):
    model, tokenizer = tiny_random
    own = self_answers(model, ROWS[:2], max_new_tokens=5, tokenizer=tokenizer)
    assert [r["prompt"][-1]["content"] for r in own] == ["日本で一番高い山は？", "12×8は？"]
    assert all(isinstance(r["answer"], str) for r in own)
    before = answer_loglik(model, own, tokenizer=tokenizer)
    assert retention(before, answer_loglik(model, own, tokenizer=tokenizer, batch_size=1)) == pytest.approx(1.0)


def test_bad_specs_and_rows_are_one_line_errors():
    with pytest.raises(InputError, match="use transformers:PATH or a model folder, not http: specs"):
        resolve_model_dir("http:m@http://localhost:1")
    with pytest.raises(InputError, match="not vllm: specs"):
        resolve_model_dir("vllm:Qwen/Qwen3-8B")
    with pytest.raises(InputError, match="must end in an assistant turn"):
        split_row({"messages": [{"role": "user", "content": "q"}]})
    with pytest.raises(InputError, match="needs `messages`"):
        split_row({"question": "q"})


@pytest.mark.slow
def test_general_eval_on_the_tiny_model_and_retention_of_itself(tmp_path):
    from tansaku.envs.evaluate import run_eval

    report = run_eval("general", GENERAL, "transformers:tiny", None, split="train", out_dir=tmp_path)
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["tokens"] == report["tokens"]
    assert report["task"] == "general" and report["rows"] >= 5 and report["mean_token_logprob"] < 0
    assert report["perplexity"] == pytest.approx(math.exp(-report["mean_token_logprob"]))
    own = self_answers("transformers:tiny", [json.loads(line) for line in GENERAL.read_text().splitlines()][:4],
                       max_new_tokens=32)
    before = answer_loglik("transformers:tiny", own)
    # the base model's own greedy answers are far more likely to it than the written references
    assert before["mean_token_logprob"] > report["mean_token_logprob"]
    assert retention(before, answer_loglik("transformers:tiny", own, batch_size=1)) == pytest.approx(1.0, abs=1e-4)
