"""``synth build multihop``: Wikipedia triples → 2-hop questions → quality loop → solvability filter.

    from tansaku.pipelines.multihop.build import build_multihop
    from tansaku.pipelines.multihop.config import MultihopConfig
    build_multihop(MultihopConfig(corpus="out/corpus"), out="out/multihop")           # templates, no LLM
    build_multihop(MultihopConfig(triples="train.json", until="chains"), out="out/chains")  # the chain stage
    build_multihop(MultihopConfig(corpus="out/corpus", llm="http:Qwen/Qwen3-8B@http://gpu:8000",
                                  policy="transformers:tiny", k=4), out="out/mh")  # solved in >= 2 of 4 tries

Stages (names for ``until``): ``triples`` → ``link`` → ``cardinality`` → ``chains`` → ``questions`` →
``quality`` → ``prefilter`` → ``solve`` → ``finalize`` (then ``phrasing_pairs`` with ``heldout_phrasing``:
``phrasing.py``). ``until`` stops after the named stage and writes the records as they stand (chains already
carry ``derivations``). Without ``llm`` questions come from
templates and the quality loop is skipped (``quality`` = None); without ``policy`` the agent check is
skipped (``pass_rate`` and ``k`` = None); the config (``MultihopConfig``, every setting) is the manifest's. A
run that reaches ``prefilter`` needs ``corpus`` or ``index``; with a corpus and no index an embedded index is
built into the work folder. The ``finalize`` stage is the task's (``MultihopQA.finalize``): every finished
row's gold answer scores 1.0 under its answer reward, and carries TRL's ``prompt`` column; ``COLUMN_TYPES``
fixes the finished rows' Features whatever the options.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pyarrow as pa

from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, batch_stage, global_stage, map_stage
from tansaku.core.errors import InputError
from tansaku.core.features import DERIVATIONS, QUESTION_COLUMNS, STRINGS, derivation_structs
from tansaku.core.heldout import TEST_PHRASING, HeldOut
from tansaku.core.licenses import choose_license
from tansaku.core.options import require_document_dataset
from tansaku.core.out_folder import precheck_out
from tansaku.core.provenance import describe_input
from tansaku.core.store import build_dataset, iter_rows
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.search import build_index, open_index, require_index
from tansaku.envs.tasks import MultihopQA, Task
from tansaku.pipelines.multihop import cardinality, chains, phrasing, quality, questions, solvability
from tansaku.pipelines.multihop import triples as sources
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.multihop.defaults import STAGES
from tansaku.pipelines.multihop.relations import Relations

# 2: prompt column, derivations as structs, typed quality; 3: hops judged in input order; 4: ``k`` column, and
# the solve stage keeps solved >= half of k by default (was: once); 5: the config is MultihopConfig's fields;
# 6: ``frame`` and ``phrasing_family`` columns, the test_phrasing split (--heldout-phrasing); 7: cardinality
# judged per subject where the data cannot judge the relation, set-valued relations, derivations in the
# source's relation spelling
PIPELINE_VERSION = "7"
# What fixes a build that kept no question, per stage[:reason] (tansaku.core.out_folder.refuse_empty).
EMPTY_HINTS = {
    "triples:no_triples": "the documents gave no triples (no infobox links): pass --llm SPEC to extract "
                          "triples from the text, or --triples FILE",
    "chains": "no two triples chain through a linked bridge article: more documents or triples, or "
              "--max-per-subject 0 --max-per-bridge 0 to lift the caps",
    "prefilter": "no question's hops are retrievable from --index: index the corpus the triples come from",
    "solve": "the --policy agent solved no question stably: check --policy and --index, or lower "
             "--min-pass-rate / raise --k",
    "solve:always_solved": "the --policy agent solved every question in all --k tries: raise --max-pass-rate "
                           "(1.0 keeps them) or use a weaker --policy",
    "solve:too_easy": "the --policy agent solved every question more often than --max-pass-rate: raise it",
}
SEARCHING = ("prefilter", "solve", "finalize")
PROMPT_VERSIONS = sorted(p.name for p in (Path(__file__).with_name("prompts")).glob("*.md"))
_VERDICT = pa.struct([("ambiguous", pa.bool_()), ("natural", pa.int64()), ("single_answer", pa.bool_()),
                      ("time_dependent", pa.bool_()), ("reasons", STRINGS)])
# The finished rows' Features: the same whatever the options (no --llm: quality null; no --policy: pass_rate,
# k null).
COLUMN_TYPES = {
    **QUESTION_COLUMNS, "qid": pa.string(), "type": pa.string(), "question": pa.string(),
    "answer": pa.string(),
    "derivations": DERIVATIONS, "page_ids": STRINGS, "time_dependent": pa.bool_(), "aliases": STRINGS,
    "pass_rate": pa.float64(), "k": pa.int64(), "hop_doc_ids": STRINGS, "generator": pa.string(),
    "bridge": pa.string(), "chain_id": pa.string(), "frame": pa.string(), phrasing.FAMILY_COLUMN: pa.string(),
    "quality": pa.struct([("rounds", pa.int64()), ("scores", _VERDICT), ("reasons", STRINGS),
                          ("failed", STRINGS)]),
}
DEFAULT_LICENSE = {"license": "cc-by-sa-4.0"}  # Wikipedia's text license, when the input declares none


def corpus_index(corpus: str | Path) -> sources.ArticleIndex:
    """Titles, redirects and outgoing links of a document dataset, for entity linking."""

    index = sources.ArticleIndex()
    for row in iter_rows(corpus, columns=["id", "title", "meta"]):
        meta = sources.doc_meta(row)
        # The cirrus reader writes "redirects"; the jsonl reader keeps the input's own "redirect" key.
        redirects = meta.get("redirects") or meta.get("redirect") or []
        redirects = [r.get("title", "") if isinstance(r, dict) else str(r) for r in redirects]
        index.add(row["id"], row["title"], redirects, [str(t) for t in meta.get("outgoing_link") or []])
    return index


def document_triples(docs: list[dict], llm, seed: int) -> list:
    """Infobox triples of each document, plus LLM-extracted ones when an LLM is given."""
    extracted = sources.llm_extract(docs, llm, seed=seed) if llm is not None else [[] for _ in docs]
    out = []
    for doc, from_llm in zip(docs, extracted):
        items = sources.infobox_triples(doc) + from_llm
        out.append(items if any(isinstance(t, dict) for t in items) else (items or Drop("no_triples")))
    return out


def final_row(record: dict) -> dict:
    """The output row before the task's finalize: JEMHopQA fields, then ours."""
    qid = hashlib.md5(f"{record['chain_id']}\x1f{record['question']}".encode()).hexdigest()
    return {
        "qid": qid, "type": "compositional", "question": record["question"], "answer": record["answer"],
        "derivations": derivation_structs(chains.derivations_of(record)), "page_ids": record["page_ids"],
        "time_dependent": bool(record.get("time_dependent", False)),
        "aliases": list(record.get("answer_aliases") or []), "pass_rate": record.get("pass_rate"),
        "k": record.get("k"), "hop_doc_ids": record["hop_doc_ids"], "generator": record["generator"],
        "quality": record.get("quality"),
        "bridge": record["bridge"], "chain_id": record["chain_id"],
        # the template frame ("bridge/final"; null for LLM questions) and, on test_phrasing rows, its held-out
        # family
        "frame": record.get("frame"), phrasing.FAMILY_COLUMN: record.get(phrasing.FAMILY_COLUMN),
    }


