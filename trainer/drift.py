"""How far RL has taken the policy from its start: ``kl_to_start``, logged once per generation round.

    drift = StartDrift.load(model_path, like=trainer.model)   # build_rl_trainer, when the recipe sets kl_to_start
    drift.log(trainer, output)                                # after each rollout batch

With ``beta: 0`` (no reference model, the usual GRPO/GSPO setting) TRL computes no KL, so a run's logs cannot
say whether the policy drifted far from its SFT start or barely moved. A frozen copy of the starting weights
scores each rollout batch's completion tokens (one no-grad forward per round, as TRL's reference model would),
and the k3 estimator of KL(π ‖ π_start) over the sampled, non-tool tokens,
``E[exp(log π_start − log π) − (log π_start − log π) − 1]`` (Schulman's unbiased, non-negative estimator, the
one TRL's ``kl`` uses), is logged as ``kl_to_start``. Nothing of it enters the loss.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

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
    """The starting weights, frozen, and the metric they give."""

    def __init__(self, start):
        self.start = start

    @classmethod
    def load(cls, model_path: str, like) -> StartDrift:
        dtype = next(like.parameters()).dtype
        start = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(like.device)
        return cls(start.requires_grad_(False).eval())

    def log(self, trainer, output: dict) -> None:
        policy = output.get("old_per_token_logps")
        if policy is None:  # on-policy: the trainer's own log-probs of the batch, as the loss will see them
            policy = trainer_logps(trainer, output)
        with torch.no_grad():
            start = trainer_logps(trainer, output, model=self.start)
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        trainer._metrics["train" if trainer.model.training else "eval"]["kl_to_start"].append(
            k3(policy, start, mask))
