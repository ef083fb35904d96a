"""JEMHopQA: import it as an evaluation dataset, and measure how well our chain stage rebuilds it.

* :func:`import_jemhopqa` — ``synth import jemhopqa PATH --out DIR``: a JEMHopQA JSON file (list of
  ``{qid, type, question, answer, derivations, page_ids, time_dependent}``) becomes a dataset for the
  ``multihop_qa`` task, one row per question, the original fields kept (``derivations`` as
  ``{subject, relation, objects}`` structs) plus TRL's ``prompt``. The dev file (``dev_*.json``) is the
  ``validation`` split; any other file is ``train`` plus a held-out ``test``. License: CC BY-SA 4.0.
  In Python: ``import_jemhopqa(JemhopqaImportConfig(path=PATH), out=DIR)`` (every setting: the config).
* :func:`chain_recall` — feed every derivation of a file as input triples through linking, cardinality
  and the chain join, then check that each compositional question's (hop 1, hop 2) comes out as a
  chain; every miss is named by the stage and rule that lost it.

Run: ``python -m tansaku.pipelines.multihop.jemhopqa ../shared/data/jemhopqa/corpus_ver1.2/train_ver1.2.json``
prints the recall report.
"""

from __future__ import annotations

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
from tansaku.core.store import StoreError, build_dataset, read_records
from tansaku.envs.tasks import MultihopQA, Task
from tansaku.pipelines.multihop.build import COLUMN_TYPES
from tansaku.pipelines.multihop.cardinality import judge_hops, relation_stats
from tansaku.pipelines.multihop.chains import Caps, join_chains, triples_frame
from tansaku.pipelines.multihop.entities import display_name, entity_key, exact_key
from tansaku.pipelines.multihop.jemhopqa_config import JemhopqaImportConfig
from tansaku.pipelines.multihop.triples import index_from_triples, link_triple, read_triples_file

# 2: derivations as structs, prompt column, dev file → validation; 3: the config is JemhopqaImportConfig's
# fields, and the task's finalize stage adds task + prompt and drops a question whose gold cannot score
IMPORT_VERSION = "3"
JEMHOPQA_LICENSE = "cc-by-sa-4.0"
FIELDS = ("qid", "type", "question", "answer", "derivations", "page_ids", "time_dependent")
# Declared Features: the multihop ones, for the columns JEMHopQA shares with them.
IMPORT_TYPES = {name: COLUMN_TYPES[name] for name in (*FIELDS, "task", "generator", "prompt")}


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
    """JEMHopQA's dev file (``dev_ver1.2.json``): its questions are the ``validation`` split."""
    return Path(path).stem.lower().startswith("dev")


def import_jemhopqa(config: JemhopqaImportConfig, out: str | Path = "out/jemhopqa",
                    context: BuildContext | None = None, task: Task = MultihopQA()) -> dict:
    """Write the JEMHopQA file ``config.path`` as a ``task`` (``multihop_qa``) dataset into ``out``: the dev
    file is the ``validation`` split; of any other file ``heldout_share`` of the questions (key ``qid``;
    ``tansaku.core.heldout``) form the ``test`` split, the rest ``train``. ``license``: the card's license id
    (default: JEMHopQA's CC BY-SA 4.0). The last stage is the task's ``finalize`` (``task`` and TRL's
    ``prompt`` columns, and the gold check: a question whose answer cannot score 1.0 is dropped, as it could
    never be passed in an eval). ``context``: progress (``BuildContext``; this import does not shard)."""
    context = context or BuildContext()
    c = config
    heldout = HeldOut(c.heldout_share, "qid", c.seed)  # checks the share before anything is read
    out = precheck_out(out, pipeline="import-jemhopqa", inputs={"PATH": c.path, "--license-file": c.license_file})
    chosen = choose_license(c.license, c.license_file, default=license_card(JEMHOPQA_LICENSE))
    dev = is_dev_file(c.path)
    items = load_items(c.path)
    stages = [map_stage("to_eval_row", to_eval_row),
              batch_stage("finalize", task.finalize, batch_size=256,
                          params={"task": task.name, "task_version": task.version})]
    return chosen.write(out, build_dataset(
        out=out, name=f"jemhopqa-{Path(c.path).stem}", pipeline="import-jemhopqa", pipeline_version=IMPORT_VERSION,
        config={**c.recipe(), "task": task.name, "split": "validation" if dev else "train+test", **chosen.recipe()},
        seed=c.seed, inputs=[describe_input(c.path, len(items))], source=items, stages=stages,
        card={"description": f"JEMHopQA (Ishii et al.) questions imported for evaluation with the {task.name} "
                             "task. License: CC BY-SA 4.0 (see the original repository).",
              "pretty_name": f"JEMHopQA {Path(c.path).stem}", **chosen.card,
              "task_categories": ["question-answering"]},
        context=context, column_types=IMPORT_TYPES,
        **({"split_of": lambda row: "validation"} if dev else {"heldout": heldout})))


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
            matching = [d for d in from_bridge if any(ans in entity_key(o) or entity_key(o) in ans for o in d[2])]
            return a, (matching or from_bridge)[-1]
    return None


