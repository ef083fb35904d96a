"""``synth build deepresearch``: the stages on the pipeline engine, written as a dataset + card.

    from tansaku.pipelines.deepresearch.build import build_deepresearch
    from tansaku.pipelines.deepresearch.config import DeepResearchConfig
    config = DeepResearchConfig(corpus="out/corpus", index="out/index", llm="scripted:deepresearch")
    build_deepresearch(config, out="out/deepresearch")
    # CLI: synth build deepresearch --corpus DIR --index DIR --out DIR --llm SPEC [--clarify-share F]
    #      [--limit N]

``llm``: a ``tansaku.core.llm`` client or spec; ``scripted:deepresearch`` is the built-in demo script
(``demo_llm.py``), so the pipeline runs on the embedded index without an endpoint. Stages:

1. ``keywords`` (global): keyword groups from the corpus documents (``keywords.py``); ``limit`` caps them.
2. ``instructions``: the search agent writes an instruction and confirms its articles (``instructions.py``).
3. ``single_page``: drop instructions one supporting article answers alone.
4. ``quality``: LLM judge with a written rubric, ``quality_threshold`` and ``quality_floor``.
5. ``select_clarify`` + ``clarify_question`` + ``clarify_answer``: a clarifying exchange for about
   ``clarify_share`` of the rows (a seeded draw each): the user's initial request, vaguer than the
   instruction, and the assistant's clarifying question (one call), then the user's answer supplying the
   detail (a second call that sees the question); each call filtered by rules, then a judge (``clarify.py``).
6. ``rubric``: per-instruction rubric validated against ``rubric.RUBRIC_SCHEMA``.
7. ``finish``: the task's (``DeepResearch.finalize``): the ``id``, ``task`` and TRL ``prompt`` columns, and
   the gold check (a rubric the task's reward can read).

Every setting is a field of ``DeepResearchConfig``: the manifest's ``config`` (with the corpus's keyword df
bounds, ``keyword_thresholds``) and each stage's ``params`` read it, and the LLM's identity is each LLM
stage's ``llm``: all in the resume fingerprint. Dropped instructions are kept in the ``rejected`` split
(``keep_rejected``, on by default).

Output row: ``id, instruction, dialogue, clarify_request, clarify_question, clarify_answer, clarify_status,
clarify_detail, needs_clarification, entities, report_format, supporting_doc_ids, searched_doc_ids,
unconfirmed_doc_ids, search_queries, agent_turns, single_page_checked, quality_score, quality_scores, rubric,
keywords, group_id, doc_ids, titles, keyword_df, task,
prompt``. The ``deepresearch`` task reads ``instruction`` (the report instruction, which the rubric and its
judge read) and ``rubric``; ``dialogue`` holds the turns before the report:
``[user initial request, assistant clarifying question, user answer]`` or ``[user instruction]``.
"""

from __future__ import annotations

import pyarrow as pa

from tansaku.core.context import BuildContext
from tansaku.core.engine import batch_stage, global_stage, map_stage
from tansaku.core.features import PROMPT, QUESTION_COLUMNS, STRINGS
from tansaku.core.heldout import HeldOut
from tansaku.core.licenses import choose_license
from tansaku.core.options import require_document_dataset
from tansaku.core.out_folder import precheck_out
from tansaku.core.provenance import describe_input
from tansaku.core.store import build_dataset, iter_rows
from tansaku.envs.search import open_index, require_index
from tansaku.envs.tasks import DeepResearch, Task
from tansaku.pipelines.deepresearch import PROMPTS
from tansaku.pipelines.deepresearch.clarify import (
    make_answer_stage_fn,
    make_question_stage_fn,
    select_for_clarification,
)
from tansaku.pipelines.deepresearch.config import DEMO_SPEC, KEYWORD_FIELDS, DeepResearchConfig
from tansaku.pipelines.deepresearch.demo_llm import demo_llm
from tansaku.pipelines.deepresearch.instructions import make_instruction_stage_fn, make_single_page_stage_fn
from tansaku.pipelines.deepresearch.keywords import keyword_groups
from tansaku.pipelines.deepresearch.quality import make_quality_stage_fn
from tansaku.pipelines.deepresearch.rubric import make_rubric_stage_fn

