"""``ResumableGRPOTrainer``: TRL's ``GRPOTrainer`` with the hooks ``train rl`` composes into it, each a few
lines that hand over to its own module: a resumable sampler order, the local sampler's log-probs
(``sampler_logprobs``), shared prompt tokens and turn caches (``tansaku.trainer.cpu``), dynamic sampling,
``kl_to_start`` (``drift``) and completion logs written once per rollout round.

It subclasses TRL's private methods (``_generate_single_turn``, ``_generate``, ``_calculate_rewards``,
``_generate_and_score_completions``, ``_get_train_sampler``): ``tests/test_trl_private_api.py`` fails
loudly when TRL changes one of their signatures. Imported only when a trainer is built (torch, trl).
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer

from tansaku.trainer.completion_log import parquet_safe
from tansaku.trainer.sampler_logprobs import correct_for_sampler


class ResumableGRPOTrainer(GRPOTrainer):
    """TRL's RepeatSampler draws each epoch's order from one generator, so a run resumed after the first
    epoch would replay epoch 1's order. Reseeding with (seed + epoch) in ``set_epoch``, which the Trainer
    calls before every epoch, makes the order a function of (seed, epoch): resume replays the same data."""

    def _get_train_sampler(self, *args, **kwargs):
        sampler = super()._get_train_sampler(*args, **kwargs)
        seed = sampler.seed if getattr(sampler, "seed", None) is not None else self.args.seed
        sampler.set_epoch = lambda epoch: sampler.generator.manual_seed(seed + epoch)
        return sampler

    # tansaku.trainer.cpu.prefix_train: which prompt tokens a rollout batch shares, and their gradient added
    # after the last micro-batch of an optimizer step, before the Trainer clips the gradients
    shared_prefix = None
    turns = None  # tansaku.core.llm.turn_cache: the last turn's KV cache, freed once the rollouts are done
    # tansaku.trainer.sampler_logprobs: the local generator's log-probs of each token it samples (None under
    # vLLM, whose TRL keeps its own), and whether the advantages are weighted for the sampler–trainer gap
    sampler = None
    correct_sampler = False
    drift = None  # tansaku.trainer.drift: kl_to_start, when the recipe asks for it
    fresh_rollouts = False  # a rollout round was generated since the last log

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
        if logprobs is None and self.sampler is not None:  # TRL's transformers path keeps none
            logprobs = self.sampler.take(completion_ids)
        return completion_ids, logprobs

    def _generate(self, prompts):
        generated = super()._generate(prompts)
        if self.shared_prefix is not None:  # before TRL's no-grad forwards of the round, which use them too
            self.shared_prefix.set_prompts([torch.tensor(ids) for ids in generated[0]])
        return generated

    # tansaku.trainer.dynamic_sampling: zero-variance groups refilled from the prompt pool (recipe key
    # dynamic_sampling_max_refills; None: off, TRL's round as sampled)
    dynamic_sampling = None

    def _calculate_rewards(self, *args, **kwargs):
        rewards = super()._calculate_rewards(*args, **kwargs)
        if self.dynamic_sampling is not None:  # which groups have zero variance is decided on these
            self.dynamic_sampling.rewards = rewards
        return rewards

    def _scored_round(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.sampler is not None:
            correct_for_sampler(self, output, correct=self.correct_sampler)
        return output

    def _generate_and_score_completions(self, inputs):
        if self.dynamic_sampling is not None and self.model.training:
            output = self.dynamic_sampling.refill(self, inputs, self._scored_round, self._between_rounds)
            if self.shared_prefix is not None:  # the prompts of the batch as trained, refills included
                self.shared_prefix.set_rollouts(output["prompt_ids"], output["prompt_mask"])
        else:
            output = self._scored_round(inputs)
        if self.drift is not None:
            self.drift.log(self, output)
        self.fresh_rollouts = True
        if self.turns is not None:
            self.turns.clear()
        return output

    def _between_rounds(self):  # a refill's prompts continue none of the last sub-round's episodes
        if self.turns is not None:
            self.turns.clear()

    def log(self, logs, start_time=None):
        # TRL writes its buffer of the last round's completions at every log: off-policy, a round spans
        # several optimizer steps, and each would write it again (rescore and run reports would count it
        # twice). Each round's completions are written once, at the step that generated them.
        keep, self.log_completions = self.log_completions, self.log_completions and self.fresh_rollouts
        if self.log_completions:  # pyarrow refuses a column mixing JSON and non-JSON tool-call arguments
            logged = self._logs["completion"]
            self._logs["completion"] = type(logged)(parquet_safe(logged), maxlen=logged.maxlen)
        try:
            super().log(logs, start_time)
        finally:
            self.log_completions, self.fresh_rollouts = keep, False

    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.shared_prefix is not None and self.accelerator.sync_gradients:
            self.shared_prefix.flush()
        return loss

