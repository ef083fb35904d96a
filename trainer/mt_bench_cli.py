"""The options and the summary table of ``train eval --task mt_bench`` (``tansaku.envs.mt_bench_eval``), kept
here so that ``tansaku.trainer.cli`` only dispatches to :func:`mt_bench_command`.

    train eval --task mt_bench --dataset ../shared/data/ja_mt_bench --model runs/rl \\
        --judge http:Qwen/Qwen3-32B@http://gpu1:8000 --out runs/mt-rl \\
        --baseline runs/mt-base --baseline runs/mt-sft
    train eval --task mt_bench --dataset ../shared/data/ja_mt_bench \\
        --answers ../shared/data/ja_mt_bench/model_answer/gpt-3.5-turbo.jsonl \\
        --judge scripted:judge.py --out /tmp/mt
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from tansaku.core.cli_common import print_table
from tansaku.core.cli_types import NumberType, OptionType, PathType, option
from tansaku.core.errors import InputError
from tansaku.core.llm.spec import check_spec
from tansaku.core.value_checks import INPUT, INPUT_FILE, check_path

TASK = "mt_bench"  # tansaku.envs.mt_bench.TASK (that module loads the LLM layer; --help stays light)


class AnswersOrSpecType(OptionType):
    """A ``model_answer``-format ``.jsonl`` file (it must exist) or an LLM spec."""

    def check(self, value):
        if str(value).endswith(".jsonl"):
            return str(check_path(value, INPUT_FILE, self.option))
        return check_spec(value, self.option, files=True)


Answers = Annotated[
    Path | None,
    option(
        "--answers",
        parser=PathType("--answers", INPUT_FILE),
        help="mt_bench: grade these pre-generated answers (model_answer format .jsonl) instead of "
        "generating with --model.",
    ),
]
Pairwise = Annotated[
    str | None,
    option(
        "--pairwise",
        parser=AnswersOrSpecType("--pairwise"),
        help="mt_bench: compare with MODEL_B (an LLM spec or a model_answer .jsonl), each pair judged twice "
        "with positions swapped.",
    ),
]
JudgePrompts = Annotated[
    Path | None,
    option(
        "--judge-prompts",
        parser=PathType("--judge-prompts", INPUT_FILE),
        help="mt_bench: judge prompts in the harness's judge_prompts.jsonl format (default: tansaku's own).",
    ),
]
JudgePriceIn = Annotated[
    float,
    option(
        "--judge-price-in",
        parser=NumberType("--judge-price-in", integer=False, min=0),
        help="mt_bench: judge price per 1M prompt tokens (0: not priced).",
    ),
]
JudgePriceOut = Annotated[
    float,
    option(
        "--judge-price-out",
        parser=NumberType("--judge-price-out", integer=False, min=0),
        help="mt_bench: judge price per 1M completion tokens (0: not priced).",
    ),
]
Baseline = Annotated[
    list[Path] | None,
    option(
        "--baseline",
        parser=PathType("--baseline", INPUT),
        help="mt_bench: an earlier mt_bench --out folder (before SFT, after SFT …; repeat, in order): one "
        "table with retention = mean / the first one's.",
    ),
]


def refuse_outside_mt_bench(task: str | None, **given) -> None:
    """The MT-Bench-only options given with another task are refused (one line naming the option): ignored,
    a typo such as ``--answers`` on a search task would look like a graded run."""
    for name, value in given.items():
        if value not in (None, 0, 0.0, [], ()):
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} is for --task {TASK} (got --task {task or 'the recipe'}'s)")


def score_table(report: dict):
    """Per condition: overall, per turn and per category mean with its 95 % interval, scored turns,
    unreadable verdicts and judge errors (pairwise: win / loss / tie / inconsistent and the win rates)."""
    from rich.table import Table  # rich: imported when something is printed

    pairwise = report["mode"] == "pairwise"
    usage = report["judge_usage"]
    table = Table(
        title=f"train eval mt_bench ({report['mode']}; {report['questions']} questions, "
        f"{report['graded']} judgments, {report['unreadable']} unreadable, "
        f"{report['judge_errors']} judge errors; judge tokens {usage['completion_tokens']}, "
        f"cost {usage['cost']})"
    )
    heads = (
        ["win", "loss", "tie", "inconsistent", "unreadable", "win rate", "adjusted"]
        if pairwise
        else ["mean", "95 % interval", "n", "unreadable", "errors"]
    )
    for head in ["condition", "group", *heads]:
        table.add_column(head)
    for condition, summary in report["conditions"].items():
        groups = [
            ("overall", summary["overall"]),
            *((f"turn {t}", g) for t, g in summary["turns"].items()),
            *summary["categories"].items(),
        ]
        for name, group in groups:
            table.add_row(condition, name, *map(_cell, _row(group, pairwise)))
    for line in report.get("retention") or []:
        table.add_row(
            "retention",
            line["label"],
            *[_cell(line.get(k)) for k in ("plain", "retention_plain", "agentic", "retention_agentic")],
        )
    return table


def _row(group: dict, pairwise: bool) -> list:
    if pairwise:
        return [
            group[k]
            for k in ("win", "loss", "tie", "inconsistent", "unreadable", "win_rate", "win_rate_adjusted")
        ]
    interval = None if group["low"] is None else f"{group['low']:.2f} … {group['high']:.2f}"
    return [group["mean"], interval, group["n"], group["unreadable"], group["errors"]]


def _cell(value) -> str:
    from tansaku.core.cli_common import cell

    return cell(value)


def mt_bench_command(*, model, task, dataset, index, config, split, k, limit, out, max_tokens, judge,
                     system_prompt, interface_variants, no_cache, api_key, extra_body, concurrency,
                     llm_option, answers, pairwise, judge_prompts, baseline, judge_price_in, judge_price_out,
                     seed, quiet, as_json) -> None:
    """``train eval --task mt_bench``, called with every option of ``train eval`` by name: run it and print
    the table (stderr) or, with ``--json``, the report (stdout)."""
    from tansaku.core.llm.cli_options import llm_options
    from tansaku.core.progress import quiet_loops
    from tansaku.envs.mt_bench_eval import run_mt_bench

    search_only = {"--config": config, "--index": index, "--interface-variants": interface_variants}
    if given := [name for name, value in search_only.items() if value is not None]:
        raise InputError(f"--task mt_bench takes no {', '.join(given)} (options of the search tasks)")
    if dataset is None:
        raise InputError("--task mt_bench needs --dataset (an MT-Bench folder: question.jsonl, "
                         "reference_answer/)")
    if model is not None and Path(model).is_dir():
        model = f"transformers:{model}"
    options = llm_options(no_cache, api_key, extra_body, concurrency, llm_option)
    with quiet_loops(quiet):
        report = run_mt_bench(dataset, model=model, judge=judge, answers=answers, pairwise=pairwise,
                              system_prompt=system_prompt, judge_prompts_file=judge_prompts, limit=limit,
                              out_dir=out, max_tokens=max_tokens, seed=seed, price_in=judge_price_in,
                              price_out=judge_price_out, baselines=baseline or (), llm_options=options)
    print_table(score_table(report), report, as_json=as_json, quiet=quiet)
