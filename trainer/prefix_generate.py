"""GRPO generation with transformers that computes the prompt part every episode shares once per call.

    from tansaku.trainer.prefix_generate import share_prompt_prefix
    share_prompt_prefix(trainer.model)   # build_rl_trainer does this unless the recipe sets share_prompt_prefix: false

Without vLLM, TRL's GRPOTrainer generates each turn with ``model.generate`` over the left-padded batch of every
active episode's whole context. Those contexts all begin with the same system turn and tool schemas (~530 of
a compact episode's ~800 prompt tokens on the tiny model's tokenizer), and a multi-turn episode pays for them
again at every turn: in the profile of one 16-episode GSPO step (``bench/gspo_profile.py``) prefill was 35k
tokens, a fifth of the step. This wrapper of the model's ``generate`` (an instance attribute: TRL's code is
untouched) finds the tokens all rows of a call share after their padding, runs them once, and hands generate
their KV cache with the rows laid out as [shared tokens][padding][own tokens]. The layout is as wide as TRL's
own, so TRL's ``prompt_length`` slicing of the output is unchanged; the attention mask hides the padding and
generate numbers positions from the mask, so each row sees its text at the positions it had. The shared part is
recomputed at every call (the weights change between steps), so nothing stale is ever reused. Its cache, and
the one a call without a shared part gets, appends in place (``tansaku.core.llm.growing_cache``).

Under fp32 the completions are token for token those of the plain call (``tests/test_prefix_generate.py``);
under bf16 the other summation order can change a rounding, as batch composition already does.
"""

from __future__ import annotations

import functools

from tansaku.core.llm.growing_cache import growing_cache

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
    n = 0
    while n < shortest - 1 and all(r[n] == rows[0][n] for r in rows[1:]):
        n += 1
    return n


def share_prompt_prefix(model, min_shared: int = MIN_SHARED_TOKENS):
    """Replace ``model.generate`` by one that computes the batch's shared prompt tokens once (see module doc)."""
    generate = model.generate

    @functools.wraps(generate)
    def generate_sharing_prefix(input_ids=None, attention_mask=None, **kwargs):
        config = kwargs.get("generation_config")
        if (input_ids is None or attention_mask is None or input_ids.shape[0] < 2 or "cache" in kwargs
                or "past_key_values" in kwargs or getattr(config, "cache_implementation", None)):
            return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        shared = shared_prefix_length(input_ids, attention_mask)
        if shared < min_shared:
            return generate(input_ids=input_ids, attention_mask=attention_mask, cache=growing_cache(model.config),
                            **kwargs)
        return _generate_with_prefix(model, generate, input_ids, attention_mask, shared, kwargs)

    model.generate = generate_sharing_prefix
    return model


def _generate_with_prefix(model, generate, input_ids, attention_mask, shared: int, kwargs):
    import torch

    width = input_ids.shape[1]
    rows = [row[mask.bool()] for row, mask in zip(input_ids, attention_mask)]
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
    return generate(input_ids=ids, attention_mask=mask, cache=growing_cache(model.config, cache), **kwargs)
