"""The signals GRPO users watch, read from TRL's ``log_history`` (``trainer_state.json``), one value per step.

TRL 1.16's ``GRPOTrainer`` logs, per step (names exactly as in ``log_history``):

- ``loss`` (the optimiser's), ``grad_norm``; ``kl`` to the reference model only when ``beta`` > 0;
- ``entropy``: the policy's mean token entropy;
- clip ratios, for the ``grpo``/``bnpo``/``dr_grpo``/``dapo``/``luspo`` losses: ``clip_ratio/region_mean``,
  ``clip_ratio/low_mean``, ``clip_ratio/high_mean``, ``clip_ratio/low_min``, ``clip_ratio/high_max``
  (``cispo_clip_ratio`` for ``cispo``);
- completion lengths in tokens: ``completions/mean_length``, ``/min_length``, ``/max_length``,
  ``/clipped_ratio`` (share cut at ``max_completion_length``), ``/mean_terminated_length``;
- ``reward``, ``reward_std``, ``frac_reward_zero_std`` (the share of groups whose rewards are all equal);
- the sampler–trainer gap, with vLLM and ``vllm_importance_sampling_correction``, and with tansaku's local
  generator (``tansaku.trainer.sampler_logprobs``) whenever old log-probs are computed:
  ``sampling/sampling_logp_difference/mean`` and ``/max`` (|trainer − sampler| token log-prob) and, when
  corrected, ``sampling/importance_sampling_ratio/min``, ``/mean``, ``/max``;
- ``kl_to_start`` (``tansaku.trainer.drift``, a recipe's ``kl_to_start: true``): the policy's KL to its start;
- what reward functions log through TRL's ``log_metric`` under the name they give (no prefix): the rubric
  judge's ``rubric/judge_failures``, ``rubric/judge_seconds`` and ``rubric/judged``
  (``tansaku.envs.rubric_reward``);
- with ``dynamic_sampling_max_refills`` > 0 (``tansaku.trainer.dynamic_sampling``):
  ``dynamic_sampling/refills``, ``/groups_dropped``, ``/zero_std_groups_kept``, ``/zero_std_share``,
  ``/extra_rollouts``.

- the search-health signals ``search_health/<name>`` (``tansaku.envs.search_health.STEP_METRICS``: searches
  per episode, distinct queries, open before answering, grounded answers, answers without a search), logged by
  the first reward function (``tansaku.trainer.rl_rewards``).

A signal a run did not log is absent (never 0): ``step_signals`` keeps only finite numbers, and TRL writes
``None`` for a metric whose every value was NaN. Any other key of the ``clip_ratio/``, ``sampling/``,
``rubric/``, ``dynamic_sampling/`` or ``search_health/`` families is kept too, after the known ones.
"""

from __future__ import annotations

import math
import statistics

SIGNALS = (
    "loss", "policy_loss", "grad_norm", "kl", "kl_to_start", "entropy",
    "clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/low_min",
    "clip_ratio/high_max", "cispo_clip_ratio",
    "completions/mean_length", "completions/min_length", "completions/max_length",
    "completions/clipped_ratio", "completions/mean_terminated_length",
    "reward", "reward_std", "frac_reward_zero_std",
    "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
    "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
    "sampling/importance_sampling_ratio/max",
    "rubric/judge_failures", "rubric/judge_seconds", "rubric/judged",
)
FAMILIES = ("clip_ratio/", "sampling/", "rubric/", "dynamic_sampling/", "search_health/")
JUDGE_KEYS = ("rubric/judge_failures", "rubric/judge_seconds", "rubric/judged")


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def step_signals(log_history: list[dict]) -> dict[int, dict[str, float]]:
    """``{step: {signal: value}}`` of the known signals (``SIGNALS``, then the families' other keys), by step.

    >>> step_signals([{"step": 2, "loss": 0.5, "kl": None, "clip_ratio/new": 0.1, "learning_rate": 1e-5},
    ...               {"step": 1, "entropy": float("nan"), "rubric/judged": 8}, {"train_loss": 0.1}])
    {1: {'rubric/judged': 8.0}, 2: {'loss': 0.5, 'clip_ratio/new': 0.1}}
    """
    known = set(SIGNALS)
    steps: dict[int, dict[str, float]] = {}
    for entry in log_history:
        step = entry.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        for key, value in entry.items():
            number = _number(value)
            if number is not None and (key in known or key.startswith(FAMILIES)):
                steps.setdefault(step, {})[key] = number
    order = {name: i for i, name in enumerate(SIGNALS)}
    return {step: dict(sorted(values.items(), key=lambda kv: order.get(kv[0], len(order))))
            for step, values in sorted(steps.items())}


def summarize(values: list[float]) -> dict:
    """``first``, ``last``, ``min``, ``max``, ``mean`` and ``n`` of one signal's per-step values.

    >>> summarize([0.75, 0.25, 0.5])
    {'first': 0.75, 'last': 0.5, 'min': 0.25, 'max': 0.75, 'mean': 0.5, 'n': 3}
    """
    return {"first": values[0], "last": values[-1], "min": min(values), "max": max(values),
            "mean": statistics.fmean(values), "n": len(values)}


def signal_summary(per_step: dict[int, dict[str, float]]) -> dict[str, dict]:
    """``{signal: summarize(its values in step order)}`` for each signal logged at least once."""
    names = list(dict.fromkeys(name for values in per_step.values() for name in values))
    order = {name: i for i, name in enumerate(SIGNALS)}
    names.sort(key=lambda name: order.get(name, len(order)))
    return {name: summarize([values[name] for values in per_step.values() if name in values])
            for name in names}


def judge_summary(per_step: dict[int, dict[str, float]]) -> dict | None:
    """The rubric judge over a run, or None when the run logged none of ``JUDGE_KEYS``.

    TRL averages what ``log_metric`` receives within one logged step (one value per reward call); with one
    generation round per logged step, as ``train rl`` sets it, each step's value is that round's count.
    ``judged``: requests sent to the judge, summed over steps; ``failures``: rows the judge left without a
    score (errors, no reply, an unreadable verdict or rubric), summed; ``failure_share``: failures / judged
    (None when nothing was judged; rows with an unreadable rubric are failures never sent, so it can exceed
    the judge's own error rate); ``seconds_mean``: the mean judge wall time per step.

    >>> judge_summary({1: {"rubric/judged": 8.0, "rubric/judge_failures": 2.0, "rubric/judge_seconds": 3.0},
    ...                2: {"rubric/judged": 8.0, "rubric/judge_failures": 0.0, "rubric/judge_seconds": 5.0}})
    {'steps': 2, 'judged': 16.0, 'failures': 2.0, 'failure_share': 0.125, 'seconds_mean': 4.0,
    'seconds_total': 8.0}
    >>> judge_summary({1: {"loss": 0.1}}) is None
    True
    """
    rows = [values for values in per_step.values() if any(key in values for key in JUDGE_KEYS)]
    if not rows:
        return None
    column = lambda key: [v[key] for v in rows if key in v]  # noqa: E731
    judged, failures, seconds = (column("rubric/judged"), column("rubric/judge_failures"),
                                 column("rubric/judge_seconds"))
    total_judged = sum(judged) if judged else None
    total_failures = sum(failures) if failures else None
    share = total_failures / total_judged if total_judged and total_failures is not None else None
    return {"steps": len(rows), "judged": total_judged, "failures": total_failures, "failure_share": share,
            "seconds_mean": statistics.fmean(seconds) if seconds else None,
            "seconds_total": sum(seconds) if seconds else None}
