"""JEMHopQA: import it as an evaluation dataset, and measure how well our chain stage rebuilds it.

* :func:`import_jemhopqa` — ``synth import jemhopqa PATH --out DIR``: a JEMHopQA JSON file (list of
  ``{qid, type, question, answer, derivations, page_ids, time_dependent}``) becomes a dataset for the
  ``multihop_qa`` task, one row per question, the original fields kept (``derivations`` as
  ``{subject, relation, objects}`` structs) plus TRL's ``prompt``. JEMHopQA is an evaluation set: every
  question of the dev file (``dev_*.json``) is in the ``validation`` split, of any other file in ``test``;
  no ``train`` split unless ``--as-train`` (``as_train``) asks for one: then ``train`` plus a held-out
  ``test`` (``--heldout-share``), a warning on stderr, and the card and manifest say so.
  License: CC BY-SA 4.0.
  In Python: ``import_jemhopqa(JemhopqaImportConfig(path=PATH), out=DIR)`` (every setting: the config).
* :func:`chain_recall` — feed every derivation of a file as input triples through linking, cardinality
  and the chain join, then check that each compositional question's (hop 1, hop 2) comes out as a
  chain; every miss is named by the stage and rule that lost it.

Run: ``python -m tansaku.pipelines.multihop.jemhopqa ../shared/data/jemhopqa/corpus_ver1.2/train_ver1.2.json``
prints the recall report.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path

from tansaku.core import jsontext
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, batch_stage, map_stage
from tansaku.core.errors import InputError
from tansaku.core.features import derivation_structs
from tansaku.core.heldout import HeldOut
from tansaku.core.licenses import choose_license, license_card
from tansaku.core.out_folder import precheck_out
from tansaku.core.provenance import describe_input
from tansaku.core.store import StoreError, build_dataset, iter_rows, read_records
from tansaku.envs.tasks import MultihopQA, Task
from tansaku.pipelines.multihop.build import COLUMN_TYPES
from tansaku.pipelines.multihop.cardinality import judge_hops, relation_stats
from tansaku.pipelines.multihop.chains import Caps, derivations_of, join_chains, triples_frame
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.multihop.entities import display_name, entity_key, exact_key
from tansaku.pipelines.multihop.jemhopqa_config import JemhopqaImportConfig
from tansaku.pipelines.multihop.relations import Relations
from tansaku.pipelines.multihop.triples import index_from_triples, link_stage_triple, read_triples_file

# 2: derivations as structs, prompt column, dev file → validation; 3: the config is JemhopqaImportConfig's
# fields, and the task's finalize stage adds task + prompt and drops a question whose gold cannot score;
# 4: JEMHopQA is an evaluation set: a file other than dev goes wholly to 'test' (was 'train' + held-out
# 'test'), 'train' only with as_train (--as-train), warned and named in the card
IMPORT_VERSION = "4"
JEMHOPQA_LICENSE = "cc-by-sa-4.0"
FIELDS = ("qid", "type", "question", "answer", "derivations", "page_ids", "time_dependent")
# Declared Features: the multihop ones, for the columns JEMHopQA shares with them.
IMPORT_TYPES = {name: COLUMN_TYPES[name] for name in (*FIELDS, "task", "generator", "prompt")}
AS_TRAIN_WARNING = ("import jemhopqa --as-train: JEMHopQA is an evaluation set, yet %d of its questions are "
                    "in the 'train' split of %s (%d held out in 'test', share %s); a model trained on them "
                    "cannot be evaluated on JEMHopQA as unseen questions")

log = logging.getLogger(__name__)


class JEMHopQAError(InputError):
    """The file is not a JEMHopQA JSON list."""


def load_items(path: str | Path) -> list[dict]:
    path = Path(path)
    if path.suffix != ".json":
        raise JEMHopQAError(f"{path}: expected a JEMHopQA .json file")
    try:
        return read_records(path)
    except (StoreError, FileNotFoundError) as e:
        raise JEMHopQAError(f"JEMHopQA: {e}") from e


def to_eval_row(item: dict) -> dict | Drop:
    """One JEMHopQA question as a row (the task's ``finalize`` adds ``task`` and ``prompt``); malformed items
    are dropped with a reason."""
    if not isinstance(item, dict):
        return Drop("not_an_object", {"item": item}, f"a {type(item).__name__}, not a JSON object")
    missing = [f for f in ("qid", "question", "answer") if not str(item.get(f) or "").strip()]
    if missing:
        return Drop("missing_" + missing[0])
    derivations = item.get("derivations") or []
    if not isinstance(derivations, list) or not all(
            isinstance(d, list) and len(d) == 3 and isinstance(d[2], list) for d in derivations):
        return Drop("malformed_derivations", item, f"qid {item['qid']}: derivations must be [[s, r, [o…]]…]")
    page_ids = item.get("page_ids") or []
    if not isinstance(page_ids, list):
        return Drop("malformed_page_ids", item, f"qid {item['qid']}: page_ids must be a list")
    if not all(isinstance(item[f], (str, int, float)) for f in ("qid", "question", "answer")):
        return Drop("malformed_fields", item, f"qid {item['qid']}: qid, question and answer must be text")
    row = {
        "qid": str(item["qid"]), "type": str(item.get("type") or ""), "question": str(item["question"]),
        "answer": str(item["answer"]),
        # Structs: parquet cannot hold the mixed [s, r, [o…]] lists.
        "derivations": derivation_structs(derivations),
        "page_ids": [str(p) for p in page_ids],
        "time_dependent": bool(item.get("time_dependent", False)), "generator": "jemhopqa",
    }
    return row


def is_dev_file(path: str | Path) -> bool:
    """JEMHopQA's dev file (``dev_ver1.2.json``): its questions are the ``validation`` split (any other file's
    the ``test`` split; ``import_jemhopqa``)."""
    return Path(path).stem.lower().startswith("dev")


def import_split(config: JemhopqaImportConfig) -> str:
    """Where an import puts the questions: ``train+test`` with ``as_train``, else ``validation`` (the dev
    file) or ``test``: JEMHopQA is an evaluation set, so it holds no ``train`` split unless asked."""
    if config.as_train:
        return "train+test"
    return "validation" if is_dev_file(config.path) else "test"


def import_description(config: JemhopqaImportConfig, task_name: str) -> str:
    """The card's description: what was imported, and in words where the questions went and why."""
    if config.as_train:
        where = ("Imported as training data on request (`--as-train`), although JEMHopQA is an evaluation "
                 "set: the questions are in `train`, except a held-out share "
                 f"({config.heldout_share}, by `qid`) in `test`. A model trained on `train` cannot be "
                 "evaluated on JEMHopQA as unseen questions.")
    else:
        split = import_split(config)
        where = (f"JEMHopQA is an evaluation set: every question is in the `{split}` split "
                 f"(`train eval --dataset DIR{'' if split == 'test' else ' --split ' + split}`); "
                 "there is no `train` split (`synth import jemhopqa --as-train` makes one).")
    return (f"JEMHopQA (Ishii et al.) questions imported for the {task_name} task. {where} "
            "License: CC BY-SA 4.0 (see the original repository).")


