"""What a recipe holds of tansaku's own: the script-argument dataclasses TRL's ``TrlParser`` fills next to
``SFTConfig`` / ``GRPOConfig`` and ``ModelConfig``, and the checks they make when built.

    from trl import GRPOConfig, ModelConfig, TrlParser
    parser = TrlParser((TansakuRLArguments, GRPOConfig, ModelConfig))

- ``TansakuSFTArguments``: the SFT data mix (``data``: ``DataSource`` each, ``mix_size``, ``overlong``) and
  ``retention``;
- ``TansakuRLArguments``: the RL tasks (``tasks``: ``RLTask`` each: task name, prompt data, search index or
  ``index: auto`` with a corpus, reward weights, system prompt, tools) and the checks around RL, whose nested
  sections live in ``tansaku.trainer.recipe_sections``.

A problem is one ``RecipeError`` line naming the key. ``tansaku.trainer.recipes.load_recipe`` parses a recipe
file with them and resolves their paths.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tansaku.core.heldout import HELDOUT_SPLITS
from tansaku.core.heldout import RL as RL_SPLIT
from tansaku.trainer.recipe_sections import DifficultySpec, JudgeSpec, ReadinessSpec, RetentionSpec, WatchSpec
from tansaku.trainer.typed_config import RecipeError, section

log = logging.getLogger(__name__)

AUTO_INDEX = "auto"  # tasks.N.index: build <output_dir>/index/<task> from tasks.N.corpus when absent
OVERLONG = ("drop", "fit", "error")  # what `train sft` does with rows longer than max_length


@dataclass
class DataSource:
    """One SFT dataset in the mix: a tansaku store folder (``data/<split>-*.parquet``) or a .jsonl/.parquet
    file."""

    path: str
    ratio: float = 1.0  # share of the mix, normalized over all sources
    split: str = "train"
    system_prompt: str | None = None  # prepended to conversations that have no system message
    max_rows: int | None = None


@dataclass
class RLTask:
    """One task of an RL run: ``tansaku.envs.tasks.TASKS[name]`` over a prompt dataset, searching one
    index."""

    name: str
    data: str
    ratio: float = 1.0
    # None: the dataset's `rl` split (prompts SFT never saw), else `train` (prompt_split)
    split: str | None = None
    # search index folder or OpenSearch URL; "auto": built from `corpus` (task_indexes.ensure_indexes)
    index: str | None = None
    corpus: str | None = None  # documents (.jsonl or dataset folder) the "auto" index is built from, once
    # a `synth serve-env` server (http://host:port) instead of an index: tools and rewards run there
    environment_url: str | None = None  # (tansaku.envs.remote_env; its task's tools and reward weights)
    max_rows: int | None = None
    reward_weights: dict[str, float] = field(default_factory=dict)  # overrides of the task's weights
    # > 0: add abstention_reward (Task.with_abstention; at most the answer's weight)
    abstention_weight: float = 0.0
    # text or @FILE instead of the task's own (the one the SFT rows were built with)
    system_prompt: str | None = None
    # ToolsConfig fields over the task's (interface_variants: 2 …)
    tools: dict[str, Any] = field(default_factory=dict)
    # zh_mix_penalty: the global step it starts at, and what it reads (reasoning | reasoning+answer); None:
    # the
    # task's own (Task.with_zh_mix, applied by rl_rewards.rl_task)
    zh_mix_start_step: int | None = None
    zh_mix_scope: str | None = None

    def prompt_split(self) -> str:
        """The split RL prompts come from: ``split`` when the recipe names one, else the dataset's ``rl``
        split (multihop and egov write one: questions SFT never trained on, so the policy is not
        near-deterministic on them), else ``train`` with a warning (an older dataset, or a .jsonl file)."""
        if self.split is not None:
            return self.split
        if any((Path(self.data) / "data").glob(f"{RL_SPLIT}-*.parquet")):
            return RL_SPLIT
        if Path(self.data).is_dir():
            log.warning("task %s: %s has no '%s' split; RL prompts come from 'train', the questions SFT "
                        "trains on (rebuild it with --rl-share > 0)", self.name, self.data, RL_SPLIT)
        return "train"


def check(ok: bool, message: str) -> None:
    """A RecipeError with ``message`` unless ``ok``."""
    if not ok:
        raise RecipeError(message)


def _check_train_split(where: str, split: str) -> None:
    """Training never reads a held-out split (``tansaku.core.heldout``: test, test_phrasing): ``train eval``
    measures on them."""
    check(split not in HELDOUT_SPLITS,
          f"{where}.split: '{split}' is the held-out split ({', '.join(HELDOUT_SPLITS)} "
          "are kept for `train eval`); train on 'train'")


RL_SECTIONS = {"watch": WatchSpec, "readiness": ReadinessSpec, "difficulty": DifficultySpec,
               "judge": JudgeSpec, "retention": RetentionSpec}
# A nested section's type is `Section | str | None`: TRL's parser then passes the YAML's mapping through and
# reads the command line's text as a string (as TrainingArguments' `dict | str` fields), which __post_init__
# builds.


@dataclass
class TansakuSFTArguments:
    """tansaku's own keys of an SFT recipe: the data mix and what happens to rows longer than
    ``max_length``."""

    # sources mixed by ratio (path, ratio, split, system_prompt, max_rows)
    data: list[DataSource] | str | None
    mix_size: int | None = None  # rows in the mixed dataset; default: the sources' total
    # Rows longer than max_length (tansaku.trainer.length): drop | fit (elide tool results) | error; never
    # truncated.
    overlong: Literal["drop", "fit", "error"] = "drop"
    # general ability while training
    retention: RetentionSpec | str | None = field(default_factory=RetentionSpec)

    def __post_init__(self):
        self.data = section(list[DataSource], self.data, "data")
        check(bool(self.data), "data: list at least one source (path, ratio, system_prompt)")
        for i, src in enumerate(self.data):
            check(src.ratio > 0, f"data.{i}.ratio: must be > 0 (got {src.ratio})")
            _check_train_split(f"data.{i}", src.split)
        check(self.mix_size is None or self.mix_size > 0, "mix_size: must be > 0")
        check(self.overlong in OVERLONG, f"overlong: one of {', '.join(OVERLONG)} (got {self.overlong!r})")
        self.retention = section(RetentionSpec, self.retention or {}, "retention")
        check(not self.retention.problems(), "; ".join(self.retention.problems()))


@dataclass
class TansakuRLArguments:
    """tansaku's own keys of an RL recipe: the tasks and the checks around training."""

    # name, data, index (or auto + corpus), ratio, reward_weights, system_prompt …
    tasks: list[RLTask] | str | None
    mix_size: int | None = None  # prompts in the task mix; default: the tasks' total
    # Compute the prompt tokens every episode shares once: per generate call without vLLM
    # (tansaku.trainer.cpu.prefix_generate) and, on CPU, per optimizer step in the training forward
    # (tansaku.trainer.cpu.prefix_train); false = TRL's plain generate and forward.
    share_prompt_prefix: bool = True
    # Without vLLM, on CPU, fp32 weights under bf16: true: generate with a bf16 copy of the weights refreshed
    # at every generate call (tansaku.trainer.cpu.generation_copy); false = the training model under autocast.
    bf16_generation_copy: bool = True
    # true: log `kl_to_start` each generation round, the policy's KL to the starting weights on its own
    # rollouts (a frozen copy of the start scores them: one no-grad forward per round; tansaku.trainer.drift).
    # TRL logs `kl` only when beta > 0, and with beta 0 nothing says how far the policy went.
    kl_to_start: bool = False
    # DAPO's dynamic sampling: > 0: a rollout round's zero-variance groups (all G rewards equal) are dropped
    # and refilled with fresh prompts, at most this many refill rounds per rollout round; the batch keeps its
    # shape (tansaku.trainer.dynamic_sampling). 0: off, TRL's round as sampled.
    dynamic_sampling_max_refills: int = 0
    watch: WatchSpec | str | None = field(default_factory=WatchSpec)
    readiness: ReadinessSpec | str | None = field(default_factory=ReadinessSpec)
    difficulty: DifficultySpec | str | None = field(default_factory=DifficultySpec)
    judge: JudgeSpec | str | None = field(default_factory=JudgeSpec)  # `judge: SPEC` or a mapping (JudgeSpec)
    # general ability while training
    retention: RetentionSpec | str | None = field(default_factory=RetentionSpec)

    def __post_init__(self):
        self.tasks = section(list[RLTask], self.tasks, "tasks")
        check(bool(self.tasks), "tasks: list at least one task (name, data, index)")
        for i, task in enumerate(self.tasks):
            check(task.ratio > 0, f"tasks.{i}.ratio: must be > 0 (got {task.ratio})")
            check(task.abstention_weight >= 0,
                   f"tasks.{i}.abstention_weight: must be >= 0 (got {task.abstention_weight})")
            _check_train_split(f"tasks.{i}", task.split or "train")
            check(bool(task.index) or bool(task.environment_url),
                   f"tasks.{i}.index: the search index (folder or OpenSearch target) is required "
                   "(or environment_url: a serve-env server)")
            check(not (task.index and task.environment_url),
                   f"tasks.{i}: index or environment_url (a serve-env server searching its own), not both")
            check(task.index != AUTO_INDEX or bool(task.corpus),
                   f"tasks.{i}.index: 'auto' builds the index from the task's corpus; set tasks.{i}.corpus")
        names = [t.name for t in self.tasks]
        check(len(set(names)) == len(names),
              f"tasks: each task name once (got {names}); merge their datasets")
        check(self.dynamic_sampling_max_refills >= 0,
               f"dynamic_sampling_max_refills: must be >= 0 (got {self.dynamic_sampling_max_refills}; 0 "
               f"turns it off)")
        if isinstance(self.judge, str) and not self.judge.lstrip().startswith("{"):
            self.judge = {"model": self.judge}  # `judge: http:MODEL@URL`, the spec alone
        for name, section_type in RL_SECTIONS.items():  # null: the section's defaults
            setattr(self, name, section(section_type, getattr(self, name) or {}, name))
        for problem in self.difficulty.problems() + self.judge.problems() + self.retention.problems():
            raise RecipeError(problem)


SCRIPT_ARGUMENTS = {"sft": TansakuSFTArguments, "rl": TansakuRLArguments}
