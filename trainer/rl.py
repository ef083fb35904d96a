"""`train rl`: GRPO / GSPO over the tansaku search environments with TRL's GRPOTrainer.

    train rl --config trainer/recipes/rl-tiny.yaml --max_steps 3 --skip-readiness
    python -c "from tansaku.trainer.rl import run_rl; \
        run_rl('trainer/recipes/rl-tiny.yaml', ['--max_steps', '3'], skip_readiness=True)"

Each recipe task names ``tansaku.envs.tasks.TASKS[name]``, its prompt dataset (store folder or .jsonl) and its
search index. The rollouts are multi-turn: TRL's tool loop calls
``tansaku.envs.environments.SearchEnvironment`` (``environment_factory``: a ``{"<task>@tools-v<n>": factory}``
dict, one factory per tool-description variant and tool interface, ``-i<k>`` for interface k > 0, and an
``environment`` column drawn per row — TRL renders each prompt with its environment's schemas, so every row
shows the model its own variant and interface; see ``tansaku.envs.environments``), tool-result tokens get no
loss, and every reward component of the task is its own TRL reward function (``tansaku.trainer.rl_rewards``;
logged as ``rewards/<name>/mean``, one column each in ``completions/*.parquet``), weighted by the task's
weights (overridable per task). With several tasks, components are named ``<task>/<component>`` and return
None on other tasks' rows, which TRL skips. The first reward function also logs each completion's
``tool_variant`` (a column of ``completions/*.parquet``) and the metric
``tools/distinct_description_variants``.

A task with ``index: auto`` and a ``corpus`` (documents: a .jsonl file or a dataset folder) searches
``<output_dir>/index/<task>``, built from the corpus before anything else when it is not there yet
(``ensure_indexes``), so ``train rl --config trainer/recipes/rl-tiny.yaml`` needs no manual step.

With ``difficulty: {samples: K, …}`` in the recipe, every candidate prompt is first sampled K times with the
starting model and only prompts it solves sometimes are trained on (``tansaku.trainer.difficulty``); that
banding replaces the readiness check below, and ``readiness`` in the result lists kept / dropped counts.
Otherwise, before step 1 the readiness check (``tansaku.trainer.readiness``: ``run_eval`` through the backend
training generates with — the TRL vLLM server, a colocated vLLM engine, or transformers in the training dtype)
samples the model on each task and refuses to start when pass@k ≈ 0 or every group has zero reward variance
(``skip_readiness=True`` / ``--skip-readiness`` to bypass).

With ``dynamic_sampling_max_refills: N`` (> 0), a rollout round's zero-variance groups are dropped and
refilled with fresh prompts of the pool, at most N refill rounds, the batch keeping its shape
(``tansaku.trainer.dynamic_sampling``; ``dynamic_sampling/*`` metrics). Off by default.

The ``GRPOConfig`` the trainer gets is the recipe's, with what tansaku derives from its tasks: the reward
weights, ``max_tool_calling_iterations`` when the recipe leaves it unset (the tasks' largest ``max_turns``),
and ``num_completions_to_print: 0`` when unset (see ``grpo_config``). GSPO vs GRPO, the batch (P prompts × G
generations per step) and the NeMo-RL names of the seed recipe: ``docs/recipes.md``.
"""

from __future__ import annotations

import logging
import os

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.core.llm import as_client
from tansaku.envs.environments import episode_interface, episode_variant, variant_factories
from tansaku.envs.evaluate import load_rows
from tansaku.envs.remote_env import remote_factories
from tansaku.envs.rewards import reward_columns
from tansaku.envs.search import require_index
from tansaku.envs.tasks import TASKS
from tansaku.envs.tool_interfaces import interface_prompt
from tansaku.trainer.curves import plot_learning_curves
from tansaku.trainer.data import mix_by_ratio
from tansaku.trainer.difficulty import Band, band_prompts, banded_rows
from tansaku.trainer.model_card import name_base_model
from tansaku.trainer.monitor import RewardWatchCallback
from tansaku.trainer.readiness import check_readiness
from tansaku.trainer.recipe_arguments import RLTask
from tansaku.trainer.recipes import (
    Recipe,
    RecipeError,
    load_recipe,
    require_model,
    resolve_model,
)
from tansaku.trainer.report import write_run_report
from tansaku.trainer.retention_callback import attach_retention
from tansaku.trainer.rl_rewards import build_rewards, environment_name, rl_task
from tansaku.trainer.run_folder import check_output_dir, claimed_output_dir, full_disk_named
from tansaku.trainer.sft import (
    check_reporters,
    peft_config,
    resume_checkpoint,
    trainer_config,
    write_recipe_copy,
)
from tansaku.trainer.task_indexes import ensure_indexes
from tansaku.trainer.update_schedule import update_notes

