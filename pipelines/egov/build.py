"""``synth build egov``: e-Gov law XML → article dataset (``DIR/articles``) → four-choice questions (``DIR``).

    synth build egov --laws ../shared/data/egov --out out/egov [--llm SPEC] [--limit N]
    python -m tansaku.pipelines.egov.build LAWS OUT            # the same without the CLI

    from tansaku.pipelines.egov.build import build_egov
    from tansaku.pipelines.egov.config import EgovConfig
    build_egov(EgovConfig(laws=["../shared/data/egov"], limit=50), out="out/egov")

Two store datasets: ``DIR/articles`` (the e-Gov article dataset of docs/contracts.md; a document
dataset the search layer indexes; its funnel counts skipped files/elements by reason) and ``DIR``
itself (the questions). An embedded search index over the articles is built at ``DIR/index`` unless
``index`` names one, and gives each question the rank of its source article (``retrieval_rank``).
Article ids are unique: of several files holding one law only the newest revision is kept, the other
files' articles are dropped as ``duplicate_law_revision`` (parse.py).

Question stages: generate (rule-based kinds without an LLM — cloze.py, statements.py, provisions.py,
subjects.py, lists.py, classic.py, quoting through quote.py — the LLM generator with one) → leak_filter →
judge (LLM only: rubric score ≥ threshold) → dedup → retrieval → balance (answer positions) →
gold_check (the task's ``gold_drops``: its answer reward must give the gold 1.0) → leak_audit (independent
checker over the final rows; it must drop 0) → prompt (the task's ``finalize``: ``task`` and TRL's ``prompt``
columns). Every setting is one field of ``EgovConfig`` (``config.py``), the question manifest's ``config``;
each stage's thresholds are its ``params`` (in the manifest and the resume fingerprint, with the LLM's
identity); dropped questions are kept in the ``rejected`` split (cheap: a few thousand small rows),
``keep_rejected=False`` turns that off. How a build runs (shards, LLM options, progress) is its
``BuildContext``: ``--shard`` / ``--from-shards`` apply to the article build, the questions are built whole.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pyarrow as pa

from tansaku.core import jsontext, ownership
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, Stage, batch_stage, global_stage, map_stage
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.features import QUESTION_COLUMNS, STRINGS
from tansaku.core.heldout import HeldOut
from tansaku.core.licenses import choose_license
from tansaku.core.out_folder import precheck_out
from tansaku.core.progress import quiet_loops
from tansaku.core.provenance import describe_input
from tansaku.core.store import build_dataset, iter_rows
from tansaku.envs.search import build_index, open_index, require_index
from tansaku.envs.tasks import EgovMCQ, Task
from tansaku.pipelines.egov import classic, cloze, generate, leak, lists, provisions, statements
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.egov.parse import ARTICLE_META, article_meta, parse_law_bytes, superseded_revisions
from tansaku.pipelines.egov.sources import Skip, list_law_sources, read_law_source

log = logging.getLogger(__name__)
# 2: one revision per law (unique article ids); 3: meta a struct, not JSON text; 4: sentences
ARTICLES_VERSION = "4"
# without 。 (old laws) kept apart by an ideographic space (extract.join_sentences)
# 2: prompt and task columns, declared column types; 3: actor/effect/true_statement kinds;
QUESTIONS_VERSION = "6"
# 4: permission/requirement/subject/body kinds (provisions.py, subjects.py); 5: the config is EgovConfig's
# fields, stage params named as they are, the gold check the task's (drop reason gold_not_scoring); 6:
# references to other
# provisions quoted as elided (quote.py), the list and value kinds (lists.py, subjects.py), old-style laws
# (classic.py)
RULE_KINDS = ("term", "number", "actor", "effect", "true_statement",  # without --llm (cloze, statements,
              "permission", "requirement", "subject", "body", "value", "list")  # provisions, subjects, lists)
KEYWORD_FIELDS = ["law_id", "law_title", "law_type", "era"]
# e-Gov data is published under the government's terms of use (公共データ利用規約 PDL 1.0: attribution).
EGOV_LICENSE = {"license": "other", "license_name": "e-gov-terms",
                "license_link": "https://www.digital.go.jp/resources/open_data/public_data_license_v1.0"}
# The question rows' Features, the same with or without --llm / an index (judge scores, ranks may be null).
QUESTION_TYPES = {**QUESTION_COLUMNS, "id": pa.string(), "question": pa.string(), "choices": STRINGS,
                  "answer_index": pa.int64(), "answer": pa.string(), "explanation": pa.string(),
                  "generator": pa.string(), "article_id": pa.string(),
                  "article_title": pa.string(), "law_id": pa.string(), "law_title": pa.string(),
                  "law_abbrev": pa.string(), "law_kana": pa.string(), "quality": pa.float64(),
                  "quality_detail": pa.struct([(k, pa.float64()) for k in generate.RUBRIC]),
                  "judge": pa.string(), "retrieval_rank": pa.int64()}
ARTICLE_CARD = {
    "pretty_name": "e-Gov law articles", **EGOV_LICENSE, "task_categories": ["text-retrieval"],
    "description": "One record per article (条) of e-Gov 法令標準XML laws, with nested paragraphs and items, "
                   "supplementary provisions flagged; a document dataset for the search index.",
    "limitations": ["Statute text is not copyrightable (著作権法第13条); e-Gov data terms ask for "
                    "attribution.",
                    "Tables are flattened to text lines; figures and forms are dropped."],
}
QUESTION_CARD = {
    "pretty_name": "e-Gov four-choice law questions", **EGOV_LICENSE,
    "task_categories": ["question-answering", "multiple-choice"],
    "description": "Four-choice questions about single law articles for agentic search (task egov_mcq). "
                   "Questions and choices name no law and no article number; the search tool must find it.",
    "limitations": ["Without an LLM the questions are rule-based (column `kind`), found by the grammar of "
                    "statutes (法令用語), not by word lists: the actor of a duty or power, what a provision "
                    "permits, forbids or requires (permission), the condition it attaches to its effect "
                    "(requirement), the effect of a condition, what a provision is about (subject), to whom "
                    "a notice or claim goes (body), what it sets a thing to be (value), "
                    "one true statement among three perturbed ones, numbers, defined terms and an item of a "
                    "list (list); old-style laws (文語体) by their own grammar. They test what the article "
                    "says, not its reasons. A reference to another provision (第N条, 前項) is quoted as "
                    "（略）, so a question never shows an article number; a quote left with too little to "
                    "say, and provisions that only apply others (準用する), get none.",
                    "Distractors are other values from the same law (or perturbations checked to occur "
                    "nowhere in it); a few may be valid in other contexts (another provision of the law "
                    "giving the same person a similar power)."],
}


def _parse_stage(skips: list[Skip]) -> Stage:
    def run(sources: Iterator[dict]) -> Iterator[dict | Drop]:
        for src in sources:
            if src.get("skip"):
                skips.append(Skip(src["source"], src["skip"], src["message"]))
                yield Drop(src["skip"])
                continue
            data = read_law_source(src["source"])
            items = [data] if isinstance(data, Skip) else parse_law_bytes(data, src["source"])
            newer = src.get("superseded_by")
            for item in items:
                if newer:  # ids must stay unique: the newest revision of the law is kept (parse.py)
                    yield Drop("duplicate_law_revision", record=item if isinstance(item, dict) else None,
                               detail=f"{src['source']} is an older revision of the law in {newer}")
                elif isinstance(item, Skip):
                    skips.append(item)
                    log.warning("skipped: %s", item.message)
                    yield Drop(item.reason)
                else:
                    yield item

    return Stage("parse", run, local=True)


def build_articles(config: EgovConfig, out: Path, context: BuildContext | None = None) -> dict:
    """Parse every law file under ``config.laws`` into the article dataset at ``out``; return its manifest.

    Of the config only ``laws``, ``seed`` and ``laws_per_chunk`` reach this build: the question settings must
    not rebuild the articles. ``context``: shards (of law files), progress."""
    laws = config.laws

    def sources() -> Iterator[dict]:
        listed = list(list_law_sources(laws))
        superseded = superseded_revisions(s for s in listed if not isinstance(s, Skip))
        for s in listed:
            if isinstance(s, Skip):
                yield {"source": s.source, "skip": s.reason, "message": s.message}
            else:
                yield {"source": s} | ({"superseded_by": superseded[s]} if s in superseded else {})

    skips: list[Skip] = []
    manifest = build_dataset(
        out=out, name="egov-articles", pipeline="egov_articles", pipeline_version=ARTICLES_VERSION,
        config={"keyword_fields": KEYWORD_FIELDS, "parser": "ja-law-parser, lxml fallback"}, seed=config.seed,
        inputs=[describe_input(p) for p in laws if Path(p).exists()], source=sources,
        stages=[_parse_stage(skips)], card=ARTICLE_CARD, chunk_size=config.laws_per_chunk,
        context=context or BuildContext(), column_types={"meta": ARTICLE_META})
    manifest["skipped"] = [{"source": s.source, "reason": s.reason, "message": s.message} for s in skips]
    return manifest


def _question_row(article: dict, q: dict, k: int) -> dict:
    meta = article_meta(article)
    return {"id": f"{article['id']}-q{k}", **q, "article_id": article["id"],
            "article_title": article["article_title"],
            "law_id": article["law_id"], "law_title": article["law_title"],
            "law_abbrev": ",".join(meta.get("abbrev", [])), "law_kana": meta.get("kana", ""),
            "quality": None, "retrieval_rank": None}


def _rules_stage(seed: int, per_article: int) -> Stage:
    def run(articles: Iterator[dict]) -> Iterator[dict | Drop]:
        articles = list(articles)  # distractors come from sibling articles: needs the whole law
        pools, statement_pools = cloze.law_pools(articles), statements.law_statement_pools(articles)
        provision_pools, list_pools = provisions.law_provision_pools(articles), lists.law_list_pools(articles)
        classic_pools = classic.law_classic_pools(articles)
        for article in articles:
            if article_meta(article).get("is_deleted"):
                yield Drop("deleted_article", record=article)
                continue
            targets = (cloze.cloze_targets(article, pools.get(article["law_id"], {"units": {}, "terms": []}))
                       + statements.statement_targets(article, statement_pools[article["law_id"]])
                       + provisions.provision_targets(article, provision_pools.get(article["law_id"], {}))
                       + lists.list_targets(article, list_pools.get(article["law_id"], {}))
                       + classic.classic_targets(article, classic_pools.get(article["law_id"], {})))
            qs = cloze.questions_from_targets(article, targets, seed, per_article)
            if not qs:
                yield Drop("no_rule_target", record=article)
            for k, q in enumerate(qs):
                yield _question_row(article, q, k)

    return global_stage("generate", run, params={"generator": "rules", "per_article": per_article,
                                                 "kinds": list(RULE_KINDS)})


def _llm_stages(client, c: EgovConfig) -> list[Stage]:
    def eligible(article: dict) -> dict | Drop:
        if article_meta(article).get("is_deleted"):
            return Drop("deleted_article")
        return article if len(article["text"]) >= c.min_article_chars else Drop("article_too_short")

    def gen(batch: list[dict]) -> list:
        outs = generate.llm_generate(client, batch, seed=c.seed)
        return [o if isinstance(o, Drop) else _question_row(a, o, 0) for a, o in zip(batch, outs)]

    return [map_stage("eligible", eligible, params=c.pick("min_article_chars")),
            batch_stage("generate", gen, batch_size=32, params={"prompt": generate.GENERATE_PROMPT},
                        llm=client)]


def _leak_filter(row: dict) -> dict | Drop:
    found = leak.row_leaks(row)
    return Drop(f"leak_{found[0][0]}") if found else row


def _leak_audit(rows: Iterator[dict]) -> Iterator[dict | Drop]:
    for row in rows:
        yield Drop("leak_in_final_rows", record=row) if leak.row_leaks(row) else row


def _typed_detail(row: dict) -> dict:
    """The judge's rubric scores as a typed struct rather than JSON text."""
    detail = row.get("quality_detail")
    return {**row, "quality_detail": json.loads(detail) if isinstance(detail, str) else detail}


