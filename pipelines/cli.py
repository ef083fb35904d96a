"""``synth build …`` and ``synth import …``: one command per pipeline, generated from the pipeline's config
dataclass (``build_command``: each config field is an option, with its default and help), then the options of
how it runs (``BuildContext``: --out, the LLM options, --shard / --from-shards, -q, --json). The command calls
the pipeline's builder (``tansaku.pipelines.<name>``) and prints the funnel (``tansaku.cli`` mounts these apps
under ``synth``). Each pipeline is one line of ``PIPELINES`` (``IMPORTERS`` for ``synth import``). The
builders are imported when a command runs, so that ``synth --help`` stays fast; bad input is one line and exit
2 (``tansaku.core.cli_common.friendly``).

    synth build corpus --input ../shared/data/jawiki/JaQuAD --out out/jaquad
    synth build egov --laws ../shared/data/egov --out out/egov
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from tansaku.core.build_config import command_from_config
from tansaku.core.cli_common import friendly
from tansaku.core.cli_common import print_manifest as _print_manifest
from tansaku.core.cli_types import IndexType, NumberType, PathType, SpecType, TextType, option
from tansaku.core.llm.cli_options import ApiKey, Concurrency, ExtraBody, LlmOption, NoCache, llm_options
from tansaku.core.llm.spec import engine_help
from tansaku.core.value_checks import INPUT_FOLDER, OUTPUT_FOLDER
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.general.config import GeneralConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.multihop.jemhopqa_config import JemhopqaImportConfig
from tansaku.pipelines.trajectories.config import TrajectoriesConfig

build_app = typer.Typer(help="Build a versioned dataset (parquet + manifest + data card) into --out.",
                        no_args_is_help=True)
import_app = typer.Typer(help="Import public datasets into the store.", no_args_is_help=True)

def shard_form(text: str) -> None:
    """``--shard``'s value has the form I/N (``tansaku.core.shards.parse_shard``, imported when it is
    given)."""
    from tansaku.core.shards import parse_shard

    parse_shard(text)


Out = Annotated[Path, option("--out", parser=PathType("--out", OUTPUT_FOLDER),
                             help="Dataset folder to write (rerun with the same folder to resume).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress: no bars on a terminal, no log lines "
                                                           "off it (every TANSAKU_LOG_EVERY s, default 10).")]
Seed = Annotated[int, option("--seed", parser=NumberType("--seed", min=0),
                             help="Seed for every random draw in the build.")]
LLM = Annotated[str | None, option("--llm", parser=SpecType("--llm"), help=f"LLM spec: {engine_help()}")]
Shard = Annotated[str | None,
                  option("--shard", parser=TextType("--shard", grammar=shard_form),
                         help="Build shard I of N (I/N): its part of the build's first record-local stages, "
                              "into its own --out; merge with --from-shards.")]
IndexTarget = Annotated[str, option("--index", parser=IndexType("--index"),
                                    help="Index folder, opensearch:NAME or https://host:9200/NAME.")]
Json = Annotated[bool, typer.Option("--json", help="Also print the manifest as JSON on stdout.")]
Executor = Annotated[str | None, option(
    "--executor", parser=TextType("--executor", choices=("dask",)),
    help="Run the build's shards as tasks on a running Dask distributed cluster (--scheduler), retrying lost "
         "ones, then merge them here as --from-shards does (shards in OUT.shards).")]
Scheduler = Annotated[str | None, option("--scheduler", parser=TextType("--scheduler"),
                                         help="The Dask scheduler's address for --executor dask "
                                              "(tcp://host:8786).")]
Shards = Annotated[int | None, option(
    "--shards", parser=NumberType("--shards", min=1),
    help="Shards for --executor (default: the cluster's worker count; the dataset is the same for any "
         "count).")]
ShardRetries = Annotated[int, option(
    "--shard-retries", parser=NumberType("--shard-retries", min=0),
    help="Submissions of a lost shard (its worker died) after the first, for --executor; each resumes the "
         "shard.")]
FromShards = Annotated[list[Path] | None,
                       option("--from-shards", parser=PathType("--from-shards", INPUT_FOLDER, guarded=False),
                              help="Finished shards (0 … N-1) of this same build, merged and finished here: "
                                   "the folder holding them, or each shard folder (repeat the option).")]


def _context_parameters(llm: bool, shardable: bool) -> list[inspect.Parameter]:
    """The options of how a build runs (``BuildContext``), after its config's: --out, the LLM options,
    --shard / --from-shards, -q, --json."""
    def keyword(name, annotation, default=inspect.Parameter.empty):
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)

    found = [keyword("out", Out)]
    if llm:
        found += [keyword("no_cache", NoCache, False), keyword("api_key", ApiKey, None),
                  keyword("extra_body", ExtraBody, None), keyword("concurrency", Concurrency, None),
                  keyword("llm_option", LlmOption, None)]
    if shardable:
        found += [keyword("shard", Shard, None), keyword("from_shards", FromShards, None),
                  keyword("executor", Executor, None), keyword("scheduler", Scheduler, None),
                  keyword("shards", Shards, None), keyword("shard_retries", ShardRetries, 2)]
    return found + [keyword("quiet", Quiet, False), keyword("as_json", Json, False)]


def _refuse_missing_engines(config, context) -> None:
    """A ``vllm:`` spec where vLLM is not installed is refused before any work, not when its stage starts
    (egov's generator, say, comes after the articles and their index are built)."""
    from tansaku.core.llm.vllm_engine import require_vllm

    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("llm") and isinstance(value, str) and value.startswith("vllm:"):
            require_vllm(value.partition(":")[2], context.llm.engine)


def build_command(app: typer.Typer, name: str, config_class: type, builder: str, *, summary: str,
                  example: str, llm: bool = False, shardable: bool = False) -> None:
    """``synth build NAME``: ``config_class``'s fields as options (``tansaku.core.build_config``), then the
    context options; runs ``builder`` (``module:function``, imported when the command runs so that
    ``synth --help`` stays fast) as ``builder(config, out, context)`` and prints the funnel."""
    def run(config, out: Path, quiet: bool = False, as_json: bool = False, no_cache: bool = False,
            api_key=None, extra_body=None, concurrency=None, llm_option=None, shard=None, from_shards=None,
            executor=None, scheduler=None, shards=None, shard_retries=2):
        from tansaku.core.context import BuildContext
        from tansaku.core.executors import ExecutorPlan, build_on_cluster
        from tansaku.core.shards import ShardPlan

        context = BuildContext(shards=ShardPlan.from_options(shard, from_shards), quiet=quiet,
                               llm=llm_options(no_cache, api_key, extra_body, concurrency, llm_option))
        _refuse_missing_engines(config, context)
        cluster = ExecutorPlan.from_options(executor, scheduler, shards, shard_retries)
        if cluster is not None:  # the shards as tasks on the cluster, then the merge here
            manifest = build_on_cluster(builder, config, out, context, cluster)
        else:
            module, _, function = builder.partition(":")
            manifest = getattr(importlib.import_module(module), function)(config, out, context)
        _print_manifest(manifest, out, as_json=as_json, quiet=quiet)

    doc = f"{summary}\n\nExample:\n\n  {example}"
    app.command(name)(friendly(command_from_config(config_class, run, _context_parameters(llm, shardable),
                                                   doc)))


@dataclass(frozen=True)
class Pipeline:
    """One ``synth build``/``synth import`` command: its config dataclass (each field an option), its
    builder (``module:function``, imported when the command runs), its help's summary and example, and
    whether it takes the LLM options (``llm``) and the shard options (``shardable``)."""

    config: type
    builder: str
    summary: str
    example: str
    llm: bool = False
    shardable: bool = False


# The pipelines of `synth build NAME`: a new one is its config and builder modules plus one line here.
PIPELINES: dict[str, Pipeline] = {
    "corpus": Pipeline(
        CorpusConfig, "tansaku.pipelines.corpus.build:build_corpus",
        "Normalize a document collection into a document dataset (id, title, text, url, source, meta).",
        "synth build corpus --input ../shared/data/jawiki/JaQuAD --out out/jaquad", shardable=True),
    "egov": Pipeline(
        EgovConfig, "tansaku.pipelines.egov.build:build_egov",
        "e-Gov law XML → article records + 4-choice questions (no law names, no article numbers).",
        "synth build egov --laws ../shared/data/egov --out out/egov --limit 50", llm=True, shardable=True),
    "multihop": Pipeline(
        MultihopConfig, "tansaku.pipelines.multihop.build:build_multihop",
        "Wikipedia triples → 2-hop chains → questions → quality loop → solvability filter.",
        "synth build multihop --corpus out/corpus --out out/multihop --heldout-share 0.2",
        llm=True, shardable=True),
    "trajectories": Pipeline(
        TrajectoriesConfig, "tansaku.pipelines.trajectories.build:build_trajectories",
        "Teacher rollouts → correct only → reasoning translated, refined, then rewritten to a scenario "
        "(three passes) → mixed SFT chat set.",
        "synth build trajectories --dataset out/multihop --index out/index --out out/sft "
        "--teacher scripted:examples/teacher_script.py "
        "--translator scripted:examples/teacher_script.py:rewrite --n 1",
        llm=True, shardable=True),
    "general": Pipeline(
        GeneralConfig, "tansaku.pipelines.general.build:build_general",
        "The base model's own answers to general prompts, no system prompt: the general half of the switch.",
        "synth build general --prompts examples/general_prompts.jsonl --llm transformers:tiny "
        "--out out/general --max-tokens 256", llm=True),
    "deepresearch": Pipeline(
        DeepResearchConfig, "tansaku.pipelines.deepresearch.build:build_deepresearch",
        "Multi-article report instructions, confirmed by search, with a rubric each and a clarifying "
        "exchange.",
        "synth build deepresearch --corpus out/corpus --index out/index --out out/deepresearch "
        "--llm scripted:deepresearch --limit 4", llm=True, shardable=True),
}
# The importers of `synth import NAME`, alike.
IMPORTERS: dict[str, Pipeline] = {
    "jemhopqa": Pipeline(
        JemhopqaImportConfig, "tansaku.pipelines.multihop.jemhopqa:import_jemhopqa",
        "JEMHopQA JSON → a multihop_qa evaluation dataset: every question in 'test' (the dev file: "
        "'validation'); --as-train: 'train' + held-out 'test', with a warning.",
        "synth import jemhopqa ../shared/data/jemhopqa/corpus_ver1.2/train_ver1.2.json --out out/jemhopqa"),
}


def register_commands() -> None:
    """One command per ``PIPELINES`` / ``IMPORTERS`` entry, in the dicts' order (the order of ``--help``)."""
    for app, registry in ((build_app, PIPELINES), (import_app, IMPORTERS)):
        for name, pipeline in registry.items():
            build_command(app, name, pipeline.config, pipeline.builder, summary=pipeline.summary,
                          example=pipeline.example, llm=pipeline.llm, shardable=pipeline.shardable)


register_commands()