log = logging.getLogger(__name__)


def task_rows(spec: RLTask, task, band: Band | None = None) -> list[dict]:
    """The task's prompt rows (``prompt`` column added by the task); columns checked against the task.
    With a difficulty ``band``, only its kept rows (``tansaku.trainer.difficulty``)."""

    try:
        split = spec.prompt_split()
        rows = load_rows(spec.data, split, spec.max_rows)
    except Exception as exc:  # missing folder/split: name the task in the message
        raise RecipeError(f"task {spec.name}: cannot read {spec.data} ({spec.split}): {exc}") from None
    if not rows:
        raise RecipeError(f"task {spec.name}: {spec.data} ({split}) has no rows")
    if band is not None:
        rows = banded_rows(rows, band)
    missing = sorted({c for row in rows for c in task.columns if row.get(c) in (None, "")})
    if missing:
        raise RecipeError(f"task {spec.name}: {spec.data} lacks column(s) {missing} ({task.columns})")
    return task.to_trl_rows(rows)


def remote_tasks(recipe: Recipe) -> list[str]:
    """The tasks served by an ``environment_url`` (no local index: the readiness check, which rolls out over
    an index, is skipped for the run, with a warning)."""
    names = [spec.name for spec in recipe.script_args.tasks if spec.environment_url]
    if names:
        log.warning("tasks %s run on remote environments: no readiness check (train eval measures them over "
                    "the served index)", names)
    return names


def check_recipe(recipe: Recipe, judge=None) -> None:
    """What needs no model, before the readiness or difficulty rollouts load one: tasks, system prompts,
    abstention and reward weights, each task's rows, the model folder (RecipeError: one line)."""
    if recipe.training_args.reward_weights is not None:
        raise RecipeError("reward_weights: train rl weights each task's reward components itself; set "
                          "tasks[].reward_weights instead")
    build_rewards(recipe, judge)
    if recipe.script_args.difficulty.samples and any(t.environment_url for t in recipe.script_args.tasks):
        raise RecipeError("difficulty: banding rolls out over a local index; a task with environment_url has "
                          "none")
    # a column named like one of TRL's own reward arguments is refused here
    for spec in recipe.script_args.tasks:
        reward_columns(task_rows(spec, rl_task(spec)))
    require_model(recipe.model_args.model_name_or_path)


def build_dataset(recipe: Recipe, bands: dict[str, Band] | None = None):
    """The mixed prompt dataset, with an ``environment`` column routing each row to its task's environment
    of the tool description variant and interface drawn for it (``episode_variant`` / ``episode_interface``:
    what ``reset`` would draw).
    ``bands``: the difficulty banding's kept rows per task (``band_prompts``)."""
    from datasets import Dataset

    tasks, seed = recipe.script_args.tasks, recipe.training_args.seed
    groups = []
    for spec in tasks:
        task = rl_task(spec)  # the prompts carry the recipe's system prompt, when it sets one
        rows = []
        for row in task_rows(spec, task, (bands or {}).get(spec.name)):
            variant, interface = episode_variant(task, row, seed), episode_interface(task, row, seed)
            # names its interface's tools
            rows.append({**row, "prompt": interface_prompt(row["prompt"], interface),
                         "environment": environment_name(spec.name, variant, interface)})
        groups.append(rows)
    mixed = mix_by_ratio(groups, [t.ratio for t in tasks], recipe.script_args.mix_size, seed)
    # Dataset.from_list keeps only the first row's keys: give every row every task's columns (None when
    # absent). Mappings (other than the prompt) become JSON text so Arrow does not merge their keys.
    columns = list(dict.fromkeys(key for row in mixed for key in row))
    rows = [{key: jsontext.dumps(row[key]) if key != "prompt" and isinstance(row.get(key), dict)
             else row.get(key) for key in columns} for row in mixed]
    return Dataset.from_list(rows)


def build_environments(recipe: Recipe) -> dict:
    """``environment_factory`` for TRL: ``{"<task>@tools-v<n>[-i<k>]": factory with variant n (and interface
    k) fixed}`` (one index opened per task). One factory per pair because TRL renders a prompt's tool schemas
    from the factory's first instance, once (``tansaku.envs.environments`` docstring): a variant drawn in
    ``reset`` alone would never reach the prompt."""

    return {environment_name(spec.name, variant, interface): factory for spec in recipe.script_args.tasks
            for (variant, interface), factory in task_factories(spec).items()}


