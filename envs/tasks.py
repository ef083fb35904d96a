"""Task definitions: one class per task (``MultihopQA``, ``EgovMCQ``, ``DeepResearch``) owning its dataset schema,
prompt, gold completion and gold check, tool config, reward functions and weights, and a version.

``TASKS[name]`` holds one instance of each, plus ``multihop_qa_compact`` (``Task.compact``: the same task
with a short prompt, terse tool descriptions, two short hits and a 4-turn budget, for the 135M tiny model;
its datasets are the multihop ones, chosen by name). Bump a task's ``version`` whenever its scoring changes, so results of
two versions are never compared. A question pipeline is given its task object and ends with
``task.finalize(rows)``: the ``task`` and ``prompt`` columns, and the gold check (the gold answer must score 1.0
under the task's own answer reward). Code outside this module never branches on a task's name: what differs
between tasks is a field (``pass_threshold``, ``source_pipelines`` …) or a method a subclass overrides
(``user_message``, ``build_prompt``, ``gold_completion``, ``gold_problem``, ``reward_factories`` — the task's
rewards by name, which ``reward_weights`` chooses and weighs). The prompts' texts are in ``task_prompts``.

    from tansaku.envs.tasks import TASKS, check_gold
    task = TASKS["multihop_qa"]
    task.build_prompt({"question": "雪村製菓の創業者の出身地は？"})   # [system, user] messages
    task.reward_functions()                                         # TRL reward_funcs; weights: task.weights()
    task.with_reward_weights({"format_reward": 0.5})                # a recipe's overrides: one Task, used everywhere
    check_gold(task, rows)                                          # ValueError listing the bad rows

>>> sorted(TASKS), type(TASKS["egov_mcq"]).__name__
(['deepresearch', 'egov_mcq', 'multihop_qa', 'multihop_qa_compact'], 'EgovMCQ')
>>> TASKS["multihop_qa_compact"].tools_config["top_k"], TASKS["multihop_qa_compact"].max_turns
(2, 4)
>>> TASKS["egov_mcq"].gold_completion({"answer_index": 1})[0]["content"]
'{{2}}'
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tansaku.core import jsontext
from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.envs import abstention, rewards, rubric_reward
from tansaku.envs.task_prompts import (
    COMPACT_TOOLS_CONFIG,
    DEEPRESEARCH_SYSTEM,
    EGOV_SYSTEM,
    MULTIHOP_COMPACT_SYSTEM,
    MULTIHOP_SYSTEM,
)
from tansaku.envs.tools import ToolsConfig


@dataclass(frozen=True)
class Task(rewards.ZhMixSettings):  # zh_mix_start_step, zh_mix_scope, with_zh_mix: the zh_mix_penalty's settings
    """Everything that defines one RL/eval task. The fields are plain data (``describe()`` puts them in
    manifests and eval reports); subclasses give them their values and override the hooks below.

    ``pass_threshold``: the answer-reward value that counts as a pass in ``run_eval`` (1.0 for exact answers).
    ``source_pipelines``: ``synth build`` pipelines whose datasets hold this task's rows (``task_for_dataset``).
    """

    name: str = ""
    version: str = "1"
    system_prompts: tuple[str, ...] = ()
    columns: dict[str, str] = field(default_factory=dict)  # required dataset columns → type description
    optional_columns: dict[str, str] = field(default_factory=dict)
    answer_style: str = "braces"  # the format reward's style — braces: {{…}}; report: the final message is the report
    answer_reward_name: str | None = "answer_reward"
    reward_weights: dict[str, float] = field(default_factory=dict)  # reward name → weight
    tool_names: tuple[str, ...] = ("search", "open_doc")
    tools_config: dict = field(default_factory=dict)  # tansaku.envs.tools.ToolsConfig fields
    tool_call_cap: int = rewards.DEFAULT_TOOL_CALL_CAP
    require_reasoning: bool = True
    max_turns: int = 8
    max_tool_calls: int = 16
    pass_threshold: float = 1.0
    source_pipelines: tuple[str, ...] = ()

    # ------------------------------------------------------------------ variants
    def compact(self, system_prompts: tuple[str, ...]) -> Task:
        """The same task (columns, rewards, answer format) with a short prompt, ``COMPACT_TOOLS_CONFIG`` and a
        small turn budget, named ``<name>_compact``: for models with a small context budget. No pipeline
        maps to it (``source_pipelines`` empty): choose it by name (``train eval --task``, recipe ``tasks``,
        ``build_trajectories(task=…)``)."""
        return replace(self, name=f"{self.name}_compact", system_prompts=system_prompts,
                       tools_config=dict(COMPACT_TOOLS_CONFIG), max_turns=4, max_tool_calls=4, source_pipelines=())

    def with_system_prompt(self, text: str) -> Task:
        """The same task whose every prompt (SFT rows, RL prompts, evaluation) carries ``text`` as its system
        message (``--system-prompt`` / a recipe's ``system_prompt``)."""
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"task {self.name}: the system prompt must be non-empty text")
        return replace(self, system_prompts=(text,))

    def with_tools(self, **fields) -> Task:
        """The same task with ``fields`` (``ToolsConfig`` fields) over its ``tools_config``, e.g.
        ``interface_variants=2`` (``train eval --interface-variants``, ``synth build trajectories
        --interface-variants``). A bad field or value is one ``InputError`` line.

        >>> TASKS["multihop_qa"].with_tools(interface_variants=2).tools_config["interface_variants"]
        2
        """
        merged = {**self.tools_config, **fields}
        try:
            ToolsConfig(**merged)
        except (TypeError, ValueError) as exc:
            raise InputError(f"task {self.name}: bad tools config ({exc})") from None
        return replace(self, tools_config=merged)

    # ------------------------------------------------------------------ prompts
    def user_message(self, row: dict) -> str:
        return str(row["question"])

    def build_prompt(self, row: dict, variant: int | None = None) -> list[dict]:
        """[system, user] messages; ``variant`` picks a system prompt (default: stable per question)."""
        return [{"role": "system", "content": self.system_prompt(row, variant)},
                {"role": "user", "content": self.user_message(row)}]

    def system_prompt(self, row: dict, variant: int | None = None) -> str:
        if variant is None:
            variant = sum(map(ord, self.user_message(row))) % len(self.system_prompts)
        return self.system_prompts[variant % len(self.system_prompts)]

    def to_trl_rows(self, rows: list[dict]) -> list[dict]:
        """Rows with a conversational ``prompt`` column added, as ``GRPOTrainer`` expects.

        A ``rubric`` given as a list becomes its JSON string, so rows with plain and weighted rubrics fit one
        Arrow column (the rubric reward reads both).
        """
        out = []
        for row in rows:
            row = {**row, "prompt": self.build_prompt(row)}
            if "rubric" in row and not isinstance(row["rubric"], str):
                row["rubric"] = jsontext.dumps(row["rubric"])
            out.append(row)
        return out

    def fits(self, row: dict) -> bool:
        """True when ``row`` has every column this task needs."""
        return all(c in row for c in self.columns)

    # ------------------------------------------------------------------ rewards
    def reward_factories(self) -> dict[str, Callable[[Any], Callable]]:
        """Every reward this task can weigh, by component name: ``judge`` → the TRL reward function. A subclass
        adds its answer reward; ``reward_weights`` chooses and weighs among these."""
        return {
            "format_reward": lambda judge: rewards.make_format_reward(self.answer_style, self.require_reasoning),
            "tool_call_reward": lambda judge: rewards.make_tool_call_reward(self.tool_call_cap),
            "zh_mix_penalty": lambda judge: self.zh_mix_penalty_function(metric=f"zh_mix/{self.name}"),
            "abstention_reward": lambda judge: abstention.abstention_reward,
        }

    def reward_function(self, name: str, judge=None):
        """The reward callable of component ``name`` (one of ``reward_factories``)."""
        factories = self.reward_factories()
        if name not in factories:
            raise InputError(f"task {self.name} has no reward {name!r}; its rewards: {', '.join(factories)}")
        return factories[name](judge)

    def reward_functions(self, judge=None) -> list:
        """The TRL ``reward_funcs`` in the order of ``reward_weights``. ``judge``: client for rubric tasks."""
        return [self.reward_function(name, judge) for name in self.reward_weights]

    def weights(self) -> list[float]:
        return list(self.reward_weights.values())

    def with_abstention(self, weight: float) -> Task:
        """This task plus ``abstention_reward`` at ``weight`` (rows may carry ``answerable: false``): credit for
        「分かりません」 when the gold is not findable, against confident hallucination. The weight may not
        exceed the answer's, so an abstention never earns more than a correct answer."""
        top = self.reward_weights.get(self.answer_reward_name or "", 0.0)
        if not 0.0 < weight <= top:
            raise InputError(f"{self.name}: abstention weight {weight} must be in (0, {top}] (the answer's weight)")
        return replace(self, reward_weights={**self.reward_weights, "abstention_reward": weight},
                       optional_columns={**self.optional_columns, "answerable": "bool"})

    def with_reward_weights(self, weights: dict[str, float]) -> Task:
        """The task with a recipe's ``weights`` over its own (its components only, finite; an abstention never
        outweighs the answer): training, evaluation, re-scoring and ``serve-env`` then weigh alike.

        >>> TASKS["multihop_qa"].with_reward_weights({"format_reward": 0.5}).reward_weights["format_reward"]
        0.5
        """
        if unknown := set(weights) - set(self.reward_weights):
            raise InputError(f"task {self.name}: reward_weights for unknown components {sorted(unknown)}; "
                             f"the task has {list(self.reward_weights)}")
        merged = {**self.reward_weights, **weights}
        if not all(isinstance(w, int | float) and math.isfinite(w) for w in merged.values()):
            raise InputError(f"task {self.name}: reward_weights must be finite numbers (got {weights})")
        merged = {name: float(w) for name, w in merged.items()}
        top = merged.get(self.answer_reward_name or "")
        if "abstention_reward" in merged and top is not None and merged["abstention_reward"] > top:
            raise InputError(f"{self.name}: abstention weight {merged['abstention_reward']} must be in (0, {top}] "
                             "(the answer's weight)")
        return replace(self, reward_weights=merged)

    def answer_reward(self, judge=None):
        """The correctness reward (the one ``check_gold``, pass@k and the readiness check use)."""
        if self.answer_reward_name is None:
            return None
        return self.reward_function(self.answer_reward_name, judge)

    def weighted_total(self, scores: dict[str, float | None]) -> float:
        """Weighted sum over components; a None component (judge failure) counts 0."""
        return sum(w * (scores.get(n) or 0.0) for n, w in self.reward_weights.items())

    def describe(self) -> dict:
        """JSON-able description for manifests and eval reports."""
        return asdict(self)

    # ------------------------------------------------------------------ gold
    def gold_completion(self, row: dict) -> list[dict]:
        """A minimal completion that states the gold answer in the task's final-answer format."""
        return [{"role": "assistant", "content": "{{" + self.gold_answer(row) + "}}", "reasoning_content": "正解を書く。"}]

    def gold_answer(self, row: dict) -> str:
        return str(row["answer"])

    def gold_problem(self, row: dict) -> str | None:
        """Why ``row``'s gold would not score 1.0 under the answer reward (None: it does)."""
        raise NotImplementedError

    def gold_drops(self, rows: list[dict]) -> list[dict | Drop]:
        """Each row, or ``Drop("gold_not_scoring")`` (with the reason) where its gold answer would not score 1.0
        under this task's answer reward: the gold check every question pipeline runs."""
        bad = dict(self.gold_failures(rows))
        return [Drop("gold_not_scoring", detail=bad[i]) if i in bad else row for i, row in enumerate(rows)]

    def finalize(self, rows: list[dict]) -> list[dict | Drop]:
        """A question pipeline's finished rows: the ``task`` column and TRL's conversational ``prompt`` (the
        system + user turns ``train rl`` and ``train eval`` build) added, then the gold check.

        >>> [row["task"] for row in TASKS["multihop_qa"].finalize([{"question": "q", "answer": "東京"}])]
        ['multihop_qa']
        """
        return self.gold_drops([{**row, "task": self.name, "prompt": self.build_prompt(row)} for row in rows])

    def gold_failures(self, rows: list[dict]) -> list[tuple[int, str]]:
        """``(row index, reason)`` for every row whose gold answer would not score 1.0 (or is malformed)."""
        failures = []
        for i, row in enumerate(rows):
            missing = [c for c in self.columns if row.get(c) in (None, "", [])]
            problem = f"missing column(s) {missing}" if missing else self.gold_problem(row)
            if problem:
                failures.append((i, problem))
        return failures


