"""GRPO's training forward with the prompt tokens every episode of a rollout batch shares run once per optimizer step.

    shared = SharedPrefix(model)          # build_rl_trainer wires it on CPU (tansaku.trainer.cpu_lm_head)
    shared.set_rollouts(prompt_ids, prompt_mask)   # after each rollout batch: its shared prompt tokens
    hidden, computed = shared.hidden_states(input_ids, attention_mask)   # in each micro-batch's forward
    shared.flush()                        # after the last micro-batch's backward, before gradient clipping

Every compact episode begins with the same system turn and tool schemas: ~530 of the tiny model's ~1.2k tokens
per episode. TRL's training forward runs one micro-batch per episode (16 per optimizer step in the efficacy
recipe), so those tokens go through forward and backward 16 times with the same weights. Here the first
micro-batch after a flush runs them once and keeps their KV cache, cut from the graph as leaf tensors; each
micro-batch runs only its own tokens over that cache, so its backward stops at the leaves and adds to their
gradients; ``flush`` then runs one backward from the cached keys and values with those summed gradients, which
adds the shared tokens' share to the weights' gradients. The sum over micro-batches of the gradients through
the cut is the gradient through the uncut graph, so the result is TRL's to rounding, and gradient clipping
(after the last micro-batch) sees all of it. RoPE attention depends on relative positions only, so the shared
tokens sitting at positions 0… instead of after each row's left padding changes nothing.

Calls with inputs other than ids and mask (images, token types), without gradients, under gradient
checkpointing (its recomputation would write the cache twice), or whose rows do not begin with the shared
tokens return None and take the full forward.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from tansaku.trainer.prefix_generate import MIN_SHARED_TOKENS, shared_prefix_length


class SharedPrefix:
    """The shared prompt tokens of the current rollout batch and, between flushes, their KV cache."""

    def __init__(self, model, min_tokens: int = MIN_SHARED_TOKENS):
        self.model, self.min_tokens = model, min_tokens
        self.tokens: torch.Tensor | None = None  # 1-D: the tokens every prompt of the batch begins with
        self.graph: list[torch.Tensor] = []  # each layer's keys and values, in the prefix forward's graph
        self.leaves: list[torch.Tensor] = []  # the same tensors cut from it; micro-batches attend to these

    def set_rollouts(self, prompt_ids, prompt_mask) -> None:
        """Take the tokens every prompt of a new rollout batch shares (left-padded ``prompt_ids``)."""
        self.flush()  # the gradients so far belong to the old tokens: add them now (addition is exact anyway)
        n = shared_prefix_length(prompt_ids, prompt_mask)
        self.tokens = prompt_ids[0][prompt_mask[0].bool()][:n] if n >= self.min_tokens else None

    def usable(self, extra_inputs) -> bool:
        return (self.tokens is not None and torch.is_grad_enabled() and not extra_inputs
                and not getattr(self.model, "is_activation_checkpointing", False))

    def hidden_states(self, input_ids, attention_mask, **extra_inputs):
        """The backbone's last hidden states for ``input_ids`` ([B, T, H]) computed over the shared tokens'
        cache, and a [B, T] mask of the positions computed (zeros elsewhere: the shared tokens and padding); or
        None where this forward does not apply (see module doc)."""
        if not self.usable(extra_inputs):
            return None
        rows = own_tokens(input_ids, attention_mask, self.tokens)
        if rows is None:
            return None
        starts, ends = rows
        shared = len(self.tokens)
        if not self.leaves:
            self._run_shared_tokens()
        width, batch = int((ends - starts).max()), len(starts)
        ids = input_ids.new_zeros(batch, width)  # each row's own tokens, right-padded
        mask = attention_mask.new_zeros(batch, shared + width)
        mask[:, :shared] = 1
        for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
            ids[i, :end - start] = input_ids[i, start:end]
            mask[i, shared:shared + end - start] = 1
        cache = DynamicCache()
        for layer in range(len(self.leaves) // 2):
            keys, values = self.leaves[2 * layer:2 * layer + 2]
            cache.update(keys.expand(batch, -1, -1, -1), values.expand(batch, -1, -1, -1), layer)
        own = self.model.base_model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True).last_hidden_state
        hidden, computed = [], torch.zeros_like(attention_mask, dtype=torch.bool)
        for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
            hidden.append(torch.cat([own.new_zeros(start, own.shape[-1]), own[i, :end - start],
                                     own.new_zeros(input_ids.shape[1] - end, own.shape[-1])]))
            computed[i, start:end] = True
        return torch.stack(hidden), computed

    def _run_shared_tokens(self) -> None:
        cache = self.model.base_model(input_ids=self.tokens.unsqueeze(0), use_cache=True).cache
        self.graph = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        self.leaves = [t.detach().requires_grad_() for t in self.graph]

    def flush(self) -> None:
        """Add the shared tokens' part of the gradient (summed over the micro-batches since the last flush) to
        the weights' gradients, and drop the cache: the next optimizer step changes the weights."""
        graph, leaves, self.graph, self.leaves = self.graph, self.leaves, [], []
        pairs = [(g, leaf.grad) for g, leaf in zip(graph, leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([g for g, _ in pairs], [grad for _, grad in pairs])


def own_tokens(input_ids, attention_mask, shared_tokens):
    """Per row, where its own tokens begin (after its padding and the shared tokens) and where its text ends;
    None unless every row's text is one run of the mask that starts with ``shared_tokens`` and goes past it.

    >>> ids = torch.tensor([[0, 7, 8, 9, 4], [7, 8, 5, 6, 0]])
    >>> own_tokens(ids, (ids != 0).long(), torch.tensor([7, 8]))
    (tensor([3, 2]), tensor([5, 4]))
    >>> own_tokens(ids, (ids != 0).long(), torch.tensor([7, 9])) is None
    True
    """
    mask = attention_mask.bool()
    lengths = mask.sum(1)
    first = mask.int().argmax(1)
    shared = len(shared_tokens)
    positions = torch.arange(mask.shape[1], device=mask.device)
    one_run = ((positions >= first[:, None]) & (positions < (first + lengths)[:, None])) == mask
    if not bool(one_run.all()) or bool((lengths <= shared).any()):
        return None
    heads = torch.stack([input_ids[i, f:f + shared] for i, f in enumerate(first.tolist())])
    if not bool((heads == shared_tokens).all()):
        return None
    return first + shared, first + lengths