# 2: prompt and task columns, declared column types; 3: the config is DeepResearchConfig's
PIPELINE_VERSION = "5"
# fields (keyword settings flat, every stage setting in it), the finish stage is the task's (gold check);
# 4: clarifying Q/A drawn per record (no global barrier before clarify); 5: the clarifying exchange is two
# calls (a vaguer initial request + the question, then the user's answer), stages clarify_question and
# clarify_answer
_RUBRIC_ITEM = pa.struct([("id", pa.string()), ("criterion", pa.string()), ("weight", pa.float64()),
                          ("scale", pa.string()), ("kind", pa.string()), ("entities", STRINGS),
                          ("source_doc_ids", STRINGS)])
# Columns whose inferred type would depend on the rows (no clarification drawn, no unconfirmed doc…).
COLUMN_TYPES = {**QUESTION_COLUMNS, "dialogue": PROMPT, "rubric": pa.list_(_RUBRIC_ITEM),
                "clarify_request": pa.string(), "clarify_question": pa.string(),
                "clarify_answer": pa.string(), "clarify_status": pa.string(), "clarify_detail": pa.string(),
                "quality_score": pa.float64(), "quality_scores": pa.list_(pa.float64()),
                **{name: STRINGS for name in ("entities", "supporting_doc_ids", "searched_doc_ids",
                                              "unconfirmed_doc_ids", "search_queries")}}


# What fixes a build that kept no instruction, per stage (tansaku.core.out_folder.refuse_empty).
EMPTY_HINTS = {
    "input": "the corpus has no documents",
    "keywords": "the corpus gave no keyword group spanning several articles: use a larger corpus, or loosen "
                "--keyword-min-df, --keyword-max-df-ratio, --keyword-max-df-floor, --keyword-min-cooccur, "
                "--keyword-min-articles",
    "instructions": "the writer confirmed no instruction through search: check --llm and that --index "
                    "indexes --corpus",
    "quality": "the judge scored no instruction at --quality-threshold with every criterion at "
               "--quality-floor: check --llm, or lower them",
    "rubric": "no rubric had --min-specific criteria naming an entity with at most --max-generic-share of "
              "its weight on generic ones: check --llm, or loosen them",
}


def resolve_llm(spec, context: BuildContext):
    """A client from a spec with the command's LLM options (``scripted:deepresearch`` = the demo script), or
    the client itself."""
    if spec == DEMO_SPEC:
        return demo_llm()
    return context.client(spec)


def deepresearch_stages(c: DeepResearchConfig, llm, backend, task: Task) -> list:
    """The stages of ``c``'s build: every setting read from ``c`` (its params are ``c.pick(...)``)."""
    keyword_config = c.keyword_config()

    def groups(docs):
        found = keyword_groups(docs, keyword_config)
        yield from (found[:c.limit] if c.limit is not None else found)

    def finish(records: list[dict]) -> list:
        # The task's tail: the task column, TRL's conversational prompt (system + user turns with any
        # clarifying Q/A, as `train rl` builds them) and the gold check, which validates the rubric.
        return task.finalize([{"id": f"dr-{r['group_id']}", **r} for r in records])

    writer = make_instruction_stage_fn(llm, backend, task, max_turns=c.max_turns, min_sources=c.min_sources,
                                       top_k=c.search_top_k, seed=c.seed)
    return [
        global_stage("keywords", groups, params=c.pick(*KEYWORD_FIELDS, "limit")),
        batch_stage("instructions", writer, c.batch_size, llm=llm,
                    params={**c.pick("max_turns", "min_sources", "search_top_k"),
                            "max_tool_calls": task.max_tool_calls}),
        batch_stage("single_page", make_single_page_stage_fn(llm, backend, c.single_page_chars), c.batch_size,
                    params=c.pick("single_page_chars"), llm=llm),
        batch_stage("quality", make_quality_stage_fn(llm, c.quality_threshold, c.quality_floor), c.batch_size,
                    params=c.pick("quality_threshold", "quality_floor"), llm=llm),
        map_stage("select_clarify", select_for_clarification(c.clarify_share, c.seed),
                  params=c.pick("clarify_share")),
        batch_stage("clarify_question", make_question_stage_fn(llm), c.batch_size, llm=llm,
                    params={"prompts": [PROMPTS["clarify_question"], PROMPTS["clarify_question_judge"]]}),
        batch_stage("clarify_answer", make_answer_stage_fn(llm), c.batch_size, llm=llm,
                    params={"prompts": [PROMPTS["clarify_answer"], PROMPTS["clarify_answer_judge"]]}),
        batch_stage(
            "rubric", make_rubric_stage_fn(llm, backend, c.min_specific, c.max_generic_share, c.rubric_chars),
            c.batch_size, params=c.pick("min_specific", "max_generic_share", "rubric_chars"), llm=llm),
        batch_stage("finish", finish, c.batch_size, params={"task": task.name, "task_version": task.version},
                    separable=True),
    ]


