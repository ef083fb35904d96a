"""``tansaku.core.llm.contiguous_head``: the generating model's LM head takes a contiguous input on CPU — the
same tokens, a deep copy (the bf16 generation copy) bound to its own head, other heads left alone.

Run: pytest tests/test_contiguous_head.py -q
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tansaku.core.llm.contiguous_head import contiguous_head_input


def _model():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2)).eval()


def test_generation_is_unchanged_and_a_copy_keeps_its_own_head():
    plain, patched = _model(), _model()
    assert contiguous_head_input(patched)
    ids = torch.randint(3, 300, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a left-padded row
    kwargs = {"attention_mask": mask, "max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(plain.generate(ids, **kwargs), patched.generate(ids, **kwargs))
    twin = copy.deepcopy(patched)
    assert twin.lm_head.forward.__self__ is twin.lm_head  # not the original's weights
    with torch.no_grad():
        twin.lm_head.weight.zero_()
    hidden = torch.randn(3, 5, 32)[:, -1:, :]
    assert not twin.lm_head(hidden).any() and patched.lm_head(hidden).any()


def test_a_head_that_is_not_a_plain_linear_is_left_alone():
    model = _model()
    model.lm_head = torch.nn.Sequential(model.lm_head)
    assert not contiguous_head_input(model)