def task_factories(spec: RLTask) -> dict:
    """One task's ``{(variant, interface): factory}``: over its index, or on its ``environment_url`` server
    (``tansaku.envs.remote_env``: the rollout here, tools and rewards there)."""
    if spec.environment_url:
        try:
            return remote_factories(rl_task(spec), spec.environment_url)
        except InputError as exc:
            raise RecipeError(str(exc)) from None
    return variant_factories(rl_task(spec), spec.index)


def grpo_config(recipe: Recipe, reward_weights: list[float] | None = None):
    """The TRL ``GRPOConfig`` the trainer gets: the recipe's, with the reward weights and, when the recipe
    leaves them unset, ``max_tool_calling_iterations`` (the tasks' largest ``max_turns``) and
    ``num_completions_to_print`` (0: TRL's console sample table json.loads every tool call's arguments, so one
    completion whose arguments are not JSON, which an early policy writes, kills the run at its next log step;
    the samples stay in completions/*.parquet and the run report; a number turns the table back on)."""
    training_args = recipe.training_args
    iterations = training_args.max_tool_calling_iterations
    if iterations is None:
        iterations = max(TASKS[t.name].max_turns for t in recipe.script_args.tasks if t.name in TASKS)
    printed = 0 if training_args.num_completions_to_print is None else training_args.num_completions_to_print
    return trainer_config(recipe, reward_weights=reward_weights, max_tool_calling_iterations=iterations,
                          num_completions_to_print=printed)


def build_rl_trainer(recipe: Recipe, callbacks: list | None = None, judge=None, bands: dict | None = None):
    """A GRPOTrainer over the recipe's tasks, environments and rewards, with the reward watch attached;
    ``bands``: only the prompts difficulty banding kept."""
    from trl import get_quantization_config

    from tansaku.trainer import cpu  # torch, trl: loaded with the trainer
    from tansaku.trainer.grpo_trainer import ResumableGRPOTrainer

    reward_funcs, weights, groups = build_rewards(recipe, judge)
    name = recipe.model_args.model_name_or_path
    model = resolve_model(name)
    watch = RewardWatchCallback(groups, recipe.script_args.watch, recipe.training_args.output_dir)
    trainer = ResumableGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=grpo_config(recipe, weights),
        train_dataset=build_dataset(recipe, bands),
        peft_config=peft_config(recipe),
        quantization_config=get_quantization_config(recipe.model_args),
        environment_factory=build_environments(recipe),
        callbacks=[watch, *(callbacks or [])],
    )
    # turn caches, shared prompt tokens, bf16 generation copy, LM head: what applies off GPU / without vLLM
    copied = cpu.apply(trainer, recipe.script_args)
    attach_hooks(trainer, recipe, model, copied)
    # recipe retention:
    attach_retention(trainer, recipe.script_args.retention, recipe.training_args.output_dir)
    for line in update_notes(trainer.args, local_sampler=trainer.sampler is not None, copied=copied):
        log.warning(line)
    return name_base_model(trainer, name, model)  # its model card names the base model, not None


def attach_hooks(trainer, recipe: Recipe, model, copied: bool) -> None:
    """The recipe's switches on ``ResumableGRPOTrainer``'s hooks: the local sampler's log-probs (and the
    correction for the bf16 copy's gap), ``kl_to_start``, dynamic sampling."""
    from tansaku.trainer.drift import StartDrift  # torch: loaded with the trainer
    from tansaku.trainer.dynamic_sampling import DynamicSampling
    from tansaku.trainer.sampler_logprobs import SamplerLogprobs

    if not recipe.training_args.use_vllm:  # outermost: it sees the tokens whichever generator drew them
        trainer.sampler = SamplerLogprobs.wrap(trainer.model)
        # the bf16 copy is another distribution than the fp32 training forward; the model itself is not
        trainer.correct_sampler = copied and trainer.args.vllm_importance_sampling_correction
        if trainer.correct_sampler and trainer.args.loss_type == "vespo":  # VESPO reads the weight on its own
            raise RecipeError("loss_type vespo with rollouts from the bf16 generation copy: set "
                              "vllm_importance_sampling_correction: false or bf16_generation_copy: false")
    if recipe.script_args.kl_to_start:
        trainer.drift = StartDrift.load(model, trainer)
    if recipe.script_args.dynamic_sampling_max_refills:
        if trainer.accelerator.num_processes > 1:
            raise RecipeError(f"dynamic_sampling_max_refills: refills one training process's rollout round "
                              f"(got {trainer.accelerator.num_processes} processes); set it to 0")
        trainer.dynamic_sampling = DynamicSampling(recipe.script_args.dynamic_sampling_max_refills)