# The data card's fields every build shares (the license is the build's own).
CARD = {
    "task_categories": ["text-generation"], "tags": ["deep-research", "rubric"],
    "description": "Japanese report instructions that need several articles of the corpus, each with the "
                   "supporting doc ids its writer confirmed through search, for a share of the rows a "
                   "clarifying exchange before the report (`dialogue`: the user's initial request, vaguer "
                   "than the instruction, the assistant's clarifying question and the user's answer "
                   "supplying the detail), and a per-instruction rubric (`rubric`: criteria with id, weight "
                   "summing to 1, scale, kind coverage/fact/format/other, entities, source_doc_ids) for "
                   "`tansaku.envs.rubric_reward.make_rubric_reward`.",
    "limitations": ["Instructions, judgements and rubrics are LLM-written; the manifest's `llm` names the "
                    "model (the demo script `scripted:deepresearch` writes templates).",
                    "Single-page and quality filters are LLM judges and can be wrong both ways.",
                    "Rows whose clarifying exchange failed its filters keep the instruction without it "
                    "(`clarify_status`, `clarify_detail`)."],
}


def build_deepresearch(config: DeepResearchConfig, out="out/deepresearch",
                       context: BuildContext | None = None, task: Task = DeepResearch()) -> dict:
    """Build the deepresearch dataset in ``out``; returns its manifest (a rerun with the same ``out``
    resumes).

    ``config`` holds every setting (``DeepResearchConfig``: its help texts are the CLI's); ``chunk_size``:
    records per checkpoint (documents, then keyword groups; the unit a ``--shard`` takes). ``keep_rejected``
    (on: few rows, each an expensive LLM/agent result) writes every dropped instruction with its stage and
    reason as the ``rejected`` split. ``heldout_share``: share of instructions (key ``id``, one per keyword
    group) that form the ``test`` split (``tansaku.core.heldout``). ``license``: the card's license id or
    ``other:NAME`` with ``license_file`` (default: the corpus card's license keys and LICENSE; ``unknown``
    when it declares none; ``tansaku.core.licenses.choose_license``). ``context``: shards, LLM options,
    progress (``BuildContext``); ``task``: whose rows these are (its tool-call budget, prompt and gold
    check)."""
    context = context or BuildContext()
    c = config.check()  # every setting before any work (one line, exit 2)
    heldout = HeldOut(c.heldout_share, "id", c.seed)
    out = precheck_out(out, pipeline="deepresearch", inputs={  # before the corpus is read
        "--corpus": c.corpus, "--index": c.index, "--license-file": c.license_file})
    # Fails fast on a folder that is no dataset, a broken manifest or a question dataset given as --corpus.
    corpus_manifest = require_document_dataset(c.corpus, "--corpus")
    chosen = choose_license(c.license, c.license_file, c.corpus, {"license": "unknown"})
    require_index(c.index, f"build it with `synth index build --dataset {c.corpus}`")
    backend = open_index(c.index)
    client = resolve_llm(c.llm, context)
    n_docs = sum(corpus_manifest.get("splits", {}).values())
    # The df bounds scale with the corpus: record the ones this corpus gets next to the config.
    recipe = {**c.recipe(), "keyword_thresholds": c.keyword_config().thresholds(n_docs), "prompts": PROMPTS,
              **chosen.recipe()}
    # the index is not hashed
    inputs = [describe_input(c.corpus, n_docs), describe_input(c.index, hashed=False)]
    manifest = build_dataset(
        out=out, name=c.name or "deepresearch", pipeline="deepresearch", pipeline_version=PIPELINE_VERSION,
        config=recipe, seed=c.seed, inputs=inputs, source=lambda: iter_rows(c.corpus),
        stages=deepresearch_stages(c, client, backend, task),
        llm=client, parents=[corpus_manifest.get("version", "")], chunk_size=c.chunk_size, context=context,
        keep_rejected=c.keep_rejected, heldout=heldout, column_types=COLUMN_TYPES, empty_hints=EMPTY_HINTS,
        card={"pretty_name": "tansaku deepresearch instructions", **chosen.card, **CARD})
    return chosen.write(out, manifest)
