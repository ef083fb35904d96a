"""On CPU, GRPO's transformers generation run by a bf16 copy of the policy, refreshed before every generate
call.

    from tansaku.trainer.cpu.generation_copy import generate_with_bf16_copy
    generate_with_bf16_copy(trainer)   # cpu.apply does this unless a recipe sets bf16_generation_copy: false

RL at a learning rate of 1e-5 keeps fp32 master weights (``bf16: true`` without ``dtype``): bf16 weights would
round most updates away. Accelerate then runs every forward under bf16 autocast, and autocast drops its cache
of cast weights when the outermost autocast region ends, which is every forward. So each decode step of TRL's
``model.generate`` casts all 135M weights again and runs the norms and the residual stream in fp32: on the
2-core machine one 16-episode GSPO step spent 98.6 s in decode forwards that way, against 47.7 s with this
copy (``bench/results/gspo_profile_shared_training.md``, ``autocast-generation`` vs ``full``). This
wrapper (an instance attribute over the model's ``generate``: TRL's code is untouched) keeps a bf16 copy of
the weights, copies the training weights into it at the start of every call (one cast per call instead of one
per decode step; the weights never change inside a call) and lets the copy generate. The rotary frequencies
and other buffers stay as they were. Sampling in bf16 while training in fp32 is what every vLLM-backed GRPO
run does; TRL recomputes the log-probs it trains on with the training model, so the loss is unchanged. LoRA
models, models whose weights are not fp32 and other devices keep TRL's generate.
"""

from __future__ import annotations

import copy
import functools

import torch
from peft import PeftModel

COPY_DTYPE = torch.bfloat16
# Instance attributes that TRL, accelerate and tansaku put over the class's methods: the copy runs the class's
# own.
PATCHED_METHODS = ("forward", "generate")


def handles(trainer) -> bool:
    """Whether a bf16 copy is the faster, equivalent path: CPU, fp32 weights trained under ``bf16: true``, no
    PEFT adapters, transformers generation (no vLLM)."""
    model, args = trainer.model, trainer.args
    return (model.device.type == "cpu" and bool(args.bf16) and not args.use_vllm
            and not isinstance(model, PeftModel) and next(model.parameters()).dtype == torch.float32)


def bf16_copy(model):
    """A copy of ``model`` for generation: its parameters in ``COPY_DTYPE`` (ties kept), its buffers as they
    were, no gradients, eval mode, and the class's own ``forward`` / ``generate``."""
    twin = copy.deepcopy(model)
    for name in PATCHED_METHODS:
        twin.__dict__.pop(name, None)
    for param in twin.parameters():  # tied parameters are one object: cast once, still tied
        param.data = param.data.to(COPY_DTYPE)
    return twin.requires_grad_(False).eval()


def parameter_pairs(twin, model) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(copy's parameter, model's parameter) by name; the copy is ``model``'s, so the names are the same."""
    own = dict(model.named_parameters())
    return [(target, own[name]) for name, target in twin.named_parameters()]


def generate_with_bf16_copy(trainer, wrap_copy=None) -> bool:
    """Route ``trainer.model.generate`` through a bf16 copy when ``handles`` says so; ``wrap_copy`` (e.g.
    ``prefix_generate.share_prompt_prefix``) is applied to the copy. Returns whether the copy is in place."""
    if not handles(trainer):
        return False
    model = trainer.model
    twin = bf16_copy(model)
    if wrap_copy is not None:
        wrap_copy(twin)
    model.generate = copy_generate(model, twin)
    return True


def copy_generate(model, twin):
    """``model.generate`` as the refreshed ``twin``'s: same arguments, same output."""

    pairs = parameter_pairs(twin, model)

    @functools.wraps(model.generate)
    def generate(*args, **kwargs):
        with torch.no_grad():  # the weights the optimizer left, cast once for the whole call
            for target, source in pairs:
                target.copy_(source)
        # TRL overrides the policy's for the call (transformers#42762)
        twin.generation_config = model.generation_config
        return twin.generate(*args, **kwargs)

    generate.bf16_copy = twin  # for profilers and tests: the module whose forwards a rollout runs
    return generate
