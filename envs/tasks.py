"""Task definitions: dataset schema, prompts, tool config, reward functions and weights, and a version.

``TASKS[name]`` holds ``multihop_qa``, ``egov_mcq`` and ``deepresearch``. Bump a task's ``version`` whenever
its scoring changes, so results of two versions are never compared. ``check_gold(task, rows)`` is run by
every synthesis pipeline: the gold answer must score 1.0 under the task's own answer reward.

    from tansaku.envs.tasks import TASKS, check_gold
    task = TASKS["multihop_qa"]
    task.build_prompt({"question": "雪村製菓の創業者の出身地は？"})   # [system, user] messages
    task.reward_functions()                                         # TRL reward_funcs; weights: task.weights()
    check_gold(task, rows)                                          # ValueError listing the bad rows
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from tansaku.envs import rewards

_ANSWER_RULE = "最終回答は最後のメッセージに {{答え}} の形で一つだけ書いてください（例: {{東京都}}）。"

_MULTIHOP_SYSTEM = (
    "あなたは日本語の検索エージェントです。質問に答えるために search で文書を検索し、open_doc で本文を読み、"
    "必要なら何度でも検索を繰り返してください。各ステップの前に <think> で考えを整理してください。" + _ANSWER_RULE,
    "あなたは検索ツールを使って複数の文書をたどり、質問に正確に答えるアシスタントです。推測で答えず、"
    "検索結果と本文で確かめてから答えてください。" + _ANSWER_RULE,
)
_EGOV_SYSTEM = (
    "あなたは日本の法令に詳しい検索エージェントです。search と open_doc で e-Gov の条文を調べ、四つの選択肢から"
    "正しいものを一つ選んでください。考えは日本語で書いてください。最終回答は選択肢の番号を {{2}} のように一つだけ"
    "書いてください。",
)
_DEEPRESEARCH_SYSTEM = (
    "あなたは日本語の調査エージェントです。search と open_doc で複数の文書を調べ、指示に沿ったレポートを"
    "日本語で書いてください。調べ終えたら、最後のメッセージにレポート本文だけを書いてください（ツール呼び出しなし）。"
    "根拠にした文書の doc_id をレポート中に示してください。",
)


@dataclass(frozen=True)
class Task:
    """Everything that defines one RL/eval task. Plain data; ``reward_functions`` builds the callables."""

    name: str
    version: str
    system_prompts: tuple[str, ...]
    columns: dict[str, str]  # required dataset columns → type description
    optional_columns: dict[str, str] = field(default_factory=dict)
    answer_style: str = "braces"  # braces: {{…}}; report: the final message is the report
    answer_reward_name: str | None = "answer_reward"
    reward_weights: dict[str, float] = field(default_factory=dict)  # reward name → weight
    tool_names: tuple[str, ...] = ("search", "open_doc")
    tools_config: dict = field(default_factory=dict)  # tansaku.envs.tools.ToolsConfig fields
    tool_call_cap: int = rewards.DEFAULT_TOOL_CALL_CAP
    require_reasoning: bool = True
    max_turns: int = 8
    max_tool_calls: int = 16

    # ------------------------------------------------------------------ prompts
    def user_message(self, row: dict) -> str:
        if self.name == "egov_mcq":
            choices = rewards._as_list(row["choices"])
            lines = [str(row["question"]), ""] + [f"{i + 1}. {c}" for i, c in enumerate(choices)]
            return "\n".join(lines)
        if self.answer_style == "report":
            return str(row.get("instruction") or row.get("question"))
        return str(row["question"])

    def build_prompt(self, row: dict, variant: int | None = None) -> list[dict]:
        """[system, user] messages; ``variant`` picks a system prompt (default: stable per question)."""
        if variant is None:
            variant = sum(map(ord, self.user_message(row))) % len(self.system_prompts)
        system = self.system_prompts[variant % len(self.system_prompts)]
        dialogue = rewards._as_list(row.get("dialogue")) if self.answer_style == "report" else []
        if dialogue:  # deepresearch rows with clarifying Q/A: instruction, clarifying question, user's answer
            return [{"role": "system", "content": system}, *({"role": m["role"], "content": m["content"]}
                                                             for m in dialogue)]
        return [{"role": "system", "content": system}, {"role": "user", "content": self.user_message(row)}]

    def to_trl_rows(self, rows: list[dict]) -> list[dict]:
        """Rows with a conversational ``prompt`` column added, as ``GRPOTrainer`` expects.

        A ``rubric`` given as a list becomes its JSON string, so rows with plain and weighted rubrics fit one
        Arrow column (the rubric reward reads both).
        """
        out = []
        for row in rows:
            row = {**row, "prompt": self.build_prompt(row)}
            if "rubric" in row and not isinstance(row["rubric"], str):
                row["rubric"] = json.dumps(row["rubric"], ensure_ascii=False)
            out.append(row)
        return out

    # ------------------------------------------------------------------ rewards
    def reward_functions(self, judge=None) -> list:
        """The TRL ``reward_funcs`` in the order of ``reward_weights``. ``judge``: client for rubric tasks."""
        functions = []
        for name in self.reward_weights:
            if name == "tool_call_reward":
                fn = rewards.make_tool_call_reward(self.tool_call_cap)
            elif name == "format_reward":
                fn = rewards.make_format_reward(self.answer_style, self.require_reasoning)
            elif name == "rubric_reward":
                if judge is None:
                    raise ValueError(f"task {self.name!r} scores reports with a judge: pass judge=<LLM client>")
                fn = rewards.make_rubric_reward(judge)
            else:
                fn = getattr(rewards, name)
            functions.append(fn)
        return functions

    def weights(self) -> list[float]:
        return list(self.reward_weights.values())

    def answer_reward(self, judge=None):
        """The correctness reward (the one ``check_gold``, pass@k and the readiness check use)."""
        if self.answer_reward_name is None:
            return None
        return self.reward_functions(judge)[list(self.reward_weights).index(self.answer_reward_name)]

    def weighted_total(self, scores: dict[str, float | None]) -> float:
        """Weighted sum over components; a None component (judge failure) counts 0."""
        return sum(w * (scores.get(n) or 0.0) for n, w in self.reward_weights.items())

    def describe(self) -> dict:
        """JSON-able description for manifests and eval reports."""
        return asdict(self)

    # ------------------------------------------------------------------ gold
    def gold_completion(self, row: dict) -> list[dict]:
        """A minimal completion that states the gold answer in the task's final-answer format."""
        if self.name == "egov_mcq":
            content = "{{" + str(int(row["answer_index"]) + 1) + "}}"
        else:
            content = "{{" + str(row["answer"]) + "}}"
        return [{"role": "assistant", "content": content, "reasoning_content": "正解を書く。"}]