class LazyIndex:
    """The search backend the searching stages share, opened (or built into the work folder: the embedded
    default over the corpus) on first use; streaming stages ask from many threads, so it is built once."""

    def __init__(self, index: Path | None, corpus: Path | None, work: Path):
        self.index, self.corpus, self.work = index, corpus, work
        self._backend = None
        self._lock = threading.Lock()

    def __call__(self):
        with self._lock:
            if self._backend is None:
                target = self.index
                if target is None:
                    target = self.work / "search-index"
                    build_index(self.corpus, target)
                self._backend = open_index(str(target))
            return self._backend


def stage_plan(c: MultihopConfig) -> list[str]:
    """The stages this config runs (``until``), refused before any work when an input they need is missing."""
    if c.until is not None and c.until not in STAGES:
        raise InputError(f"--until {c.until!r}: choose one of {', '.join(STAGES)}")
    if c.corpus is None and c.triples is None:
        raise InputError("give --corpus DIR (a document dataset) or --triples PATH")
    names = list(STAGES[: STAGES.index(c.until) + 1] if c.until else STAGES)
    searching = [n for n in names if n in SEARCHING]
    if searching and c.corpus is None and c.index is None:
        raise InputError(f"stage {searching[0]!r} searches: give --corpus or --index, or stop earlier with "
                         "--until questions/quality")
    if c.corpus is not None:  # a question dataset or a broken manifest is refused here, not mid-build
        require_document_dataset(c.corpus, "--corpus")
    if c.index is not None and searching:
        require_index(c.index)
    return names


