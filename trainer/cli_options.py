"""The options several ``train`` commands share, and ``--task``'s choices and help made from the task
registry.

``tansaku.trainer.cli`` (``train sft|rl|select|rescore|compare|report|merge``),
``tansaku.trainer.eval_command`` (``train eval``) and ``tansaku.cli`` (``synth serve-env``'s ``--task``)
declare their parameters with these, so that one option reads the same in every command's ``--help``::

    def train_x(limit: Limit = None, seed: Seed = 0, as_json: AsJson = False): ...
"""

from __future__ import annotations

from typing import Annotated

import typer

from tansaku.core.cli_types import NumberType, TextType, option
from tansaku.envs.retention import TASK as GENERAL_TASK
from tansaku.envs.tasks import TASKS  # the task registry: every --task list is made from it
from tansaku.envs.tool_interfaces import N_INTERFACES
from tansaku.trainer import mt_bench_cli  # train eval --task mt_bench: its task name

Limit = Annotated[int | None, option("--limit", parser=NumberType("--limit", min=1),
                                     help="Stop after N items (smoke runs).")]
Seed = Annotated[int, option("--seed", parser=NumberType("--seed", min=0),
                             help="Seed for every random draw.")]
MaxTokens = Annotated[int, option("--max-tokens", parser=NumberType("--max-tokens", min=1),
                                  help="New tokens per turn.")]
SystemPrompt = Annotated[str | None, option(
    "--system-prompt", parser=TextType("--system-prompt", multiline=True),
    help="Text (or @FILE) instead of the task's system prompt: the one the model was trained under.")]
InterfaceVariants = Annotated[int | None, option(
    "--interface-variants", parser=NumberType("--interface-variants", min=1, max=N_INTERFACES),
    help="Tool interfaces drawn per episode: 1 = search/open_doc, 2 = find/read too "
         "(default: the task's own).")]
AsJson = Annotated[bool, typer.Option(
    "--json", help="Print the whole result (report, selection, comparison …) as one JSON value on stdout; "
                   "without it stdout holds no JSON.")]


def task_names(general: bool = False) -> tuple[str, ...]:
    """What ``--task`` takes: the keys of ``tansaku.envs.tasks.TASKS`` (and ``general``, retention, for
    ``train eval``), read when a value is given, so that a task registered after this module loaded counts."""
    return (*TASKS, GENERAL_TASK, mt_bench_cli.TASK) if general else tuple(TASKS)


def task_help(general: bool = False) -> str:
    """``--task``'s help, made from ``TASKS``: ``multihop_qa | … | deepresearch``
    (``| general (retention)``)."""
    extra = f" | {GENERAL_TASK} (retention) | {mt_bench_cli.TASK} (LLM judge)"
    return " | ".join(TASKS) + (extra if general else "")
