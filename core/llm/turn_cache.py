"""KV caches of one generate call kept for the next turn of the same episodes, wherever a multi-turn loop
calls ``generate`` with each episode's whole context again.

    turns = TurnCache(weights=model)
    plan = turns.plan(rows)            # rows: each episode's unpadded tokens; None: nothing to reuse
    ids, mask = continuing_layout(rows, plan)
    cache = turns.gathered(plan)
    out = model.generate(input_ids=ids, attention_mask=mask, cache=cache, ...)
    turns.keep(cache, ids, mask, sequences, end_token_ids(model))   # after every batch of the call
    turns.release()                    # optional, once the call's last batch has gathered what it reuses
    turns.end_call()                   # the call's batches become what the next call reuses

An agent loop (TRL's GRPO tool loop, tansaku's own evaluation and rollouts through the transformers backend)
generates a turn, runs the tools, and calls ``generate`` again with each episode's whole context: its earlier
tokens, then the tool result. Without vLLM that call prefills the whole context again; in the profile of a
16-episode GSPO step prefill was ~30 s, most of it re-reading earlier turns. ``TurnCache`` keeps the last
call's caches (one per batch the call was split into) with, per row, the cache columns of its text (the
positions whose keys and values were computed). For a new batch it finds each row's longest prefix in common
with a kept row and gathers those columns into a new cache, so the batch prefills only what is new. The keys
were computed at the positions generate numbers from the mask (0… for each row's text), which is where the new
batch numbers
them too. Kept caches are dropped when the weights change: ``weights``' parameter version counters move at
every in-place update (the optimizer's step, a refresh of a generation copy's source).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from tansaku.core.llm.growing_cache import growing_cache

MIN_REUSED_TOKENS = 32  # below this, gathering costs more than the prefill it saves


@dataclass
class Kept:
    """One generated batch: its cache and, per row, the tokens it holds keys and values of and their
    columns."""

    cache: DynamicCache
    texts: list[torch.Tensor]  # per row: the tokens whose keys and values the cache holds, in order
    columns: list[torch.Tensor]  # per row: those tokens' cache columns


@dataclass
class Plan:
    rows: list[tuple[int, int] | None]  # per new row: the (kept batch, row) it continues, None: none
    reused: list[int]  # per new row: how many of its leading tokens come from the kept cache


@dataclass
class TurnCache:
    weights: torch.nn.Module  # whose parameter versions say whether a kept cache is still valid
    min_reused: int = MIN_REUSED_TOKENS
    kept: list[Kept] = field(default_factory=list)  # the last finished call's batches: what a batch reuses
    keeping: list[Kept] = field(default_factory=list)  # the batches of the call in progress
    kept_version: tuple[int, ...] | None = None

    def version(self) -> tuple[int, ...]:
        return tuple(p._version for p in self.weights.parameters())

    def plan(self, rows: list[torch.Tensor]) -> Plan | None:
        """Per new row (its unpadded tokens), the kept row with the longest common prefix; None when the
        weights changed since it was kept or no row reuses ``min_reused`` tokens."""
        if self.kept and self.kept_version != self.version():
            self.clear()
        if not self.kept:
            return None
        plan = Plan([], [])
        for row in rows:
            best, length = None, 0
            for b, batch in enumerate(self.kept):
                for k, text in enumerate(batch.texts):
                    n = min(common_length(row, text), len(row) - 1)  # the row keeps a token to prefill
                    if n > length:
                        best, length = (b, k), n
            plan.rows.append(best if length >= self.min_reused else None)
            plan.reused.append(length if length >= self.min_reused else 0)
        return plan if any(plan.reused) else None

    def gathered(self, plan: Plan) -> DynamicCache:
        """A cache of ``max(plan.reused)`` columns: each row's reused keys and values right-aligned, zeros
        (masked) before them."""
        width, cache = max(plan.reused), growing_cache(None, DynamicCache())
        for layer_index in range(len(self.kept[0].cache.layers)):
            sample = self.kept[0].cache.layers[layer_index]
            keys, values = (t.new_zeros(len(plan.rows), t.shape[1], width, t.shape[3])
                            for t in (sample.keys, sample.values))
            for i, (source, n) in enumerate(zip(plan.rows, plan.reused)):
                if n:
                    b, k = source
                    layer, columns = self.kept[b].cache.layers[layer_index], self.kept[b].columns[k][:n]
                    keys[i, :, width - n:], values[i, :, width - n:] = (layer.keys[k, :, columns],
                                                                        layer.values[k, :, columns])
            cache.update(keys, values, layer_index)
        return cache

    def keep(self, cache, ids, mask, sequences, eos_ids) -> None:
        """Keep a finished batch's cache: ``ids`` / ``mask`` are the layout it was called with, ``sequences``
        what generate returned (that layout, then the new tokens). Reused from the next call on
        (``end_call``)."""
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
        self.keeping.append(Kept(cache, texts, columns))

    def release(self) -> None:
        """The last call's caches are no longer needed (the call in progress gathered what its last batch
        reuses): free them now rather than at ``end_call``."""
        self.kept, self.kept_version = [], None

    def end_call(self) -> None:
        """The call in progress is over: its batches replace the ones kept before (freed now, not a turn
        later)."""
        self.kept, self.keeping = self.keeping, []
        self.kept_version = self.version() if self.kept else None

    def clear(self) -> None:
        self.kept, self.keeping, self.kept_version = [], [], None


def continuing_layout(rows: list[torch.Tensor], plan: Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) laid out as [padding][tokens from the kept cache][padding][new tokens], to go
    with ``TurnCache.gathered(plan)``: generate prefills only the new ones and numbers positions from the
    mask, so each row's text keeps positions 0…"""
    kept = max(plan.reused)
    news = [row[n:] for row, n in zip(rows, plan.reused)]
    width = kept + max(len(new) for new in news)
    ids = rows[0].new_zeros(len(rows), width)
    mask = rows[0].new_zeros(len(rows), width)
    for i, (row, n, new) in enumerate(zip(rows, plan.reused, news)):
        ids[i, kept - n:kept], mask[i, kept - n:kept] = row[:n], 1
        ids[i, width - len(new):], mask[i, width - len(new):] = new, 1
    return ids, mask


def end_token_ids(model, config=None) -> list[int]:
    """The tokens that end a row's generation: ``config``'s (a generation config passed to generate), else the
    model's own generation config's."""
    eos = getattr(config, "eos_token_id", None)
    eos = eos if eos is not None else model.generation_config.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def common_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading tokens ``a`` and ``b`` share.

    >>> common_length(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4, 5]))
    2
    """
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n
