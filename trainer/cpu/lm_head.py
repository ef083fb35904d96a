"""On CPU, TRL's fused LM head scored through plain bf16 projections of the labelled positions only.

    from tansaku.trainer.cpu.lm_head import score_labelled_positions
    score_labelled_positions(trainer)   # tansaku.trainer.cpu.apply does this for train sft and train rl

TRL's SFT and GRPO trainers patch the model with a fused LM head (``trl.trainer.utils.add_fused_lm_head``) and
call it as ``model(..., labels=labels, fused_lm_head=True)`` for per-token log-probs without the full logits.
On CUDA it scores only the positions whose label is not -100. Elsewhere TRL keeps tile shapes fixed for
compilers: it scores every position, the prompt included, and accumulates the head's gradient GEMMs in fp32
inputs. A compact SFT row of ~1.2k tokens has ~530 prompt tokens; on a 2-core CPU the head then takes 3.0 s
of an 8.1 s forward + backward (``bench/results/cpu_lm_head.md``). This wrapper (an instance attribute
over TRL's forward: TRL's code is untouched) runs TRL's backbone call, then projects only the labelled rows,
in blocks of ``BLOCK_ROWS`` under torch's checkpointing (so no block's ``[rows, vocab]`` logits outlive it),
with the autocast dtype's matmuls and fp32 log-softmax: the path every trainer took before the fused head,
0.84 s on the same row. It returns TRL's ``FusedCausalLMOutput`` with the same fields and zeros where the
label is -100. Models whose logits TRL rescales (soft-capping, ``logit_scale`` and kin), MoE router losses and
non-CPU devices keep TRL's own head. For GRPO, ``share_prefix`` has the policy's training forwards run the
prompt tokens all rollouts of a batch share once per optimizer step (``tansaku.trainer.cpu.prefix_train``).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from peft import PeftModel
from torch.utils.checkpoint import checkpoint
from trl.trainer.utils import FusedCausalLMOutput

from tansaku.trainer.cpu.prefix_train import SharedPrefix

BLOCK_ROWS = 256  # rows of logits alive at once: 256 × 49k vocab × fp32 is 50 MB per temporary
# Config keys TRL's head handles and this one does not: rescaled or capped logits, MoE router losses.
TRL_ONLY_CONFIG_KEYS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                        "logits_scaling", "output_router_logits")
# The fields besides log_probs each trainer has TRL's head compute (``add_fused_lm_head(outputs=...)`` in its
# __init__; tests/test_trl_private_api.py checks TRL still asks for these): the others stay None, as in TRL,
# since each costs a pass over [rows, vocab] per block and again in the backward's recomputation.
EXTRAS = ("entropy", "is_top1")  # SFT: the entropy and mean_token_accuracy metrics
GRPO_EXTRAS = ("entropy",)  # GRPO: the entropy metric and mask; nothing reads is_top1
REFERENCE_EXTRAS = ()  # a reference model (TRL patches it with the default outputs: log_probs alone)


def block_scores(hidden, weight, bias, labels, inv_temperature: float, extras: tuple[str, ...] = EXTRAS):
    """Log-prob of each label and, of ``extras``, the entropy and whether the label is the first argmax, for a
    block of rows.

    >>> w = torch.eye(3)
    >>> lp, ent, top1 = block_scores(torch.tensor([[2.0, 0.0, 0.0]]), w, None, torch.tensor([0]), 1.0)
    >>> round(lp.item(), 4), top1.tolist()
    (-0.2395, [True])
    >>> len(block_scores(torch.tensor([[2.0, 0.0, 0.0]]), w, None, torch.tensor([0]), 1.0, ()))
    1
    """
    z = F.linear(hidden, weight, bias).float() * inv_temperature
    log_p = z.log_softmax(-1)
    scores = [log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)]
    if "entropy" in extras:
        scores.append(-(log_p.exp() * log_p).sum(-1))
    if "is_top1" in extras:
        scores.append(z.argmax(-1) == labels)
    return tuple(scores)


def labelled_scores(hidden, weight, bias, labels, temperature: float = 1.0, block_rows: int | None = None,
                    extras: tuple[str, ...] = EXTRAS):
    """``block_scores`` over every row of ``hidden`` ([N, H]), ``block_rows`` (default ``BLOCK_ROWS``) at a
    time, each block recomputed in the backward rather than keeping its logits."""
    inv_t, block_rows = 1.0 / temperature, block_rows or BLOCK_ROWS
    parts = [checkpoint(block_scores, hidden[s:s + block_rows], weight, bias, labels[s:s + block_rows], inv_t,
                        extras, use_reentrant=False)
             # one empty block keeps an empty batch connected
             for s in range(0, max(len(hidden), 1), block_rows)]
    return tuple(torch.cat(p) for p in zip(*parts))


def handles(model) -> bool:
    """Whether this head gives what TRL's does for ``model``: on CPU, none of ``TRL_ONLY_CONFIG_KEYS`` set."""
    config = model.config.get_text_config()
    return model.device.type == "cpu" and not any(getattr(config, k, None) for k in TRL_ONLY_CONFIG_KEYS)