def judge_client(recipe: Recipe, judge=None, llm_options=None):
    """The rubric judge of a run: ``judge`` when it is a client; else the recipe's ``judge:`` section, whose
    ``model`` a ``judge`` spec (``train rl --judge SPEC``) replaces first, so the recipe copy names the judge
    the run used. None when neither names one (a deepresearch task is then refused by ``check_recipe``).
    ``llm_options``: the command's ``--api-key`` / ``--extra-body`` / ``--concurrency`` / ``--no-cache``
    (``LLMOptions``), under the recipe's own ``judge:`` settings."""
    spec = recipe.script_args.judge
    if judge is not None and not isinstance(judge, str):
        return judge
    if judge is not None:
        spec.model = judge
        for problem in spec.problems():
            raise RecipeError(problem)
    if spec.model is None:
        return None
    return as_client(spec.model, llm_options=llm_options, **spec.client_options())


def run_rl(config_path: str | os.PathLike, args: list[str] | None = None, skip_readiness: bool = False,
           judge=None, llm_options=None) -> dict:
    """Run ``train rl``: recipe (``args``: TRL's ``--key value`` overrides) → readiness check → GRPO/GSPO
    training → final save.

    ``skip_readiness``: start without the pre-flight pass@k / zero-variance check. ``judge``: an LLM
    client, or a spec that replaces the recipe's ``judge.model`` (``train rl --judge``), for tasks scored by a
    rubric judge (``deepresearch``); without it the recipe's ``judge:`` (``judge_client``, with
    ``llm_options``). Returns
    ``{"output_dir", "global_step", "training_loss", "readiness", "warnings", "difficulty", "report_ok"}``
    (``difficulty``: kept / dropped counts per task when the recipe bands its prompts); checkpoints,
    ``trainer_state.json``, ``completions/completions_<step>.parquet``, ``tansaku_recipe.json``,
    ``run_report.json`` and ``learning_curves.png`` (``tansaku.trainer.report``) are in the recipe's
    ``output_dir``.
    """
    recipe = load_recipe(config_path, args, kind="rl")
    script_args, output_dir = recipe.script_args, recipe.training_args.output_dir
    # resolved once, so the readiness check, training and the recipe copy agree
    for task in script_args.tasks:
        task.split = task.prompt_split()
    # before anything is built, loaded or written: a dataset or a user's folder is refused
    check_output_dir(recipe)
    check_reporters(recipe)
    made_judge = judge is None or isinstance(judge, str)
    judge = judge_client(recipe, judge, llm_options)
    check_recipe(recipe, judge)  # before the index build and the rollouts below: nothing here needs a model
    with claimed_output_dir(recipe), full_disk_named(output_dir):  # one run at a time into output_dir
        write_recipe_copy(recipe)  # first: from now on the folder is provably this run's
        ensure_indexes(recipe)
        # each opened once: a damaged index is one line, before any model loads
        for spec in script_args.tasks:
            if not spec.environment_url:  # a remote task's server searches its own
                require_index(spec.index)
        resume = resume_checkpoint(recipe)
        model_path = resolve_model(recipe.model_args.model_name_or_path)
        bands = None
        if script_args.difficulty.samples:  # banding samples every candidate: it is the readiness check too
            bands = band_prompts(recipe, model_path, {t.name: rl_task(t) for t in script_args.tasks}, judge)
            readiness = []
        else:
            readiness = [] if skip_readiness or resume or remote_tasks(recipe) \
                else check_readiness(recipe, model_path, judge)
        trainer = build_rl_trainer(recipe, judge=judge, bands=bands)
        try:
            result = trainer.train(resume_from_checkpoint=resume)
        finally:
            # made here from the recipe's spec: its connections end with it
            if made_judge and judge is not None:
                judge.close()
        trainer.save_model(output_dir)
        trainer.save_state()
        watch = next(cb for cb in trainer.callback_handler.callbacks
                     if type(cb).__name__ == "RewardWatchCallback")
        weights = dict(zip(trainer.reward_func_names, trainer.args.reward_weights or []))
        report = write_run_report(output_dir, weights)  # run_report.json + learning_curves.png
        plot_learning_curves(output_dir, report=report)
    return {"output_dir": output_dir, "global_step": trainer.state.global_step,
            "training_loss": result.training_loss, "readiness": readiness, "warnings": watch.warnings,
            "difficulty": [band.summary() for band in (bands or {}).values()],
            "report_ok": report["ok"]}
