"""The reward functions of an RL recipe, as TRL's GRPOTrainer takes them, and the ``environment`` names they
route by.

    funcs, weights, groups = build_rewards(load_recipe("trainer/recipes/rl-tiny.yaml", kind="rl"))
    # the task as the recipe trains it:
    task = rl_task(recipe_task(recipe.script_args.tasks, None, "rl-tiny.yaml"))

``rl_task(spec)`` is the recipe task complete (system prompt, abstention, tools, reward weights, the zh-mix
penalty's start step and scope): the one task the run optimises and every measurement of it uses (readiness,
banding, ``train eval --config``, ``train rescore``, ``synth serve-env --config``). Every reward component of
each recipe task is its own TRL reward function (``f(completions, **columns)``, logged as
``rewards/<name>/mean``), weighted by that task's weights. With several tasks, components are named
``<task>/<component>`` and score only their task's rows (None elsewhere, which TRL skips), routed by the row's
``environment`` column (``<task>@tools-v<n>``, ``<task>@tools-v<n>-i<k>`` for tool interface k > 0). The first
function also logs each completion's tool description variant and the row columns the rewards read, with the
global step they were scored at (``trainer_step``; ``train rescore`` scores them again, the zh-mix penalty's
start step alike; the ``environment`` among them names the interface).
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import jsontext, ownership
from tansaku.core.errors import InputError, TansakuError
from tansaku.core.options import read_system_prompt
from tansaku.envs.remote_env import remote_reward
from tansaku.envs.rewards import TRAINER_STEP, TRL_REWARD_ARGUMENTS
from tansaku.envs.search_health import step_metrics
from tansaku.envs.tasks import OVERRIDES, TASKS, Task
from tansaku.trainer.recipe_arguments import RLTask
from tansaku.trainer.recipes import Recipe, RecipeError, auto_index_dir, load_recipe


def environment_name(task_name: str, variant: int, interface: int = 0) -> str:
    """The ``environment`` column value / factory key of a task's episodes showing tool description
    ``variant`` in tool ``interface`` (interface 0 keeps the name it always had).

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
            # TRL's own: no row column
            if k not in TRL_REWARD_ARGUMENTS and isinstance(v, list) and len(v) == n}
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
        if log_metric is not None:  # is the policy still searching, and answering from what it read?
            for name, value in step_metrics(completions).items():
                log_metric(f"search_health/{name}", value)
        if log_extra is not None:
            inputs = dict(columns)
            step = getattr(columns.get("trainer_state"), "global_step", None)
            # the step the batch was scored at: train rescore starts zh_mix_penalty alike
            if isinstance(step, int):
                inputs[TRAINER_STEP] = [step] * len(completions)
            log_extra("reward_inputs", reward_inputs(inputs, len(completions)))
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


def rl_task(spec) -> Task:
    """The recipe's task, complete: ``TASKS[name].configured(spec)`` (``Task.configured``: the recipe's
    ``system_prompt``, read here when it is an ``@FILE`` — the text the SFT rows were built with, ``synth
    build trajectories --system-prompt`` —, abstention, ``tools``, ``reward_weights``, ``zh_mix_start_step`` /
    ``zh_mix_scope``). The one task ``train rl`` optimises and the readiness check, banding, ``train eval
    --config``, ``train rescore`` and ``synth serve-env --config`` measure; a problem is one ``RecipeError``
    line naming the task."""
    if spec.name not in TASKS:
        raise RecipeError(f"tasks: unknown task {spec.name!r}; choose from {sorted(TASKS)}")
    try:
        overrides = {name: getattr(spec, name, None) for name in OVERRIDES}
        overrides["system_prompt"] = read_system_prompt(spec.system_prompt, "system_prompt")  # text or @FILE
        return TASKS[spec.name].configured(overrides)
    except TansakuError as exc:
        raise RecipeError(f"tasks {spec.name}: {str(exc).removeprefix(f'task {spec.name}: ')}") from None