@dataclass(frozen=True)
class MultihopQA(Task):
    """Two-hop questions answered as ``{{答え}}``; scored by ``answer_reward`` (answer or an alias)."""

    name: str = "multihop_qa"
    version: str = "1"
    system_prompts: tuple[str, ...] = MULTIHOP_SYSTEM
    columns: dict[str, str] = field(default_factory=lambda: {"question": "str", "answer": "str"})
    optional_columns: dict[str, str] = field(default_factory=lambda: {"aliases": "list[str]", "id": "str"})
    reward_weights: dict[str, float] = field(default_factory=lambda: {  # zh_mix 0: logged only (docs/tasks.md)
        "answer_reward": 1.0, "format_reward": 0.2, "tool_call_reward": 0.2, "zh_mix_penalty": 0.0})
    source_pipelines: tuple[str, ...] = ("multihop", "jemhopqa")

    def reward_factories(self) -> dict[str, Callable[[Any], Callable]]:
        return {**super().reward_factories(), "answer_reward": lambda judge: rewards.answer_reward}

    def gold_problem(self, row: dict) -> str | None:
        aliases = rewards.as_list(row.get("aliases"))
        bad_aliases = [a for a in aliases
                       if rewards.answer_reward([[{"role": "assistant", "content": "{{" + str(a) + "}}"}]],
                                                answer=[row["answer"]], aliases=[aliases])[0] != 1.0]
        if bad_aliases:
            return f"aliases that cannot score: {bad_aliases}"
        score = rewards.answer_reward([self.gold_completion(row)], answer=[row["answer"]])[0]
        return None if score == 1.0 else f"gold answer scores {score} under {self.answer_reward_name}"


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

    def reward_factories(self) -> dict[str, Callable[[Any], Callable]]:
        return {**super().reward_factories(), "mcq_reward": lambda judge: rewards.mcq_reward}

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
    reward_weights: dict[str, float] = field(default_factory=lambda: {  # zh_mix 0: logged only (docs/tasks.md)
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

    def reward_factories(self) -> dict[str, Callable[[Any], Callable]]:
        return {**super().reward_factories(), "rubric_reward": self._rubric_reward}

    def _rubric_reward(self, judge):
        if judge is None:
            raise InputError(f"task {self.name!r} scores reports with an LLM judge: give one (--judge SPEC, "
                             "or `judge: SPEC` in a train rl recipe)")
        return rubric_reward.make_rubric_reward(judge)

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


TASKS: dict[str, Task] = {task.name: task for task in (MultihopQA(), EgovMCQ(), DeepResearch(),
                                                       MultihopQA().compact(MULTIHOP_COMPACT_SYSTEM))}


def task_named(name: str) -> Task:
    """The task a user named (``--task``), or one ``InputError`` line listing the known names.

    >>> task_named("egov_mcq").name
    'egov_mcq'
    """
    if name not in TASKS:
        raise InputError(f"unknown task {name!r}; known: {sorted(TASKS)}")
    return TASKS[name]


def check_gold(task: Task | str, rows: list[dict]) -> None:
    """Raise ``InputError`` (count + first examples) unless every row's gold answer scores 1.0."""
    task = task_named(task) if isinstance(task, str) else task
    failures = task.gold_failures(rows)
    if failures:
        examples = "; ".join(f"row {i}: {reason}" for i, reason in failures[:5])
        raise InputError(f"{len(failures)} of {len(rows)} rows fail the gold check of {task.name} "
                         f"v{task.version}: {examples}")


def task_for_dataset(pipeline: str | None, row: dict | None) -> Task | None:
    """The task a question dataset is for: the one its pipeline builds rows for, else the most specific task
    whose columns the row has (egov rows also have ``question``/``answer``); None when nothing fits.

    >>> task_for_dataset("egov_mcq", None).name, task_for_dataset(None, {"question": "q", "answer": "a"}).name
    ('egov_mcq', 'multihop_qa')
    """
    for task in TASKS.values():
        if pipeline and pipeline in task.source_pipelines:
            return task
    fitting = [task for task in TASKS.values() if row and task.fits(row)]
    return max(fitting, key=lambda t: len(t.columns), default=None)
