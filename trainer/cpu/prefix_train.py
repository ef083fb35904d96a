"""GRPO's training forward with the prompt tokens several rollouts share run once per optimizer step.

    shared = SharedPrefix(model)          # build_rl_trainer wires it on CPU (tansaku.trainer.cpu.lm_head)
    shared.set_prompts(rows)              # once each rollout batch is generated: its prompts' shared prefixes
    hidden, computed = shared.hidden_states(input_ids, attention_mask)   # in each micro-batch's forward
    shared.flush()                        # after the last micro-batch's backward, before gradient clipping

The G rollouts of one GRPO prompt share the whole prompt (~450 of a compact episode's ~1.1k tokens on the tiny
model), and all prompts share the system turn. TRL's training forward runs one micro-batch per rollout (16 per
optimizer step in the efficacy recipe), so those tokens go through forward and backward once per rollout with
the same weights. Here each rollout's longest prefix in common with another rollout of the batch (the group's
prompt, less its last token) runs once, at the first micro-batch that needs it after a flush; its KV cache is
cut from the graph as leaf tensors. Each micro-batch runs only its own tokens over that cache, so its backward
stops at the leaves and adds to their gradients; ``flush`` then runs one backward from the cached keys and
values with those summed gradients, which adds the prefixes' share to the weights' gradients. The sum over
micro-batches of the gradients through the cut is the gradient through the uncut graph, so the result is
TRL's to rounding, and gradient clipping (after the last micro-batch) sees all of it. RoPE attention depends
on relative positions only, so a prefix at positions 0… instead of after each row's left padding changes
nothing.

Forwards without gradients (TRL's ``old_per_token_logps`` of an off-policy round, the sampler gap of
``tansaku.trainer.sampler_logprobs``) take the same path over a cache computed without a graph, so the
log-probs a
round is clipped against are computed the way its training forward computes them: in bf16 the full forward and
the prefix path differ by more than GSPO's clip of 3e-4 (on the 2-core CPU, 75 % of the first minibatch's
sequences were clipped before any update), which would clip on rounding instead of on the policy's change.

Calls with inputs other than ids and mask (images, token types), under gradient checkpointing (its
recomputation would write the cache twice), or with a row that begins with no prefix return None and take the
full forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from tansaku.core.llm.turn_cache import common_length
from tansaku.trainer.cpu.prefix_generate import MIN_SHARED_TOKENS


@dataclass
class Prefix:
    """Prompt tokens several rollouts begin with, and between flushes their KV cache."""

    tokens: torch.Tensor  # 1-D
    # each layer's keys and values, in the forward's graph
    graph: list[torch.Tensor] = field(default_factory=list)
    # the same tensors cut from it: rows attend to these
    leaves: list[torch.Tensor] = field(default_factory=list)
    frozen: list[torch.Tensor] = field(default_factory=list)  # keys and values computed without gradients


class SharedPrefix:
    """The prompt prefixes of the current rollout batch (``shared_prefixes``) and their caches."""

    def __init__(self, model, min_tokens: int = MIN_SHARED_TOKENS):
        self.model, self.min_tokens = model, min_tokens
        self.prefixes: list[Prefix] = []

    def set_prompts(self, rows: list[torch.Tensor]) -> None:
        """Take the prefixes the prompts (1-D token tensors) of a new rollout batch share."""
        # the gradients so far belong to the old prefixes: add them now (addition is exact anyway)
        self.flush()
        self.prefixes = [Prefix(tokens) for tokens in shared_prefixes(rows, self.min_tokens)]

    def set_rollouts(self, prompt_ids, prompt_mask) -> None:
        """``set_prompts`` from left-padded ``prompt_ids``."""
        self.set_prompts([row[mask.bool()] for row, mask in zip(prompt_ids, prompt_mask)])

    def usable(self, extra_inputs) -> bool:
        return (bool(self.prefixes) and not extra_inputs
                and not getattr(self.model, "is_activation_checkpointing", False))

    def hidden_states(self, input_ids, attention_mask, **extra_inputs):
        """The backbone's last hidden states for ``input_ids`` ([B, T, H]), each row computed over its
        prefix's cache, and a [B, T] mask of the positions computed (zeros elsewhere: prefixes and padding);
        or None where this forward does not apply (see module doc)."""
        if not self.usable(extra_inputs):
            return None
        spans = text_spans(attention_mask)
        if spans is None:
            return None
        matches = [self._prefix_of(input_ids[i, start:end]) for i, (start, end) in enumerate(spans)]
        if any(m is None for m in matches):
            return None
        rows: dict[int, torch.Tensor] = {}
        for prefix in {id(m): m for m in matches}.values():
            group = [i for i, m in enumerate(matches) if m is prefix]
            own = [input_ids[i, spans[i][0] + len(prefix.tokens):spans[i][1]] for i in group]
            rows.update(zip(group, self._run_over(prefix, own)))
        width = input_ids.shape[1]
        hidden, computed = [], torch.zeros_like(attention_mask, dtype=torch.bool)
        for i, (start, end) in enumerate(spans):
            begin, own = start + len(matches[i].tokens), rows[i]
            hidden.append(torch.cat([own.new_zeros(begin, own.shape[-1]), own,
                                     own.new_zeros(width - end, own.shape[-1])]))
            computed[i, begin:end] = True
        return torch.stack(hidden), computed

    def _prefix_of(self, text) -> Prefix | None:
        """The longest prefix ``text`` begins with and goes past."""
        best = None
        for prefix in self.prefixes:
            n = len(prefix.tokens)
            if (n < len(text) and (best is None or n > len(best.tokens))
                    and torch.equal(text[:n], prefix.tokens)):
                best = prefix
        return best

    def _run_over(self, prefix: Prefix, own: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each row's own tokens through the backbone over ``prefix``'s cache (run once per flush, with
        gradients or without)."""
        if torch.is_grad_enabled() and not prefix.leaves:
            prefix.graph = self._prefix_cache(prefix)
            prefix.leaves = [t.detach().requires_grad_() for t in prefix.graph]
        elif not torch.is_grad_enabled() and not prefix.frozen:
            prefix.frozen = self._prefix_cache(prefix)
        layers = prefix.leaves if torch.is_grad_enabled() else prefix.frozen
        shared, batch, width = len(prefix.tokens), len(own), max(len(o) for o in own)
        ids = own[0].new_zeros(batch, width)  # right-padded: the padding comes after every real token
        mask = own[0].new_zeros(batch, shared + width)
        mask[:, :shared] = 1
        for i, tokens in enumerate(own):
            ids[i, :len(tokens)], mask[i, shared:shared + len(tokens)] = tokens, 1
        cache = DynamicCache()
        for layer in range(len(layers) // 2):
            keys, values = layers[2 * layer:2 * layer + 2]
            cache.update(keys.expand(batch, -1, -1, -1), values.expand(batch, -1, -1, -1), layer)
        out = self.model.base_model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)
        return [out.last_hidden_state[i, :len(tokens)] for i, tokens in enumerate(own)]

    def _prefix_cache(self, prefix: Prefix) -> list[torch.Tensor]:
        cache = self.model.base_model(input_ids=prefix.tokens.unsqueeze(0), use_cache=True).cache
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]

    def flush(self) -> None:
        """Add the prefixes' part of the gradient (summed over the micro-batches since the last flush) to the
        weights' gradients, and drop their caches: the next optimizer step changes the weights."""
        pairs = [(g, leaf.grad) for prefix in self.prefixes for g, leaf in zip(prefix.graph, prefix.leaves)
                 if leaf.grad is not None]
        for prefix in self.prefixes:  # the next optimizer step changes the weights: no cache of these stays
            prefix.graph, prefix.leaves, prefix.frozen = [], [], []
        if pairs:
            torch.autograd.backward([g for g, _ in pairs], [grad for _, grad in pairs])