def check_inputs(c: EgovConfig) -> None:
    """Refuse missing or wrong ``--laws`` and a damaged ``--index`` before the articles are built (hours on a
    full dump)."""
    if missing := [str(p) for p in c.laws if not p.exists()]:  # a typo must not build an empty dataset
        raise MissingInputError(f"--laws {', '.join(missing)}: no such file or folder")
    if files := [str(p) for p in c.laws if p.is_file() and p.suffix.lower() not in (".xml", ".zip")]:
        raise InputError(f"--laws {', '.join(files)}: a file given is a law XML (*.xml) or a zip of them "
                         f"(*.zip)")
    if not any(isinstance(s, str) for s in list_law_sources(c.laws)):  # names only: cheap
        raise InputError(f"--laws {', '.join(map(str, c.laws))}: no law XML files (*.xml, or *.xml inside a "
                         f"zip)")
    if c.index is not None:  # a missing or damaged one is refused now, not after the articles are built
        require_index(c.index,
                      "build it with `synth index build`, or leave --index out to index the articles")


def retrieval_backend(c: EgovConfig, out: Path, articles_dir: Path, quiet: bool):
    """(backend, index path) for the retrieval signal: ``--index``, or the articles indexed into ``out/index``
    (reused when a finished one is there); (None, None) without ``--retrieval`` or ``--index``."""
    if not c.retrieval and c.index is None:
        return None, None
    index_path = str(c.index) if c.index is not None else str(out / "index")
    # missing, or a build killed while writing it
    if c.index is None and not ownership.is_index(out / "index"):
        with quiet_loops(quiet):  # between the two builds: -q holds here too
            build_index(articles_dir, out / "index")
    return open_index(index_path), index_path