def import_jemhopqa(config: JemhopqaImportConfig, out: str | Path = "out/jemhopqa",
                    context: BuildContext | None = None, task: Task = MultihopQA()) -> dict:
    """Write the JEMHopQA file ``config.path`` as a ``task`` (``multihop_qa``) dataset into ``out``.
    JEMHopQA is an evaluation set: every question of the dev file is in the ``validation`` split, of any
    other file in ``test``. ``as_train``: a ``train`` split instead, ``heldout_share`` of the questions
    (key ``qid``; ``tansaku.core.heldout``) held out as ``test`` — logged as a warning, and named in the
    card's description and the manifest's ``config`` (``as_train``, ``split``). ``license``: the card's
    license id (default: JEMHopQA's CC BY-SA 4.0). The last stage is the task's ``finalize`` (``task`` and
    TRL's ``prompt`` columns, and the gold check: a question whose answer cannot score 1.0 is dropped, as it
    could never be passed in an eval). ``context``: progress (``BuildContext``; this import does not
    shard)."""
    context = context or BuildContext()
    c = config.check()  # every option's declared bounds, before anything is read
    heldout = HeldOut(c.heldout_share, "qid", c.seed)
    out = precheck_out(out, pipeline="import-jemhopqa",
                       inputs={"PATH": c.path, "--license-file": c.license_file})
    chosen = choose_license(c.license, c.license_file, default=license_card(JEMHOPQA_LICENSE))
    split = import_split(c)
    items = load_items(c.path)
    stages = [map_stage("to_eval_row", to_eval_row),
              batch_stage("finalize", task.finalize, batch_size=256,
                          params={"task": task.name, "task_version": task.version})]
    manifest = chosen.write(out, build_dataset(
        out=out, name=f"jemhopqa-{Path(c.path).stem}", pipeline="import-jemhopqa",
        pipeline_version=IMPORT_VERSION,
        config={**c.recipe(), "task": task.name, "split": split, **chosen.recipe()},
        seed=c.seed, inputs=[describe_input(c.path, len(items))], source=items, stages=stages,
        card={"description": import_description(c, task.name), "pretty_name": f"JEMHopQA {Path(c.path).stem}",
              **chosen.card, "task_categories": ["question-answering"]},
        context=context, column_types=IMPORT_TYPES,
        **({"heldout": heldout} if c.as_train else {"split_of": lambda row: split})))
    if c.as_train:  # once the train split exists (a refused build wrote none), with what it holds
        splits = manifest.get("splits", {})
        log.warning(AS_TRAIN_WARNING, splits.get("train", 0), out, splits.get("test", 0), c.heldout_share)
    return manifest


