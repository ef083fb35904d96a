"""`train rl`: GRPO / GSPO over the tansaku search environments with TRL's GRPOTrainer.

    train rl --config trainer/recipes/rl-tiny.yaml --set max_steps=3 --skip-readiness
    python -c "from tansaku.trainer.rl import run_rl; run_rl('trainer/recipes/rl-tiny.yaml', ['max_steps=3'], skip_readiness=True)"

Each recipe task names ``tansaku.envs.tasks.TASKS[name]``, its prompt dataset (store folder or .jsonl) and its
search index. The rollouts are multi-turn: TRL's tool loop calls ``tansaku.envs.environments.SearchEnvironment``
(``environment_factory``: a ``{"<task>@tools-v<n>": factory}`` dict, one factory per tool-description variant
and tool interface, ``-i<k>`` for interface k > 0, and an ``environment`` column drawn per row — TRL renders
each prompt with its environment's schemas, so every row shows the model its own variant and interface; see
``tansaku.envs.environments``), tool-result tokens get no
loss, and every reward component of the task is its own TRL reward function (``tansaku.trainer.rl_rewards``; logged as
``rewards/<name>/mean``, one column each in ``completions/*.parquet``), weighted by the task's weights
(overridable per task). With several tasks, components are named ``<task>/<component>`` and return None on
other tasks' rows, which TRL skips. The first reward function also logs each completion's ``tool_variant``
(a column of ``completions/*.parquet``) and the metric ``tools/distinct_description_variants``.

A task with ``index: auto`` and a ``corpus`` (documents: a .jsonl file or a dataset folder) searches
``<output_dir>/index/<task>``, built from the corpus before anything else when it is not there yet
(``ensure_indexes``), so ``train rl --config trainer/recipes/rl-tiny.yaml`` needs no manual step.

With ``difficulty: {samples: K, …}`` in the recipe, every candidate prompt is first sampled K times with the
starting model and only prompts it solves sometimes are trained on (``tansaku.trainer.difficulty``); that
banding replaces the readiness check below, and ``readiness`` in the result lists kept / dropped counts.
Otherwise, before step 1 the readiness check (``tansaku.trainer.readiness``: ``run_eval`` through the backend training
generates with — the TRL vLLM server, a colocated vLLM engine, or transformers in the training dtype) samples the model
on each task and refuses to start when pass@k ≈ 0 or every group has zero reward variance
(``skip_readiness=True`` / ``--skip-readiness`` to bypass). Algorithm, NeMo-RL key and batch mapping:
``tansaku.trainer.recipes`` (module docstring).
"""

from __future__ import annotations

import os
from pathlib import Path

from tansaku.core import jsontext, ownership
from tansaku.core.llm import as_client
from tansaku.core.store import StoreError, read_records
from tansaku.envs.environments import episode_interface, episode_variant, variant_factories
from tansaku.envs.evaluate import load_rows
from tansaku.envs.search import build_index, require_index
from tansaku.envs.search.embedded import build_embedded
from tansaku.envs.tasks import TASKS, reward_columns
from tansaku.envs.tool_interfaces import interface_prompt
from tansaku.trainer.data import mix_by_ratio
from tansaku.trainer.difficulty import Band, band_prompts, banded_rows
from tansaku.trainer.model_card import name_base_model
from tansaku.trainer.monitor import RewardWatchCallback
from tansaku.trainer.prefix_generate import share_prompt_prefix
from tansaku.trainer.readiness import check_readiness
from tansaku.trainer.recipes import (
    ALGORITHM_DEFAULTS,
    RecipeError,
    RLRecipe,
    RLTask,
    auto_index_dir,
    batch_plan,
    load_recipe,
    require_model,
    resolve_model,
)
from tansaku.trainer.report import plot_learning_curves, write_run_report
from tansaku.trainer.rl_rewards import build_rewards, environment_name, rl_task
from tansaku.trainer.run_folder import check_output_dir
from tansaku.trainer.sft import (
    check_reporters,
    make_trl_config,
    peft_config,
    resume_checkpoint,
    training_args,
    write_recipe_copy,
)


