"""The bf16 generation copy (``trainer/cpu/generation_copy.py``): the policy's generate runs on a bf16 copy holding the
training weights of the moment (refreshed at every call, so an optimizer step is seen by the next rollout), with
ties and buffers kept, the training model untouched, and TRL's generate kept where the copy is not equivalent.

Run: pytest tests/test_generation_copy.py -q
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch
from peft import LoraConfig, get_peft_model
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from tansaku.trainer.cpu.generation_copy import COPY_DTYPE, bf16_copy, generate_with_bf16_copy, handles
from tansaku.trainer.cpu.prefix_generate import share_prompt_prefix

CONFIG = GenerationConfig(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)


def _model():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                        pad_token_id=0))


def _trainer(model, bf16=True, use_vllm=False):
    return SimpleNamespace(model=model, args=SimpleNamespace(bf16=bf16, use_vllm=use_vllm))


def _inputs():
    ids = torch.randint(3, 300, (3, 40))
    ids[:, :34] = ids[0, :34]  # a shared system turn, as every episode of a GRPO call has
    mask = torch.ones_like(ids)
    ids[2, :2], mask[2, :2] = 0, 0  # a left-padded row
    ids[2, 2:36] = ids[0, :34]
    return {"input_ids": ids, "attention_mask": mask}


def _reference(model, inputs):
    """What a bf16 model with ``model``'s current weights generates, built independently of the copy."""
    ref = LlamaForCausalLM(model.config)
    ref.load_state_dict(model.state_dict())
    ref.to(COPY_DTYPE).eval()
    with torch.no_grad():
        return ref.generate(**inputs, generation_config=CONFIG)


def test_the_copy_generates_with_the_weights_of_the_moment():
    model, inputs = _model(), _inputs()
    assert generate_with_bf16_copy(_trainer(model))
    with torch.no_grad():
        first = model.generate(**inputs, generation_config=CONFIG)
    assert first.tolist() == _reference(model, inputs).tolist()
    # an optimizer step between two rollouts: the next generate must see it
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    model(input_ids=inputs["input_ids"], labels=inputs["input_ids"]).loss.backward()
    optimizer.step()
    with torch.no_grad():
        second = model.generate(**inputs, generation_config=CONFIG)
    assert second.tolist() == _reference(model, inputs).tolist()
    assert second.tolist() != first.tolist()  # the step changed the greedy tokens: the check above can fail


def test_the_copy_is_bf16_with_ties_and_buffers_kept_and_the_policy_untouched():
    model = _model()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    twin = bf16_copy(model)
    assert {p.dtype for p in twin.parameters()} == {COPY_DTYPE}
    assert twin.lm_head.weight is twin.model.embed_tokens.weight  # tied, as in the policy
    assert twin.model.rotary_emb.inv_freq.dtype == torch.float32  # positions keep their precision
    assert not any(p.requires_grad for p in twin.parameters()) and not twin.training
    assert {p.dtype for p in model.parameters()} == {torch.float32} and all(p.requires_grad
                                                                             for p in model.parameters())
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def test_patched_forwards_stay_on_the_policy_and_the_prefix_runs_on_the_copy():
    model, inputs = _model(), _inputs()
    calls = []
    forward = model.forward

    @functools.wraps(forward)
    def counting_forward(*args, **kwargs):  # as TRL's fused head and tansaku's CPU head patch the policy
        calls.append(1)
        return forward(*args, **kwargs)

    model.forward = counting_forward
    assert generate_with_bf16_copy(_trainer(model), wrap_copy=share_prompt_prefix)
    with torch.no_grad():
        out = model.generate(**inputs, generation_config=CONFIG)
    assert calls == []  # every forward of the rollout, the shared prefix's included, ran on the copy
    assert out.shape == (3, 46)  # TRL slices completions at the prompt's width


def test_other_setups_keep_trls_generate():
    peft = get_peft_model(_model(), LoraConfig(r=2, target_modules=["q_proj"]))
    bf16 = _model().to(torch.bfloat16)
    for trainer in (_trainer(_model(), bf16=False), _trainer(_model(), use_vllm=True), _trainer(peft),
                    _trainer(bf16)):
        generate = trainer.model.generate
        assert not handles(trainer) and not generate_with_bf16_copy(trainer)
        assert trainer.model.generate == generate
