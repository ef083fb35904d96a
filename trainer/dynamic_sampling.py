"""Dynamic sampling (DAPO): a rollout round's groups whose rewards are all equal are replaced by fresh
prompts.

    dynamic_sampling_max_refills: 2      # recipe key (TansakuRLArguments); 0, the default, turns it off

GRPO's advantage is a completion's reward against its group's: a group whose G completions all score the same
(all solved, all failed) has advantage 0 everywhere and gives the policy-gradient term nothing. DAPO drops
such groups and samples more prompts until the batch is full. Here, after TRL has generated and scored a
rollout round, each zero-variance group is dropped and its slot refilled: a prompt drawn from the run's own
prompt pool (``trainer.train_dataset``: the task mix, after difficulty banding when the recipe bands), G fresh
completions generated and scored by the very same TRL code (``_generate_and_score_completions``, tansaku's
sampler correction included), and its rows put where the dropped group's were. Refilled groups that come back
zero-variance are refilled again, at most ``max_refills`` rounds per rollout round; whatever is still
zero-variance after the bound (or when the pool has no unused prompt left) is kept as it is — it trains with
advantage 0 — and counted.

Zero variance is TRL's own criterion for ``frac_reward_zero_std`` (``scale_rewards`` group/none): the weighted
sum of the reward components per completion (rows no component scored excluded), its group std ``isclose`` to
0. The rewards come from TRL's ``_calculate_rewards`` (the trainer hands them over; ``rewards``).

**The batch keeps its shape.** TRL generates one round of
``per_device_train_batch_size × steps_per_generation`` completions (``num_generations`` = G per prompt, each
group G consecutive rows), then shuffles the rows and trains them as ``steps_per_generation`` micro-batches,
``gradient_accumulation_steps`` per optimizer step (``num_iterations`` times over). A refill replaces a whole
group by a whole group, in place, before that shuffle: the round has the same number of rows, groups and
prompts, so the micro-batches, the optimizer steps per round, the rounds per run and ``max_steps`` are what
they are without it. Only the tensors' widths may grow: prompts are left-padded and completions right-padded
to the widest row of all sub-rounds (``merge_rows``; the padding is masked), and ``num_items_in_batch`` (the
loss-token count TRL's ``dapo`` loss divides by) is recounted over the merged rows. Each sub-round's
``old_per_token_logps`` (computed when a round feeds more than one optimizer step) and the sampler's log-probs
come from the same weights — no optimizer step happens inside a rollout round — so the merged batch is one
on-policy (or equally off-policy) round, as if TRL had sampled those prompts at once. A refilled group's
advantages are TRL's of its own sub-round: per group under ``scale_rewards`` group/none (what one call would
give), over the sub-round's rows under ``scale_rewards: batch``. A refill costs one more generate call (and
its no-grad forwards) per refill round, for ``len(dropped) × G`` rows.

**What is logged.** TRL's metrics of the round (``reward``, ``rewards/<name>/mean``, ``frac_reward_zero_std``,
completion lengths, tool calls, the sampler gap …) describe the prompts first drawn, as without dynamic
sampling, so runs with it on and off compare like for like; the refill sub-rounds' own entries are dropped
(``state.num_input_tokens_seen`` counts their tokens; ``kl_to_start`` is measured on the batch as trained).
Per rollout round, added to the trainer's metrics (so they reach ``log_history``, the run's loggers and
``run_report.json``'s per-step signals):

- ``dynamic_sampling/refills``: refill rounds run (0 … ``max_refills``);
- ``dynamic_sampling/groups_dropped``: zero-variance groups dropped and replaced (over all refill rounds);
- ``dynamic_sampling/zero_std_groups_kept``: zero-variance groups kept after the bound (no gradient);
- ``dynamic_sampling/zero_std_share``: their share of the round's groups, the batch as trained
  (``frac_reward_zero_std`` is the share as first drawn);
- ``dynamic_sampling/extra_rollouts``: completions the refills generated.

The completions table (``completions/*.parquet``, ``log_completions``) holds the rows as trained: a dropped
group's rows are replaced there too, with their rewards and advantages.

The refill prompts are drawn with a generator seeded by (``seed``, global step, refill round): a run and its
resume draw the same ones. They skip prompts already in the round; they do not advance the epoch's sampler, so
a
refilled prompt may come again later in the epoch. One training process only: TRL spreads a round's groups
over processes, and a refill would have to regenerate across them (``train rl`` refuses ``num_processes > 1``
with the key on).
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

PREFIX = "dynamic_sampling/"
# Right-padding value per completion-aligned key (default 0): a padded tool_mask is 1 as in TRL, a ratio 1.
COMPLETION_PAD = {"tool_mask": 1, "importance_sampling_ratio": 1.0}
PROMPT_KEYS = ("prompt_ids", "prompt_mask")
COMPLETION_KEYS = ("completion_ids", "completion_mask", "tool_mask", "old_per_token_logps",
                   "sampling_per_token_logps", "ref_per_token_logps")


def zero_std_groups(rewards_per_func: torch.Tensor, weights: torch.Tensor,
                    num_generations: int) -> list[bool]:
    """Per group of ``num_generations`` consecutive rows: whether its rewards are all equal, as TRL decides it
    for ``frac_reward_zero_std`` (weighted sum per row, rows no component scored left out, group std close to
    0).

    >>> rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [float("nan"), 1.0],
    ...                         [0.0, 1.0]])
    >>> zero_std_groups(rewards, torch.tensor([1.0, 0.5]), 2)
    [True, False, True]
    """
    from trl.trainer.utils import nanstd

    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    std = nanstd(rewards.view(-1, num_generations), dim=1)
    return torch.isclose(std, torch.zeros_like(std)).tolist()


def prompt_key(row: dict) -> str:
    """A row's prompt as text: what tells two prompts apart."""
    return json.dumps(row.get("prompt"), ensure_ascii=False, sort_keys=True, default=str)


