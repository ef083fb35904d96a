"""``kl_to_start`` (``trainer/drift.py``): the frozen start scores a rollout round through the same shared-prompt
path as the policy, so the first round's KL (same weights) is 0, and the shared path gives the full forward's
log-probs to rounding.

Run: pytest tests/test_drift.py -q
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from types import MethodType, SimpleNamespace

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from tansaku.trainer.cpu.lm_head import GRPO_EXTRAS, score_labelled_positions
from tansaku.trainer.drift import StartDrift
from tansaku.trainer.sampler_logprobs import trainer_logps

SHARED, OWN, COMPLETION = 40, 6, 9  # system turn, each question's own tokens, completion width


def _trainer(path, share: bool):
    """The parts of a GRPO trainer that ``StartDrift`` and ``trainer_logps`` read, around a policy at ``path``."""
    policy = LlamaForCausalLM.from_pretrained(path).train()  # a trainer's policy: train-mode log-probs
    add_fused_lm_head(policy, temperature=0.9, outputs=("log_probs", "entropy"))
    trainer = SimpleNamespace(model=policy, temperature=0.9, ref_model=None, _metrics={"train": defaultdict(list)},
                              accelerator=SimpleNamespace(autocast=contextlib.nullcontext, is_main_process=True),
                              args=SimpleNamespace(cast_lm_head_to_fp32=False, gradient_checkpointing=False,
                                                   per_device_train_batch_size=1))
    trainer._get_per_token_logps_and_entropies = MethodType(GRPOTrainer._get_per_token_logps_and_entropies,
                                                            trainer)
    trainer.shared_prefix = score_labelled_positions(trainer, share_prefix=share, extras=GRPO_EXTRAS)
    return trainer


def _round():
    """Two prompts × two generations behind one system turn, prompts left-padded, completions right-padded."""
    torch.manual_seed(1)
    head = torch.randint(3, 300, (SHARED,))
    questions = [torch.randint(3, 300, (OWN,)), torch.randint(3, 300, (OWN - 2,))]
    prompts, prompt_masks, completions, completion_masks = [], [], [], []
    for question, done in zip((questions[0], questions[0], questions[1], questions[1]), (9, 5, 7, 9)):
        pad = OWN - len(question)
        prompts.append(torch.cat([torch.zeros(pad, dtype=torch.long), head, question]))
        prompt_masks.append((torch.arange(OWN + SHARED) >= pad).long())
        completions.append(torch.randint(3, 300, (COMPLETION,)))
        completion_masks.append((torch.arange(COMPLETION) < done).long())
    return {"prompt_ids": torch.stack(prompts), "prompt_mask": torch.stack(prompt_masks),
            "completion_ids": torch.stack(completions), "completion_mask": torch.stack(completion_masks)}


def test_the_start_shares_the_round_prompts_and_its_first_kl_is_zero(tmp_path):
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 tie_word_embeddings=True)).save_pretrained(tmp_path)
    output = _round()
    shared_trainer, plain_trainer = _trainer(tmp_path, share=True), _trainer(tmp_path, share=False)
    shared_trainer.shared_prefix.set_rollouts(output["prompt_ids"], output["prompt_mask"])
    drift = StartDrift.load(str(tmp_path), shared_trainer)
    assert drift.shared is not None and StartDrift.load(str(tmp_path), plain_trainer).shared is None
    drift.log(shared_trainer, output)
    assert drift.shared.prefixes and all(p.frozen for p in drift.shared.prefixes)  # the start took the path
    assert shared_trainer._metrics["train"]["kl_to_start"] == [0.0]  # same weights, same path: no rounding gap
    with torch.no_grad():
        shared = trainer_logps(shared_trainer, output, model=drift.start)
        full = trainer_logps(plain_trainer, output)
    mask = output["completion_mask"].bool()
    assert torch.allclose(shared[mask], full[mask], atol=1e-5)