# ---------------------------------------------------------------- recall of the chain stage


def gold_chain(item: dict) -> tuple[list, list] | None:
    """The (hop 1, hop 2) of a compositional question: hop 1's object is hop 2's subject; among several
    hops from the bridge (3-derivation questions add a constraint hop), the one whose object matches
    the answer, else the last."""
    derivations = [d for d in item["derivations"] if d and d[2]]
    for a in derivations:
        for b in derivations:
            if a is b or entity_key(a[2][0]) != entity_key(b[0]) or entity_key(a[0]) == entity_key(b[0]):
                continue
            from_bridge = [d for d in derivations if entity_key(d[0]) == entity_key(b[0])]
            ans = entity_key(item["answer"])
            matching = [d for d in from_bridge
                        if any(ans in entity_key(o) or entity_key(o) in ans for o in d[2])]
            return a, (matching or from_bridge)[-1]
    return None


def _hop_verdicts(linked: list[dict], config: MultihopConfig, table: Relations,
                  filter_cardinality: bool) -> tuple[list[dict], dict[tuple, str]]:
    """The hops the cardinality stage keeps, and each hop's fate by (subject key, object key): ``kept``, else
    the first reason it was dropped (every hop kept when ``filter_cardinality`` is off)."""
    hop_reason: dict[tuple, str] = {}
    kept = []
    stats = relation_stats(linked, config.cardinality_threshold, config.cardinality_confidence,
                           config.resolved_min_support())
    verdicts = (judge_hops(linked, stats, set_valued=table.set_valued()) if filter_cardinality
                else ((t, None) for t in linked))
    for triple, reason in verdicts:
        ident = (triple["subject_key"], entity_key(triple["object"]))
        if reason is None:
            kept.append(triple)
            hop_reason[ident] = "kept"
        else:
            hop_reason.setdefault(ident, reason)
    return kept, hop_reason


def _chain_outcomes(pairs) -> dict[tuple, str]:
    """Each joined (subject, bridge, answer) key — an answer alias counts as the answer — with ``kept`` when
    some chain for it survived, else the first rule that dropped it."""
    outcome: dict[tuple, str] = {}
    for row in pairs.select("subject_key_1", "relation_1", "object_key_1", "relation_2", "object_2",
                            "object_aliases_2", "drop").iter_rows():
        s, r1, b, r2, answer, aliases, drop = row
        for a in [answer, *(aliases or [])]:
            key = (s, b, entity_key(a))
            if outcome.get(key) != "kept":
                outcome[key] = drop or "kept"
    return outcome


def _miss_class(item: dict, outcome: dict[tuple, str], hop_reason: dict[tuple, str], join_key) -> str | None:
    """Where a compositional question's chain was lost (``None`` when it was rebuilt): no gold chain, a hop
    dropped by cardinality, or a chain rule."""
    gold = gold_chain(item)
    if gold is None:
        return "no_shared_bridge"
    (s1, r1, o1), (s2, r2, o2s) = gold
    keys = [(join_key(s1), join_key(o1[0]), entity_key(o)) for o in o2s]
    found = [outcome[k] for k in keys if k in outcome]
    if "kept" in found:
        return None
    hop1 = hop_reason.get((join_key(s1), entity_key(o1[0])), "missing")
    hop2 = [hop_reason.get((join_key(s2), entity_key(o)), "missing") for o in o2s]
    if hop1 != "kept":
        return f"cardinality:hop1:{hop1}"
    if "kept" not in hop2:
        return f"cardinality:hop2:{hop2[0]}"
    return f"chain:{found[0]}" if found else "chain:not_joined"


