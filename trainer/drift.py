"""How far RL has taken the policy from its start: ``kl_to_start``, logged once per generation round.

    drift = StartDrift.load(model_path, trainer)   # build_rl_trainer, when the recipe sets kl_to_start
    drift.log(trainer, output)                                # after each rollout batch

With ``beta: 0`` (no reference model, the usual GRPO/GSPO setting) TRL computes no KL, so a run's logs cannot
say whether the policy drifted far from its SFT start or barely moved. A frozen copy of the starting weights
scores each rollout batch's completion tokens (one no-grad forward per round, as TRL's reference model would),
and the k3 estimator of KL(π ‖ π_start) over the sampled, non-tool tokens,
``E[exp(log π_start − log π) − (log π_start − log π) − 1]`` (Schulman's unbiased, non-negative estimator, the
one TRL's ``kl`` uses), is logged as ``kl_to_start``. Nothing of it enters the loss. Its floor is the two
forwards' rounding: on CPU both share each round's prompt prefixes the same way, so at the first round, where
the two are the same weights, it is 0 to rounding.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from tansaku.trainer.cpu import lm_head as cpu_lm_head
from tansaku.trainer.cpu.prefix_train import SharedPrefix
from tansaku.trainer.sampler_logprobs import trainer_logps


def k3(policy_logps, start_logps, mask) -> float:
    """Mean k3 estimate of KL(policy ‖ start) over ``mask``.

    >>> round(k3(torch.tensor([[-1.0, -1.0]]), torch.tensor([[-1.0, -2.0]]), torch.tensor([[1, 0]])), 6)
    0.0
    >>> round(k3(torch.tensor([[-1.0]]), torch.tensor([[-2.0]]), torch.tensor([[1]])), 4)
    0.3679
    """
    diff = start_logps - policy_logps
    values = (torch.exp(diff) - diff - 1)[mask.bool()]
    return values.mean().item() if values.numel() else 0.0


class StartDrift:
    """The starting weights, frozen, and the metric they give. ``shared``: on CPU, when the policy's forwards
    share each round's prompt tokens (``tansaku.trainer.cpu.prefix_train``), the start's do too: each group's
    prompt once per round instead of once per completion, and the two forwards take the same path."""

    def __init__(self, start, shared: SharedPrefix | None = None):
        self.start, self.shared = start, shared

    @classmethod
    def load(cls, model_path: str, trainer) -> StartDrift:
        """The start's weights as the trainer's reference model would be: its dtype and device, scored through
        TRL's fused LM head (``_get_per_token_logps_and_entropies`` asks for it), on CPU through tansaku's."""
        like = trainer.model
        start = AutoModelForCausalLM.from_pretrained(model_path, dtype=next(like.parameters()).dtype)
        start = start.to(like.device).requires_grad_(False).eval()
        add_fused_lm_head(start, temperature=trainer.temperature,
                          cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32)
        shared = None
        if cpu_lm_head.handles(start):
            if getattr(trainer, "shared_prefix", None) is not None:
                shared = SharedPrefix(start, trainer.shared_prefix.min_tokens)
            start.forward = cpu_lm_head.labelled_forward(start, trainer.temperature, shared,
                                                         extras=cpu_lm_head.REFERENCE_EXTRAS)
        return cls(start, shared)

    def log(self, trainer, output: dict) -> None:
        policy = output.get("old_per_token_logps")
        if policy is None:  # on-policy: the trainer's own log-probs of the batch, as the loss will see them
            policy = trainer_logps(trainer, output)
        if self.shared is not None:  # this round's prompts: the prefixes its completions share
            self.shared.set_rollouts(output["prompt_ids"], output["prompt_mask"])
        with torch.no_grad(), trainer.accelerator.autocast():  # the precision the policy's forward runs in
            start = trainer_logps(trainer, output, model=self.start)
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        trainer._metrics["train" if trainer.model.training else "eval"]["kl_to_start"].append(
            k3(policy, start, mask))