def first_stage(c: MultihopConfig, llm) -> tuple:
    """(source, inputs, article index, the ``triples`` stage): a triples file as given, or each document's
    infobox (and LLM-extracted) triples; entities are linked against the corpus when there is one."""
    if c.triples is not None:
        given = list(sources.read_triples_file(c.triples))  # fails fast on a malformed file
        article_index = corpus_index(c.corpus) if c.corpus is not None else sources.index_from_triples(given)
        inputs = [describe_input(c.triples, len(given))] + ([describe_input(c.corpus)] if c.corpus else [])
        return given, inputs, article_index, map_stage("triples", lambda t: t, params={"source": "file"})
    stage = batch_stage("triples", lambda docs: document_triples(docs, llm, c.seed), batch_size=16,
                        params={"source": "infobox" + ("+llm" if llm is not None else "")}, llm=llm)
    return (lambda: iter_rows(c.corpus)), [describe_input(c.corpus)], corpus_index(c.corpus), stage


def fact_stages(c: MultihopConfig, article_index, table: Relations, llm) -> dict:
    """``link`` → ``cardinality`` → ``chains``: triples to unambiguous 2-hop chains."""
    min_support = c.resolved_min_support()  # the default derives from the threshold
    caps = c.caps()
    return {
        "link": map_stage("link", lambda t: sources.link_stage_triple(t, article_index, table),
                          params={"relations_version": table.version}),
        "cardinality": global_stage("cardinality", lambda ts: cardinality.filter_unique_hops(
            ts, c.cardinality_threshold, llm=llm, min_support=min_support, seed=c.seed,
            confidence=c.cardinality_confidence, set_valued=table.set_valued()),
            params={**c.pick("cardinality_threshold", "cardinality_confidence", "min_support"),
                    "min_support_applied": min_support, "rule": cardinality.RULE,
                    "set_valued_relations": sorted(table.set_valued())}, llm=llm),
        "chains": global_stage("chains", lambda ts: chains.chain_stage(ts, caps, c.seed, c.limit,
                                                                     require_linked_bridge=True),
                               params={**c.pick("max_per_subject", "max_per_bridge", "max_per_relation_pair",
                                                "limit"), "require_linked_bridge": True}),
    }


def question_stages(c: MultihopConfig, table: Relations, families: tuple, heldout: HeldOut, llm) -> dict:
    """``questions`` → ``quality``: the LLM writer and its judge/fix loop, or the templates (no loop)."""
    if llm is None:
        params = {"generator": "template", "relations_version": table.version,
                  **(c.pick("heldout_phrasing") if families else {})}
        return {"questions": map_stage("questions", lambda r: phrasing.template_questions(
                    r, c.seed, table, families, heldout), params=params),
                "quality": map_stage("quality", lambda r: {**r, "quality": None})}
    return {
        "questions": batch_stage("questions", lambda cs: questions.generate_llm(
            cs, llm, c.seed, c.question_temperature), batch_size=32, params=c.pick("question_temperature"),
                                 llm=llm),
        "quality": batch_stage("quality", lambda rs: quality.quality_loop(
            rs, llm, c.max_rounds, c.min_natural, seed=c.seed), 32,
            params=c.pick("max_rounds", "min_natural"), llm=llm),
    }


def search_stages(c: MultihopConfig, rule: dict, backend: LazyIndex, policy, task: Task) -> dict:
    """``prefilter`` → ``solve`` → ``finalize`` (→ ``phrasing_pairs``): retrievable hops, questions the
    ``policy`` agent solves within the keep rule, the task's finished rows."""

    def solve(batch):
        environments = make_environment_factory(task, backend(), seed=c.seed)
        return solvability.agent_check(batch, policy, environments, task, k=c.k, m=c.m, seed=c.seed,
                                       min_pass_rate=c.min_pass_rate, max_pass_rate=c.max_pass_rate)

    # the options and the counts they mean
    solve_params = {**c.pick("k", "m", "min_pass_rate", "max_pass_rate"),
                    "min_solved": rule["min_solved"], "max_solved": rule["max_solved"]}
    return {
        "prefilter": batch_stage("prefilter",
                                 lambda rs: solvability.prefilter(rs, backend(), c.prefilter_size),
                                 batch_size=64, params=c.pick("prefilter_size", "index"), separable=True),
        "solve": (batch_stage("solve", solve, batch_size=16, llm=policy, params=solve_params)
                  if policy is not None
                  else map_stage("solve", lambda r: {**r, "pass_rate": None, "k": None})),
        "finalize": batch_stage("finalize", lambda rs: task.finalize([final_row(r) for r in rs]),
                                batch_size=256,
                                params={"task": task.name, "task_version": task.version}, separable=True),
        # with held-out phrasings: a test_phrasing row stays only beside its chain's test row
        "phrasing_pairs": global_stage("phrasing_pairs", phrasing.keep_pairs,
                                       params=c.pick("heldout_phrasing")),
    }


