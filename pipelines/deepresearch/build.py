"""``synth build deepresearch``: the stages on the pipeline engine, written as a dataset + card.

    build_deepresearch("out/corpus", "out/index", "out/deepresearch", "scripted:deepresearch")
    # CLI: synth build deepresearch --corpus DIR --index DIR --out DIR --llm SPEC [--clarify-share F] [--limit N]

``llm``: a ``tansaku.core.llm`` client or spec; ``scripted:deepresearch`` is the built-in demo script
(``demo_llm.py``), so the pipeline runs on the embedded index without an endpoint. Stages:

1. ``keywords`` (global): keyword groups from the corpus documents (``keywords.py``); ``limit`` caps them.
2. ``instructions``: the search agent writes an instruction and confirms its articles (``instructions.py``).
3. ``single_page``: drop instructions one supporting article answers alone.
4. ``quality``: LLM judge with a written rubric, ``quality_threshold``.
5. ``select_clarify`` (global) + ``clarify``: clarifying Q/A for ``clarify_share`` of the rows.
6. ``rubric``: per-instruction rubric validated against ``rubric.RUBRIC_SCHEMA``.

Thresholds (``quality_threshold``, ``clarify_share``, ``max_turns``, ``min_sources``, keyword config) are the stages'
``params`` and the LLM's identity is each LLM stage's ``llm``: both in the manifest and the resume fingerprint.
Dropped instructions are kept in the ``rejected`` split (``keep_rejected``, on by default).

Output row: ``id, instruction, dialogue, clarify_question, clarify_answer, clarify_status,
needs_clarification, entities, report_format, supporting_doc_ids, searched_doc_ids, unconfirmed_doc_ids,
search_queries, agent_turns, single_page_checked, quality_score, quality_scores, rubric, keywords, group_id,
doc_ids, titles, keyword_df``. The ``deepresearch`` task reads ``instruction`` and ``rubric``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tansaku.core.engine import batch_stage, global_stage, map_stage
from tansaku.core.features import PROMPT, QUESTION_COLUMNS, STRINGS
from tansaku.core.heldout import DEFAULT_SHARE, HeldOut
from tansaku.core.licenses import choose_license
from tansaku.core.llm import as_client
from tansaku.core.options import check_count, check_fraction, check_limit, require_document_dataset
from tansaku.core.out_folder import precheck_out
from tansaku.core.store import build_dataset, describe_input, iter_rows
from tansaku.envs.search import open_index, require_index
from tansaku.envs.tasks import TASKS
from tansaku.pipelines.deepresearch import PROMPTS
from tansaku.pipelines.deepresearch.clarify import make_clarify_stage_fn, select_for_clarification
from tansaku.pipelines.deepresearch.demo_llm import demo_llm
from tansaku.pipelines.deepresearch.instructions import make_instruction_stage_fn, make_single_page_stage_fn
from tansaku.pipelines.deepresearch.keywords import KeywordConfig, keyword_groups
from tansaku.pipelines.deepresearch.quality import make_quality_stage_fn
from tansaku.pipelines.deepresearch.rubric import make_rubric_stage_fn

PIPELINE_VERSION = "2"  # 2: prompt and task columns, declared column types
_RUBRIC_ITEM = pa.struct([("id", pa.string()), ("criterion", pa.string()), ("weight", pa.float64()),
                          ("scale", pa.string()), ("kind", pa.string()), ("entities", STRINGS),
                          ("source_doc_ids", STRINGS)])
# Columns whose inferred type would depend on the rows (no clarification drawn, no unconfirmed doc…).
COLUMN_TYPES = {**QUESTION_COLUMNS, "dialogue": PROMPT, "rubric": pa.list_(_RUBRIC_ITEM),
                "clarify_question": pa.string(), "clarify_answer": pa.string(), "clarify_status": pa.string(),
                "quality_score": pa.float64(), "quality_scores": pa.list_(pa.float64()),
                **{name: STRINGS for name in ("entities", "supporting_doc_ids", "searched_doc_ids",
                                              "unconfirmed_doc_ids", "search_queries")}}
DEMO_SPEC = "scripted:deepresearch"


# What fixes a build that kept no instruction, per stage (tansaku.core.out_folder.refuse_empty).
EMPTY_HINTS = {
    "input": "the corpus has no documents",
    "keywords": "the corpus gave no keyword group spanning several articles: use a larger corpus",
    "instructions": "the writer confirmed no instruction through search: check --llm and that --index indexes "
                    "--corpus",
}

def resolve_llm(llm):
    """A client from a spec (``scripted:deepresearch`` = the demo script), or the client itself."""
    if llm == DEMO_SPEC:
        return demo_llm()
    return as_client(llm)


def deepresearch_stages(llm, backend, *, clarify_share: float = 0.5, limit: int | None = None, seed: int = 0,
                        keyword_config: KeywordConfig = KeywordConfig(), quality_threshold: float = 3.5,
                        min_sources: int = 2, max_turns: int = 6, batch_size: int = 16) -> list:
    def groups(docs):
        found = keyword_groups(docs, keyword_config)
        yield from (found[:limit] if limit is not None else found)

    def finish(r: dict) -> dict:
        # prompt: TRL's conversational column, the system + user turns (with any clarifying Q/A) `train rl` builds.
        row = {"id": f"dr-{r['group_id']}", **r, "task": "deepresearch"}
        return {**row, "prompt": TASKS["deepresearch"].build_prompt(row)}

    return [
        global_stage("keywords", groups, params={"config": keyword_config.to_dict(), "limit": limit}),
        batch_stage("instructions", make_instruction_stage_fn(llm, backend, max_turns, min_sources, seed), batch_size,
                    params={"max_turns": max_turns, "min_sources": min_sources}, llm=llm),
        batch_stage("single_page", make_single_page_stage_fn(llm, backend), batch_size, llm=llm),
        batch_stage("quality", make_quality_stage_fn(llm, quality_threshold), batch_size,
                    params={"threshold": quality_threshold}, llm=llm),
        global_stage("select_clarify", select_for_clarification(clarify_share, seed), params={"share": clarify_share}),
        batch_stage("clarify", make_clarify_stage_fn(llm), batch_size, llm=llm),
        batch_stage("rubric", make_rubric_stage_fn(llm, backend), batch_size, llm=llm),
        map_stage("finish", finish),
    ]


def build_deepresearch(corpus: str | Path, index: str | Path, out: str | Path, llm, clarify_share: float = 0.5,
                       limit: int | None = None, seed: int = 0, quiet: bool = False,
                       keyword_config: KeywordConfig = KeywordConfig(), quality_threshold: float = 3.5,
                       name: str | None = None, keep_rejected: bool = True,
                       heldout_share: float = DEFAULT_SHARE, license: str | None = None,
                       chunk_size: int = 64, license_file: str | Path | None = None) -> dict:
    """Build the deepresearch dataset in ``out``; returns its manifest (a rerun with the same ``out`` resumes).
    ``chunk_size``: records per checkpoint (documents, then keyword groups; the unit a ``--shard`` takes).

    ``keep_rejected`` (on: few rows, each an expensive LLM/agent result) writes every dropped instruction with
    its stage and reason as the ``rejected`` split. ``heldout_share``: share of instructions (key ``id``, one
    per keyword group) that form the ``test`` split (``tansaku.core.heldout``). ``license``: the card's license id
    or ``other:NAME`` with ``license_file`` (default: the corpus card's license keys and LICENSE; ``unknown``
    when it declares none; ``tansaku.core.licenses.choose_license``)."""

    check_fraction("--clarify-share", clarify_share, 0, 1)
    check_limit(limit)
    check_count("chunk_size", chunk_size)
    check_fraction("quality_threshold", quality_threshold, 0, None)
    heldout = HeldOut(heldout_share, "id", seed)
    out = precheck_out(out, pipeline="deepresearch", inputs={  # before the corpus is read
        "--corpus": corpus, "--index": index, "--license-file": license_file})
    # Fails fast on a folder that is no dataset, a broken manifest or a question dataset given as --corpus.
    corpus_manifest = require_document_dataset(corpus, "--corpus")
    chosen = choose_license(license, license_file, corpus, {"license": "unknown"})
    require_index(index, f"build it with `synth index build --dataset {corpus}`")
    backend = open_index(index)
    client = resolve_llm(llm)
    n_docs = sum(corpus_manifest.get("splits", {}).values())
    # The df bounds scale with the corpus: record the ones this corpus gets next to the config.
    config = {"clarify_share": clarify_share, "limit": limit, "keywords": keyword_config.to_dict(),
              "keyword_thresholds": keyword_config.thresholds(n_docs), "quality_threshold": quality_threshold,
              "min_sources": 2, "max_turns": 6, "prompts": PROMPTS, **chosen.recipe()}
    inputs = [describe_input(corpus, n_docs), describe_input(index, hashed=False)]  # the index is not hashed
    manifest = build_dataset(
        out=out, name=name or "deepresearch", pipeline="deepresearch", pipeline_version=PIPELINE_VERSION,
        config=config, seed=seed, inputs=inputs, source=lambda: iter_rows(corpus),
        stages=deepresearch_stages(client, backend, clarify_share=clarify_share, limit=limit, seed=seed,
                                   keyword_config=keyword_config, quality_threshold=quality_threshold),
        llm=client, parents=[corpus_manifest.get("version", "")], chunk_size=chunk_size, quiet=quiet,
        keep_rejected=keep_rejected, heldout=heldout, column_types=COLUMN_TYPES, empty_hints=EMPTY_HINTS,
        card={"pretty_name": "tansaku deepresearch instructions", **chosen.card,
              "task_categories": ["text-generation"], "tags": ["deep-research", "rubric"],
              "description": "Japanese report instructions that need several articles of the corpus, each with "
                             "the supporting doc ids its writer confirmed through search, an optional "
                             "clarifying question and user answer (`dialogue`), and a per-instruction rubric "
                             "(`rubric`: criteria with id, weight summing to 1, scale, kind coverage/fact/"
                             "format/other, entities, source_doc_ids) for `tansaku.envs.rubric_reward.make_rubric_reward`.",
              "limitations": ["Instructions, judgements and rubrics are LLM-written; the manifest's `llm` names "
                              "the model (the demo script `scripted:deepresearch` writes templates).",
                              "Single-page and quality filters are LLM judges and can be wrong both ways.",
                              "Rows whose clarifying Q/A failed its filters keep the instruction without it "
                              "(`clarify_status`)."]},
    )
    return chosen.write(out, manifest)
