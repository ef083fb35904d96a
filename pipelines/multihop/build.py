"""``synth build multihop``: Wikipedia triples → 2-hop questions → quality loop → solvability filter.

    from tansaku.pipelines.multihop.build import build_multihop
    build_multihop(corpus="out/corpus", out="out/multihop")                      # templates, no LLM
    build_multihop(triples="train.json", out="out/chains", until="chains")      # inspect the chain stage
    build_multihop(corpus="out/corpus", out="out/mh", llm="http:Qwen/Qwen3-8B@http://gpu:8000",
                   policy="transformers:tiny", k=4)   # keeps questions solved in >= half of 4 tries

Stages (names for ``until``): ``triples`` → ``link`` → ``cardinality`` → ``chains`` → ``questions`` →
``quality`` → ``prefilter`` → ``solve`` → ``finalize``. ``until`` stops after the named stage and writes the
records as they stand (chains already carry ``derivations``). Without ``llm`` questions come from
templates and the quality loop is skipped (``quality`` = None); without ``policy`` the agent check is
skipped (``pass_rate`` and ``k`` = None); both are recorded in the manifest config. A run that reaches
``prefilter`` needs ``corpus`` or ``index``; with a corpus and no index an embedded index is built into the
work folder. Every finished row's gold answer scores 1.0 under the ``multihop_qa`` answer reward, and carries
TRL's ``prompt`` column; ``COLUMN_TYPES`` fixes the finished rows' Features whatever the options.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pyarrow as pa

from tansaku.core.engine import Drop, batch_stage, global_stage, map_stage
from tansaku.core.errors import InputError
from tansaku.core.features import DERIVATIONS, QUESTION_COLUMNS, STRINGS, derivation_structs
from tansaku.core.heldout import DEFAULT_RL_SHARE, DEFAULT_SHARE, HeldOut
from tansaku.core.licenses import choose_license
from tansaku.core.llm import as_client
from tansaku.core.options import check_count, check_fraction, check_limit, require_document_dataset
from tansaku.core.out_folder import precheck_out
from tansaku.core.store import build_dataset, describe_input, iter_rows
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.search import build_index, open_index, require_index
from tansaku.envs.tasks import TASKS, gold_failures
from tansaku.pipelines.multihop import cardinality, chains, quality, questions, solvability
from tansaku.pipelines.multihop import triples as sources
from tansaku.pipelines.multihop.relations import Relations

# 2: prompt column, derivations as structs, typed quality; 3: hops judged in input order; 4: ``k`` column, and
# the solve stage keeps solved >= half of k by default (was: once)
PIPELINE_VERSION = "4"
# What fixes a build that kept no question, per stage[:reason] (tansaku.core.out_folder.refuse_empty).
EMPTY_HINTS = {
    "triples:no_triples": "the documents gave no triples (no infobox links): pass --llm SPEC to extract triples "
                          "from the text, or --triples FILE",
    "chains": "no two triples chain through a linked bridge article: more documents or triples, or "
              "--max-per-subject 0 --max-per-bridge 0 to lift the caps",
    "prefilter": "no question's hops are retrievable from --index: index the corpus the triples come from",
    "solve": "the --policy agent solved no question stably: check --policy and --index, or lower "
             "--min-pass-rate / raise --k",
    "solve:always_solved": "the --policy agent solved every question in all --k tries: raise --max-pass-rate "
                           "(1.0 keeps them) or use a weaker --policy",
    "solve:too_easy": "the --policy agent solved every question more often than --max-pass-rate: raise it",
}
STAGES = ("triples", "link", "cardinality", "chains", "questions", "quality", "prefilter", "solve", "finalize")
SEARCHING = ("prefilter", "solve", "finalize")
PROMPT_VERSIONS = sorted(p.name for p in (Path(__file__).with_name("prompts")).glob("*.md"))
_VERDICT = pa.struct([("ambiguous", pa.bool_()), ("natural", pa.int64()), ("single_answer", pa.bool_()),
                      ("time_dependent", pa.bool_()), ("reasons", STRINGS)])
# The finished rows' Features: the same whatever the options (no --llm: quality null; no --policy: pass_rate, k null).
COLUMN_TYPES = {
    **QUESTION_COLUMNS, "qid": pa.string(), "type": pa.string(), "question": pa.string(), "answer": pa.string(),
    "derivations": DERIVATIONS, "page_ids": STRINGS, "time_dependent": pa.bool_(), "aliases": STRINGS,
    "pass_rate": pa.float64(), "k": pa.int64(), "hop_doc_ids": STRINGS, "generator": pa.string(),
    "bridge": pa.string(), "chain_id": pa.string(),
    "quality": pa.struct([("rounds", pa.int64()), ("scores", _VERDICT), ("reasons", STRINGS), ("failed", STRINGS)]),
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
    """The output row: JEMHopQA fields, then ours; ``prompt`` is the system + user turns ``train rl`` builds."""
    qid = hashlib.md5(f"{record['chain_id']}\x1f{record['question']}".encode()).hexdigest()
    row = {
        "qid": qid, "type": "compositional", "question": record["question"], "answer": record["answer"],
        "derivations": derivation_structs(chains.derivations_of(record)), "page_ids": record["page_ids"],
        "time_dependent": bool(record.get("time_dependent", False)),
        "aliases": list(record.get("answer_aliases") or []), "pass_rate": record.get("pass_rate"),
        "k": record.get("k"), "hop_doc_ids": record["hop_doc_ids"], "generator": record["generator"],
        "quality": record.get("quality"),
        "bridge": record["bridge"], "chain_id": record["chain_id"], "task": "multihop_qa",
    }
    return {**row, "prompt": TASKS["multihop_qa"].build_prompt(row)}


def gold_check(rows: list[dict]) -> list[dict | Drop]:
    finals = [final_row(r) for r in rows]
    bad = {i for i, _ in gold_failures(TASKS["multihop_qa"], finals)}
    return [Drop("gold_not_scoring") if i in bad else row for i, row in enumerate(finals)]


def build_multihop(corpus=None, out="out/multihop", triples_path=None, llm=None, policy=None, index=None,
                   limit: int | None = None, until: str | None = None, k: int = 4, m: int | None = None,
                   min_pass_rate: float | None = None, max_pass_rate: float = 1.0, seed: int = 0,
                   caps: chains.Caps = chains.Caps(), max_rounds: int = 2, quiet: bool = False,
                   chunk_size: int = 1000, triples=None, min_natural: int = 3, question_temperature: float = 0.7,
                   prefilter_size: int = 10, keep_rejected: bool = False,
                   heldout_share: float = DEFAULT_SHARE, license: str | None = None, rl_share: float = DEFAULT_RL_SHARE,
                   relations: str | Path | None = None, license_file: str | Path | None = None) -> dict:
    """Run the multihop pipeline into the dataset folder ``out`` and return its manifest.
    ``triples`` (alias ``triples_path``): a JSONL or JEMHopQA file to start from instead of the corpus.
    ``min_natural`` (quality judge's naturalness bar), ``question_temperature`` and ``prefilter_size`` (top
    hits searched per hop) are stage params like ``k``/``m``/``caps``: in the manifest and the resume
    fingerprint. The agent check keeps questions solved in ``[min_pass_rate, max_pass_rate]`` of ``k`` tries
    (default ``[0.5, 1.0]``: solved stably; ``max_pass_rate`` < 1 drops the always-solved, useless for RL);
    ``m``, a count of ``k``, replaces ``min_pass_rate`` (not both; ``solvability.keep_rule``). The effective rule
    is the manifest's ``config.solvability`` and the solve stage's params. ``keep_rejected`` is off by default:
    most drops are triples, many on a full Wikipedia.
    ``heldout_share``: share of bridge entities whose questions form the ``test`` split (``tansaku.core.heldout``);
    ``rl_share``: the share that forms the ``rl`` split (``train rl``'s prompts; trajectories read ``train``).
    The key is ``bridge``, not ``qid``/``chain_id``: chains through the same bridge share hop-2 facts (often the
    answer), so a question trained on would give away its test sibling.
    ``license``/``license_file``: the card's license (default: the corpus card's and its LICENSE, else
    Wikipedia's CC BY-SA 4.0; ``tansaku.core.licenses.choose_license``).
    ``relations``: a JSON table merged over ``relations.json`` (canonical relation names and their phrasing)."""
    check_limit(limit)
    rule = solvability.keep_rule(k, m, min_pass_rate, max_pass_rate)  # before any work: one line, exit 2
    check_count("max_rounds", max_rounds, 0)
    check_count("chunk_size", chunk_size)
    check_count("prefilter_size", prefilter_size)
    check_fraction("question_temperature", question_temperature, 0, None)
    heldout = HeldOut(heldout_share, "bridge", seed, rl_share)
    table = Relations.load(Path(relations) if relations is not None else None)

    triples_path = triples if triples is not None else triples_path
    if until is not None and until not in STAGES:
        raise InputError(f"--until {until!r}: choose one of {', '.join(STAGES)}")
    if corpus is None and triples_path is None:
        raise InputError("give --corpus DIR (a document dataset) or --triples PATH")
    names = list(STAGES[: STAGES.index(until) + 1] if until else STAGES)
    if any(n in SEARCHING for n in names) and corpus is None and index is None:
        raise InputError(f"stage {next(n for n in names if n in SEARCHING)!r} searches: give --corpus or "
                         "--index, or stop earlier with --until questions/quality")
    if corpus is not None:  # a question dataset or a broken manifest is refused here, not mid-build
        require_document_dataset(corpus, "--corpus")
    if index is not None and any(n in SEARCHING for n in names):
        require_index(index)
    out = precheck_out(out, pipeline="multihop", inputs={  # before the inputs are read
        "--corpus": corpus, "--triples": triples_path, "--index": index, "--relations": relations,
        "--license-file": license_file})
    chosen = choose_license(license, license_file, corpus, DEFAULT_LICENSE)
    llm, policy = as_client(llm), as_client(policy)

    if triples_path is not None:
        given = list(sources.read_triples_file(triples_path))  # fails fast on a malformed file
        article_index = corpus_index(corpus) if corpus is not None else sources.index_from_triples(given)
        source, inputs = given, [describe_input(triples_path, len(given))]
        first = map_stage("triples", lambda t: t, params={"source": "file"})
    else:
        article_index = corpus_index(corpus)
        source, inputs = (lambda: iter_rows(corpus)), [describe_input(corpus)]
        first = batch_stage("triples", lambda docs: document_triples(docs, llm, seed), batch_size=16,
                            params={"source": "infobox" + ("+llm" if llm is not None else "")}, llm=llm)
    if corpus is not None and triples_path is not None:
        inputs.append(describe_input(corpus))

    backend_holder: dict = {}
    backend_lock = threading.Lock()  # streaming stages call backend() from many threads: build the index once
    caps_params = {"per_subject": caps.per_subject, "per_bridge": caps.per_bridge,
                   "per_relation_pair": caps.per_relation_pair}

    def backend():
        with backend_lock:
            return _backend()

    def _backend():
        if "b" not in backend_holder:
            target = index
            if target is None:  # the embedded default: index the corpus once, inside the work folder
                target = out / ".work" / "search-index"
                build_index(corpus, target)
            backend_holder["b"] = open_index(str(target))
        return backend_holder["b"]

    def solve(batch):
        environments = make_environment_factory(TASKS["multihop_qa"], backend(), seed=seed)
        return solvability.agent_check(batch, policy, environments, k=k, m=m, seed=seed,
                                       min_pass_rate=min_pass_rate, max_pass_rate=max_pass_rate)

    all_stages = {
        "triples": first,
        "link": map_stage("link", lambda t: sources.link_triple({**t, "relation": table.canonical(t["relation"])},
                                                                article_index),
                          params={"relations": table.version}),
        "cardinality": global_stage("cardinality", lambda ts: cardinality.filter_unique_hops(ts, llm=llm, seed=seed),
                                    params={"threshold": cardinality.DEFAULT_THRESHOLD, "min_support": 3}, llm=llm),
        "chains": global_stage("chains", lambda ts: chains.chain_stage(ts, caps, seed, limit,
                                                                     require_linked_bridge=True),
                               params={"caps": caps_params, "limit": limit, "require_linked_bridge": True}),
        "questions": (batch_stage("questions", lambda cs: questions.generate_llm(cs, llm, seed, question_temperature),
                                  batch_size=32, params={"temperature": question_temperature}, llm=llm)
                      if llm is not None else map_stage("questions", lambda c: questions.generate_template(c, seed, table),
                                                        params={"generator": "template", "relations": table.version})),
        "quality": (batch_stage("quality", lambda rs: quality.quality_loop(rs, llm, max_rounds, min_natural, seed=seed),
                                32, params={"max_rounds": max_rounds, "min_natural": min_natural}, llm=llm)
                    if llm is not None else map_stage("quality", lambda r: {**r, "quality": None})),
        "prefilter": batch_stage("prefilter", lambda rs: solvability.prefilter(rs, backend(), prefilter_size),
                                 batch_size=64, params={"size": prefilter_size, "index": str(index) if index else None}),
        "solve": (batch_stage("solve", solve, batch_size=16, params=rule, llm=policy) if policy is not None
                  else map_stage("solve", lambda r: {**r, "pass_rate": None, "k": None})),
        "finalize": batch_stage("finalize", gold_check, batch_size=256,
                                params={"task": "multihop_qa", "task_version": TASKS["multihop_qa"].version}),
    }
    config = {
        "until": until, "limit": limit, "solvability": rule, "seed": seed, "max_rounds": max_rounds,
        "caps": caps_params,
        "question_generator": "llm" if llm is not None else "template",
        "quality": "llm judge/fix loop" if llm is not None else "skipped (no --llm)",
        "agent_check": "rollouts" if policy is not None else "skipped (no --policy)",
        # The LLM and policy identities are stage recipes (triples/cardinality/questions/quality, solve).
        "index": str(index) if index else None,
        "prompts": PROMPT_VERSIONS, **chosen.recipe(),
    }
    manifest = build_dataset(
        out=out, name=out.name, pipeline="multihop", pipeline_version=PIPELINE_VERSION, config=config, seed=seed,
        inputs=inputs, source=source, stages=[all_stages[n] for n in names], llm=llm, quiet=quiet,
        chunk_size=chunk_size, keep_rejected=keep_rejected, empty_hints=EMPTY_HINTS,
        column_types=COLUMN_TYPES if "finalize" in names else None,  # earlier stages write working records
        heldout=heldout if "questions" in names else None,  # records before it are triples/chains, not questions
        card={"description": "Two-hop Japanese questions built from (subject, relation, object) triples: hop 1's "
                             "object is hop 2's subject; the bridge entity is never named in the question.",
              "pretty_name": f"tansaku multihop: {Path(out).name}", "task_categories": ["question-answering"],
              **chosen.card,
              "limitations": [
                  "Only hops whose answer is unique in the triple statistics (1:1, N:1) are kept; relations that "
                  "are 1:N in the world but look unique in a small corpus can still give ambiguous questions.",
                  "Template questions (no --llm) come from 12 fixed frames chosen per relation pair "
                  "(relations.json); the LLM generator and judge vary and smooth them.",
                  "`pass_rate` is the share of `k` agent tries that solved the item with the configured policy "
                  "and search index (kept: within the manifest's config.solvability); it is a difficulty signal "
                  "for that policy only.",
                  "Facts come from the corpus as it was indexed and may be out of date (`time_dependent`)."]})
    return chosen.write(out, manifest)