def recipe_task(tasks: list[RLTask], name: str | None, where: str) -> RLTask:
    """The recipe task a command measures (of ``tasks``, a recipe's ``script_args.tasks``): the one named
    ``name`` (``--task``), or the recipe's only task. A name the recipe does not train, or no name with
    several tasks, is one ``InputError`` line naming ``where`` (the recipe)."""
    specs = {spec.name: spec for spec in tasks}
    if name is None and len(specs) > 1:
        raise InputError(f"{where} trains {len(specs)} tasks ({', '.join(specs)}): choose one with --task")
    if name is not None and name not in specs:
        raise InputError(f"--task {name} is not a task of {where} (it trains {', '.join(specs)})")
    return specs[name] if name is not None else next(iter(specs.values()))


def recipe_target(config, name: str | None, index: str | None = None) -> tuple[RLTask, Task, str]:
    """(recipe task, its ``rl_task``, index) of the ``train rl`` recipe ``config`` that
    ``train eval --config`` and ``synth serve-env --config`` measure: the task ``name`` picks
    (``recipe_task``), searching ``index`` or else the recipe task's. An ``index: auto`` that ``train rl`` has
    not built yet is one ``InputError`` line: building it here would put it inside the run's ``output_dir``
    before the run's own marker, which ``train rl`` then refuses."""
    recipe = load_recipe(config, kind="rl")
    spec = recipe_task(recipe.script_args.tasks, name, f"recipe {config}")
    task = rl_task(spec)
    index = index or spec.index
    auto = auto_index_dir(recipe.training_args.output_dir, spec.name)
    if index == auto and not ownership.is_index(Path(auto)):
        raise InputError(f"task {spec.name}: the recipe's index: auto is built by train rl at {auto} on its "
                         f"first run and is not there yet; run train rl first, or give --index (an index of "
                         f"{spec.corpus})")
    return spec, task, index


def measured_task(config, task: str | None, options: dict[str, object], set_by_recipe: dict[str, object]):
    """What a measuring command (``train eval`` / ``train select`` / ``synth serve-env``) scores: with
    ``--config`` the recipe's task as ``train rl`` trains it (``recipe_target``), over the recipe task's
    ``data`` and ``index`` unless ``options`` gives them; without it, ``--task`` and ``options``, each
    required. ``options``: ``{"--dataset": value, "--index": value}`` as the command takes them;
    ``set_by_recipe``: options the recipe's task sets itself (``--system-prompt`` …), refused beside
    ``--config``. Returns ``(task, {option: value})``, the task a ``Task`` with ``--config``, else the name
    given. Each problem is one ``InputError`` line.

    >>> measured_task(None, "multihop_qa", {"--index": "out/index"}, {})
    ('multihop_qa', {'--index': 'out/index'})
    """
    if config is None:
        required = {"--task": task, **options}
        if any(value is None for value in required.values()):
            names = list(required)
            raise InputError(f"give {', '.join(names[:-1])} and {names[-1]}, or --config RECIPE (a train rl "
                             "recipe's task)")
        return task, dict(options)
    for option, value in set_by_recipe.items():
        if value is not None:
            raise InputError(f"{option} and --config: the recipe's task sets it (tasks[].system_prompt / "
                             "tools); give one or the other")
    spec, built, index = recipe_target(config, task, options.get("--index"))
    given = {**options, "--index": index}
    if "--dataset" in given and given["--dataset"] is None:
        given["--dataset"] = Path(spec.data)
    return built, given


def build_rewards(recipe: Recipe, judge=None) -> tuple[list, list[float], dict[str, tuple[list[str], str]]]:
    """(reward functions, weights, watch groups ``{task: ([component names], correctness name)}``); the
    weights are the ones ``rl_task`` puts in the task (its ``reward_weights``), no other source."""

    tasks = recipe.script_args.tasks
    multi = len(tasks) > 1
    funcs, weights, groups = [], [], {}
    for spec in tasks:
        task = rl_task(spec)
        if spec.environment_url:  # scored by its server's /verify: the served task's weighted total
            name = f"{spec.name}/remote_reward" if multi else "remote_reward"
            funcs.append(_subset_reward(remote_reward, spec.name, name) if multi
                         else _named(remote_reward, name))
            weights.append(1.0)
            groups[spec.name] = ([name], name)
            continue
        names = []
        for (component, weight), fn in zip(task.reward_weights.items(), task.reward_functions(judge),
                                           strict=True):
            name = f"{spec.name}/{component}" if multi else component
            funcs.append(_subset_reward(fn, spec.name, name) if multi else _named(fn, name))
            weights.append(float(weight))
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
