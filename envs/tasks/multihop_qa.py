"""``MultihopQA``: two-hop questions answered as ``{{答え}}``, scored by ``answer_reward`` (the answer or an
alias).

    from tansaku.envs.tasks import TASKS
    TASKS["multihop_qa"].build_prompt({"question": "雪村製菓の創業者の出身地は？"})
    # [system, user] messages
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tansaku.envs import rewards
from tansaku.envs.task_prompts import MULTIHOP_SYSTEM
from tansaku.envs.tasks.base import Task


@dataclass(frozen=True)
class MultihopQA(Task):
    """Two-hop questions answered as ``{{答え}}``; scored by ``answer_reward`` (answer or an alias)."""

    name: str = "multihop_qa"
    version: str = "1"
    system_prompts: tuple[str, ...] = MULTIHOP_SYSTEM
    columns: dict[str, str] = field(default_factory=lambda: {"question": "str", "answer": "str"})
    optional_columns: dict[str, str] = field(default_factory=lambda: {"aliases": "list[str]", "id": "str"})
    # zh_mix 0: logged only (docs/tasks.md)
    reward_weights: dict[str, float] = field(default_factory=lambda: {
        "answer_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.0})
    source_pipelines: tuple[str, ...] = ("multihop", "jemhopqa")

    def gold_problem(self, row: dict) -> str | None:
        aliases = rewards.as_list(row.get("aliases"))
        bad_aliases = [a for a in aliases
                       if rewards.answer_reward([[{"role": "assistant", "content": "{{" + str(a) + "}}"}]],
                                                answer=[row["answer"]], aliases=[aliases])[0] != 1.0]
        if bad_aliases:
            return f"aliases that cannot score: {bad_aliases}"
        score = rewards.answer_reward([self.gold_completion(row)], answer=[row["answer"]])[0]
        return None if score == 1.0 else f"gold answer scores {score} under {self.answer_reward_name}"
