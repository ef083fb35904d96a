"""The kept cache of TRL's tool-loop turns (``core/llm/turn_cache.py`` through ``prefix_generate``): the next turn
gives the plain generate's tokens (fp32) while prefilling only what is new, and a weight update drops it.

Run: pytest tests/test_turn_cache.py -q
"""

from __future__ import annotations

import functools

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from tansaku.core.llm.turn_cache import TurnCache
from tansaku.trainer.cpu.prefix_generate import share_prompt_prefix

NEW = 7
CONFIG = GenerationConfig(max_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=5)


def _model():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)).eval()


def _left_padded(rows):
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):], mask[i, width - len(row):] = row, 1
    return ids, mask


def _next_turn(ids, mask, out, keep, tool_lengths):
    """TRL's tool loop: each continuing episode's context (prompt + completion up to its end token) + a tool
    result, as concatenated ids."""
    rows = []
    for i, n in zip(keep, tool_lengths):
        completion = out[i, ids.shape[1]:].tolist()
        completion = completion[:completion.index(5) + 1] if 5 in completion else completion
        rows.append(torch.cat([ids[i][mask[i].bool()], torch.tensor(completion), torch.randint(6, 300, (n,))]))
    return _left_padded(rows)


def _counting(model):
    widths = []
    forward = model.forward

    @functools.wraps(forward)
    def counting(*args, **kwargs):
        widths.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    model.forward = counting
    return widths


def test_the_next_turn_reuses_the_kept_cache_and_gives_the_plain_tokens():
    model = _model()
    head = torch.randint(6, 300, (40,))
    prompts = [torch.cat([head, torch.randint(6, 300, (n,))]) for n in (5, 11, 8)]
    ids, mask = _left_padded(prompts)
    with torch.no_grad():
        plain_first = model.generate(input_ids=ids, attention_mask=mask, generation_config=CONFIG)
        widths = _counting(model)
        wrapped = share_prompt_prefix(model)
        first = wrapped.generate(input_ids=ids, attention_mask=mask, generation_config=CONFIG)
        assert first.tolist() == plain_first.tolist()
        ids2, mask2 = _next_turn(ids, mask, first, keep=[2, 0], tool_lengths=[9, 4])
        widths.clear()
        second = wrapped.generate(input_ids=ids2, attention_mask=mask2, generation_config=CONFIG)
        assert widths[0] <= 9 + 1 + 1  # the prefill: the tool result and the last uncached token, not the context
        model.forward = model.__class__.forward.__get__(model)
        plain_second = model.generate(input_ids=ids2, attention_mask=mask2, generation_config=CONFIG)
    assert second.shape == plain_second.shape  # TRL slices completions at its own width
    assert second.tolist() == plain_second.tolist()


def test_a_weight_update_drops_the_kept_cache():
    model = _model()
    ids, mask = _left_padded([torch.randint(6, 300, (n,)) for n in (40, 45)])
    turns = TurnCache(model)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=CONFIG, return_dict_in_generate=True)
        turns.keep(out.cache, ids, mask, out.sequences, [5])
        turns.end_call()
        rows = [row[m.bool()] for row, m in zip(*_next_turn(ids, mask, out.sequences, [0, 1], [3, 3]))]
        assert turns.plan(rows) is not None and turns.plan(rows).reused[0] >= 40
        model.lm_head.weight.add_(0.01)  # an optimizer step, in place
        assert turns.plan(rows) is None and turns.kept == []
