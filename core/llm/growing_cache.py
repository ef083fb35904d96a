"""A KV cache for transformers' ``generate`` that appends in place: a decode step writes one position per
layer instead of copying the whole cache.

    from tansaku.core.llm.growing_cache import growing_cache
    model.generate(**inputs, cache=growing_cache(model.config, inputs.pop("cache", None)))

transformers' ``DynamicLayer`` grows by ``torch.cat`` at every step, which copies each layer's keys and values
whole: on the 2-core machine that is ~45 ms of a ~175 ms bf16 decode step at 16 rows × 1k positions × 30
layers (``bench/kv_cache.py``). ``GrowingLayer`` keeps them in buffers with room to spare, writes each step's
positions in place and hands attention a view of the filled part, which SDPA reads as fast as a contiguous
tensor here. When a batch operation (``batch_select_indices``, ``batch_repeat_interleave``) or anything else
replaces its tensors, the next update copies them into fresh room once. Sliding-window, quantized and other
layer kinds are left as they are. The tokens generated are the same: only where the keys are stored changes.
"""

from __future__ import annotations

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

SPARE_POSITIONS = 256  # room added beyond what is needed, and at least a quarter more: few regrowths per call


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of buffers that grow by amortised doubling."""

    room_keys = room_values = None  # the buffers; ``keys`` / ``values`` are their filled part

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, new = self.get_seq_length(), key_states.shape[-2]
        if not self._holds_current(key_states) or length + new > self.room_keys.shape[-2]:
            self._make_room(length, length + new, key_states, value_states)
        self.room_keys[..., length:length + new, :] = key_states
        self.room_values[..., length:length + new, :] = value_states
        self.keys = self.room_keys[..., :length + new, :]
        self.values = self.room_values[..., :length + new, :]
        return self.keys, self.values

    def _holds_current(self, key_states) -> bool:
        """Whether ``keys`` is still the filled part of the buffer (a crop keeps it; a batch operation does
        not)."""
        room = self.room_keys
        return (room is not None and room.shape[:2] == key_states.shape[:2] and room.dtype == key_states.dtype
                and (self.keys.numel() == 0 or self.keys.data_ptr() == room.data_ptr()))

    def _make_room(self, length: int, needed: int, key_states, value_states) -> None:
        capacity = needed + max(SPARE_POSITIONS, needed // 4)
        batch, heads = key_states.shape[:2]
        keys = key_states.new_empty(batch, heads, capacity, key_states.shape[-1])
        values = value_states.new_empty(batch, value_states.shape[1], capacity, value_states.shape[-1])
        if length:
            keys[..., :length, :], values[..., :length, :] = self.keys, self.values
        self.room_keys, self.room_values = keys, values


def growing_cache(config, cache: DynamicCache | None = None) -> DynamicCache:
    """``cache`` (default: a new ``DynamicCache`` for ``config``) with its plain dynamic layers, filled or
    not, turned into ``GrowingLayer``s holding the same keys and values."""
    cache = cache if cache is not None else DynamicCache(config=config)
    cache.layers = [as_growing(layer) for layer in cache.layers]
    if cache.layer_class_to_replicate is DynamicLayer:
        cache.layer_class_to_replicate = GrowingLayer
    return cache


def as_growing(layer):
    """``layer`` as a ``GrowingLayer`` with its state, if it is exactly a ``DynamicLayer``; else ``layer``."""
    if type(layer) is not DynamicLayer:
        return layer
    grown = GrowingLayer()
    grown.__dict__.update(layer.__dict__)
    return grown