def dataset_card(out: Path, families: tuple, chosen) -> dict:
    """The data card's fields: what the rows are, and what they cannot promise."""
    phrasing_note = [f"`{TEST_PHRASING}` asks the `test` chains again in the held-out phrasing families "
                     f"{', '.join(families)} (column `phrasing_family`; every row's frame is its `frame`), "
                     "which no other split uses: it measures whether what training taught survives new "
                     "phrasings."]
    return {
        "description": "Two-hop Japanese questions built from (subject, relation, object) triples: hop 1's "
                       "object is hop 2's subject; the bridge entity is never named in the question.",
        "pretty_name": f"tansaku multihop: {Path(out).name}", "task_categories": ["question-answering"],
        **chosen.card,
        "limitations": [
            "Only hops whose subject has one value in the data are kept (and none of a relation the data "
            "shows to be 1:N or N:N, or the relation table calls set-valued); a value missing from the "
            "corpus can still make a question ambiguous in the world.",
            "Template questions (no --llm) come from 12 fixed frames chosen per relation pair "
            "(relations.json); the LLM generator and judge vary and smooth them.",
            *(phrasing_note if families else []),
            "`pass_rate` is the share of `k` agent tries that solved the item with the configured policy "
            "and search index (kept: within the manifest's config.solvability); it is a difficulty signal "
            "for that policy only.",
            "Facts come from the corpus as it was indexed and may be out of date (`time_dependent`)."],
    }


def build_multihop(config: MultihopConfig, out="out/multihop", context: BuildContext | None = None,
                   task: Task = MultihopQA()) -> dict:
    """Run the multihop pipeline into the dataset folder ``out`` and return its manifest.

    ``config`` holds every setting and its bounds (``MultihopConfig``: its help texts are the CLI's). The
    agent check keeps questions solved in ``[min_pass_rate, max_pass_rate]`` of ``k`` tries (``m``, a count,
    replaces ``min_pass_rate``; ``solvability.keep_rule``, the manifest's ``config.solvability``).
    ``heldout_share`` / ``rl_share``: shares of bridge entities whose questions form the ``test`` / ``rl``
    splits; the key is ``bridge``, not ``qid``: chains through one bridge share hop-2 facts (often the
    answer), so a question trained on would give away its test sibling. ``heldout_phrasing``: template
    families only ``test_phrasing`` uses (``phrasing``). ``context``: shards, LLM options, progress."""
    context = context or BuildContext()
    c = config.check()
    # before any work: one line, exit 2
    rule = solvability.keep_rule(c.k, c.m, c.min_pass_rate, c.max_pass_rate)
    families = phrasing.check_options(c.heldout_phrasing, c.llm, c.heldout_share)
    heldout = HeldOut(c.heldout_share, "bridge", c.seed, c.rl_share,
                      phrasing_column=phrasing.FAMILY_COLUMN if families else None)
    table = Relations.load(Path(c.relations) if c.relations is not None else None)
    names = (stage_plan(c)
             + (["phrasing_pairs"] if families and (not c.until or c.until == "finalize") else []))
    out = precheck_out(out, pipeline="multihop", inputs={  # before the inputs are read
        "--corpus": c.corpus, "--triples": c.triples, "--index": c.index, "--relations": c.relations,
        "--license-file": c.license_file})
    chosen = choose_license(c.license, c.license_file, c.corpus, DEFAULT_LICENSE)
    llm, policy = context.client(c.llm), context.client(c.policy)
    source, inputs, article_index, first = first_stage(c, llm)
    stages = {"triples": first, **fact_stages(c, article_index, table, llm),
              **question_stages(c, table, families, heldout, llm),
              **search_stages(c, rule, LazyIndex(c.index, c.corpus, out / ".work"), policy, task)}
    recipe = {
        **c.recipe(), "solvability": rule, "question_generator": "llm" if llm is not None else "template",
        "quality": "llm judge/fix loop" if llm is not None else "skipped (no --llm)",
        "agent_check": "rollouts" if policy is not None else "skipped (no --policy)",
        # The LLM and policy identities are stage recipes (triples/cardinality/questions/quality, solve).
        "prompts": PROMPT_VERSIONS, **chosen.recipe(),
    }
    summarize = (lambda m: phrasing.summary(out, m["splits"], families, table)) if families else None
    manifest = build_dataset(
        out=out, name=out.name, pipeline="multihop", pipeline_version=PIPELINE_VERSION, config=recipe,
        seed=c.seed,
        inputs=inputs, source=source, stages=[stages[n] for n in names], llm=llm, context=context,
        chunk_size=c.chunk_size, keep_rejected=c.keep_rejected, empty_hints=EMPTY_HINTS,
        column_types=COLUMN_TYPES if "finalize" in names else None,  # earlier stages write working records
        # records before it are triples/chains, not questions
        heldout=heldout if "questions" in names else None,
        summarize=summarize if "questions" in names else None, card=dataset_card(out, families, chosen))
    return chosen.write(out, manifest)