def draw_prompts(pool, count: int, exclude: set[str], rng: random.Random, columns=None) -> list[dict]:
    """Up to ``count`` rows of ``pool`` (a dataset or list of rows) in ``rng``'s order, each prompt once and
    none in ``exclude``; ``columns``: the keys each row keeps (the ones TRL's own batches carry).

    >>> pool = [{"prompt": p, "x": 1} for p in "abcab"]
    >>> sorted(r["prompt"]
    ...        for r in draw_prompts(pool, 5, {prompt_key({"prompt": "a"})}, random.Random(0), ["prompt"]))
    ['b', 'c']
    """
    rows, seen = [], set(exclude)
    for i in rng.sample(range(len(pool)), len(pool)):
        if len(rows) == count:
            break
        row = dict(pool[i])
        key = prompt_key(row)
        if key in seen:
            continue
        seen.add(key)
        rows.append({k: row[k] for k in columns if k in row} if columns is not None else row)
    return rows


def _pad(tensor: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing <= 0:
        return tensor
    return torch.nn.functional.pad(tensor, (missing, 0) if left else (0, missing), value=value)


def merge_rows(outputs: list[dict], picks: list[tuple[int, int]], pad_token_id: int) -> dict:
    """The batch whose row i is row ``picks[i] = (k, j)`` of ``outputs[k]``
    (``_generate_and_score_completions``'s dicts): prompts left-padded and completions right-padded to the
    widest source, per-row values taken as they are, ``num_items_in_batch`` recounted over the rows' loss
    tokens.

    >>> a = {"prompt_ids": torch.tensor([[5, 6], [5, 6]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
    ...      "completion_ids": torch.tensor([[7], [8]]),
    ...      "completion_mask": torch.ones(2, 1, dtype=torch.long),
    ...      "advantages": torch.tensor([0.0, 0.0]), "num_items_in_batch": torch.tensor(2)}
    >>> b = {"prompt_ids": torch.tensor([[4, 5, 6]] * 2), "prompt_mask": torch.ones(2, 3, dtype=torch.long),
    ...      "completion_ids": torch.tensor([[1, 2], [3, 0]]),
    ...      "completion_mask": torch.tensor([[1, 1], [1, 0]]),
    ...      "advantages": torch.tensor([1.0, -1.0]), "num_items_in_batch": torch.tensor(3)}
    >>> m = merge_rows([a, b], [(1, 0), (0, 1)], pad_token_id=0)
    >>> m["prompt_ids"].tolist(), m["prompt_mask"].tolist(), m["completion_ids"].tolist()
    ([[4, 5, 6], [0, 5, 6]], [[1, 1, 1], [0, 1, 1]], [[1, 2], [8, 0]])
    >>> m["completion_mask"].tolist(), m["advantages"].tolist(), int(m["num_items_in_batch"])
    ([[1, 1], [1, 0]], [1.0, 0.0], 3)
    """
    keys = list(outputs[0])
    for k, output in enumerate(outputs[1:], 1):
        if set(output) != set(keys):
            raise ValueError(f"dynamic sampling: refill round {k} has keys {sorted(output)}, the round "
                             f"{sorted(keys)}")
    used = sorted({k for k, _ in picks})
    prompt_width = max(outputs[k]["prompt_ids"].shape[1] for k in used)
    completion_width = max(outputs[k]["completion_ids"].shape[1] for k in used)
    merged = {}
    for key in keys:
        if key == "num_items_in_batch":
            continue
        values = [outputs[k][key] for k in used]
        if not all(isinstance(v, torch.Tensor) and v.dim() >= 1 for v in values):
            raise ValueError(f"dynamic sampling: cannot merge {key!r} (not a per-row tensor); text rollouts "
                             f"only")
        if key in PROMPT_KEYS:
            value = pad_token_id if key == "prompt_ids" else 0
            padded = {k: _pad(outputs[k][key], prompt_width, value, left=True) for k in used}
        elif values[0].dim() == 1 or (key not in COMPLETION_KEYS and all(v.shape[1] == 1 for v in values)):
            # one value per row (advantages [B], a sequence ratio [B, 1])
            padded = {k: outputs[k][key] for k in used}
        else:
            value = pad_token_id if key == "completion_ids" else COMPLETION_PAD.get(key, 0)
            padded = {k: _pad(outputs[k][key], completion_width, value, left=False) for k in used}
        merged[key] = torch.stack([padded[k][j] for k, j in picks])
    mask = merged["completion_mask"]
    if "tool_mask" in merged:
        mask = mask * merged["tool_mask"]
    if "num_items_in_batch" in outputs[0]:
        merged["num_items_in_batch"] = mask.sum().to(outputs[0]["num_items_in_batch"].dtype)
    return {key: merged[key] for key in keys}


def take_log_rows(logs: dict) -> dict[tuple, list]:
    """Empty TRL's completion log (``trainer._logs``: deques, and mappings of deques for rewards and extra
    columns) and return what it held, ``{("prompt",): rows, ("rewards", name): rows, …}``."""
    rows = {}
    for key, value in logs.items():
        columns = ({(key,): value} if isinstance(value, deque)
                   else {(key, name): d for name, d in value.items()})
        for column, d in columns.items():
            rows[column] = list(d)
            d.clear()
    return rows


def put_log_rows(logs: dict, rows: dict[tuple, list]) -> None:
    """Append ``rows`` (``take_log_rows``' form) to TRL's completion log."""
    for column, values in rows.items():
        target = logs[column[0]] if len(column) == 1 else logs[column[0]][column[1]]
        target.extend(values)


def picked_log_rows(rounds: list[dict[tuple, list]], picks: list[tuple[int, int]]) -> dict[tuple, list]:
    """The log rows of the batch as trained: row i is row ``picks[i]`` of the sub-rounds' rows; a column a
    sub-round did not log gets None there (a column no sub-round logged stays empty)."""
    columns = list(dict.fromkeys(column for rows in rounds for column in rows))
    picked = {}
    for column in columns:
        if not any(rows.get(column) for rows in rounds):
            picked[column] = []
            continue
        picked[column] = [rounds[k][column][j] if len(rounds[k].get(column, [])) > j else None for k,
                          j in picks]
    return picked


@dataclass
class DynamicSampling:
    """The refill of one run (module doc). ``rewards``: the last sub-round's ``rewards_per_func``, handed over
    by the trainer's ``_calculate_rewards``."""

    max_refills: int
    rewards: torch.Tensor | None = None
    draws: list[list[str]] = field(default_factory=list)  # the prompts each refill drew (last rollout round)

    def _zero_groups(self, trainer, rows: int) -> list[bool]:
        if self.rewards is None or self.rewards.shape[0] != rows:
            raise RuntimeError("dynamic sampling: the round's rewards were not handed over "
                               "(_calculate_rewards)")
        return zero_std_groups(self.rewards, trainer.reward_weights, trainer.num_generations)

    def refill(self, trainer, inputs: list[dict], score_round: Callable[[list[dict]], dict],
               between_rounds: Callable[[], None] | None = None) -> dict:
        """``score_round(inputs)`` (TRL's generate-and-score of one round), with its zero-variance groups
        refilled (module doc); the metrics go to ``trainer._metrics["train"]``, the trained rows to its
        completion log."""
        G, metrics = trainer.num_generations, trainer._metrics["train"]
        groups = len(inputs) // G
        # what the log held: the round's own rows are written back after it
        earlier = take_log_rows(trainer._logs)
        self.rewards, self.draws = None, []
        outputs = [score_round(inputs)]
        rounds = [take_log_rows(trainer._logs)]
        picks = [(0, i) for i in range(len(inputs))]
        slots = [g for g, zero in enumerate(self._zero_groups(trainer, len(inputs))) if zero]
        seen = {prompt_key(row) for row in inputs}
        lengths = {name: len(values) for name, values in metrics.items()}  # TRL's metrics: the first draw's
        refills = dropped = extra = 0
        while slots and refills < self.max_refills:
            rng = random.Random(f"{trainer.args.seed}:{trainer.state.global_step}:{refills}")
            rows = draw_prompts(trainer.train_dataset, len(slots), seen, rng, columns=list(inputs[0]))
            if not rows:  # every prompt of the pool is in this round already
                break
            filled, slots = slots[:len(rows)], slots[len(rows):]
            seen.update(prompt_key(row) for row in rows)
            self.draws.append([prompt_key(row) for row in rows])
            if between_rounds is not None:
                between_rounds()
            batch = [dict(row) for row in rows for _ in range(G)]
            self.rewards = None
            outputs.append(score_round(batch))
            rounds.append(take_log_rows(trainer._logs))
            for name in list(metrics):  # the sub-round's own entries: dropped
                if name in lengths:
                    del metrics[name][lengths[name]:]
                else:
                    del metrics[name]
            again = self._zero_groups(trainer, len(batch))
            for j, g in enumerate(filled):
                picks[g * G:(g + 1) * G] = [(len(outputs) - 1, j * G + k) for k in range(G)]
            slots = [g for j, g in enumerate(filled) if again[j]] + slots
            refills, dropped, extra = refills + 1, dropped + len(filled), extra + len(batch)
        put_log_rows(trainer._logs, earlier)
        put_log_rows(trainer._logs, picked_log_rows(rounds, picks))
        for name, value in (("refills", refills), ("groups_dropped", dropped),
                            ("zero_std_groups_kept", len(slots)),
                            ("zero_std_share", len(slots) / groups if groups else 0.0),
                            ("extra_rollouts", extra)):
            metrics[PREFIX + name].append(float(value))
        if len(outputs) == 1:
            return outputs[0]
        return merge_rows(outputs, picks, trainer._tokenizer.pad_token_id)  # TRL's padding token
