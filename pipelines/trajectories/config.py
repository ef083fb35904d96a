"""``TrajectoriesConfig``: every setting of ``synth build trajectories``, once (the CLI's options, the
builder's argument, the stages' params and the manifest's ``config`` all read it;
``tansaku.core.build_config``).

    from tansaku.pipelines.trajectories.build import build_trajectories
    from tansaku.pipelines.trajectories.config import TrajectoriesConfig
    build_trajectories(TrajectoriesConfig(dataset="out/multihop", index="out/index",
                                          teacher="scripted:examples/teacher_script.py",
                                          translator="scripted:examples/teacher_script.py:rewrite"),
                       out="out/sft")

``task`` is a task's name (``tansaku.envs.tasks.task_named``; None: the dataset's own, from its pipeline or
columns) and ``system_prompt`` is the option's value (text, or ``@FILE``): the builder reads both before any
work, and the manifest's ``config`` records what they came to (the task's name, the prompt's text).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tansaku.core.build_config import (
    BuildConfig,
    license_file_option,
    license_option,
    limit_option,
    option,
    seed_option,
)
from tansaku.core.value_checks import DATASET, INDEX, INPUT, INPUT_FILE
from tansaku.envs.tool_interfaces import N_INTERFACES

# Defaults the stage modules share (rewrite, language): here, so `synth --help` reads them without importing
# the stages. The language thresholds are argued in language.japanese_share: Japanese prose scores ~1, English
# prose ~0 (names count for neither); zh_detect never reads a run under 4 Han characters as Chinese, so 4 =
# any run it flags drops the row.
MIN_JAPANESE_SHARE = 0.5
MIN_CHINESE_CHARS = 4
RESULT_CHARS = 600  # tool results shown to the rewriter; the data itself is never cut
REWRITE_MAX_TOKENS, REWRITE_TEMPERATURE = 4096, 0.0  # the rewriter answers greedily: a rerun asks the same


def task_names() -> tuple[str, ...]:
    """What ``--task`` takes (``tansaku.envs.tasks.TASKS``; imported when a value is given: --help stays
    fast)."""
    from tansaku.envs.tasks import TASKS

    return tuple(TASKS)


@dataclass(frozen=True)
class TrajectoriesConfig(BuildConfig):
    dataset: Path = option(path=DATASET,
                           help="Question dataset (synth build multihop / egov / deepresearch).")
    teacher: str = option(llm=True, help="LLM spec of the teacher (also scripted:FILE.py[:FN]).")
    index: str = option(path=INDEX, help="Search index the teacher's tool searches.")
    translator: str | None = option(None, llm=True,
                                    help="LLM spec for the rewrite passes, translate, refine and scenario "
                                         "(default: the teacher).")
    judge: str | None = option(None, llm=True, help="LLM spec of the judge a judged answer reward asks: "
                                                    "deepresearch's rubric (needed for a deepresearch "
                                                    "--dataset; its rows' clarifying exchange opens each "
                                                    "trajectory).")
    general: Path | None = option(None, path=INPUT,
                                  help="General chat set (JSONL/parquet/store folder with messages, or "
                                       "hf:OWNER/NAME, optionally :CONFIG, @REVISION, #SPLIT, from the local "
                                       "HF cache).")
    ratio: float = option(0.5, min=0, help="General rows per agentic row.")
    n: int = option(4, min=1, help="Teacher tries per question.")
    limit: int | None = limit_option()
    seed: int = seed_option()
    task: str | None = option(None, choices=task_names,
                              help="Task the questions are for, by name (tansaku.envs.tasks.TASKS, e.g. "
                                   "multihop_qa_compact; default: the dataset's, from its pipeline or "
                                         "columns).")
    system_prompt: str | None = option(None, multiline=True,
                                       help="Text (or @FILE) every agentic row gets as its system prompt "
                                            "instead of the task's own; give train rl/eval the same (recipe "
                                                  "task system_prompt).")
    interface_variants: int | None = option(None, min=1, max=N_INTERFACES,
                                            help="Tool interfaces the teacher's episodes draw from: 1 = "
                                                 "search/open_doc, 2 = find/read too (default: the task's "
                                                       "own).")
    temperature: float = option(0.7, min=0, help="Sampling temperature of the teacher.")
    max_tokens: int = option(1024, min=1,
                             help="Tokens per teacher turn (a turn cut there ends its episode: max_tokens).")
    min_reward: float = option(1.0, min=0, max=1,
                               help="Keep trajectories whose answer reward is at least this (1.0: the "
                                    "gold answer only; a rubric score for deepresearch, whose pass "
                                         "threshold is 0.5).")
    catalog: Path | None = option(None, path=INPUT_FILE,
                                  help="Scenario catalog YAML (default: pipelines/trajectories/"
                                       "scenarios.yaml).")
    result_chars: int = option(RESULT_CHARS, min=1,
                               help="Characters of each tool result the rewriter is shown (the "
                                    "rows keep them whole).")
    rewrite_max_tokens: int = option(REWRITE_MAX_TOKENS, min=1, help="Tokens per rewriter answer.")
    rewrite_temperature: float = option(REWRITE_TEMPERATURE, min=0,
                                        help="Sampling temperature of the rewriter (0: greedy).")
    min_japanese_share: float = option(MIN_JAPANESE_SHARE, min=0, max=1,
                                       help="A rewritten step whose letters are less Japanese "
                                            "than this is dropped (reasoning_not_japanese).")
    min_chinese_chars: int = option(MIN_CHINESE_CHARS, min=1,
                                    help="A rewritten step with this many Chinese characters "
                                         "is dropped (reasoning_has_chinese).")
    chunk_size: int = option(64, min=1,
                             help="Questions per checkpoint chunk (what an interruption costs; the unit of "
                                  "--shard).")
    license: str | None = license_option()
    license_file: Path | None = license_file_option()
    name: str | None = option(None, recipe=False,
                              help="Dataset name (default: trajectories-<dataset folder>).")
