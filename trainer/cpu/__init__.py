"""Speed-ups of TRL's trainers for training without a GPU, all behind one switch: ``apply``.

    from tansaku.trainer import cpu
    cpu.apply(sft_trainer)                          # build_sft_trainer: the LM head
    copied = cpu.apply(grpo_trainer, script_args)   # build_rl_trainer: the recipe's share_prompt_prefix and
                                                    # bf16_generation_copy keys, then the LM head

A GPU run with vLLM gets none of them: each module checks where it applies (CPU, transformers generation, fp32
weights) and otherwise leaves TRL's own path in place. Each one patches instance attributes (``forward``,
``generate``) of the trainer's model; TRL's code is untouched. The modules:

- ``prefix_generate``: transformers generation that runs the prompt tokens every row of a generate call shares
  once per call, and reuses the last turn's KV cache for the next turn of the same episodes
  (``tansaku.core.llm.turn_cache``, which evaluation's transformers backend uses too). Applies whenever
  generation is not vLLM's (recipe key ``share_prompt_prefix``).
- ``generation_copy``: on CPU, rollouts from a bf16 copy of the fp32 policy, refreshed before every generate
  call (recipe key ``bf16_generation_copy``).
- ``lm_head``: on CPU, TRL's fused LM head scored over the labelled positions only (SFT and GRPO).
- ``tansaku.core.llm.contiguous_head``: on CPU, each prefill's last-position slice goes to the generating
  model's LM head as a contiguous tensor (GRPO; evaluation's transformers backend does the same).
- ``prefix_train``: on CPU, GRPO's training forward runs the prompt tokens its rollouts share once per
  optimizer step (under ``share_prompt_prefix``; wired through ``lm_head``).
- ``heap_trim``: on CPU, the C heap's free pages go back to the system after every optimizer step (SFT and
  GRPO): less resident memory between steps, the same peak.

The recipe keys' defaults (true) are the fast paths; false gives TRL's plain generate and forward.
Measurements: ``docs/benchmarks.md``. torch, peft and trl load with this package: import it where a trainer
is built.
"""

from __future__ import annotations

from tansaku.core.llm.contiguous_head import contiguous_head_input
from tansaku.core.llm.turn_cache import TurnCache
from tansaku.trainer.cpu.generation_copy import generate_with_bf16_copy
from tansaku.trainer.cpu.heap_trim import HeapTrimCallback
from tansaku.trainer.cpu.lm_head import GRPO_EXTRAS, score_labelled_positions
from tansaku.trainer.cpu.prefix_generate import share_prompt_prefix


def apply(trainer, script_args=None) -> bool:
    """Turn on each speed-up that applies to ``trainer``; returns whether its rollouts come from the bf16
    generation copy. ``script_args`` (GRPO: ``TansakuRLArguments``) carries the recipe's
    ``share_prompt_prefix`` and ``bf16_generation_copy``; None (SFT) applies the LM head alone. A GRPO trainer
    gets ``trainer.turns`` (the kept turn caches, or None) and ``trainer.shared_prefix`` (the training
    forward's shared prompt tokens, or None), which it feeds and clears as rollouts come and go."""
    if trainer.args.device.type == "cpu":
        trainer.add_callback(HeapTrimCallback())  # free heap pages back to the system after each step
    if script_args is None:
        score_labelled_positions(trainer)  # on CPU: the LM head over the assistant turns' positions only
        return False
    # On CPU: each prefill's last-position slice goes to the LM head contiguous (the bf16 copy inherits it)
    contiguous_head_input(trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model")
                          else trainer.model)
    # Without vLLM: the system turn + tool schemas once per generate call, not per row; on CPU, by a bf16 copy
    sharing = script_args.share_prompt_prefix and not trainer.args.use_vllm
    trainer.turns = TurnCache(trainer.model) if sharing else None  # kept across turns while the weights stay

    def prefix(generator):
        share_prompt_prefix(generator, turns=trainer.turns)

    copied = script_args.bf16_generation_copy and generate_with_bf16_copy(
        trainer, wrap_copy=prefix if sharing else None)
    if sharing and not copied:
        prefix(trainer.model)
    # on CPU: the LM head over the completion's positions only, the shared prompt tokens once per
    # optimizer step
    trainer.shared_prefix = score_labelled_positions(trainer, share_prefix=script_args.share_prompt_prefix,
                                                     extras=GRPO_EXTRAS)
    return bool(copied)
