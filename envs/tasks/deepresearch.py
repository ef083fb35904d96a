"""``DeepResearch``: report instructions scored by an LLM judge against a per-row rubric (``rubric_reward``).

    from tansaku.envs.tasks import TASKS
    task = TASKS["deepresearch"]
    task.score(completions, rows, judge=client)   # the rubric reward needs a judge client
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tansaku.envs import rewards, rubric_reward
from tansaku.envs.task_prompts import DEEPRESEARCH_SYSTEM
from tansaku.envs.tasks.base import Task


@dataclass(frozen=True)
class DeepResearch(Task):
    """Report instructions scored by an LLM judge against a per-row rubric (``rubric_reward``).

    There is no gold report: the gold check validates the rubric instead, and a rubric score of 0.5
    counts as a pass in ``run_eval``.
    """

    name: str = "deepresearch"
    version: str = "2"  # 2: graded rubric scales (0-2, 0-3) scored as points / top
    system_prompts: tuple[str, ...] = DEEPRESEARCH_SYSTEM
    columns: dict[str, str] = field(default_factory=lambda: {
        "instruction": "str", "rubric": "list[str] or list[{criterion, weight}] (JSON string ok)"})
    optional_columns: dict[str, str] = field(default_factory=lambda: {"id": "str"})
    answer_style: str = "report"
    answer_reward_name: str | None = "rubric_reward"
    # zh_mix 0: logged only (docs/tasks.md)
    reward_weights: dict[str, float] = field(default_factory=lambda: {
        "rubric_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.0})
    max_turns: int = 12
    max_tool_calls: int = 24
    pass_threshold: float = 0.5
    source_pipelines: tuple[str, ...] = ("deepresearch",)

    def user_message(self, row: dict) -> str:
        return str(row.get("instruction") or row.get("question"))

    def build_prompt(self, row: dict, variant: int | None = None) -> list[dict]:
        """With clarifying Q/A (``dialogue``): instruction, clarifying question, the user's answer."""
        dialogue = rewards.as_list(row.get("dialogue"))
        if not dialogue:
            return super().build_prompt(row, variant)
        return [{"role": "system", "content": self.system_prompt(row, variant)},
                *({"role": m["role"], "content": m["content"]} for m in dialogue)]

    def gold_completion(self, row: dict) -> list[dict]:
        raise ValueError(f"task {self.name!r} has no gold completion: its rows carry a rubric, not an answer")

    def gold_problem(self, row: dict) -> str | None:
        try:
            texts, weights, _ = rubric_reward.rubric_items(row["rubric"])
        except (TypeError, ValueError) as exc:
            return f"unreadable rubric: {exc}"
        if not texts or not all(t.strip() for t in texts) or sum(weights) <= 0:
            return "rubric needs at least one non-empty criterion with positive weight"
        return None
