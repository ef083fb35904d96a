"""The cardinality rule of ``synth build multihop``: a relation is judged as a whole only where the data can
tell its class; elsewhere each subject's hop is kept when it has one value in the data; set-valued relations
of the table are never hops; and no kept chain has a gold answer that is ambiguous in the data.

Fictional knowledge bases built here (people, towns, books); realdata: the CLI build over JEMHopQA's train
file rebuilds its compositional chains (tests/test_multihop_chains.py has the library's recall report)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from fixtures.drops import split
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.store import iter_rows
from tansaku.pipelines.multihop.cardinality import filter_unique_hops, relation_stats, value_classes
from tansaku.pipelines.multihop.chains import Caps, chain_stage, derivations_of
from tansaku.pipelines.multihop.entities import display_name, entity_key
from tansaku.pipelines.multihop.jemhopqa import build_recall
from tansaku.pipelines.multihop.relations import DEFAULT as TABLE
from tansaku.pipelines.multihop.triples import index_from_triples, link_stage_triple, make_triple

JEMHOPQA_TRAIN = (Path(__file__).resolve().parents[1].parent / "shared" / "data" / "jemhopqa" / "corpus_ver1.2"
                  / "train_ver1.2.json")




def linked(rows: list[tuple[str, str, str]]) -> list[dict]:
    triples = [make_triple(s, r, o, source="t") for s, r, o in rows]
    index = index_from_triples(triples)
    return [link_stage_triple(t, index, TABLE) for t in triples]


def chains_of(rows, **judge) -> tuple[list[dict], Counter]:
    hops, drops = split(filter_unique_hops(linked(rows), set_valued=TABLE.set_valued(), **judge))
    kept, _ = split(chain_stage(hops, caps=Caps(None, None, None)))
    return kept, drops


def small_kb() -> list[tuple[str, str, str]]:
    """Ten people in a small KB: 配偶者 looks 1:N here (two people list two spouses), yet eight have one."""
    rows = []
    for i in range(10):
        rows.append((f"人物{i}", "配偶者", f"伴侶{i}"))
        rows.append((f"伴侶{i}", "出生地", f"町{i}"))
    rows += [("人物0", "配偶者", "伴侶X"), ("伴侶X", "出生地", "町X"),
             ("人物1", "配偶者", "伴侶Y"), ("伴侶Y", "出生地", "町Y")]
    return rows


def test_a_relation_multi_valued_somewhere_in_a_small_kb_keeps_its_unique_subjects():
    stats = relation_stats(linked(small_kb()))
    assert stats["配偶者"]["class"] == "1:N" and stats["配偶者"]["judged"] == "per_subject"
    chains, drops = chains_of(small_kb())
    answers = {c["subject"]: c["answer"] for c in chains if c["relations"] == ["配偶者", "出生地"]}
    assert {f"人物{i}" for i in range(2, 10)} == set(answers)          # one spouse: asked
    assert answers["人物5"] == "町5"
    assert "人物0" not in answers and "人物1" not in answers        # two spouses: ambiguous, never asked
    assert drops == Counter({"multi_valued": 4})


def test_a_relation_the_data_can_judge_is_judged_as_a_whole():
    # 120 clubs: 70 list two home towns. The share of one-valued subjects is far below the threshold with
    # enough subjects to tell: every hop of the relation goes, also those of clubs listing one.
    rows = [(f"クラブ{i}", "本拠地", f"町{i}") for i in range(120)]
    rows += [(f"クラブ{i}", "本拠地", f"村{i}") for i in range(70)]
    stats = relation_stats(linked(rows))
    assert stats["本拠地"]["judged"] == "relation" and stats["本拠地"]["class"] == "1:N"
    _, drops = chains_of(rows)
    assert drops == Counter({"relation_1:N": 190})
    # 200 clubs, 2 of them with two values: judged as a whole 1:1; the two are dropped, the rest kept.
    rows = [(f"クラブ{i}", "本拠地", f"町{i}") for i in range(200)] + [("クラブ0", "本拠地", "村0"),
                                                                  ("クラブ1", "本拠地", "村1")]
    stats = relation_stats(linked(rows))
    assert stats["本拠地"]["judged"] == "relation" and stats["本拠地"]["class"] == "1:1"
    hops, drops = split(filter_unique_hops(linked(rows)))
    assert drops == Counter({"multi_valued": 4}) and len(hops) == 198
    assert {h["cardinality"] for h in hops} == {"1:1"}
    # the same data with a looser confidence or a lower support floor: still judged, the same verdicts
    assert relation_stats(linked(rows), confidence=0.5, min_support=10)["本拠地"]["judged"] == "relation"


def test_set_valued_relations_of_the_table_are_never_hops():
    rows = [("映画A", "出演者", "俳優B"), ("俳優B", "出生地", "町C"), ("映画A", "監督", "監督D"),
            ("監督D", "出生地", "町E")]
    chains, drops = chains_of(rows)
    assert drops == Counter({"relation_set_valued": 1})
    assert [(c["subject"], c["relations"]) for c in chains] == [("映画A", ["監督", "出生地"])]


def one_value_in_data(rows, subject: str, relation: str) -> bool:
    """Does the input give ``subject`` one value for ``relation`` (spellings nested in each other are one)?"""
    relation = TABLE.canonical(display_name(relation))   # as the triples stage writes and the link stage reads it
    objects = [entity_key(o) for s, r, o in rows if entity_key(s) == entity_key(subject)
               and TABLE.canonical(display_name(r)) == relation]
    keyed = [{"subject_key": "s", "relation": "r", "object_key": o} for o in objects]
    return len(set(value_classes(keyed).values())) == 1


@pytest.mark.parametrize("seed", range(3))
def test_no_kept_chain_has_a_gold_answer_that_is_ambiguous_in_the_data(seed):
    rng = random.Random(seed)
    people, towns = [f"人{i}" for i in range(45)], [f"町{i}" for i in range(15)]
    rows = []
    for p in people:
        for relation, pool in (("配偶者", people), ("出生地", towns), ("師匠", people)):
            for _ in range(rng.choice([0, 1, 1, 1, 1, 2, 3])):   # 0–3 values: many subjects several
                rows.append((p, relation, rng.choice(pool)))
    rows += [(t, "市長", rng.choice(people)) for t in towns]
    chains, _ = chains_of(rows)
    assert chains, "the generated KB gives chains"
    for chain in chains:
        (s, r1, (b,)), (_, r2, _) = derivations_of(chain)
        assert one_value_in_data(rows, s, r1) and one_value_in_data(rows, b, r2), chain["derivations"]


def jemhopqa_item(qid: str, hop1: tuple, hop2: tuple) -> dict:
    return {"qid": qid, "type": "compositional", "question": f"{hop1[0]}の{hop1[1]}の{hop2[1]}は？",
            "answer": hop2[2], "derivations": [[hop1[0], hop1[1], [hop1[2]]], [hop2[0], hop2[1], [hop2[2]]]],
            "page_ids": ["1", "2"], "time_dependent": False}


def test_cli_build_rebuilds_a_jemhopqa_style_file_in_its_own_spelling(tmp_path):
    """A fictional JEMHopQA-style file: its compositional chains come back through the CLI with every cap off,
    under JEMHopQA's own relation names (作者, 生年月日 — the table's canonical names are 著者, 生年)."""
    items = [jemhopqa_item(f"q{i}", (f"小説{i}", "作者", f"作家{i}"), (f"作家{i}", "生年月日", f"19{50 + i}年1月2日"))
             for i in range(8)]
    items += [jemhopqa_item(f"s{i}", (f"歌手{i}", "配偶者", f"伴侶{i}"), (f"伴侶{i}", "出身地", f"町{i}"))
              for i in range(8)]
    items.append(jemhopqa_item("x", ("歌手0", "配偶者", "伴侶Z"), ("伴侶Z", "出身地", "町Z")))  # a second spouse
    items.append({**items[0], "qid": "c1", "type": "comparison"})
    source = tmp_path / "train_fictional.json"
    source.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    result = CliRunner().invoke(synth_app, ["build", "multihop", "--triples", str(source), "--until", "chains",
                                            "--max-per-subject", "0", "--max-per-bridge", "0",
                                            "--max-per-relation-pair", "0", "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    report = build_recall(source, tmp_path / "out")
    # 17 compositional: the two chains through 歌手0's two spouses are ambiguous and must not come back
    assert report["gold_chains"] == 17 and report["recall"] == report["recall_same_relations"] == round(15 / 17, 4)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    stage = next(s for s in manifest["stages"] if s["name"] == "cardinality")
    assert stage["params"]["min_support_applied"] == 50 and stage["params"]["cardinality_confidence"] == 0.95
    assert "per subject" in stage["params"]["rule"] and "出演者" in stage["params"]["set_valued_relations"]
    assert stage["dropped"] == {"multi_valued": 2, "duplicate_triple": 2}  # the comparison item repeats q0


@pytest.mark.realdata
def test_cli_build_rebuilds_jemhopqa_compositional_chains(tmp_path):
    if not JEMHOPQA_TRAIN.exists():
        pytest.skip("../shared/data/jemhopqa is absent")
    out = tmp_path / "chains"
    result = CliRunner().invoke(synth_app, ["build", "multihop", "--triples", str(JEMHOPQA_TRAIN), "--until",
                                            "chains", "--max-per-subject", "0", "--max-per-bridge", "0",
                                            "--max-per-relation-pair", "0", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    report = build_recall(JEMHOPQA_TRAIN, out)
    print(json.dumps(report))
    assert report["recall"] >= 0.95 and report["recall_same_relations"] >= 0.95
    rows = [(s, r, o) for item in json.loads(JEMHOPQA_TRAIN.read_text(encoding="utf-8"))
            for s, r, objects in (d for d in item["derivations"] if d) for o in objects]
    for chain in iter_rows(out, "train"):
        (s, r1, (b,)), (_, r2, _) = derivations_of(chain)
        assert one_value_in_data(rows, s, r1) and one_value_in_data(rows, b, r2), chain["derivations"]