def chain_recall(path: str | Path, caps=None, seed: int = 0, filter_cardinality: bool = True,
                 config: MultihopConfig | None = None) -> dict:
    """Recall of compositional JEMHopQA chains rebuilt from the file's own derivations, with every miss
    classified by where it was lost (``cardinality:<reason>``, ``chain:<rule>``, ``no_shared_bridge``).
    Linking and cardinality are the build's (``synth build multihop --triples``: canonical relation names,
    the relation table's set-valued relations, ``config``'s thresholds); a chain counts when its subject,
    bridge and answer match, as the same fact may be kept under another spelling of its relation.
    ``filter_cardinality=False`` measures the linking and join alone (every hop kept)."""

    caps = caps if caps is not None else Caps(None, None, None)
    config = config or MultihopConfig(triples=Path(path))
    table = Relations.load(config.relations)
    raw = list(read_triples_file(path))
    index = index_from_triples(raw)
    linked = [link_stage_triple(t, index, table) for t in raw]

    def join_key(name: str) -> str:  # the join key linking gives a name (keeps "(歌手)" of a linked title)
        hit = index.link(name)
        return exact_key(hit[1]) if hit else entity_key(name)

    kept, hop_reason = _hop_verdicts(linked, config, table, filter_cardinality)
    pairs = join_chains(triples_frame(kept), caps, seed)
    outcome = _chain_outcomes(pairs)
    misses: Counter = Counter()
    examples: dict[str, list] = {}
    items = [i for i in load_items(path) if i.get("type") == "compositional"]
    for item in items:
        cls = _miss_class(item, outcome, hop_reason, join_key)
        if cls is not None:
            misses[cls] += 1
            examples.setdefault(cls, []).append({k: item[k] for k in ("qid", "question", "derivations")})
    n = len(items)
    return {"compositional": n, "reconstructed": n - sum(misses.values()),
            "recall": round((n - sum(misses.values())) / n, 4) if n else 0.0,
            "misses": dict(misses.most_common()), "examples": examples,
            "triples": len(raw), "hops_kept": len(kept), "chains_kept": int(pairs["drop"].is_null().sum())}


def build_recall(path: str | Path, dataset: str | Path) -> dict:
    """Recall of JEMHopQA's compositional chains in a dataset that ``synth build multihop --triples PATH
    --until chains`` wrote: a question counts when a chain has its subject, bridge and answer (``recall``)
    and, stricter, also both relations as JEMHopQA spells them (``recall_same_relations``)."""
    facts, spelled = set(), set()
    for row in iter_rows(dataset, "train", columns=["derivations", "answer", "answer_aliases"]):
        (s, r1, (b, *_)), (_, r2, _) = derivations_of(row)[:2]
        for a in [row["answer"], *(row["answer_aliases"] or [])]:
            facts.add((entity_key(s), entity_key(b), entity_key(a)))
            spelled.add((entity_key(s), r1, entity_key(b), r2, entity_key(a)))
    compositional = (i for i in load_items(path) if i.get("type") == "compositional")
    golds = [g for g in map(gold_chain, compositional) if g]
    found = same = 0
    for (s1, r1, o1), (_, r2, o2s) in golds:
        found += any((entity_key(s1), entity_key(o1[0]), entity_key(o)) in facts for o in o2s)
        # display_name: how the triples stage writes a relation (NFKC, spaces)
        same += any((entity_key(s1), display_name(r1), entity_key(o1[0]), display_name(r2), entity_key(o))
                    in spelled for o in o2s)
    n = len(golds)
    return {"gold_chains": n, "recall": round(found / n, 4) if n else 0.0,
            "recall_same_relations": round(same / n, 4) if n else 0.0}


def main(argv: list[str]) -> None:
    join_only = chain_recall(argv[0], filter_cardinality=False)
    print(f"join alone (no cardinality filter): recall {join_only['recall']} {join_only['misses']}")
    report = chain_recall(argv[0])
    print(f"recall {report['recall']} ({report['reconstructed']}/{report['compositional']}); "
          f"triples {report['triples']}, hops kept {report['hops_kept']}, "
          f"chains kept {report['chains_kept']}")
    for cls, n in report["misses"].items():
        print(f"  {n:3d}  {cls}")
        for ex in report["examples"][cls][:3]:
            print(f"         {ex['question']}  {jsontext.dumps(ex['derivations'])}")


if __name__ == "__main__":
    main(sys.argv[1:])
