"""Multihop stages 1–3 on the fictional mini-wiki and hand-made triples: linking, infobox extraction,
cardinality, the chain join and its drop rules; realdata: JEMHopQA chains rebuilt from its derivations."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from fixtures.drops import split

from tansaku.pipelines.multihop.cardinality import filter_unique_hops, relation_stats
from tansaku.pipelines.multihop.chains import Caps, chain_stage, derivations_of
from tansaku.pipelines.multihop.entities import ArticleIndex, entity_key
from tansaku.pipelines.multihop.triples import (
    TriplesError,
    index_from_triples,
    infobox_triples,
    link_triple,
    make_triple,
    read_triples_file,
)

MINIWIKI = Path(__file__).parent / "fixtures" / "miniwiki" / "miniwiki.jsonl"
JEMHOPQA_TRAIN = (Path(__file__).resolve().parents[1].parent / "shared" / "data" / "jemhopqa" / "corpus_ver1.2"
                  / "train_ver1.2.json")


def miniwiki_docs() -> list[dict]:
    docs = []
    for line in MINIWIKI.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        meta = {k: row[k] for k in ("source_text", "outgoing_link", "redirect")}
        docs.append({"id": row["id"], "title": row["title"], "text": row["text"], "meta": json.dumps(meta)})
    return docs


def miniwiki_index(docs) -> ArticleIndex:
    index = ArticleIndex()
    for d in docs:
        meta = json.loads(d["meta"])
        index.add(d["id"], d["title"], meta["redirect"], meta["outgoing_link"])
    return index




@pytest.fixture(scope="module")
def mini():
    docs = miniwiki_docs()
    index = miniwiki_index(docs)
    triples = [link_triple(t, index) for d in docs for t in infobox_triples(d)]
    hops, hop_drops = split(filter_unique_hops(triples))
    chains, chain_drops = split(chain_stage(hops, caps=Caps(None, None, None)))
    return {"docs": docs, "index": index, "triples": triples, "hops": hops, "hop_drops": hop_drops,
            "chains": chains, "chain_drops": chain_drops}


def test_mini_wiki_is_big_enough_and_has_infoboxes(mini):
    assert 30 <= len(mini["docs"]) <= 60
    assert all("{{" in json.loads(d["meta"])["source_text"] for d in mini["docs"])


def test_entity_normalization_and_linking(mini):
    assert entity_key("『硝子の灯台』") == entity_key("硝子の灯台 (映画)") == "硝子の灯台"
    index = mini["index"]
    assert index.link("水城 遥")[:2] == ("mw0008", "水城遥")          # redirect
    assert index.link("ユキムラ製菓")[2] == "redirect"
    assert index.link("硝子の灯台")[:2] == ("mw0015", "硝子の灯台")     # exact title beats the film
    assert index.link("『北の駅舎』")[1] == "北の駅舎"
    assert index.link("存在しない記事") is None
    # A bare name resolved through the outgoing links of the article it was found in.
    films = ArticleIndex()
    films.add("a", "灯台 (小説)")
    films.add("b", "灯台 (映画)")
    films.add("c", "監督X", outgoing=["灯台 (映画)"])
    assert films.link("灯台") is None                                # ambiguous without context
    assert films.link("灯台", from_doc="c")[:3] == ("b", "灯台 (映画)", "outgoing_link")


def test_infobox_extraction(mini):
    by = {(t["subject"], t["relation"]): [] for t in mini["triples"]}
    for t in mini["triples"]:
        by[t["subject"], t["relation"]].append(t)
    author = by["硝子の灯台", "著者"][0]
    assert author["object"] == "水城遥" and author["object_id"] == "mw0008" and author["source"] == "infobox"
    assert {t["object"] for t in by["硝子の灯台 (映画)", "出演者"]} == {"早乙女サキ", "黒木蓮"}
    assert by["水城遥", "代表作"][0]["object"] == "硝子の灯台"          # quotes around a link
    assert ("青葉県", "名前") not in by                                  # name fields are skipped
    assert all(not t["object"].startswith("Category") for t in mini["triples"])
    assert by["朝霧市", "市長"][0]["object_id"] is None                   # no article for the mayor


def test_cardinality_by_relation_buckets_equals_one_pass(mini, monkeypatch):
    """A dump is judged a bucket of relations at a time; the result must not depend on the buckets."""
    from tansaku.pipelines.multihop import cardinality

    def judged():
        return [x if isinstance(x, dict) else (x.reason, x.record["triple_id"])
                for x in filter_unique_hops(mini["triples"])]

    one = judged()
    monkeypatch.setattr(cardinality, "BUCKET_ROWS", 7)
    assert len(cardinality.relation_buckets(cardinality.hop_frame(mini["triples"]))) > 3
    assert judged() == one and any(isinstance(x, tuple) for x in one) and any(isinstance(x, dict) for x in one)


def test_cardinality_keeps_only_unique_answers(mini):
    stats = relation_stats(mini["triples"])
    assert stats["出生地"]["class"] == "N:1"
    assert stats["出演者"]["class"] in ("1:N", "N:N")
    assert not any(h["relation"] == "出演者" for h in mini["hops"])
    rows = [make_triple("甲", "色", o, source="t") for o in ("赤", "青")] + \
           [make_triple("乙", "色", "赤", source="t"), make_triple("丙", "色", "白", source="t"),
            make_triple("丁", "住所", "東京都", source="t"), make_triple("丁", "住所", "東京都港区", source="t")]
    linked = [link_triple(t, index_from_triples(rows)) for t in rows]
    kept, drops = split(filter_unique_hops(linked, threshold=0.6))
    assert drops == Counter({"multi_valued": 2, "granularity_variant": 1})
    address = next(k for k in kept if k["relation"] == "住所")
    assert address["object"] == "東京都港区" and address["object_aliases"] == ["東京都"]


def test_chain_pairing_and_rules(mini):
    found = {(c["subject"], *c["relations"], c["bridge"], c["answer"]) for c in mini["chains"]}
    assert ("硝子の灯台", "著者", "出生地", "水城遥", "朝霧市") in found
    assert ("雪村製菓", "創業者", "出生地", "雪村源蔵", "鳴沢市") in found
    chain = next(c for c in mini["chains"] if c["subject"] == "硝子の灯台" and c["relations"] == ["著者", "出生地"])
    assert derivations_of(chain) == [["硝子の灯台", "著者", ["水城遥"]], ["水城遥", "出生地", ["朝霧市"]]]
    assert chain["page_ids"] == ["mw0015", "mw0008"]
    # 水城遥 →出生地→ 朝霧市 →名誉市民→ 水城遥 returns to the start.
    assert not any(c["subject"] == "水城遥" and c["answer"] == "水城遥" for c in mini["chains"])
    # 朝霧市立図書館 →設計者→ 綾瀬拓真 →出生地→ 朝霧市: the answer is inside the question's subject.
    assert not any(c["subject"] == "朝霧市立図書館" and c["answer"] == "朝霧市" for c in mini["chains"])
    # 北の駅舎 →前作→ 風見鶏の夏 →前作→ 硝子の灯台 uses one relation twice.
    assert not any(c["relations"] == ["前作", "前作"] for c in mini["chains"])
    for reason in ("cycle", "answer_in_question", "same_relation"):
        assert mini["chain_drops"][reason] >= 1, reason
    for c in mini["chains"]:
        assert entity_key(c["answer"]) not in entity_key(c["subject"])
        assert c["relations"][0] != c["relations"][1]


def test_bridge_must_be_a_linked_article_and_caps_apply():
    index = ArticleIndex()
    index.add("d1", "本A")
    index.add("d2", "作家B")
    raw = [make_triple("本A", "著者", "作家B", source="t", doc_id="d1"),
           make_triple("作家B", "出生地", "町C", source="t", doc_id="d2"),
           make_triple("本A", "編集者", "編集者D", source="t", doc_id="d1"),   # 編集者D has no article
           make_triple("編集者D", "出生地", "町E", source="t")]
    hops = [link_triple(t, index) for t in raw]
    kept, drops = split(chain_stage(hops, caps=Caps(None, None, None)))
    assert [c["answer"] for c in kept] == ["町C"] and drops == Counter({"bridge_not_linked": 1})
    many = [make_triple(f"本{i}", "著者", "作家B", source="t") for i in range(6)] + \
           [make_triple("作家B", "出生地", "町C", source="t")]
    linked = [link_triple(t, index_from_triples(many)) for t in many]
    kept, drops = split(chain_stage(linked, caps=Caps(per_subject=None, per_bridge=4, per_relation_pair=None)))
    assert len(kept) == 4 and drops["cap_bridge"] == 2
    again, _ = split(chain_stage(linked, caps=Caps(per_subject=None, per_bridge=4, per_relation_pair=None)))
    assert [c["chain_id"] for c in again] == [c["chain_id"] for c in kept]   # caps are deterministic


def test_triples_files(tmp_path):
    good = tmp_path / "t.jsonl"
    good.write_text('{"subject": "本A", "relation": "著者", "object": "作家B"}\n\n', encoding="utf-8")
    assert [t["object"] for t in read_triples_file(good)] == ["作家B"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"subject": "本A", "relation": "著者", "object": "作家B"}\n{"subject": "x"}\n', encoding="utf-8")
    with pytest.raises(TriplesError, match=r"bad.jsonl:2: needs"):
        list(read_triples_file(bad))
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(TriplesError, match="broken.jsonl:1"):
        list(read_triples_file(broken))
    with pytest.raises(TriplesError, match="no such file"):
        list(read_triples_file(tmp_path / "missing.jsonl"))
    jem = tmp_path / "jem.json"
    jem.write_text(json.dumps([{"qid": "q1", "type": "compositional", "question": "?", "answer": "町C",
                                "derivations": [["本A", "著者", ["作家B"]], ["作家B", "出生地", ["町C", "町C"]]],
                                "page_ids": ["11", "22"], "time_dependent": False}], ensure_ascii=False))
    triples = list(read_triples_file(jem))
    assert [(t["subject"], t["object"], t["subject_id"]) for t in triples] == [("本A", "作家B", "11"),
                                                                               ("作家B", "町C", "22")]


@pytest.mark.realdata
def test_jemhopqa_compositional_chains_are_rebuilt_from_their_derivations():
    if not JEMHOPQA_TRAIN.exists():
        pytest.skip("../shared/data/jemhopqa is absent")
    from tansaku.pipelines.multihop.jemhopqa import chain_recall

    join_only = chain_recall(JEMHOPQA_TRAIN, filter_cardinality=False)
    report = chain_recall(JEMHOPQA_TRAIN)
    print(json.dumps({"join_only": join_only["recall"], "recall": report["recall"], "misses": report["misses"]},
                     ensure_ascii=False))
    assert report["compositional"] == 392
    # Linking + join alone: only the rule drops and one annotation without a shared bridge are lost.
    assert join_only["recall"] >= 0.99
    assert set(join_only["misses"]) <= {"chain:same_relation", "chain:answer_in_question", "no_shared_bridge"}
    # With the cardinality rule (unique answers only) the misses are hops whose subject has several values in
    # the data itself, or whose relation the table calls set-valued (子供, メンバー) — by design, each named.
    assert report["recall"] >= 0.95
    assert all(c.startswith(("cardinality:", "chain:", "no_shared_bridge")) for c in report["misses"])


# ---------------------------------------------------------------- join_chains against a plain-Python reference

def reference_chains(triples: list[dict], caps: Caps, seed: int, require_linked_bridge: bool = True) -> list:
    """The chain rules written out naively: every (hop 1, hop 2) pair with bridge = hop 1 object key = hop 2
    subject key, the first rule it breaks, then the caps in turn over the alive pairs in the seeded order.
    The order is the seeded polars hash of the pair (seeded hash of id 1, seeded hash of id 2) (row numbers
    break ties) — the one primitive borrowed from polars; everything else is independent of chains.py."""
    import polars as pl

    by_subject: dict[str, list[int]] = {}
    for j, t in enumerate(triples):
        by_subject.setdefault(t["subject_key"], []).append(j)
    pairs = []
    for i, t1 in enumerate(triples):
        for j in by_subject.get(t1["object_key"], []):
            t2 = triples[j]
            s1, bridge, answer = t1["subject_key"], t1["object_key"], t2["object_key"]
            if answer == s1 or bridge == s1 or answer == bridge:
                reason = "cycle"
            elif t1["relation"] == t2["relation"]:
                reason = "same_relation"
            elif t2["object"] in t1["subject"] or t2["object"] in t1["relation"] or t2["object"] in t2["relation"]:
                reason = "answer_in_question"
            elif require_linked_bridge and t1["object_id"] is None:
                reason = "bridge_not_linked"
            else:
                reason = None
            pairs.append([i, j, reason, f"{t1['triple_id']}:{t2['triple_id']}"])
    ids = pl.Series([t["triple_id"] for t in triples], dtype=pl.String).hash(seed).to_list()
    hashes = pl.DataFrame({"a": [ids[p[0]] for p in pairs], "b": [ids[p[1]] for p in pairs]},
                          schema={"a": pl.UInt64, "b": pl.UInt64}).select(pl.struct("a", "b").hash(seed)).to_series().to_list()
    pairs = [p for _, p in sorted(zip(hashes, pairs), key=lambda hp: (hp[0], hp[1][0], hp[1][1]))]
    for reason, key, cap in (("cap_subject", lambda i, j: triples[i]["subject_key"], caps.per_subject),
                             ("cap_bridge", lambda i, j: triples[i]["object_key"], caps.per_bridge),
                             ("cap_relation_pair", lambda i, j: (triples[i]["relation"], triples[j]["relation"]),
                              caps.per_relation_pair)):
        if cap is None:
            continue
        seen: Counter = Counter()
        for p in pairs:
            if p[2] is None:
                seen[key(p[0], p[1])] += 1
                if seen[key(p[0], p[1])] > cap:
                    p[2] = reason
    return pairs


def tricky_triples(n: int, seed: int, repeated_ids: bool = False) -> list[dict]:
    """Random triples over a tiny vocabulary built so that every rule fires often: names nested in each other
    (北, 北町, 北町駅), relation names containing names (北町長), self-loops, back-and-forth edges, unlinked
    objects, display names that differ from the join key, an empty object now and then."""
    import random

    rng = random.Random(seed)
    names = ["北", "町", "北町", "北町駅", "川", "川町", "山", "山川", "駅", "東山", "長", "東"]
    names += [f"{a}{b}" for a in "北南東西中" for b in "山川田野"]
    names += [f"{a}{b}{c}" for a in "北南東西中" for b in "山川田野" for c in "町村駅市"]
    relations = ["出身地", "所在地", "北町長", "川", "著者", "隣町", "山の名"]
    rows = []
    for i in range(n):
        s = rng.choice(names)
        o = s if rng.random() < 0.05 else ("" if rng.random() < 0.01 else rng.choice(names))
        subject = f"『{s}』" if rng.random() < 0.2 else s       # display name, same key
        rows.append({"triple_id": f"t{rng.randrange(n // 4) if repeated_ids else i}", "subject": subject,
                     "relation": rng.choice(relations), "object": o, "subject_key": s, "object_key": o,
                     "subject_id": f"id-{s}", "object_id": None if rng.random() < 0.15 else f"id-{o}",
                     "subject_title": s, "object_title": o, "doc_id": f"d{i % 50}", "source": "test",
                     "evidence": None, "object_aliases": []})
    return rows


CAP_SETTINGS = [Caps(None, None, None), Caps(), Caps(1, 3, 7), Caps(None, 2, None)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("caps", CAP_SETTINGS)
def test_join_chains_matches_a_plain_python_reference(seed, caps):
    from tansaku.pipelines.multihop.chains import join_chains, triples_frame

    triples = tricky_triples(2500, seed)
    expected = reference_chains(triples, caps, seed)
    pairs = join_chains(triples_frame(triples), caps, seed, columns=("chain_id",))
    got = [list(r) for r in pairs.select("row_1", "row_2", pl_string("drop"), "chain_id").iter_rows()]
    assert got == expected                          # same pairs, same order, same reason for each
    reasons = Counter(p[2] for p in expected)
    for rule in ("cycle", "same_relation", "answer_in_question", "bridge_not_linked"):
        assert reasons[rule] >= 5, (rule, reasons)  # the data exercises every rule
    # The stage built on it: the same kept chains (in the same order) and the same drop counts.
    kept, drops = split(chain_stage(triples, caps=caps, seed=seed))
    assert [c["chain_id"] for c in kept] == [p[3] for p in expected if p[2] is None]
    assert drops == Counter(p[2] for p in expected if p[2] is not None)


def pl_string(name: str):
    import polars as pl

    return pl.col(name).cast(pl.String)


def test_join_chains_repeated_ids_unlinked_allowed_and_columns():
    from tansaku.pipelines.multihop.chains import join_chains, triples_frame

    triples = tricky_triples(2000, 5, repeated_ids=True)    # repeated chain ids: row numbers break ties
    frame = triples_frame(triples)
    for caps in (Caps(), Caps(2, 2, 2)):
        expected = reference_chains(triples, caps, 7, require_linked_bridge=False)
        pairs = join_chains(frame, caps, 7, require_linked_bridge=False, columns=("chain_id", "object_2"))
        got = [list(r) for r in pairs.select("row_1", "row_2", pl_string("drop"), "chain_id").iter_rows()]
        assert got == expected
        assert "bridge_not_linked" not in {p[2] for p in expected}
        assert pairs["object_2"].to_list() == [triples[p[1]]["object"] for p in expected]
    full = join_chains(frame, Caps(), 7)                    # columns=None: every column of both hops
    assert {"chain_id", "subject_1", "object_aliases_2", "triple_id_2"} <= set(full.columns)
    with pytest.raises(ValueError, match="no column 'subject_3'"):
        join_chains(frame, Caps(), 7, columns=("subject_3",))
    empty = join_chains(triples_frame([]), Caps(), 0)
    assert empty.height == 0 and list(split(chain_stage([]))[1].elements()) == []
