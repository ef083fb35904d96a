"""The sampler's log-probs of local rollouts (tansaku.trainer.sampler_logprobs), the importance weight folded
into the advantages, and the words `train rl` says about its update schedule (tansaku.trainer.update_schedule).

Run: pytest tests/test_sampler_logprobs.py            (a random 2-layer model: fast)
     pytest tests/test_sampler_logprobs.py -m slow    (off-policy GSPO on the tiny model: ratios move, clip engages)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"


def random_model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("sampling", [{"temperature": 0.7}, {"temperature": 1.3, "top_k": 20},
                                      {"temperature": 0.9, "top_p": 0.8}])
def test_recorded_logprobs_are_those_of_the_distribution_each_token_was_drawn_from(sampling):
    from transformers import GenerationConfig

    from tansaku.trainer.sampler_logprobs import SamplerLogprobs, warpers

    model = random_model()
    sampler = SamplerLogprobs.wrap(model)
    prompt = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = (prompt != 0).long()
    config = GenerationConfig(do_sample=True, max_new_tokens=12, pad_token_id=0, eos_token_id=2, **sampling)
    torch.manual_seed(1)
    out = model.generate(input_ids=prompt, attention_mask=mask, generation_config=config)
    new = out[:, prompt.shape[1]:]
    recorded = sampler.take([row.tolist() for row in new])
    assert [len(r) for r in recorded] == [12, 12] and sampler.take([[1]]) is None  # taken once

    full_mask = torch.cat([mask, torch.ones_like(new)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=out, attention_mask=full_mask).logits[:, prompt.shape[1] - 1:-1].float()
    chain = warpers(config)
    for row in range(2):
        for t in range(12):
            scores = chain(out[row:row + 1, :prompt.shape[1] + t], logits[row:row + 1, t].clone())
            expected = torch.log_softmax(scores, -1)[0, new[row, t]].item()
            assert recorded[row][t] == pytest.approx(expected, abs=1e-4)
            assert expected > -1e9  # a drawn token is inside the top-k / top-p set: its log-prob is finite


def test_the_weight_is_folded_into_the_advantages_and_the_gap_is_logged():
    from collections import defaultdict
    from types import SimpleNamespace

    from tansaku.trainer.sampler_logprobs import correct_for_sampler

    trainer = SimpleNamespace(
        model=SimpleNamespace(training=True), _metrics={"train": defaultdict(list)},
        args=SimpleNamespace(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_min=None,
                             vllm_importance_sampling_clip_max=2.0))
    old = torch.tensor([[-1.0, -1.0, -1.0], [-0.5, -0.5, 0.0]])
    sampled = torch.tensor([[-1.0, -2.0, -0.5], [-0.5, -0.1, 0.0]])
    output = {"sampling_per_token_logps": sampled, "old_per_token_logps": old,
              "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]), "tool_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
              "advantages": torch.tensor([1.0, -2.0])}
    correct_for_sampler(trainer, output, correct=True)
    # e^1 truncated at C = 2; a tool-result token and padding keep weight 1 (they carry no loss anyway)
    weights = torch.tensor([[1.0, 2.0, 1.0], [1.0, torch.exp(torch.tensor(-0.4)), 1.0]])
    assert torch.allclose(output["advantages"], torch.tensor([[1.0], [-2.0]]) * weights)
    metrics = trainer._metrics["train"]
    # over the sampled, non-tool tokens only: |0|, |1|, |0|, |0.4|
    assert metrics["sampling/sampling_logp_difference/max"] == [pytest.approx(1.0)]
    assert metrics["sampling/sampling_logp_difference/mean"] == [pytest.approx(1.4 / 4)]
    assert metrics["sampling/importance_sampling_ratio/max"] == [pytest.approx(2.0)]

    on_policy = {**output, "advantages": torch.tensor([1.0, -2.0])}
    on_policy.pop("old_per_token_logps")
    assert correct_for_sampler(trainer, on_policy, correct=False)["advantages"].dim() == 1  # nothing to compare


@pytest.mark.parametrize(("keys", "inert"), [
    ({}, False),  # rl-tiny: one generation round, two optimizer steps
    ({"steps_per_generation": 2}, True),  # = gradient_accumulation_steps: on-policy
    ({"steps_per_generation": 2, "num_iterations": 2}, False),
])
def test_train_rl_says_when_the_ratio_clip_cannot_engage(tmp_path, keys, inert):
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rl import grpo_config
    from tansaku.trainer.update_schedule import update_notes

    args = [f"--{k}={v}" for k, v in keys.items()]
    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path), *args], kind="rl")
    notes = update_notes(grpo_config(recipe), local_sampler=True, copied=False)
    assert any("importance ratio is 1 and epsilon has no effect" in n for n in notes) == inert


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", ["false", "true"])
def test_off_policy_gspo_moves_the_ratios_and_engages_the_clip(tmp_path, envs_index, tiny_model_path, monkeypatch,
                                                               checkpointing):
    """One generation round, two optimizer steps (steps_per_generation = 2 × gradient_accumulation_steps): the
    first minibatch trains at the weights that sampled (ratio 1, nothing clipped), the second after an update
    (ratios ≠ 1: GSPO's tight clip engages). Rollouts come from the bf16 copy: the gap is logged, and corrected.

    The untrained tiny model scores the same on every completion (no advantage, no update), so a reward that
    differs between sampled completions (their length) is added: this tests the update, not the task. Under
    gradient checkpointing (the demo's setting) the old log-probs must take the training forward's path too."""
    from tansaku.trainer import rl
    from tansaku.trainer.rl import run_rl

    task_rewards = rl.build_rewards

    def with_length_reward(recipe, judge=None):
        funcs, weights, groups = task_rewards(recipe, judge)

        def length_reward(completions, **_):
            return [len(str(c)) % 7 / 7 for c in completions]

        return [*funcs, length_reward], [*weights, 1.0], groups

    monkeypatch.setattr(rl, "build_rewards", with_length_reward)

    task = [f"--tasks={json.dumps([{'name': 'multihop_qa', 'data': str(ROOT / 'tests/fixtures/envs/multihop.jsonl'), 'index': str(envs_index)}])}"]
    result = run_rl(RECIPE, ["--output_dir", str(tmp_path / "run"), *task, "--max_steps", "2", "--bf16", "true",
                             "--learning_rate", "1e-4", "--max_completion_length", "48", "--save_steps", "10",
                             "--temperature", "1.2", "--kl_to_start", "true",
                             "--gradient_checkpointing", checkpointing], skip_readiness=True)
    assert result["global_step"] == 2
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    first, second = [e for e in history if "loss" in e]
    assert first["clip_ratio/region_mean"] == 0.0  # the minibatch sampled by these very weights
    assert second["clip_ratio/region_mean"] > 0.0, second  # after one update: the ratio left [1 - 3e-4, 1 + 4e-4]
    assert first["sampling/sampling_logp_difference/mean"] > 0.0  # bf16 sampler vs fp32 trainer
    assert 0.0 < first["sampling/importance_sampling_ratio/mean"] <= 3.0
    assert first["frac_reward_zero_std"] < 1.0
    assert 0.0 <= first["kl_to_start"] < 1e-2  # the first round's policy is the start: rounding alone
