"""The in-place KV cache (``core/llm/growing_cache.py``): the same keys and values as transformers' dynamic
layer through appends, regrowth, crops and batch operations, and the same tokens from ``generate``.

Run: pytest tests/test_growing_cache.py -q
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicLayer

from tansaku.core.llm import growing_cache as module
from tansaku.core.llm.growing_cache import GrowingLayer, growing_cache


def _kv(batch, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, n, 8, generator=g), torch.randn(batch, 3, n, 4, generator=g)


def test_appends_regrowth_crops_and_batch_operations_hold_what_a_dynamic_layer_holds(monkeypatch):
    monkeypatch.setattr(module, "SPARE_POSITIONS", 2)  # regrow often
    plain, grown = DynamicLayer(), GrowingLayer()
    steps = [("update", 5), ("update", 1), ("update", 1), ("crop", -2), ("update", 3), ("select", [2, 0]),
             ("update", 1), ("repeat", 2), ("update", 4), ("update", 1)]
    for k, (op, arg) in enumerate(steps):
        for layer in (plain, grown):
            if op == "update":
                out = layer.update(*_kv(plain.keys.shape[0] if plain.is_initialized else 3, arg, k))
            elif op == "crop":
                layer.crop(arg)
            elif op == "select":
                layer.batch_select_indices(torch.tensor(arg))
            else:
                layer.batch_repeat_interleave(arg)
        assert torch.equal(plain.keys, grown.keys) and torch.equal(plain.values, grown.values), (k, op)
        if op == "update":
            assert torch.equal(out[0], plain.keys)
    assert grown.room_keys.shape[-2] > grown.keys.shape[-2]  # there is room left: the next step copies nothing
    ptr = grown.room_keys.data_ptr()
    grown.update(*_kv(4, 1, 99))
    assert grown.room_keys.data_ptr() == ptr and grown.keys.data_ptr() == ptr  # written in place


def test_generate_gives_the_same_tokens_with_the_growing_cache():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)).eval()
    ids = torch.randint(3, 300, (3, 12))
    mask = torch.ones_like(ids)
    ids[1, :4], mask[1, :4] = 0, 0
    config = GenerationConfig(max_new_tokens=300, min_new_tokens=300, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        cache = growing_cache(model.config)
        grown = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, cache=cache)
        # a filled cache (a shared prefix computed once) converts too
        prefix = model(input_ids=ids[:1, :6], use_cache=True).cache
        assert all(type(layer) is DynamicLayer for layer in prefix.layers)
        converted = growing_cache(model.config, prefix)
    assert torch.equal(plain, grown)
    assert all(type(layer) is GrowingLayer for layer in cache.layers)
    assert cache.layers[0].room_keys.shape[-2] >= 312  # it grew past its first room (12 + 256) in place
    assert converted is prefix and all(type(layer) is GrowingLayer for layer in prefix.layers)
    assert converted.get_seq_length() == 6


def test_an_empty_cache_without_config_replicates_growing_layers():
    cache = growing_cache(None, DynamicCache())
    cache.update(*_kv(2, 3, 0), layer_idx=0)
    assert type(cache.layers[0]) is GrowingLayer and cache.get_seq_length() == 3
