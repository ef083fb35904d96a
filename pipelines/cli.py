"""``synth build …`` and ``synth import …``: one command per pipeline, each parsing its options and calling the
pipeline's builder (``tansaku.pipelines.<name>``), then printing the funnel (``tansaku.cli`` mounts these apps
under ``synth``). The builders are imported inside the commands so that ``synth --help`` stays fast; bad input
is one line and exit 2 (``tansaku.core.cli_common.friendly``).

    synth build corpus --input ../shared/data/jawiki/JaQuAD --out out/jaquad
    synth build egov --laws ../shared/data/egov --out out/egov
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from tansaku.core.cli_common import License, LicenseFile, friendly
from tansaku.core.cli_common import print_manifest as _print_manifest
from tansaku.core.llm.cli_options import ApiKey, Concurrency, ExtraBody, NoCache

build_app = typer.Typer(help="Build a versioned dataset (parquet + manifest + data card) into --out.",
                        no_args_is_help=True)
import_app = typer.Typer(help="Import public datasets into the store.", no_args_is_help=True)

Out = Annotated[Path, typer.Option("--out", help="Dataset folder to write (rerun with the same folder to resume).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress: no bars on a terminal, no log lines off it "
                                                           "(every TANSAKU_LOG_EVERY s, default 10).")]
Limit = Annotated[int | None, typer.Option("--limit", help="Stop after N items (smoke runs).")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for every random draw in the build.")]
KeepRejected = Annotated[bool | None, typer.Option("--keep-rejected/--no-keep-rejected", help="Also write every dropped record (stage, reason, record) as the 'rejected' split (default: per pipeline).")]
RLShare = Annotated[float, typer.Option("--rl-share", help="Share of questions in the 'rl' split: train rl's prompts, never in SFT's train split (0: none).")]
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
    rl_share: RLShare = 0.0,
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
                       heldout_share=heldout_share, rl_share=rl_share, license=license, license_file=license_file,
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
    min_pass_rate: Annotated[float | None, typer.Option("--min-pass-rate", help="Keep questions solved in at least this share of the k tries (default 0.5: solved stably).")] = None,
    max_pass_rate: Annotated[float, typer.Option("--max-pass-rate", help="Keep questions solved in at most this share (1.0 keeps the always-solved; e.g. 0.75 for RL, whose always-solved questions teach nothing).")] = 1.0,
    m: Annotated[int | None, typer.Option("--m", help="Keep questions solved at least m of k times, instead of --min-pass-rate (not both).")] = None,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
    until: Annotated[str | None, typer.Option("--until", help="Stop after this stage and write the records.")] = None,
    limit: Limit = None,
    seed: Seed = 0,
    heldout_share: HeldoutShare = 0.2,
    rl_share: RLShare = 0.0,
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
                       min_pass_rate=min_pass_rate, max_pass_rate=max_pass_rate, until=until, limit=limit,
                       seed=seed, quiet=quiet, heldout_share=heldout_share, rl_share=rl_share,
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
    system_prompt: Annotated[str | None, typer.Option("--system-prompt", help="Text (or @FILE) every agentic row gets as its system prompt instead of the task's own; give train rl/eval the same (recipe task system_prompt).")] = None,
    interface_variants: Annotated[int | None, typer.Option("--interface-variants", help="Tool interfaces the teacher's episodes draw from: 1 = search/open_doc, 2 = find/read too (default: the task's own).")] = None,
    license: License = None, license_file: LicenseFile = None,
    shard: Shard = None,
    from_shards: FromShards = None,
    quiet: Quiet = False,
):
    """Teacher rollouts → correct only → Japanese reasoning → scenario rewrites → mixed SFT chat set."""
    from tansaku.core.options import read_system_prompt
    from tansaku.pipelines.trajectories.build import build_trajectories as run

    with _sharding(shard, from_shards):
        manifest = run(dataset, out, teacher, index, translator=translator, general=general, ratio=ratio, n=n,
                       system_prompt=read_system_prompt(system_prompt), interface_variants=interface_variants,
                       seed=seed, limit=limit, quiet=quiet, license=license, license_file=license_file)
    _print_manifest(manifest, out)


@build_app.command("general")
@friendly
def build_general(
    prompts: Annotated[Path, typer.Option("--prompts", help="General prompts: JSONL/JSON/parquet rows with 'prompt' (text) or 'messages' (ending in a user turn), optional 'id'; or a dataset folder.")],
    llm: Annotated[str, typer.Option("--llm", help="The base model you will fine-tune (its own answers): http:MODEL@URL | vllm:MODEL | transformers:PATH|tiny | scripted:FILE.py[:FN].")],
    out: Out,
    reasoning: Annotated[bool, typer.Option("--reasoning", help="Keep the model's reasoning as it wrote it (assistant reasoning_content); default: the answer only.")] = False,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Tokens per answer; an answer cut there is dropped (truncated).")] = 1024,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature (0: greedy, the model's most likely answer).")] = 0.0,
    no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
    concurrency: Concurrency = None,
    limit: Limit = None,
    seed: Seed = 0,
    heldout_share: HeldoutShare = 0.2,
    keep_rejected: KeepRejected = None,
    license: License = None, license_file: LicenseFile = None,
    quiet: Quiet = False,
):
    """The base model's own answers to general prompts, no system prompt: the general half of the switch."""
    from tansaku.pipelines.general import build_general as run

    manifest = run(prompts, out, llm, reasoning=reasoning, max_tokens=max_tokens, temperature=temperature,
                   limit=limit, seed=seed, heldout_share=heldout_share, license=license, license_file=license_file,
                   quiet=quiet, **_rejected(keep_rejected))
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
