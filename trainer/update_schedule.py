"""What a GRPO configuration's batch keys make of the policy update, said in words at the start of `train rl`.

    for line in update_notes(trainer.args, local_sampler=True, copied=True):
        log.warning(line)

TRL's GRPOTrainer generates one round of rollouts every ``steps_per_generation × num_iterations``
micro-batches and takes the log-probs it clips against (``old_per_token_logps``) from the training weights
only when that round spans more than one optimizer step (``gradient_accumulation_steps % (steps_per_generation
× num_iterations) != 0``). Otherwise every importance ratio is exactly 1: ``epsilon`` / ``epsilon_high`` never
clip, and GSPO (sequence-level ratios) and GRPO (token-level ratios) give the same gradient up to how the loss
averages over tokens. That is a legitimate on-policy setting, but not the algorithm the names promise, so it
is said, once, in the log. The batch arithmetic and the NeMo-RL → TRL key map: docs/recipes.md.
"""

from __future__ import annotations


def optimizer_steps_per_round(args) -> float:
    """Optimizer steps TRL takes on one generation round: ``steps_per_generation × num_iterations``
    micro-batches, ``gradient_accumulation_steps`` of them per optimizer step.

    >>> from types import SimpleNamespace as A
    >>> optimizer_steps_per_round(A(steps_per_generation=8, num_iterations=1, gradient_accumulation_steps=4))
    2.0
    """
    return args.steps_per_generation * args.num_iterations / args.gradient_accumulation_steps


def ratio_is_one(args) -> bool:
    """TRL's own test for skipping ``old_per_token_logps`` (``_generate_and_score_completions``): one
    optimizer step per round, so the policy that sampled is the policy being updated.

    >>> from types import SimpleNamespace as A
    >>> ratio_is_one(A(steps_per_generation=4, num_iterations=1, gradient_accumulation_steps=4))
    True
    >>> ratio_is_one(A(steps_per_generation=8, num_iterations=1, gradient_accumulation_steps=4))
    False
    >>> ratio_is_one(A(steps_per_generation=4, num_iterations=2, gradient_accumulation_steps=4))
    False
    """
    return args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) == 0


def update_notes(args, local_sampler: bool, copied: bool) -> list[str]:
    """One line per thing the configuration does that its names do not say (empty when there is none).

    ``local_sampler``: rollouts come from tansaku's transformers path (not vLLM); ``copied``: from a bf16 copy
    of the policy (``tansaku.trainer.cpu.generation_copy``), a different distribution from the training
    forward.

    >>> from types import SimpleNamespace as A
    >>> on = A(steps_per_generation=4, num_iterations=1, gradient_accumulation_steps=4, loss_type="grpo",
    ...        importance_sampling_level="sequence", vllm_importance_sampling_correction=True)
    >>> update_notes(on, local_sampler=True, copied=False)[0][:80]
    'one optimizer step per generation round: the importance ratio is 1 and epsilon h'
    """
    notes = []
    if args.loss_type not in ("sapo", "vespo") and ratio_is_one(args):
        level = ("sequence-level (GSPO)" if args.importance_sampling_level == "sequence"
                 else "token-level (GRPO)")
        notes.append(
            "one optimizer step per generation round: the importance ratio is 1 and epsilon has no effect; "
            f"the {level} ratio changes only how the loss is averaged. For off-policy updates set "
            "steps_per_generation to a multiple of gradient_accumulation_steps, or num_iterations > 1 "
            "(docs/recipes.md)")
    if local_sampler and copied:
        if args.vllm_importance_sampling_correction:
            notes.append("rollouts come from a bf16 copy of the policy: the sampler-trainer gap is logged "
                         "(sampling/sampling_logp_difference) and corrected by truncated importance sampling "
                         f"({args.vllm_importance_sampling_mode}, vllm_importance_sampling_clip_max "
                         f"{args.vllm_importance_sampling_clip_max})")
            if args.vllm_importance_sampling_mode.startswith("sequence"):
                notes.append(f"vllm_importance_sampling_mode {args.vllm_importance_sampling_mode} weighs a "
                             "whole completion by the product of its per-token ratios: on long completions a "
                             "small per-token gap clips or masks most of them; token_truncate weighs each "
                             "token")
        else:
            notes.append("rollouts come from a bf16 copy of the policy and "
                         "vllm_importance_sampling_correction is false: the sampler-trainer gap is logged "
                         "where old log-probs are computed, not corrected")
    return notes