def score_labelled_positions(trainer, share_prefix: bool = False,
                             extras: tuple[str, ...] = EXTRAS) -> SharedPrefix | None:
    """Wrap the forward TRL patched on the trainer's model (and reference model) when ``handles`` says so.
    ``share_prefix`` (GRPO): the policy's training forwards run the rollouts' shared prompt tokens once per
    optimizer step (``tansaku.trainer.cpu.prefix_train``); returns that ``SharedPrefix`` for the trainer to
    feed. ``extras``: the fields besides log_probs the trainer's TRL head computes for the policy."""
    temperature = getattr(trainer, "temperature", 1.0)  # GRPO's sampling temperature; SFT scores at 1.0
    policy = trainer.model.get_base_model() if isinstance(trainer.model, PeftModel) else trainer.model
    # Not under gradient checkpointing: its recomputation would write the cache twice, so the training forward
    # takes the full path, and TRL's no-grad forwards (old log-probs), which it runs with checkpointing off,
    # must take the same path, or rounding alone moves the ratio a round is clipped against.
    checkpointing = getattr(getattr(trainer, "args", None), "gradient_checkpointing", False)
    shared = SharedPrefix(policy) if share_prefix and handles(policy) and not checkpointing else None
    for model, prefix, fields in ((policy, shared, extras),
                                  (getattr(trainer, "ref_model", None), None, REFERENCE_EXTRAS)):
        if model is not None and handles(model):
            model.forward = labelled_forward(model, temperature, prefix, fields)
    return shared


def labelled_forward(model, temperature: float, shared: SharedPrefix | None = None,
                     extras: tuple[str, ...] = EXTRAS):
    """``model``'s forward with ``fused_lm_head=True`` calls scored by ``labelled_scores`` (log-probs and
    ``extras``; the other fields None, as TRL leaves the outputs it was not asked for), over ``shared``'s
    cache of the shared prompt tokens where it applies; every other call goes to the forward TRL patched
    (``add_fused_lm_head``), whose signature ``generate`` reads."""
    fused = model.forward

    @functools.wraps(fused)
    def forward(*args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None,
                **kwargs):
        if not fused_lm_head:
            return fused(*args, labels=labels, shift_labels=shift_labels,
                         num_items_in_batch=num_items_in_batch, **kwargs)
        targets = labels[:, 1:] if shift_labels is None else shift_labels
        mask = targets != -100
        hidden = None
        if shared is not None and not args:
            found = shared.hidden_states(**kwargs)
            # every scored position
            if found is not None and bool(found[1][:, :targets.shape[1]][mask].all()):
                hidden = found[0]
        if hidden is None:
            hidden = model.base_model(*args, **{**kwargs, "use_cache": False}).last_hidden_state
        hidden = hidden[:, :targets.shape[1]]  # unshifted labels: position t predicts label t + 1
        head = model.get_output_embeddings()
        scores = labelled_scores(hidden[mask], head.weight, head.bias, targets[mask], temperature,
                                 extras=extras)
        log_probs, *found = (x.new_zeros(mask.shape).masked_scatter(mask, x) for x in scores)
        fields = dict(zip(extras, found))
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(loss=-log_probs.sum() / count, log_probs=log_probs, label_mask=mask,
                                   entropy=fields.get("entropy"), is_top1=fields.get("is_top1"))

    return forward
