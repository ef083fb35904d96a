"""``train eval``: run a model with a task's environment and report pass@1, pass@k, tool calls, parse
failures and each reward (``tansaku.envs.evaluate.run_eval``); ``--task general`` measures retention and
``--task mt_bench`` hands over to ``tansaku.trainer.mt_bench_cli``. ``tansaku.trainer.cli`` registers
:func:`train_eval` on ``train_app`` as ``train eval``::

    train eval --task multihop_qa --dataset out/multihop --model runs/sft --index out/index \\
        --json | jq '."pass@1"'
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from tansaku.core.cli_common import Quiet, friendly, print_summary
from tansaku.core.cli_types import IndexType, NumberType, PathType, SpecType, TextType, option
from tansaku.core.errors import InputError
from tansaku.core.llm.cli_options import ApiKey, Concurrency, ExtraBody, LlmOption, NoCache, llm_options
from tansaku.core.value_checks import INPUT, INPUT_FILE, OUTPUT_FOLDER
from tansaku.trainer import mt_bench_cli  # train eval --task mt_bench: its options and runner
from tansaku.trainer.cli_options import (
    AsJson,
    InterfaceVariants,
    Limit,
    MaxTokens,
    Seed,
    SystemPrompt,
    task_help,
    task_names,
)

EvalModel = Annotated[str | None, option("--model", parser=SpecType("--model"),
                                         help="LLM spec, or a model folder (= transformers:FOLDER).")]
EvalTask = Annotated[str | None, option(
    "--task", parser=TextType("--task", choices=lambda: task_names(general=True)),
    help=f"{task_help(general=True)}; with --config: which of the recipe's "
         "tasks (needed when it has several).")]
EvalDataset = Annotated[Path | None, option(
    "--dataset", parser=PathType("--dataset", INPUT),
    help="Dataset folder or JSONL of rows (with --config: default the recipe task's data).")]
EvalIndex = Annotated[str | None, option(
    "--index", parser=IndexType("--index"),
    help="Search index the agent uses (not for general; with --config: default the recipe task's index).")]
EvalRecipe = Annotated[Path | None, option(
    "--config", "-c", parser=PathType("--config", INPUT_FILE),
    help="A train rl recipe: evaluate its task as the recipe trains it (system prompt, abstention, tools, "
         "reward weights).")]
EvalSplit = Annotated[str, option("--split", parser=TextType("--split"),
                                  help="Dataset split to evaluate: the held-out 'test' by default.")]
Samples = Annotated[int, option("--k", parser=NumberType("--k", min=1),
                                help="Samples per question (pass@k).")]
EvalOut = Annotated[Path | None, option("--out", parser=PathType("--out", OUTPUT_FOLDER),
                                        help="Folder for report.json and trajectories.jsonl.")]
EvalJudge = Annotated[str | None, option("--judge", parser=SpecType("--judge"),
                                         help="LLM spec of the judge (deepresearch, mt_bench).")]


def eval_summary(report: dict, out: Path | None) -> dict:
    """The headline numbers of a ``train eval`` report (a search task's, or ``general``'s retention)."""
    k = report.get("k")
    names = {"task": "task", "questions": "questions", "pass@1": "pass@1", f"pass@{k}": f"pass@{k}",
             "mean_total_reward": "mean reward", "mean_tool_calls": "tool calls/episode",
             "parse_failure_rate": "parse failure rate", "rows": "rows", "tokens": "tokens",
             "mean_token_logprob": "mean token logprob", "perplexity": "perplexity"}
    return {**{label: report[key] for key, label in names.items() if key in report},
            "out": str(out) if out else None}


@friendly
def train_eval(
    model: EvalModel = None,
    task: EvalTask = None,
    dataset: EvalDataset = None,
    index: EvalIndex = None,
    config: EvalRecipe = None,
    split: EvalSplit = "test",
    k: Samples = 4,
    limit: Limit = None,
    out: EvalOut = None,
    max_tokens: MaxTokens = 1024,
    judge: EvalJudge = None,
    system_prompt: SystemPrompt = None,
    interface_variants: InterfaceVariants = None,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None, llm_option: LlmOption = None,
    answers: mt_bench_cli.Answers = None, pairwise: mt_bench_cli.Pairwise = None,
    judge_prompts: mt_bench_cli.JudgePrompts = None, baseline: mt_bench_cli.Baseline = None,
    judge_price_in: mt_bench_cli.JudgePriceIn = 0.0, judge_price_out: mt_bench_cli.JudgePriceOut = 0.0,
    seed: Seed = 0,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """Run a model with the task's environment: pass@1, pass@k, tool calls, parse failures, each reward (a
    summary on stderr; the whole report with --json on stdout and, with --out, in report.json).

    With --config RECIPE: the recipe's task as train rl trains it (its reward weights …), over its data and
    index unless given. --task mt_bench: Japanese MT-Bench graded by --judge, with and without the agentic
    prompt.

    Example: train eval --task multihop_qa --dataset out/multihop --model runs/sft --index out/index --k 1
    """
    if task == mt_bench_cli.TASK:  # its own runner and table; every option is passed on by name
        return mt_bench_cli.mt_bench_command(**locals())
    mt_bench_cli.refuse_outside_mt_bench(
        task, answers=answers, pairwise=pairwise, judge_prompts=judge_prompts, baseline=baseline,
        judge_price_in=judge_price_in, judge_price_out=judge_price_out)
    from tansaku.core.progress import quiet_loops
    from tansaku.envs.evaluate import run_eval
    from tansaku.trainer.rl_rewards import measured_task

    # one source for the task: with --config the recipe's, as train rl trains it
    set_by_recipe = {"--system-prompt": system_prompt, "--interface-variants": interface_variants}
    task, given = measured_task(config, task, {"--dataset": dataset}, set_by_recipe)
    dataset, index = given["--dataset"], given.get("--index", index)
    if model is None:
        raise InputError(f"--task {task} needs --model (the model that runs the episodes)")
    if Path(model).is_dir():
        model = f"transformers:{model}"
    with quiet_loops(quiet):
        report = run_eval(task, dataset, model, index, split=split, k=k, limit=limit, out_dir=out,
                          max_tokens=max_tokens, seed=seed, judge=judge, system_prompt=system_prompt,
                          interface_variants=interface_variants,
                          llm_options=llm_options(no_cache, api_key, extra_body, concurrency, llm_option))
    print_summary(f"train eval {report.get('task')}", eval_summary(report, out), as_json=as_json,
                  quiet=quiet, json_value=report)
