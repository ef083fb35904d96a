"""``Task``: everything that defines one RL/eval task, and the one way it is configured and scored.

A task owns its dataset schema, prompt, gold completion and gold check, tool config, reward functions and
weights, and a version. ``Task.configured(overrides)`` is the task a recipe means (its ``tasks[]`` entry:
system prompt, abstention, tools, reward weights, zh-mix settings): training, the readiness gate, ``train
eval``, ``train rescore`` and ``synth serve-env`` all take that one object. ``Task.score(completions, rows)``
is the one scoring path: every weighed reward component as TRL calls it, and the weighted total (rollouts and
evaluation, ``/verify``, rescoring).

    from tansaku.envs.tasks import TASKS
    task = TASKS["multihop_qa"].configured({"reward_weights": {"format_reward": 0.5}})
    [score] = task.score([completion], [row])        # score.components {name: value}, score.total
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tansaku.core import jsontext
from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.envs import reward_registry, rewards
from tansaku.envs.task_prompts import COMPACT_TOOLS_CONFIG
from tansaku.envs.tools import ToolsConfig

# What a recipe's task may set over the task's own (``tansaku.trainer.recipe_arguments.RLTask`` fields of
# those names).
OVERRIDES = ("system_prompt", "abstention_weight", "tools", "reward_weights", "zh_mix_start_step",
             "zh_mix_scope")


@dataclass(frozen=True)
class Score:
    """One completion's scores: each weighed reward component (None: it did not apply, or the judge failed)
    and their weighted total."""

    components: dict[str, float | None]
    total: float


def override_values(overrides: Mapping[str, Any] | Any) -> dict[str, Any]:
    """The overrides that are set, by name (``OVERRIDES``), of a mapping or of an object with those attributes
    (a recipe's ``RLTask``); a mapping key that is no override is one ``InputError`` line.

    >>> override_values({"abstention_weight": 0.0, "tools": {"top_k": 2}, "system_prompt": None})
    {'tools': {'top_k': 2}}
    """
    if isinstance(overrides, Mapping):
        if unknown := sorted(set(overrides) - set(OVERRIDES)):
            raise InputError(f"unknown task override(s) {unknown}; known: {', '.join(OVERRIDES)}")
        values = dict(overrides)
    else:
        values = {name: getattr(overrides, name, None) for name in OVERRIDES}
    # What a recipe task without the setting holds.
    unset = {"abstention_weight": 0.0, "tools": {}, "reward_weights": {}}
    return {name: value for name, value in values.items()
            if value is not None and not (name in unset and value == unset[name])}


@dataclass(frozen=True)
class Task(rewards.ZhMixSettings):  # zh_mix_start_step, zh_mix_scope, with_zh_mix: the penalty's settings
    """Everything that defines one RL/eval task. The fields are plain data (``describe()`` puts them in
    manifests and eval reports); subclasses give them their values and override the hooks below.

    ``pass_threshold``: the answer-reward value that counts as a pass in ``run_eval`` (1.0 for exact answers).
    ``source_pipelines``: ``synth build`` pipelines whose datasets hold this task's rows
    (``task_for_dataset``).
    """

    name: str = ""
    version: str = "1"
    system_prompts: tuple[str, ...] = ()
    columns: dict[str, str] = field(default_factory=dict)  # required dataset columns → type description
    optional_columns: dict[str, str] = field(default_factory=dict)
    # The format reward's style — braces: {{…}}; report: the final message is the report.
    answer_style: str = "braces"
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
                       tools_config=dict(COMPACT_TOOLS_CONFIG), max_turns=4, max_tool_calls=4,
                       source_pipelines=())

    def configured(self, overrides: Mapping[str, Any] | Any) -> Task:
        """The task a recipe means: ``overrides`` (a mapping, or a recipe's ``RLTask``; see ``OVERRIDES``)
        over this task's own, each kind applied here and nowhere else — ``system_prompt`` (the text: a caller
        reads an ``@FILE`` first, ``tansaku.core.options.read_system_prompt``), ``abstention_weight``,
        ``tools`` (``ToolsConfig`` fields), ``reward_weights``, ``zh_mix_start_step`` / ``zh_mix_scope`` (a
        start step for a penalty the task weighs 0 is refused: it would do nothing). Each problem is one
        ``InputError`` line.

        >>> from tansaku.envs.tasks import TASKS
        >>> task = TASKS["multihop_qa"].configured({"reward_weights": {"format_reward": 0.5},
        ...                                         "abstention_weight": 0.5})
        >>> task.reward_weights["format_reward"], task.reward_weights["abstention_reward"]
        (0.5, 0.5)
        """
        given, task = override_values(overrides), self
        if "system_prompt" in given:
            task = task.with_system_prompt(given["system_prompt"])
        if "abstention_weight" in given:
            task = task.with_abstention(given["abstention_weight"])
        if "tools" in given:  # e.g. interface_variants: 2 (the SFT rows and eval must be built the same way)
            try:
                task = task.with_tools(**given["tools"])
            except (InputError, TypeError) as exc:
                reason = str(exc).removeprefix(f"task {self.name}: ")
                raise InputError(f"task {self.name}: tools: {reason}") from None
        if "reward_weights" in given:
            task = task.with_reward_weights(given["reward_weights"])
        start_step, scope = given.get("zh_mix_start_step"), given.get("zh_mix_scope")
        if start_step is not None or scope is not None:
            task = task.with_zh_mix(start_step, scope)
            if start_step is not None and not task.reward_weights.get("zh_mix_penalty"):
                raise InputError(f"task {self.name}: zh_mix_start_step {start_step} starts a penalty that "
                                 "weighs 0 in this task; weigh it too "
                                 "(reward_weights: {zh_mix_penalty: 0.3})")
        return task

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

        >>> from tansaku.envs.tasks import TASKS
        >>> TASKS["multihop_qa"].with_tools(interface_variants=2).tools_config["interface_variants"]
        2
        """
        merged = {**self.tools_config, **fields}
        try:
            ToolsConfig(**merged)
        except (TypeError, ValueError) as exc:
            raise InputError(f"task {self.name}: bad tools config ({exc})") from None
        return replace(self, tools_config=merged)

    def with_abstention(self, weight: float) -> Task:
        """This task plus ``abstention_reward`` at ``weight`` (rows may carry ``answerable: false``): credit
        for 「分かりません」 when the gold is not findable, against confident hallucination. The weight may
        not exceed the answer's, so an abstention never earns more than a correct answer."""
        top = self.reward_weights.get(self.answer_reward_name or "", 0.0)
        if not 0.0 < weight <= top:
            raise InputError(f"task {self.name}: abstention weight {weight} must be in (0, {top}] "
                             "(the answer's weight)")
        return replace(self, reward_weights={**self.reward_weights, "abstention_reward": weight},
                       optional_columns={**self.optional_columns, "answerable": "bool"})

    def with_reward_weights(self, weights: dict[str, float]) -> Task:
        """The task with a recipe's ``weights`` over its own (its components only, finite; an abstention never
        outweighs the answer): training, evaluation, re-scoring and ``serve-env`` then weigh alike.

        >>> from tansaku.envs.tasks import TASKS
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
            raise InputError(f"task {self.name}: abstention weight {merged['abstention_reward']} must be in "
                             f"(0, {top}] (the answer's weight)")
        return replace(self, reward_weights=merged)

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
        """Every reward this task can weigh, by component name: ``judge`` → the TRL reward function, made for
        this task (the registry's, ``tansaku.envs.reward_registry.REWARDS``); ``reward_weights`` chooses and
        weighs among these."""
        return reward_registry.reward_factories(self)

    def reward_function(self, name: str, judge=None):
        """The reward callable of component ``name`` (one of ``reward_factories``)."""
        factories = self.reward_factories()
        if name not in factories:
            raise InputError(f"task {self.name} has no reward {name!r}; its rewards: {', '.join(factories)}")
        return factories[name](judge)

    def reward_functions(self, judge=None) -> list:
        """The TRL ``reward_funcs`` in the order of ``reward_weights``. ``judge``: client for rubric tasks."""
        return [self.reward_function(name, judge) for name in self.reward_weights]

    def scoring_functions(self, judge=None) -> dict[str, Callable]:
        """``reward_functions`` by component name: what ``score`` calls (made once, e.g. for a served app)."""
        return dict(zip(self.reward_weights, self.reward_functions(judge), strict=True))

    def score(self, completions: list, rows: list[dict], judge=None, *, functions: dict | None = None,
              logged: bool = False) -> list[Score]:
        """Each completion scored against its row: every weighed component called as TRL calls it
        (``f(completions, **columns)``) and the weighted total — the one scoring path of rollouts and
        ``train eval``, ``/verify`` and ``train rescore``. ``judge``: the rubric tasks' client;
        ``functions``: ``scoring_functions(judge)`` made once by the caller; ``logged``: the rows are ``train
        rl``'s logged reward inputs (``trainer_step`` among them), else dataset rows, where a field named like
        one of TRL's reward arguments is ``InputError`` (``rewards.reward_columns``).

        >>> from tansaku.envs.tasks import TASKS
        >>> task = TASKS["multihop_qa"].configured({"reward_weights": {"format_reward": 0.5}})
        >>> [score] = task.score([[{"role": "assistant", "content": "{{東京}}",
        ...                         "reasoning_content": "調べた"}]],
        ...                      [{"answer": "東京"}])
        >>> score.components["answer_reward"], score.components["format_reward"], score.total
        (1.0, 1.0, 1.5)
        """
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions for {len(rows)} rows")
        if not completions:
            return []
        columns = rewards.reward_columns(rows, logged=logged)
        functions = functions if functions is not None else self.scoring_functions(judge)
        components: list[dict[str, float | None]] = [{} for _ in completions]
        for name in self.reward_weights:
            for scores, value in zip(components, functions[name](list(completions), **columns), strict=True):
                # None (and NaN, as TRL's nanmean reads it): no score, which the total counts 0
                scores[name] = None if value is None or math.isnan(value) else float(value)
        return [Score(scores, self.weighted_total(scores)) for scores in components]

    def answer_reward(self, judge=None):
        """The correctness reward (the one the gold check, pass@k and the readiness check use)."""
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
        return [{"role": "assistant", "content": "{{" + self.gold_answer(row) + "}}",
                 "reasoning_content": "正解を書く。"}]

    def gold_answer(self, row: dict) -> str:
        return str(row["answer"])

    def gold_problem(self, row: dict) -> str | None:
        """Why ``row``'s gold would not score 1.0 under the answer reward (None: it does)."""
        raise NotImplementedError

    def gold_drops(self, rows: list[dict]) -> list[dict | Drop]:
        """Each row, or ``Drop("gold_not_scoring")`` (with the reason) where its gold answer would not score
        1.0 under this task's answer reward: the gold check every question pipeline runs."""
        bad = dict(self.gold_failures(rows))
        return [Drop("gold_not_scoring", detail=bad[i]) if i in bad else row for i, row in enumerate(rows)]

    def finalize(self, rows: list[dict]) -> list[dict | Drop]:
        """A question pipeline's finished rows: the ``task`` column and TRL's conversational ``prompt`` (the
        system + user turns ``train rl`` and ``train eval`` build) added, then the gold check.

        >>> from tansaku.envs.tasks import TASKS
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
