"""``EgovMCQ``: four-choice law questions; the user message lists the numbered choices, the answer is
``{{番号}}``.

    from tansaku.envs.tasks import TASKS
    TASKS["egov_mcq"].gold_completion({"answer_index": 1})[0]["content"]   # '{{2}}'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tansaku.envs import rewards
from tansaku.envs.task_prompts import EGOV_SYSTEM
from tansaku.envs.tasks.base import Task


@dataclass(frozen=True)
class EgovMCQ(Task):
    """Four-choice law questions: the user message lists the numbered choices, the answer is ``{{番号}}``."""

    name: str = "egov_mcq"
    version: str = "1"
    system_prompts: tuple[str, ...] = EGOV_SYSTEM
    columns: dict[str, str] = field(default_factory=lambda: {
        "question": "str", "choices": "list[str] (4)", "answer_index": "int (0-based)"})
    optional_columns: dict[str, str] = field(default_factory=lambda: {
        "law_title": "str", "article_title": "str", "id": "str"})
    answer_reward_name: str | None = "mcq_reward"
    reward_weights: dict[str, float] = field(default_factory=lambda: {  # zh_mix from step 0 (docs/tasks.md)
        "mcq_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.5})
    source_pipelines: tuple[str, ...] = ("egov_mcq", "egov")

    def user_message(self, row: dict) -> str:
        choices = rewards.as_list(row["choices"])
        return "\n".join([str(row["question"]), ""] + [f"{i + 1}. {c}" for i, c in enumerate(choices)])

    def gold_answer(self, row: dict) -> str:
        return str(int(row["answer_index"]) + 1)  # choices are numbered from 1 in the prompt

    def gold_problem(self, row: dict) -> str | None:
        choices = rewards.as_list(row["choices"])
        if not 0 <= int(row["answer_index"]) < len(choices):
            return f"answer_index {row['answer_index']} outside {len(choices)} choices"
        score = rewards.mcq_reward([self.gold_completion(row)], answer_index=[row["answer_index"]],
                                   choices=[choices])[0]
        return None if score == 1.0 else f"gold answer scores {score} under {self.answer_reward_name}"