def retrieval_stage(c: EgovConfig, backend, index_path: str):
    """Each question's source-article rank in a search for it; drop the not retrievable."""

    def ranked(batch: list[dict]) -> list:
        results = []
        for row in batch:
            rank = generate.retrieval_rank(backend, row["question"], row["article_id"], c.retrieval_k)
            if c.max_retrieval_rank is not None and (rank is None or rank > c.max_retrieval_rank):
                results.append(Drop("not_retrievable"))
            else:
                results.append(row | {"retrieval_rank": rank})
        return results

    return batch_stage("retrieval", ranked, batch_size=64,
                       params={"retrieval_index": index_path, **c.pick("retrieval_k", "max_retrieval_rank")})


def question_stages(c: EgovConfig, client, articles_dir: Path, retrieval, task: Task) -> list:
    """Generate (rules or LLM) → leak filter → judge (LLM) → dedup → retrieval → balance → gold check → leak
    audit → the task's prompt rows."""
    stages = [_rules_stage(c.seed, c.per_article)] if client is None else _llm_stages(client, c)
    stages.append(map_stage("leak_filter", _leak_filter))
    if client is not None:
        by_id = {a["id"]: a for a in iter_rows(articles_dir)}
        stages.append(batch_stage(
            "judge", lambda b: generate.llm_judge(client, b, by_id, c.judge_threshold), 32,
            params={**c.pick("judge_threshold"), "prompt": generate.JUDGE_PROMPT}, llm=client))
    stages.append(global_stage("dedup", lambda rows: generate.near_duplicates(rows, c.dedup_threshold),
                               params=c.pick("dedup_threshold")))
    if retrieval is not None:
        stages.append(retrieval)
    task_params = {"task": task.name, "task_version": task.version}
    return stages + [
        global_stage("balance", lambda rows: generate.balance_positions(rows, c.seed)),
        batch_stage("gold_check", task.gold_drops, batch_size=256, params=task_params),
        global_stage("leak_audit", _leak_audit),
        batch_stage("prompt", lambda rows: task.finalize([_typed_detail(r) for r in rows]), batch_size=256,
                    params=task_params)]