def shared_prefixes(rows: list[torch.Tensor], min_tokens: int) -> list[torch.Tensor]:
    """Each row's longest common prefix with any other row, leaving the row at least one token of its own;
    the distinct ones of at least ``min_tokens``. The rows of one GRPO group share their whole prompt; rows of
    different prompts, the system turn. Neighbours in sorted order hold each row's longest common prefix.

    >>> rows = [torch.tensor(r) for r in ([1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 5, 6], [7, 8])]
    >>> [p.tolist() for p in shared_prefixes(rows, 2)]
    [[1, 2, 3], [1, 2]]
    """
    order = sorted(range(len(rows)), key=lambda i: rows[i].tolist())
    found: dict[tuple, torch.Tensor] = {}
    for k, i in enumerate(order):
        neighbours = [rows[order[j]] for j in (k - 1, k + 1) if 0 <= j < len(order)]
        n = min(max((common_length(rows[i], other) for other in neighbours), default=0), len(rows[i]) - 1)
        if n >= min_tokens:
            found.setdefault(tuple(rows[i][:n].tolist()), rows[i][:n])
    return sorted(found.values(), key=len, reverse=True)


def text_spans(attention_mask) -> list[tuple[int, int]] | None:
    """Per row, where its text begins and ends; None unless every row's text is one run of the mask.

    >>> text_spans(torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]]))
    [(1, 3), (0, 4)]
    >>> text_spans(torch.tensor([[1, 0, 1, 1]])) is None
    True
    """
    mask = attention_mask.bool()
    lengths, first = mask.sum(1), mask.int().argmax(1)
    positions = torch.arange(mask.shape[1], device=mask.device)
    if not bool((((positions >= first[:, None]) & (positions < (first + lengths)[:, None])) == mask).all()):
        return None
    return list(zip(first.tolist(), (first + lengths).tolist()))
