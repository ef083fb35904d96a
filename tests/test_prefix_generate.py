"""The GRPO generate wrapper that computes the rows' shared prompt tokens once (``trainer/cpu/prefix_generate.py``):
token for token the plain generate under fp32, same output width (TRL slices completions by it).

Run: pytest tests/test_prefix_generate.py -m slow
"""

from __future__ import annotations

import functools

import pytest

from tansaku.trainer.cpu.prefix_generate import share_prompt_prefix

pytestmark = pytest.mark.slow


def test_completions_equal_the_plain_generate_and_the_width_is_kept(tiny_model_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    system = [{"role": "system", "content": "You are a search agent. Think, call search, then answer in {{…}}. "
                                            "Be brief, cite the document you read, and never guess."}]
    texts = [tokenizer.apply_chat_template(system + [{"role": "user", "content": q}], add_generation_prompt=True,
                                           tokenize=False)
             for q in ("Who founded the company?", "Where is the harbour of the research ship, and what is landed?",
                       "Hi")]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    config = GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        plain = model.generate(**enc, generation_config=config)
        calls = []
        forward = model.forward

        @functools.wraps(forward)  # generate reads forward's signature: keep it
        def counting_forward(*args, **kwargs):
            calls.append(kwargs.get("input_ids", args[0] if args else None).shape)
            return forward(*args, **kwargs)

        model.forward = counting_forward
        shared = share_prompt_prefix(model).generate(**enc, generation_config=config)
    assert shared.shape == plain.shape  # TRL takes completions as output[:, prompt width:]
    width = enc["input_ids"].shape[1]
    assert shared[:, width:].tolist() == plain[:, width:].tolist()
    assert calls[0][0] == 1 and calls[0][1] > 32  # the shared tokens, once
    assert max(c[1] for c in calls[1:]) < enc["input_ids"].shape[1] - 32  # the rows' prefill skipped them