def build_egov(config: EgovConfig, out="out/egov", context: BuildContext | None = None,
               task: Task = EgovMCQ()) -> dict:
    """Build ``out/articles`` and the question dataset at ``out``; return the question manifest.

    ``config`` holds every setting and its bounds (``EgovConfig``: its help texts are the CLI's); with
    ``llm`` the LLM generator and judge are used, else the rule-based kinds (``RULE_KINDS``). ``limit``: at
    most this many articles for questions (the article dataset is complete). ``heldout_share`` /
    ``rl_share``: shares of articles whose questions form the ``test`` / ``rl`` splits, keyed by
    ``article_id`` so one article's questions never sit on both sides. The card's license is the e-Gov
    terms (``EGOV_LICENSE``) unless ``license`` says otherwise. ``context``: shards (of the article build; the
    questions are built whole, on the merge), LLM options, progress; ``task``: whose rows these are."""
    context = context or BuildContext()
    c = config.check()  # every option before the article dataset and index are built (hours on a full dump)
    heldout = HeldOut(c.heldout_share, "article_id", c.seed, c.rl_share)
    chosen = choose_license(c.license, c.license_file, default=EGOV_LICENSE)
    check_inputs(c)
    # before out/articles and out/index are written into it
    out = precheck_out(out, pipeline="egov_mcq", inputs={
        "--laws": c.laws, "--index": c.index, "--license-file": c.license_file})
    articles_dir = out / "articles"
    # --shard / --from-shards apply to the articles (their shards lie at …/articles too)
    art_manifest = build_articles(c, articles_dir, context.nested("articles"))
    if "shard" in art_manifest:  # one shard: its articles are done; the questions are built on the merge
        return art_manifest
    client = context.client(c.llm)
    backend, index_path = retrieval_backend(c, out, articles_dir, context.quiet)
    retrieval = retrieval_stage(c, backend, index_path) if backend is not None else None
    recipe = {**c.recipe(), "generator": "rules" if client is None else "llm",
              "prompts": [generate.GENERATE_PROMPT, generate.JUDGE_PROMPT] if client is not None else [],
              "retrieval_index": index_path, "task": task.name, **chosen.recipe()}
    manifest = build_dataset(
        out=out, name="egov-mcq", pipeline="egov_mcq", pipeline_version=QUESTIONS_VERSION, config=recipe,
        seed=c.seed, inputs=[describe_input(articles_dir, art_manifest["splits"].get("train", 0))
                             | {"version": art_manifest["version"]}],
        source=lambda: islice(iter_rows(articles_dir), c.limit),
        stages=question_stages(c, client, articles_dir, retrieval, task), column_types=QUESTION_TYPES,
        card={**QUESTION_CARD, "license_name": None, "license_link": None, **chosen.card}, llm=client,
        parents=[str(articles_dir)], chunk_size=c.chunk_size,
        context=context.whole(),  # the questions: one build, on the merge of the article shards
        keep_rejected=c.keep_rejected, heldout=heldout)
    manifest["articles"] = {"path": str(articles_dir), "rows": art_manifest["splits"].get("train", 0),
                            "stages": art_manifest["stages"], "skipped": art_manifest.get("skipped", [])}
    return chosen.write(out, manifest)


if __name__ == "__main__":
    m = build_egov(EgovConfig(laws=[Path(sys.argv[1])]), sys.argv[2])
    print(jsontext.dumps({"rows": m["splits"], "stages": m["stages"]}, indent=1))
