"""``train``: SFT and GRPO/GSPO runs from YAML recipes, evaluation, report comparison and merges
(``train --help``).

Each command parses options and calls one toolkit function (``tansaku.trainer.sft.run_sft``,
``tansaku.trainer.rl.run_rl``, ``tansaku.envs.evaluate.run_eval``, …); the trainers are imported inside the
commands so that ``train --help`` stays fast. ``train eval`` is defined in ``tansaku.trainer.eval_command``
and registered here; the options several commands share are in ``tansaku.trainer.cli_options``. Bad input is
one line and exit 2 (``tansaku.core.cli_common``). ``train eval --config R`` and ``train rescore`` measure a
recipe's task as ``train rl`` trains it (``tansaku.trainer.rl_rewards.rl_task``: its reward weights,
abstention, tools and system prompt).

``train sft`` / ``train rl`` hand every argument they do not know themselves to TRL's parser, as TRL's own
scripts take them: ``train sft --config R.yaml --learning_rate 1e-5 --max_steps 2`` (``docs/recipes.md``).

Output, as ``synth``'s (``tansaku.core.cli_common``): a command's summary is a table on stderr
(``-q``/``--quiet``: none, and for ``sft``/``rl`` no progress bars either) and, with ``--json``, its whole
result as one JSON value on stdout; without ``--json`` stdout holds only a command's plain result
(``train merge``: the merged folder) or nothing. Every command's ``--help`` ends with an example::

    train eval --task multihop_qa --dataset out/multihop --model runs/sft --index out/index --json \
        | jq '."pass@1"'
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tansaku.core.cli_common import Quiet, Version, friendly, print_summary, print_table
from tansaku.core.cli_types import (
    IndexType,
    ModelRefType,
    NumberType,
    PathType,
    SpecType,
    TextType,
    argument,
    option,
)
from tansaku.core.errors import InputError
from tansaku.core.llm.cli_options import ApiKey, Concurrency, ExtraBody, LlmOption, NoCache, llm_options
from tansaku.core.value_checks import (
    INPUT,
    INPUT_FILE,
    INPUT_FOLDER,
    OUTPUT_FILE,
    OUTPUT_FOLDER,
)
from tansaku.trainer.cli_options import (  # the options several train commands share; --task's choices
    AsJson,
    Limit,
    MaxTokens,
    Seed,
    SystemPrompt,
    task_help,
    task_names,
)
from tansaku.trainer.eval_command import train_eval

train_app = typer.Typer(help="Train (SFT, GRPO/GSPO), evaluate and merge models.", no_args_is_help=True,
                        pretty_exceptions_enable=False)


@train_app.callback()
def _train(version: Version = False) -> None:
    """Train (SFT, GRPO/GSPO), evaluate and merge models."""


Recipe = Annotated[Path, option("--config", "-c", parser=PathType(
    "--config", INPUT_FILE), help="YAML recipe (see trainer/recipes/, docs/recipes.md); "
                                  "any other --KEY VALUE overrides a recipe key, as TRL's scripts take it.")]
# The arguments a command does not declare (--learning_rate 1e-5 …) reach it in ctx.args, for TRL's parser.
TRL_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}
TrainQuiet = Annotated[bool, typer.Option("--quiet", "-q",
                                          help="No progress and no summary table on stderr, TRL's bars "
                                               "included (--disable_tqdm true unless given); TANSAKU_QUIET=1 "
                                               "does the same but for TRL's bars.")]
TQDM_FLAGS = ("--disable_tqdm", "--disable-tqdm")


def trl_args(args: list[str], quiet: bool) -> list[str]:
    """The arguments for TRL's parser: with ``-q``, ``--disable_tqdm true`` too, unless the command line sets
    it.

    >>> trl_args(["--max_steps", "2"], True), trl_args(["--disable_tqdm=false"], True), trl_args([], False)
    (['--max_steps', '2', '--disable_tqdm', 'true'], ['--disable_tqdm=false'], [])
    """
    given = any(a.split("=", 1)[0] in TQDM_FLAGS for a in args)
    return [*args, "--disable_tqdm", "true"] if quiet and not given else list(args)


def training_summary(result: dict) -> dict:
    """The headline numbers of a ``train sft`` / ``train rl`` result (``run_sft`` / ``run_rl``)."""
    summary = {"global_step": result.get("global_step"), "training_loss": result.get("training_loss")}
    if "train_runtime" in (result.get("metrics") or {}):
        summary["seconds"] = result["metrics"]["train_runtime"]
    if "report_ok" in result:  # train rl: its run report's checks and the reward watch
        summary["run report ok"] = result["report_ok"]
        summary["warnings"] = len(result.get("warnings") or [])
    return {**summary, "output_dir": result.get("output_dir")}


@train_app.command("sft", context_settings=TRL_ARGS)
@friendly
def train_sft(ctx: typer.Context, config: Recipe, quiet: TrainQuiet = False, as_json: AsJson = False):
    """Supervised fine-tuning with TRL (tool results, system and user text get no loss); a summary (steps,
    loss, output_dir) on stderr, with --json the result on stdout.

    Example: train sft --config trainer/recipes/sft-tiny.yaml --max_steps 2
    """
    from tansaku.core.progress import quiet_loops
    from tansaku.trainer.sft import run_sft

    with quiet_loops(quiet):
        result = run_sft(config, trl_args(ctx.args, quiet))
    print_summary("train sft", training_summary(result), as_json=as_json, quiet=quiet, json_value=result)


@train_app.command("rl", context_settings=TRL_ARGS)
@friendly
def train_rl(
    ctx: typer.Context,
    config: Recipe,
    skip_readiness: Annotated[bool, typer.Option("--skip-readiness",
                                                 help="Start even when the pre-flight check says the task is "
                                                      "not learnable yet.")] = False,
    judge: Annotated[str | None, option("--judge", parser=SpecType("--judge"),
                                        help="LLM spec of the rubric judge (deepresearch); replaces the "
                                             "recipe's judge.model.")] = None,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None, llm_option: LlmOption = None,
    quiet: TrainQuiet = False,
    as_json: AsJson = False,
):
    """GRPO / GSPO with TRL over the tansaku search environments; a summary (steps, loss, run report, reward
    warnings, output_dir) on stderr, with --json the result on stdout.

    Example: train rl --config trainer/recipes/rl-tiny.yaml --max_steps 3 --skip-readiness
    """
    from tansaku.core.progress import quiet_loops
    from tansaku.trainer.rl import run_rl

    options = llm_options(no_cache, api_key, extra_body, concurrency, llm_option)
    with quiet_loops(quiet):
        result = run_rl(config, trl_args(ctx.args, quiet), skip_readiness=skip_readiness, judge=judge,
                        llm_options=options)
    print_summary("train rl", training_summary(result), as_json=as_json, quiet=quiet, json_value=result)


train_app.command("eval")(train_eval)  # tansaku.trainer.eval_command: here, so --help lists it after rl


@train_app.command("select")
@friendly(outputs=("run",))  # it writes into the run folder (checkpoint_selection.json, selection/)
def train_select(
    run: Annotated[Path, option("--run", parser=PathType("--run", INPUT_FOLDER),
                                help="A train sft output_dir with checkpoint-* folders.")],
    task: Annotated[str | None, option("--task", parser=TextType("--task", choices=task_names),
                                       help=f"The task RL will train: {task_help()}; with --config: which of "
                                            "the recipe's tasks.")] = None,
    dataset: Annotated[Path | None, option("--dataset", parser=PathType("--dataset", INPUT),
                                           help="Dataset folder with the validation split (with --config: "
                                                "default the recipe task's data).")] = None,
    index: Annotated[str | None, option("--index", parser=IndexType("--index"),
                                        help="Search index the agent uses (with --config: default the recipe "
                                             "task's index).")] = None,
    config: Annotated[Path | None, option("--config", "-c", parser=PathType(
        "--config", INPUT_FILE), help="The train rl recipe the start is for: its task as train rl trains it "
                                      "(system prompt, abstention, tools, reward weights) chooses.")] = None,
    split: Annotated[str, option("--split", parser=TextType(
        "--split"), help="Validation split: 'rl' (never 'test', kept for the final comparison).")] = "rl",
    rows: Annotated[int, option("--rows", parser=NumberType("--rows", min=1),
                                help="Questions evaluated per checkpoint (the first N).")] = 32,
    k: Annotated[int, option("--k", parser=NumberType("--k", min=1),
                             help="Samples per question (with --temperature > 0).")] = 1,
    temperature: Annotated[float, option("--temperature", parser=NumberType(
        "--temperature", integer=False, min=0), help="0 = greedy.")] = 0.0,
    max_tokens: MaxTokens = 1024,
    system_prompt: SystemPrompt = None,
    seed: Seed = 0,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """Evaluate each SFT checkpoint on a validation slice; choose the RL start (pass@1, entropy per
    checkpoint; table on stderr, with --json the selection on stdout).

    Example: train select --run runs/sft --task multihop_qa --dataset out/multihop --index out/index --rows 16
    """
    from tansaku.core.progress import quiet_loops
    from tansaku.trainer.rl_rewards import measured_task
    from tansaku.trainer.select import select_checkpoint, selection_table

    # the task the start will be trained on: with --config the recipe's, as train rl trains it
    task, given = measured_task(config, task, {"--dataset": dataset, "--index": index},
                                {"--system-prompt": system_prompt})
    dataset, index = given["--dataset"], given["--index"]
    with quiet_loops(quiet):
        selection = select_checkpoint(run, task, dataset, index, split=split, rows=rows, k=k,
                                      temperature=temperature, max_tokens=max_tokens, seed=seed,
                                      system_prompt=system_prompt)
    print_table(selection_table(selection), selection, as_json=as_json, quiet=quiet)


@train_app.command("rescore")
@friendly
def train_rescore(
    completions: Annotated[Path, option("--completions", parser=PathType("--completions", INPUT_FOLDER),
                                        help="A train rl run's completions folder (or the run).")],
    task: Annotated[str | None, option("--task", parser=TextType("--task", choices=task_names),
                                       help=f"The task whose rewards score them: {task_help()}; default: the "
                                            "run's recipe task (its tansaku_recipe.json), or which of its "
                                            "tasks.")] = None,
    config: Annotated[Path | None, option("--config", "-c", parser=PathType(
        "--config", INPUT_FILE), help="A train rl recipe whose task (reward weights, abstention, tools) "
                                      "scores them, instead of the run's own recipe copy.")] = None,
    out: Annotated[Path | None, option("--out", parser=PathType("--out", OUTPUT_FOLDER),
                                       help="Folder for rescored.parquet and rescore_report.json.")] = None,
    judge: Annotated[str | None, option("--judge", parser=SpecType("--judge"),
                                        help="LLM spec of the rubric judge (deepresearch).")] = None,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None, llm_option: LlmOption = None,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """Score stored rollouts again with the current reward functions; report what changed per component (table
    on stderr, with --json the report on stdout).

    The task is the run's own, as train rl trained it (its reward weights …): from the run folder's
    tansaku_recipe.json, or --config RECIPE; --task NAME alone (a run without a recipe copy) gets its
    defaults.

    Example: train rescore --completions runs/rl/completions --out runs/rl-rescored
    """
    from tansaku.core.llm import as_client
    from tansaku.core.progress import quiet_loops
    from tansaku.trainer.rescore import format_report, rescore

    options = llm_options(no_cache, api_key, extra_body, concurrency, llm_option)
    with quiet_loops(quiet):
        report = rescore(completions, task, out=out, judge=as_client(judge, llm_options=options),
                         config=config)
    print_table(format_report(report), report, as_json=as_json, quiet=quiet)


@train_app.command("compare")
@friendly
def train_compare(
    a: Annotated[Path | None, argument(PathType("A", INPUT), help="Eval report A: report.json or a train "
                                                                  "eval --out folder.")] = None,
    b: Annotated[Path | None,
                 argument(PathType("B", INPUT), help="Eval report B (deltas are B − A).")] = None,
    completions: Annotated[Path | None, option("--completions", parser=PathType(
        "--completions", INPUT_FOLDER), help="Instead: a train rl run (or its completions folder) whose "
                                             "samples to compare across --steps.")] = None,
    steps: Annotated[tuple[int, int] | None, option("--steps", parser=NumberType("--steps", min=0),
                                                    help="With --completions: steps A B; the prompts both "
                                                         "sampled, side by side.")] = None,
    limit: Limit = None,
    width: Annotated[int, option("--width", parser=NumberType("--width", min=20),
                                 help="With --completions: characters of each completion shown in the table "
                                      "(the JSON has all).")] = 400,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """Two eval reports side by side (A, B, B − A per metric), or with --completions RUN --steps A B the same
    prompts' samples at two steps of a run with their reward components (table on stderr, with --json the
    comparison on stdout).

    Example: train compare runs/eval-base runs/eval-sft
    """
    from tansaku.core.errors import InputError

    if completions is not None or steps is not None:
        if completions is None or steps is None or a is not None or b is not None:
            raise InputError("give either two eval reports (train compare A B) or --completions RUN --steps "
                             "A B")
        from tansaku.trainer.step_samples import samples_table, step_samples

        result = step_samples(completions, *steps, limit=limit)
        print_table(samples_table(result, width), result, as_json=as_json, quiet=quiet)
        return
    if a is None or b is None:
        raise InputError("give two eval reports (train compare A B), or --completions RUN --steps A B")
    from tansaku.envs.compare import compare_reports, comparison_table, load_report

    result = compare_reports(load_report(a), load_report(b), (str(a), str(b)))
    print_table(comparison_table(result), result, as_json=as_json, quiet=quiet)


@train_app.command("report")
@friendly
def train_report(
    run: Annotated[list[Path], argument(PathType("RUN", INPUT_FOLDER),
                                        help="A run's output_dir; with --runs, two or more runs (seeds).")],
    runs: Annotated[bool, typer.Option("--runs", help="Overlay the runs given and flag collapses that recur "
                                                      "at the same step.")] = False,
    out: Annotated[Path | None, option("--out", parser=PathType("--out", OUTPUT_FILE),
                                       help="PNG to write: one run's learning curves, or the --runs overlay "
                                            "(none without it).")] = None,
    lookback: Annotated[int, option("--lookback", parser=NumberType("--lookback", min=1),
                                    help="--runs: a collapse is a drop below (1 − drop) × the peak of this "
                                         "many previous steps.")] = 5,
    drop: Annotated[float, option("--drop", parser=NumberType(
        "--drop", integer=False, min=0, max=1, min_open=True, max_open=True),
                                  help="--runs: relative drop from that peak, 0 < drop < 1.")] = 0.5,
    within: Annotated[int, option("--within", parser=NumberType("--within", min=0),
                                  help="--runs: onsets this many steps apart or closer coincide.")] = 1,
    min_runs: Annotated[int, option("--min-runs", parser=NumberType("--min-runs", min=2),
                                    help="--runs: runs that must share a collapse.")] = 2,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """One run: its run report (reward weights 1; a summary on stderr, with --json the report on stdout) and
    its learning curves at --out; nothing is written into the run. With --runs R1 R2 …: each run's reward,
    zero-variance share and entropy per step overlaid (--out PNG) and its collapse onsets, flagged where they
    coincide (table on stderr, with --json the comparison on stdout).

    Example: train report runs/rl --out runs/rl-curves.png
    """
    if runs:
        from tansaku.trainer.seeds import compare_seeds, plot_seeds, seeds_table

        result = compare_seeds(run, lookback=lookback, drop=drop, within=within, min_runs=min_runs)
        if out is not None:
            plot_seeds(result, out, option="--out")
        print_table(seeds_table(result), {**result, "png": str(out) if out else None}, as_json=as_json,
                    quiet=quiet)
        return
    if len(run) != 1:
        raise InputError(f"give one run, or --runs for {len(run)} runs side by side")
    from tansaku.core.errors import MissingInputError
    from tansaku.trainer.curves import plot_learning_curves
    from tansaku.trainer.report import run_report

    if not run[0].is_dir():
        raise MissingInputError(f"no run folder at {run[0]}")
    report = run_report(run[0])
    if not report["per_step"]:
        raise InputError(f"{run[0]}: no trainer_state.json log history and no completions/*.parquet to read")
    png = str(plot_learning_curves(run[0], out, report=report, option="--out")) if out is not None else None
    summary = {"output_dir": report["output_dir"], "steps": report["steps"], "ok": report["ok"],
               "failed checks": [c["name"] for c in report["checks"] if not c["ok"]], "png": png}
    print_summary("train report", summary, as_json=as_json, quiet=quiet, json_value={**report, "png": png})


@train_app.command("merge")
@friendly
def train_merge(
    method: Annotated[str, argument(TextType("METHOD", choices=(
        "soup", "chat-vector", "chat_vector", "lora")), help="soup | chat-vector | lora")],
    models: Annotated[list[str],
                      argument(PathType("MODELS", INPUT_FOLDER, text=True),
                               help="soup: checkpoints; chat-vector: TARGET INSTRUCT BASE; lora: ADAPTER")],
    out: Annotated[Path, option("--out", parser=PathType("--out", OUTPUT_FOLDER),
                                help="Folder for the merged model.")],
    weights: Annotated[list[float] | None, option("--weight", parser=NumberType("--weight", integer=False),
                                                  help="soup: one weight per model (repeat).")] = None,
    scale: Annotated[float, option("--scale", parser=NumberType("--scale", integer=False),
                                   help="chat-vector: θ + scale·(θ_instruct − θ_base).")] = 1.0,
    base: Annotated[str | None, option("--base", parser=ModelRefType("--base"),
                                       help="lora: the base model the adapter was trained on.")] = None,
    exclude: Annotated[list[str] | None, option("--exclude", parser=TextType("--exclude", max_chars=1024),
                                                help="chat-vector: tensor names to keep from TARGET (e.g. "
                                                     "embed_tokens).")] = None,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """Model soup, chat vector or LoRA merge, streamed tensor by tensor over safetensors; print the merged
    folder (a summary on stderr; with --json the summary on stdout instead of the folder).

    Example: train merge soup runs/sft/checkpoint-50 runs/sft/checkpoint-100 --out runs/soup
    """
    from tansaku.trainer.merge import run_merge

    merged = str(run_merge(method, models, str(out), weights=weights, scale=scale, exclude=exclude,
                           base=base))
    if not as_json:
        typer.echo(merged)
    summary = {"method": method, "models": models, **({"weights": weights} if weights else {}), "out": merged}
    print_summary("train merge", summary, as_json=as_json, quiet=quiet)