TASKS: dict[str, Task] = {
    "multihop_qa": Task(
        name="multihop_qa",
        version="1",
        system_prompts=_MULTIHOP_SYSTEM,
        columns={"question": "str", "answer": "str"},
        optional_columns={"aliases": "list[str]", "id": "str"},
        reward_weights={"answer_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2,
                        "zh_mix_penalty": 0.3},
    ),
    "egov_mcq": Task(
        name="egov_mcq",
        version="1",
        system_prompts=_EGOV_SYSTEM,
        columns={"question": "str", "choices": "list[str] (4)", "answer_index": "int (0-based)"},
        optional_columns={"law_title": "str", "article_title": "str", "id": "str"},
        answer_reward_name="mcq_reward",
        reward_weights={"mcq_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.5},
    ),
    "deepresearch": Task(
        name="deepresearch",
        version="2",  # 2: graded rubric scales (0-2, 0-3) scored as points / top
        system_prompts=_DEEPRESEARCH_SYSTEM,
        columns={"instruction": "str", "rubric": "list[str] or list[{criterion, weight}] (JSON string ok)"},
        optional_columns={"id": "str"},
        answer_style="report",
        answer_reward_name="rubric_reward",
        reward_weights={"rubric_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.3},
        max_turns=12,
        max_tool_calls=24,
    ),
}


def gold_failures(task: Task, rows: list[dict]) -> list[tuple[int, str]]:
    """``(row index, reason)`` for every row whose gold answer would not score 1.0 (or is malformed)."""
    failures = []
    for i, row in enumerate(rows):
        missing = [c for c in task.columns if row.get(c) in (None, "", [])]
        if missing:
            failures.append((i, f"missing column(s) {missing}"))
            continue
        if task.name == "deepresearch":
            try:
                texts, weights, _ = rewards._rubric_items(row["rubric"])
            except (TypeError, ValueError) as exc:
                failures.append((i, f"unreadable rubric: {exc}"))
                continue
            if not texts or not all(t.strip() for t in texts) or sum(weights) <= 0:
                failures.append((i, "rubric needs at least one non-empty criterion with positive weight"))
            continue
        if task.name == "egov_mcq":
            choices = rewards._as_list(row["choices"])
            if not 0 <= int(row["answer_index"]) < len(choices):
                failures.append((i, f"answer_index {row['answer_index']} outside {len(choices)} choices"))
                continue
            score = rewards.mcq_reward([task.gold_completion(row)], answer_index=[row["answer_index"]],
                                       choices=[choices])[0]
        else:
            aliases = rewards._as_list(row.get("aliases"))
            score = rewards.answer_reward([task.gold_completion(row)], answer=[row["answer"]])[0]
            bad_aliases = [a for a in aliases
                           if rewards.answer_reward([[{"role": "assistant", "content": "{{" + str(a) + "}}"}]],
                                                    answer=[row["answer"]], aliases=[aliases])[0] != 1.0]
            if bad_aliases:
                failures.append((i, f"aliases that cannot score: {bad_aliases}"))
                continue
        if score != 1.0:
            failures.append((i, f"gold answer scores {score} under {task.answer_reward_name}"))
    return failures


def check_gold(task: Task | str, rows: list[dict]) -> None:
    """Raise ``ValueError`` (count + first examples) unless every row's gold answer scores 1.0."""
    task = TASKS[task] if isinstance(task, str) else task
    failures = gold_failures(task, rows)
    if failures:
        examples = "; ".join(f"row {i}: {reason}" for i, reason in failures[:5])
        raise ValueError(f"{len(failures)} of {len(rows)} rows fail the gold check of {task.name} "
                         f"v{task.version}: {examples}")


def task_json(task: Task) -> str:
    return json.dumps(task.describe(), ensure_ascii=False, sort_keys=True)
