"""The reward functions of an RL recipe, as TRL's GRPOTrainer takes them, and the ``environment`` names they route by.

    funcs, weights, groups = build_rewards(load_recipe("trainer/recipes/rl-tiny.yaml", kind="rl"))

Every reward component of each recipe task is its own TRL reward function (``f(completions, **columns)``,
logged as ``rewards/<name>/mean``), weighted by the task's weights with the recipe's overrides. With several
tasks, components are named ``<task>/<component>`` and score only their task's rows (None elsewhere, which TRL
skips), routed by the row's ``environment`` column (``<task>@tools-v<n>``, ``<task>@tools-v<n>-i<k>`` for tool
interface k > 0). The first function also logs each completion's tool description variant and the row columns the
rewards read (``train rescore`` scores them again; the ``environment`` among them names the interface).
"""

from __future__ import annotations

from tansaku.core import jsontext
from tansaku.core.errors import InputError, TansakuError
from tansaku.core.options import read_system_prompt
from tansaku.envs.rewards import TRL_REWARD_ARGUMENTS
from tansaku.envs.tasks import TASKS
from tansaku.trainer.recipes import Recipe, RecipeError


def environment_name(task_name: str, variant: int, interface: int = 0) -> str:
    """The ``environment`` column value / factory key of a task's episodes showing tool description ``variant``
    in tool ``interface`` (interface 0 keeps the name it always had).

    >>> environment_name("multihop_qa", 2), task_of_environment("multihop_qa@tools-v2")
    ('multihop_qa@tools-v2', 'multihop_qa')
    >>> environment_name("multihop_qa", 2, 1), task_of_environment("multihop_qa@tools-v2-i1")
    ('multihop_qa@tools-v2-i1', 'multihop_qa')
    """
    return f"{task_name}@tools-v{variant}" + (f"-i{interface}" if interface else "")


def task_of_environment(name: str) -> str:
    return str(name).split("@tools-v", 1)[0]


def reward_inputs(columns: dict, n: int) -> list[str]:
    """Each completion's row columns the rewards read, as JSON (``train rescore`` scores them again).

    >>> reward_inputs({"answer": ["a", "b"], "aliases": [["x"], []], "trainer_state": object()}, 2)
    ['{"answer": "a", "aliases": ["x"]}', '{"answer": "b", "aliases": []}']
    """
    keep = {k: v for k, v in columns.items()
            if k not in TRL_REWARD_ARGUMENTS and isinstance(v, list) and len(v) == n}  # TRL's own: no row column
    return [jsontext.dumps({k: v[i] for k, v in keep.items()}, default=str) for i in range(n)]


def _logging_tool_variants(fn):
    """``fn`` that also logs each completion's tool description variant (read from TRL's ``environments``)
    and its reward inputs (``reward_inputs``)."""

    def reward(completions, environments=None, log_extra=None, log_metric=None, **columns):
        if environments and log_extra is not None:
            variants = [getattr(e, "tool_variant", None) for e in environments]
            log_extra("tool_variant", variants)
            if log_metric is not None:
                log_metric("tools/distinct_description_variants", float(len(set(variants))))
                # No tool_interface column: trainer/report.py would read a numeric column as a reward.
                interfaces = {getattr(e, "tool_interface", 0) for e in environments}
                log_metric("tools/distinct_interface_variants", float(len(interfaces)))
        if log_extra is not None:
            log_extra("reward_inputs", reward_inputs(columns, len(completions)))
        return fn(
            completions, environments=environments, log_extra=log_extra, log_metric=log_metric, **columns
        )

    reward.__name__ = fn.__name__
    return reward


def _subset_reward(fn, task_key: str, name: str):
    """Wrap a task's reward so it scores only rows of ``task_key`` (None elsewhere: TRL skips those)."""

    def reward(completions, environment=None, **columns):
        if environment is None:
            return fn(completions, **columns)
        idx = [i for i, env in enumerate(environment) if task_of_environment(env) == task_key]
        out: list = [None] * len(completions)
        if not idx:
            return out
        n = len(completions)
        sliced = {
            k: [v[i] for i in idx] if isinstance(v, list) and len(v) == n else v for k, v in columns.items()
        }
        for i, value in zip(idx, fn([completions[i] for i in idx], **sliced)):
            out[i] = value
        return out

    reward.__name__ = name
    return reward


def rl_task(spec) -> object:
    """The recipe's task: ``TASKS[name]``, under the recipe's ``system_prompt`` when it gives one (the text the
    SFT rows were built with: ``synth build trajectories --system-prompt``), with the abstention reward when the
    recipe asks for it, and its ``tools`` settings over the task's (``ToolsConfig`` fields)."""
    if spec.name not in TASKS:
        raise RecipeError(f"tasks: unknown task {spec.name!r}; choose from {sorted(TASKS)}")
    task = TASKS[spec.name]
    if spec.system_prompt is not None:
        try:
            task = task.with_system_prompt(
                read_system_prompt(spec.system_prompt, f"tasks {spec.name}: system_prompt")
            )
        except TansakuError as exc:
            raise RecipeError(str(exc)) from None
    if spec.abstention_weight:
        try:
            task = task.with_abstention(spec.abstention_weight)
        except InputError as exc:
            raise RecipeError(str(exc)) from None
    if spec.tools:  # e.g. interface_variants: 2 (the SFT rows and eval must be built the same way)
        try:
            task = task.with_tools(**spec.tools)
        except InputError as exc:
            raise RecipeError(f"tasks {spec.name}: tools: {exc}") from None
    return task


def build_rewards(recipe: Recipe, judge=None) -> tuple[list, list[float], dict[str, tuple[list[str], str]]]:
    """(reward functions, weights, watch groups ``{task: ([component names], correctness name)}``)."""

    tasks = recipe.script_args.tasks
    multi = len(tasks) > 1
    funcs, weights, groups = [], [], {}
    for spec in tasks:
        task = rl_task(spec)
        unknown = set(spec.reward_weights) - set(task.reward_weights)
        if unknown:
            raise RecipeError(
                f"task {spec.name}: reward_weights for unknown components {sorted(unknown)}; "
                f"the task has {list(task.reward_weights)}"
            )
        task_weights = {**task.reward_weights, **spec.reward_weights}
        names = []
        for component, fn in zip(task.reward_weights, task.reward_functions(judge)):
            name = f"{spec.name}/{component}" if multi else component
            funcs.append(_subset_reward(fn, spec.name, name) if multi else _named(fn, name))
            weights.append(float(task_weights[component]))
            names.append(name)
        correctness = task.answer_reward_name
        groups[spec.name] = (names, f"{spec.name}/{correctness}" if multi else correctness)
    if funcs:  # one function per batch is enough to log the variants
        funcs[0] = _logging_tool_variants(funcs[0])
    return funcs, weights, groups


def _named(fn, name: str):
    def reward(completions, **columns):
        return fn(completions, **columns)

    reward.__name__ = name
    return reward
