"""The KV cache of one generate call kept for the next turn of the same episodes in TRL's tool loop.

    turns = TurnCache(weights=trainer.model)
    plan = turns.plan(rows)            # rows: each episode's unpadded context; None: nothing to reuse
    cache = turns.gathered(plan)       # the reused keys and values, to hand generate
    turns.keep(cache, ids, mask, sequences, eos_ids)   # after every call

TRL's GRPO tool loop generates a turn, runs the tools, and calls ``generate`` again with each episode's whole
context: its earlier tokens, concatenated as ids (no re-tokenizing), then the tool result. Without vLLM that
call prefills the whole context again; in the profile of a 16-episode GSPO step prefill was ~30 s, most of it
re-reading earlier turns. ``TurnCache`` keeps the last call's cache with, per row, the cache columns of its text
(the positions whose keys and values were computed). For a new call it finds each row's longest prefix in
common with a kept row and gathers those columns into a new cache, so the call prefills only what is new. The
keys were computed at the positions generate numbers from the mask (0… for each row's text), which is where
the new call numbers them too. A kept cache is dropped when the weights change: ``weights``' parameter
version counters move at every in-place update (the optimizer's step, a refresh of a generation copy's source).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from tansaku.core.llm.growing_cache import growing_cache

MIN_REUSED_TOKENS = 32  # below this, gathering costs more than the prefill it saves


@dataclass
class Kept:
    version: tuple[int, ...]
    cache: DynamicCache
    texts: list[torch.Tensor]  # per row: the tokens whose keys and values the cache holds, in order
    columns: list[torch.Tensor]  # per row: those tokens' cache columns


@dataclass
class Plan:
    rows: list[int]  # per new row: the kept row it continues (-1: none)
    reused: list[int]  # per new row: how many of its leading tokens come from the kept cache


class TurnCache:
    def __init__(self, weights, min_reused: int = MIN_REUSED_TOKENS):
        self.weights, self.min_reused = weights, min_reused
        self.kept: Kept | None = None

    def version(self) -> tuple[int, ...]:
        return tuple(p._version for p in self.weights.parameters())

    def plan(self, rows: list[torch.Tensor]) -> Plan | None:
        """Per new row (its unpadded tokens), the kept row with the longest common prefix; None when the weights
        changed since it was kept or no row reuses ``min_reused`` tokens."""
        if self.kept is None or self.kept.version != self.version():
            self.kept = None
            return None
        plan = Plan([], [])
        for row in rows:
            best, length = -1, 0
            for k, text in enumerate(self.kept.texts):
                n = min(common_length(row, text), len(row) - 1)  # the row keeps a token to prefill
                if n > length:
                    best, length = k, n
            plan.rows.append(best if length >= self.min_reused else -1)
            plan.reused.append(length if length >= self.min_reused else 0)
        return plan if any(plan.reused) else None

    def gathered(self, plan: Plan) -> DynamicCache:
        """A cache of ``max(plan.reused)`` columns: each row's reused keys and values right-aligned, zeros (masked)
        before them."""
        width, batch = max(plan.reused), len(plan.rows)
        source = torch.zeros(batch, width, dtype=torch.long)  # kept row per (row, column)
        column = torch.zeros(batch, width, dtype=torch.long)
        valid = torch.zeros(batch, width, dtype=torch.bool)
        for i, (k, n) in enumerate(zip(plan.rows, plan.reused)):
            if n:
                source[i, width - n:], column[i, width - n:] = k, self.kept.columns[k][:n]
                valid[i, width - n:] = True
        cache = growing_cache(None, DynamicCache())
        for layer_index, layer in enumerate(self.kept.cache.layers):
            keys, values = (t[source, :, column].permute(0, 2, 1, 3) * valid[:, None, :, None]
                            for t in (layer.keys, layer.values))
            cache.update(keys, values, layer_index)
        return cache

    def keep(self, cache, ids, mask, sequences, eos_ids) -> None:
        """Keep a finished call's cache: ``ids`` / ``mask`` are the layout it was called with, ``sequences`` what
        generate returned (that layout, then the new tokens)."""
        width, filled = ids.shape[1], cache.get_seq_length()
        texts, columns = [], []
        eos = torch.tensor(eos_ids, device=sequences.device)
        for i in range(len(ids)):
            own = mask[i].bool().nonzero().squeeze(1)
            new = sequences[i, width:]
            ends = torch.isin(new, eos).nonzero()
            count = int(ends[0]) + 1 if len(ends) else len(new)  # up to its end token: later ones are padding
            cols = torch.cat([own, torch.arange(width, width + count, device=own.device)])
            cols = cols[cols < filled]  # the last sampled token was never run through the model
            texts.append(torch.cat([ids[i][own], new[:count]])[:len(cols)])
            columns.append(cols)
        self.kept = Kept(self.version(), cache, texts, columns)

    def clear(self) -> None:
        self.kept = None


def common_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading tokens ``a`` and ``b`` share.

    >>> common_length(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4, 5]))
    2
    """
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n
