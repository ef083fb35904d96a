"""The nested sections of an RL recipe that configure checks around training: the reward watch (``watch:``), the
readiness check (``readiness:``) and difficulty banding (``difficulty:``). ``tansaku.trainer.recipes`` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WatchSpec:
    """The reward-hacking watch: warn when a component rises while answer correctness stays flat."""

    window: int = 10  # logged steps compared: mean of the last `window` vs the `window` before
    rise: float = 0.1  # a component "rises" when its mean grows by at least this much
    flat: float = 0.02  # correctness is "flat" when its mean moves less than this
    correctness: str | None = None  # None: the task's answer reward; else a substring of a component name


@dataclass
class ReadinessSpec:
    """The pre-flight check of ``train rl`` (``tansaku.envs.evaluate``): refuse when the model never succeeds."""

    k: int = 4  # samples per question
    rows: int = 16  # questions per task
    split: str | None = None  # default: the task's own split
    model: str | None = None  # LLM spec for the rollouts; default transformers:<recipe model>
    max_tokens: int = 1024
    min_pass_at_k: float = 0.02


@dataclass
class DifficultySpec:
    """Difficulty banding before step 1 (``tansaku.trainer.difficulty``): keep prompts the start model solves
    sometimes. Off while ``samples`` is 0; on, it replaces the readiness rollouts."""

    samples: int = 0  # K rollouts per candidate prompt with the model RL starts from (0: off)
    min_pass: float = 0.05  # keep pass rate >= min_pass (the default drops never-solved prompts for K < 20)
    max_pass: float = 0.95  # keep pass rate <= max_pass (the default drops always-solved prompts for K < 20)
    rows: int | None = None  # candidate prompts per task: the first N of its prompt split (None: all)
    max_tokens: int = 1024  # new tokens per turn
    temperature: float | None = None  # None: the recipe's temperature (what GRPO samples at)

    def problems(self) -> list[str]:
        """What is wrong with these settings, as recipe error messages (empty: fine)."""
        checks = [
            (self.samples == 0 or self.samples >= 2,
             f"difficulty.samples: >= 2 rollouts per prompt give a pass rate (got {self.samples}; 0 turns banding off)"),
            (0.0 <= self.min_pass <= self.max_pass <= 1.0,
             f"difficulty: need 0 <= min_pass <= max_pass <= 1 (got {self.min_pass}, {self.max_pass})"),
            (self.rows is None or self.rows > 0, f"difficulty.rows: must be > 0 (got {self.rows})"),
            (self.max_tokens > 0, f"difficulty.max_tokens: must be > 0 (got {self.max_tokens})"),
            (self.temperature is None or self.temperature > 0,
             f"difficulty.temperature: sampling needs > 0 (got {self.temperature})"),
        ]
        return [message for ok, message in checks if not ok]