def ensure_indexes(recipe: RLRecipe) -> list[str]:
    """Build each task's ``index: auto`` folder from its ``corpus`` when absent; return the folders built.

    A folder that is not a finished tansaku index (``ownership.is_index``) but holds something: refused, not
    overwritten.
    """
    built = []
    for spec in recipe.tasks:
        if not spec.corpus or spec.index != auto_index_dir(recipe.output_dir, spec.name):
            continue
        index = Path(spec.index)
        if ownership.is_index(index):
            continue
        if index.exists() and (not index.is_dir() or any(index.iterdir())):
            raise RecipeError(f"task {spec.name}: {index} exists but is not a finished index; remove it to rebuild")
        corpus = Path(spec.corpus)
        if not corpus.exists():
            raise RecipeError(f"task {spec.name}: corpus {corpus} not found")
        if corpus.is_dir():
            build_index(corpus, index)
        else:  # a document .jsonl/.parquet file: the rows themselves (build_index reads dataset folders)
            try:
                rows = read_records(corpus)
            except StoreError as exc:
                raise RecipeError(f"task {spec.name}: corpus {exc}") from None
            build_embedded(rows, index, source_name=str(corpus), quiet=True)
        built.append(str(index))
    return built


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


def check_recipe(recipe: RLRecipe, judge=None) -> None:
    """What needs no model, before the readiness or difficulty rollouts load one: tasks, system prompts, abstention
    and reward weights, TRL's ``GRPOConfig`` checks, each task's rows, the model folder (RecipeError: one line)."""
    _, weights, _ = build_rewards(recipe, judge)
    grpo_config(recipe, weights)
    for spec in recipe.tasks:  # a column named like one of TRL's own reward arguments is refused here
        reward_columns(task_rows(spec, rl_task(spec)))
    require_model(recipe.model)


def build_dataset(recipe: RLRecipe, bands: dict[str, Band] | None = None):
    """The mixed prompt dataset, with an ``environment`` column routing each row to its task's environment
    of the tool description variant and interface drawn for it (``episode_variant`` / ``episode_interface``:
    what ``reset`` would draw).
    ``bands``: the difficulty banding's kept rows per task (``band_prompts``)."""
    from datasets import Dataset

    groups = []
    for spec in recipe.tasks:
        task = rl_task(spec)  # the prompts carry the recipe's system prompt, when it sets one
        rows = []
        for row in task_rows(spec, task, (bands or {}).get(spec.name)):
            variant, interface = episode_variant(task, row, recipe.seed), episode_interface(task, row, recipe.seed)
            rows.append({**row, "prompt": interface_prompt(row["prompt"], interface),  # names its interface's tools
                         "environment": environment_name(spec.name, variant, interface)})
        groups.append(rows)
    mixed = mix_by_ratio(groups, [t.ratio for t in recipe.tasks], recipe.mix_size, recipe.seed)
    # Dataset.from_list keeps only the first row's keys: give every row every task's columns (None when
    # absent). Mappings (other than the prompt) become JSON text so Arrow does not merge their keys.
    columns = list(dict.fromkeys(key for row in mixed for key in row))
    rows = [{key: jsontext.dumps(row[key]) if key != "prompt" and isinstance(row.get(key), dict)
             else row.get(key) for key in columns} for row in mixed]
    return Dataset.from_list(rows)


def build_environments(recipe: RLRecipe) -> dict:
    """``environment_factory`` for TRL: ``{"<task>@tools-v<n>[-i<k>]": factory with variant n (and interface k)
    fixed}`` (one index opened per task). One factory per pair because TRL renders a prompt's tool schemas
    from the factory's first instance, once (``tansaku.envs.environments`` docstring): a variant drawn in
    ``reset`` alone would never reach the prompt."""

    return {environment_name(spec.name, variant, interface): factory for spec in recipe.tasks
            for (variant, interface), factory in variant_factories(rl_task(spec), spec.index).items()}


