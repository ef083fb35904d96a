"""GRPO generation with transformers that computes the prompt part every episode shares once per call, and
an episode's earlier turns once per episode.

    from tansaku.trainer.cpu.prefix_generate import share_prompt_prefix
    share_prompt_prefix(trainer.model)   # cpu.apply does this unless a recipe sets share_prompt_prefix: false

Without vLLM, TRL's GRPOTrainer generates each turn with ``model.generate`` over the left-padded batch of
every active episode's whole context. Those contexts all begin with the same system turn and tool schemas
(most of a compact prompt), and a multi-turn episode pays for them again at every turn: in the first profile
of one 16-episode GSPO step (``bench/gspo_profile.py``, 2026-12-01) prefill was 37k tokens, a fifth of the
step. This wrapper of the model's ``generate`` (an instance attribute: TRL's code is untouched) finds the
tokens all rows of a call share after their padding, runs them once, and hands generate their KV cache with
the rows laid out as [shared tokens][padding][own tokens]. The layout is as wide as TRL's own, so TRL's
``prompt_length`` slicing of the output is unchanged; the attention mask hides the padding and generate
numbers positions from the mask, so each row sees its text at the positions it had. The shared part is
recomputed at every call (the weights change between steps), so nothing stale is ever reused. A call that
continues the episodes of the call before it (the next turn of TRL's tool loop, with the same weights) reuses
that call's cache instead, so it prefills only the tool results (``tansaku.core.llm.turn_cache``). Every cache
it hands generate appends in place (``tansaku.core.llm.growing_cache``).

Under fp32 the completions are token for token those of the plain call (``tests/test_prefix_generate.py``);
under bf16 the other summation order can change a rounding, as batch composition already does.
"""

from __future__ import annotations

import copy
import functools

import torch

from tansaku.core.llm.growing_cache import growing_cache
from tansaku.core.llm.turn_cache import TurnCache, common_length, continuing_layout, end_token_ids

MIN_SHARED_TOKENS = 32  # below this the extra forward costs more than it saves


def shared_prefix_length(input_ids, attention_mask) -> int:
    """Tokens every row shares right after its left padding, leaving each row at least one token of its own.

    >>> import torch
    >>> ids = torch.tensor([[0, 5, 6, 7, 8], [5, 6, 7, 9, 9], [0, 0, 5, 6, 4]])
    >>> shared_prefix_length(ids, (ids != 0).long())
    2
    """
    rows = [row[mask.bool()] for row, mask in zip(input_ids, attention_mask)]
    shortest = min(len(r) for r in rows)
    return min(min((common_length(rows[0], r) for r in rows[1:]), default=shortest), shortest - 1)


def share_prompt_prefix(model, min_shared: int = MIN_SHARED_TOKENS, turns: TurnCache | None = None):
    """Replace ``model.generate`` by one that computes the batch's shared prompt tokens once and reuses the
    last call's cache for the next turn (see module doc). ``turns``: where that cache is kept (default: a
    ``TurnCache`` over ``model``'s weights; a generation copy passes one over the training model it is
    refreshed from, which the trainer also clears once the rollouts are done)."""
    generate = model.generate
    turns = turns if turns is not None else TurnCache(model)

    @functools.wraps(generate)
    def generate_sharing_prefix(input_ids=None, attention_mask=None, **kwargs):
        config = kwargs.get("generation_config")
        if (input_ids is None or attention_mask is None or "cache" in kwargs or "past_key_values" in kwargs
                or getattr(config, "cache_implementation", None) or kwargs.get("return_dict_in_generate")
                or getattr(config, "return_dict_in_generate", False)
                or (getattr(config, "num_return_sequences", None) or 1) > 1):
            turns.clear()
            return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        rows = [row[mask.bool()] for row, mask in zip(input_ids, attention_mask)]
        plan = turns.plan(rows)
        if plan is not None:
            (ids, mask), cache = continuing_layout(rows, plan), turns.gathered(plan)
        else:
            ids, mask, cache = _shared_prefix_layout(model, rows, input_ids, attention_mask, min_shared)
        out = generate(input_ids=ids, attention_mask=mask, cache=cache, **returning_the_cache(kwargs))
        turns.keep(out.cache, ids, mask, out.sequences, end_token_ids(model, config))
        turns.end_call()
        return torch.cat([input_ids, out.sequences[:, ids.shape[1]:]], dim=1)  # TRL slices at its own width

    model.generate = generate_sharing_prefix
    return model


def returning_the_cache(kwargs: dict) -> dict:
    """``generate``'s arguments asking for its output with the cache (in the generation config when one is
    passed: transformers deprecates mixing the two)."""
    config = kwargs.get("generation_config")
    if config is None:
        return {**kwargs, "return_dict_in_generate": True}
    config = copy.deepcopy(config)
    config.return_dict_in_generate = True
    return {**kwargs, "generation_config": config}


def _shared_prefix_layout(model, rows, input_ids, attention_mask, min_shared: int):
    """[shared tokens][padding][own tokens] with the shared tokens' cache, or the batch as it came (fewer than
    two rows, or less than ``min_shared`` shared) with an empty cache."""
    shared = shared_prefix_length(input_ids, attention_mask) if len(rows) > 1 else 0
    if shared < min_shared:
        return input_ids, attention_mask, growing_cache(model.config)
    width = input_ids.shape[1]
    prefix = rows[0][:shared].unsqueeze(0)
    ids = torch.zeros_like(input_ids)  # the padding's id does not matter: the mask hides it
    mask = torch.zeros_like(attention_mask)
    for i, row in enumerate(rows):
        rest = row[shared:]
        ids[i, :shared], ids[i, width - len(rest):] = prefix[0], rest
        mask[i, :shared], mask[i, width - len(rest):] = 1, 1
    with torch.no_grad():
        cache = model(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True).cache
    cache.batch_repeat_interleave(len(rows))
    return ids, mask, growing_cache(model.config, cache)