def chain_recall(path: str | Path, caps=None, seed: int = 0, filter_cardinality: bool = True) -> dict:
    """Recall of compositional JEMHopQA chains rebuilt from the file's own derivations, with every miss
    classified by where it was lost (``cardinality:<reason>``, ``chain:<rule>``, ``no_shared_bridge``).
    ``filter_cardinality=False`` measures the linking and join alone (every hop kept)."""

    caps = caps if caps is not None else Caps(None, None, None)
    raw = list(read_triples_file(path))
    index = index_from_triples(raw)
    linked = [link_triple(t, index) for t in raw]

    def join_key(name: str) -> str:  # the join key linking gives a name (keeps "(歌手)" of a linked title)
        hit = index.link(name)
        return exact_key(hit[1]) if hit else entity_key(name)

    hop_reason: dict[tuple, str] = {}
    kept = []
    verdicts = judge_hops(linked, relation_stats(linked)) if filter_cardinality else ((t, None) for t in linked)
    for triple, reason in verdicts:
        ident = (triple["subject_key"], triple["relation"], entity_key(triple["object"]))
        if reason is None:
            kept.append(triple)
            hop_reason[ident] = "kept"
        else:
            hop_reason.setdefault(ident, reason)
    pairs = join_chains(triples_frame(kept), caps, seed)
    outcome: dict[tuple, str] = {}
    for row in pairs.select("subject_key_1", "relation_1", "object_key_1", "relation_2", "object_2",
                            "object_aliases_2", "drop").iter_rows():
        s, r1, b, r2, answer, aliases, drop = row
        for a in [answer, *(aliases or [])]:
            key = (s, r1, b, r2, entity_key(a))
            if outcome.get(key) != "kept":
                outcome[key] = drop or "kept"
    misses: Counter = Counter()
    examples: dict[str, list] = {}
    items = [i for i in load_items(path) if i.get("type") == "compositional"]
    for item in items:
        gold = gold_chain(item)
        if gold is None:
            cls = "no_shared_bridge"
        else:
            (s1, r1, o1), (s2, r2, o2s) = gold
            keys = [(join_key(s1), display_name(r1), join_key(o1[0]), display_name(r2), entity_key(o)) for o in o2s]
            found = [outcome[k] for k in keys if k in outcome]
            if "kept" in found:
                continue
            hop1 = hop_reason.get((join_key(s1), display_name(r1), entity_key(o1[0])), "missing")
            hop2 = [hop_reason.get((join_key(s2), display_name(r2), entity_key(o)), "missing") for o in o2s]
            if hop1 != "kept":
                cls = f"cardinality:hop1:{hop1}"
            elif "kept" not in hop2:
                cls = f"cardinality:hop2:{hop2[0]}"
            else:
                cls = f"chain:{found[0]}" if found else "chain:not_joined"
        misses[cls] += 1
        examples.setdefault(cls, []).append({k: item[k] for k in ("qid", "question", "derivations")})
    n = len(items)
    return {"compositional": n, "reconstructed": n - sum(misses.values()),
            "recall": round((n - sum(misses.values())) / n, 4) if n else 0.0,
            "misses": dict(misses.most_common()), "examples": examples,
            "triples": len(raw), "hops_kept": len(kept), "chains_kept": int(pairs["drop"].is_null().sum())}


def main(argv: list[str]) -> None:
    join_only = chain_recall(argv[0], filter_cardinality=False)
    print(f"join alone (no cardinality filter): recall {join_only['recall']} {join_only['misses']}")
    report = chain_recall(argv[0])
    print(f"recall {report['recall']} ({report['reconstructed']}/{report['compositional']}); "
          f"triples {report['triples']}, hops kept {report['hops_kept']}, chains kept {report['chains_kept']}")
    for cls, n in report["misses"].items():
        print(f"  {n:3d}  {cls}")
        for ex in report["examples"][cls][:3]:
            print(f"         {ex['question']}  {jsontext.dumps(ex['derivations'])}")


if __name__ == "__main__":
    main(sys.argv[1:])