def grpo_config(recipe: RLRecipe, reward_weights: list[float] | None = None):
    """The TRL ``GRPOConfig`` of a recipe: algorithm defaults, NeMo-RL batch plan, vLLM, logging."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig

    defaults = ALGORITHM_DEFAULTS[recipe.algorithm]
    iterations = recipe.max_tool_calling_iterations
    if iterations is None:
        iterations = max(TASKS[t.name].max_turns for t in recipe.tasks if t.name in TASKS)
    kwargs = training_args(recipe)
    kwargs.update(batch_plan(recipe))
    kwargs.pop("gradient_accumulation_steps")  # TRL derives it from steps_per_generation
    kwargs.update(
        gradient_accumulation_steps=kwargs["steps_per_generation"],
        importance_sampling_level=defaults["importance_sampling_level"],
        epsilon=recipe.epsilon if recipe.epsilon is not None else defaults["epsilon"],
        epsilon_high=recipe.epsilon_high if recipe.epsilon_high is not None else defaults["epsilon_high"],
        loss_type=recipe.loss_type or defaults["loss_type"],
        beta=recipe.beta,
        max_completion_length=recipe.max_completion_length,
        max_tool_calling_iterations=iterations,
        temperature=recipe.temperature,
        top_p=recipe.top_p,
        use_vllm=recipe.use_vllm,
        vllm_mode=recipe.vllm_mode,
        vllm_gpu_memory_utilization=recipe.vllm_gpu_memory_utilization,
        log_completions=recipe.log_completions,
        # TRL's console sample table json.loads every tool call's arguments, so one completion whose arguments
        # are not JSON (an early policy writes those) kills the run at its next log step. The samples stay in
        # completions/*.parquet and the run report; trl.num_completions_to_print turns the table back on.
        num_completions_to_print=0,
        reward_weights=reward_weights,
        multi_objective_aggregation=recipe.reward_aggregation,
        shuffle_dataset=True,
    )
    if recipe.vllm_server_base_url:
        kwargs["vllm_server_base_url"] = recipe.vllm_server_base_url
    return make_trl_config(GRPOConfig, recipe, kwargs)


def build_rl_trainer(recipe: RLRecipe, callbacks: list | None = None, judge=None, bands: dict | None = None):
    """A GRPOTrainer over the recipe's tasks, environments and rewards, with the reward watch attached;
    ``bands``: only the prompts difficulty banding kept."""
    from trl import GRPOTrainer

    class ResumableGRPOTrainer(GRPOTrainer):
        """TRL's RepeatSampler draws each epoch's order from one generator, so a run resumed after the first
        epoch would replay epoch 1's order. Reseeding with (seed + epoch) in ``set_epoch``, which the Trainer
        calls before every epoch, makes the order a function of (seed, epoch): resume replays the same data."""

        def _get_train_sampler(self, *args, **kwargs):
            sampler = super()._get_train_sampler(*args, **kwargs)
            seed = sampler.seed if getattr(sampler, "seed", None) is not None else self.args.seed
            sampler.set_epoch = lambda epoch: sampler.generator.manual_seed(seed + epoch)
            return sampler

    reward_funcs, weights, groups = build_rewards(recipe, judge)
    model = resolve_model(recipe.model)
    trainer = ResumableGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=grpo_config(recipe, weights),
        train_dataset=build_dataset(recipe, bands),
        peft_config=peft_config(recipe),
        environment_factory=build_environments(recipe),
        callbacks=[RewardWatchCallback(groups, recipe.watch, recipe.output_dir), *(callbacks or [])],
    )
    if recipe.share_prompt_prefix and not recipe.use_vllm:
        share_prompt_prefix(trainer.model)  # the system turn + tool schemas once per generate call, not per row
    return name_base_model(trainer, recipe.model, model)  # its model card names the base model, not None


def judge_client(recipe: RLRecipe, judge=None):
    """The rubric judge of a run: ``judge`` when it is a client; else the recipe's ``judge:`` section, whose
    ``model`` a ``judge`` spec (``train rl --judge SPEC``) replaces first, so the recipe copy names the judge the
    run used. None when neither names one (a deepresearch task is then refused by ``check_recipe``)."""
    if judge is not None and not isinstance(judge, str):
        return judge
    if judge is not None:
        recipe.judge.model = judge
        for problem in recipe.judge.problems():
            raise RecipeError(problem)
    if recipe.judge.model is None:
        return None
    return as_client(recipe.judge.model, **recipe.judge.client_options())


def run_rl(config_path: str | os.PathLike, overrides: list[str] | None = None, skip_readiness: bool = False,
           judge=None) -> dict:
    """Run ``train rl``: recipe (+ ``--set`` overrides) → readiness check → GRPO/GSPO training → final save.

    ``skip_readiness``: start without the pre-flight pass@k / zero-variance check. ``judge``: an LLM
    client, or a spec that replaces the recipe's ``judge.model`` (``train rl --judge``), for tasks scored by a
    rubric judge (``deepresearch``); without it the recipe's ``judge:`` (``judge_client``). Returns
    ``{"output_dir", "global_step", "training_loss", "readiness", "warnings", "difficulty", "report_ok"}``
    (``difficulty``: kept / dropped counts per task when the recipe bands its prompts); checkpoints,
    ``trainer_state.json``, ``completions/completions_<step>.parquet``, ``tansaku_recipe.json``,
    ``run_report.json`` and ``learning_curves.png`` (``tansaku.trainer.report``) are in the recipe's ``output_dir``.
    """
    recipe = load_recipe(config_path, overrides, kind="rl")
    for task in recipe.tasks:  # resolved once, so the readiness check, training and the recipe copy agree
        task.split = task.prompt_split()
    check_output_dir(recipe)  # before anything is built, loaded or written: a dataset or a user's folder is refused
    check_reporters(recipe)
    made_judge = judge is None or isinstance(judge, str)
    judge = judge_client(recipe, judge)
    check_recipe(recipe, judge)  # before the index build and the rollouts below: nothing here needs a model
    write_recipe_copy(recipe, recipe.output_dir)  # first: from now on the folder is provably this run's
    ensure_indexes(recipe)
    for spec in recipe.tasks:  # each opened once: a damaged index is one line, before any model loads
        require_index(spec.index)
    resume = resume_checkpoint(recipe)
    bands = None
    if recipe.difficulty.samples:  # banding samples every candidate: it is the readiness check too
        bands = band_prompts(recipe, resolve_model(recipe.model), {t.name: rl_task(t) for t in recipe.tasks}, judge)
        readiness = []
    else:
        readiness = [] if skip_readiness or resume else check_readiness(recipe, resolve_model(recipe.model), judge)
    trainer = build_rl_trainer(recipe, judge=judge, bands=bands)
    try:
        result = trainer.train(resume_from_checkpoint=resume)
    finally:
        if made_judge and judge is not None:  # made here from the recipe's spec: its connections end with the run
            judge.close()
    trainer.save_model(recipe.output_dir)
    trainer.save_state()
    watch = next(cb for cb in trainer.callback_handler.callbacks if type(cb).__name__ == "RewardWatchCallback")
    weights = dict(zip(trainer.reward_func_names, trainer.args.reward_weights or []))
    report = write_run_report(recipe.output_dir, weights)  # run_report.json + learning_curves.png
    plot_learning_curves(recipe.output_dir, report=report)
    return {"output_dir": recipe.output_dir, "global_step": trainer.state.global_step,
            "training_loss": result.training_loss, "readiness": readiness, "warnings": watch.warnings,
            "difficulty": [band.summary() for band in (bands or {}).values()],
            "report_ok": report["ok"]}

