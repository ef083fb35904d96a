"""The CPU LM head (``trainer/cpu/lm_head.py``) gives what TRL's fused head gives: the same log-probs, entropy,
top-1 flags, loss and gradients (fp32: to rounding), zeros where the label is -100, TRL's forward untouched for
generation and for models whose logits TRL rescales.

Run: pytest tests/test_cpu_lm_head.py -q
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import add_fused_lm_head

from tansaku.trainer.cpu import lm_head as cpu_lm_head
from tansaku.trainer.cpu.lm_head import score_labelled_positions


def _pair(temperature: float, **config):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                         **config))
    add_fused_lm_head(model, temperature=temperature, outputs=("log_probs", "entropy", "is_top1"))
    theirs, ours = model, copy.deepcopy(model)  # deepcopy binds TRL's forward to the copy
    score_labelled_positions(SimpleNamespace(model=ours, temperature=temperature))
    return theirs, ours


def _batch():
    ids = torch.randint(3, 300, (3, 21))
    attention = torch.ones_like(ids)
    attention[2, :5] = 0  # a left-padded row
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, :8] = -100  # the prompt
    labels[0, 12:15] = -100  # a tool result inside the completion
    labels[1, :] = -100  # a row with nothing to score
    return ids, attention, labels


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_same_outputs_and_gradients_as_trls_fused_head(monkeypatch, temperature):
    monkeypatch.setattr(cpu_lm_head, "BLOCK_ROWS", 7)  # several blocks, one partial
    theirs, ours = _pair(temperature)
    assert ours.forward is not theirs.forward
    ids, attention, labels = _batch()
    outs = []
    for model in (theirs, ours):
        out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        out.loss.backward()
        outs.append((out, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (a, grads_a), (b, grads_b) = outs
    assert torch.equal(a.label_mask, b.label_mask) and b.label_mask.sum() == 2 * 13 - 3
    for field in ("log_probs", "entropy"):
        assert torch.allclose(getattr(a, field), getattr(b, field), atol=1e-5), field
        assert (getattr(b, field)[~b.label_mask] == 0).all()
    assert torch.equal(a.is_top1, b.is_top1) and torch.allclose(a.loss, b.loss, atol=1e-6)
    for name, grad in grads_a.items():
        assert torch.allclose(grad, grads_b[name], atol=1e-6, rtol=1e-4), name


def test_shift_labels_and_an_empty_batch_score_as_trls():
    theirs, ours = _pair(1.0)
    ids, attention, labels = _batch()
    shifted = torch.cat([labels[:, 1:], torch.full((3, 1), -100)], dim=1)
    a, b = (m(input_ids=ids, attention_mask=attention, shift_labels=shifted, fused_lm_head=True)
            for m in (theirs, ours))
    assert torch.allclose(a.log_probs, b.log_probs, atol=1e-5) and a.log_probs.shape == (3, 21)
    nothing = torch.full_like(labels, -100)
    empty = ours(input_ids=ids, attention_mask=attention, labels=nothing, fused_lm_head=True)
    empty.loss.backward()  # an all-masked micro-batch is still a differentiable zero
    assert empty.loss.item() == 0.0


def test_generation_calls_and_rescaled_models_keep_trls_forward():
    theirs, ours = _pair(1.0)
    ids, attention, _ = _batch()
    with torch.no_grad():
        assert torch.equal(theirs(input_ids=ids, attention_mask=attention).logits,
                           ours(input_ids=ids, attention_mask=attention).logits)
    capped = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2))
    capped.config.final_logit_softcapping = 30.0
    add_fused_lm_head(capped)
    trls = capped.forward
    score_labelled_positions(SimpleNamespace(model=capped))
    assert capped.forward is trls


def test_only_the_fields_the_trainer_asked_for_are_computed():
    """GRPO asks TRL's head for log_probs and entropy: the same values, and is_top1 left None as TRL leaves it."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    add_fused_lm_head(model, temperature=0.9, outputs=("log_probs", "entropy"))
    theirs, ours = model, copy.deepcopy(model)
    score_labelled_positions(SimpleNamespace(model=ours, temperature=0.9), extras=cpu_lm_head.GRPO_EXTRAS)
    ids, attention, labels = _batch()
    a, b = (m(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True) for m in (theirs, ours))
    assert a.is_top1 is None and b.is_top1 is None
    assert torch.allclose(a.log_probs, b.log_probs, atol=1e-5) and torch.allclose(a.entropy, b.entropy, atol=1e-5)
    for out in (a, b):  # the loss GRPO trains on: log-probs and the entropy it may weigh, the same gradients
        (out.loss + 0.1 * out.entropy.sum()).backward()
    for (name, mine), (_, trls) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.allclose(mine.grad, trls.grad, atol=1e-6, rtol=1e-4), name
