"""deepresearch keyword groups and the whole build on real Wikipedia text (skipped without ../shared/data).

WikipediaAnnotatedCorpus: 3,979 short article leads; JaQuAD dev: 101 long articles. Measured when written
(2 CPU cores): WAC 106 groups in 1.3 s, JaQuAD 33 groups in 1.6 s; the bounds below are conservative.

    pytest tests/test_deepresearch_realdata.py -q -m realdata
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tansaku.core.context import BuildContext
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.deepresearch.keywords import KeywordConfig, keyword_groups

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WAC = DATA / "jawiki" / "WikipediaAnnotatedCorpus"
JAQUAD = DATA / "jawiki" / "JaQuAD" / "data" / "dev"

pytestmark = [pytest.mark.realdata,
              pytest.mark.skipif(not (WAC.exists() and JAQUAD.exists()), reason=f"{DATA} is absent (no shared data)")]

# Words that describe the text, not a topic: none may seed or join a group.
GENERIC = {"意味", "用語", "一部", "場合", "周", "施設", "名称", "正式名称", "一定期間", "日本国内", "プロジェクト",
           "デザイン", "エピソード", "イメージ", "オリジナル", "メンバー", "University", "Inc.", "ジョン", "小林"}
MIN_GROUPS = {"wac": 60, "jaquad": 15}
# Hand-checked clusters: a real corpus must give at least one group with two keywords of each.
CLUSTERS = {
    "wac": [{"大韓民国", "韓国", "ソウル", "朝鮮半島", "北朝鮮", "朝鮮民主主義人民共和国", "李氏朝鮮"},
            {"アメリカ合衆国", "カリブ海", "メキシコ", "カナダ", "テキサス州", "アラバマ州", "ニューヨーク"}],
    "jaquad": [{"江戸", "江戸時代", "明治", "明治時代", "慶長", "慶応", "安政", "大坂", "長崎", "横浜", "京都"},
               {"イングランド", "スコットランド", "ロンドン", "英国", "アイルランド", "エリザベス1世"}],
}
_ASCII_WORD = re.compile(r"^[\x21-\x7e]+$")


def _corpus(name, src, root):
    from tansaku.core.store import iter_rows
    from tansaku.pipelines.corpus.build import build_corpus

    build_corpus(CorpusConfig(input=src), root / name, BuildContext(quiet=True))
    return root / name, list(iter_rows(root / name))


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("dr_real")
    return {"wac": _corpus("wac", WAC, root), "jaquad": _corpus("jaquad", JAQUAD, root)}


@pytest.mark.parametrize("name", ["wac", "jaquad"])
def test_real_groups_are_specific_and_span_articles(corpora, name):
    config = KeywordConfig()
    _, docs = corpora[name]
    groups = keyword_groups(docs, config)
    assert len(groups) >= MIN_GROUPS[name], len(groups)
    max_df = config.thresholds(len(docs))["max_df"]
    text_of = {d["id"]: d["title"] + "\n" + d["text"] for d in docs}
    for g in groups:
        keywords = g["keywords"]
        assert len(keywords) == config.group_size and len(set(keywords)) == len(keywords)
        assert not GENERIC & set(keywords), keywords
        assert all(config.min_df <= df <= max_df for df in g["keyword_df"]), g
        # ASCII keywords are acronyms (NHK, FIFA), never English words lifted from a parenthesis.
        assert all(k.isupper() for k in keywords if _ASCII_WORD.match(k)), keywords
        assert not any(a != b and a in b for a in keywords for b in keywords), keywords  # no nested pair
        assert len(g["doc_ids"]) >= 3 and len(set(g["doc_ids"])) == len(g["doc_ids"])
        for doc_id in g["doc_ids"]:  # each spanned article really names two of the keywords
            assert sum(k in text_of[doc_id] for k in keywords) >= 2, (keywords, doc_id)
        assert g["titles"] == [next(d["title"] for d in docs if d["id"] == i) for i in g["doc_ids"]]
    for cluster in CLUSTERS[name]:
        assert any(len(cluster & set(g["keywords"])) >= 2 for g in groups), cluster
    assert keyword_groups(docs, config) == groups  # deterministic


def test_real_groups_not_answerable_from_one_page(corpora):
    """No article's own keyword set holds a whole group (keywords are token-aligned, so a plain substring
    test would also count 「日本」 inside 「日本語」)."""
    from tansaku.pipelines.deepresearch.keywords import document_keywords, specific_title

    config = KeywordConfig()
    _, docs = corpora["jaquad"]
    titles = frozenset(d["title"] for d in docs if specific_title(d["title"], config))
    found = {d["id"]: document_keywords(d, titles, config) for d in docs}
    for g in keyword_groups(docs, config):
        assert not any(set(g["keywords"]) <= kws for kws in found.values()), g["keywords"]


def test_build_deepresearch_on_real_sample(corpora, tmp_path):
    from tansaku.core.store import read_rows
    from tansaku.envs.search import build_index
    from tansaku.pipelines.deepresearch.build import build_deepresearch

    corpus, docs = corpora["jaquad"]
    build_index(corpus, tmp_path / "index")
    config = DeepResearchConfig(corpus=corpus, index=tmp_path / "index", llm="scripted:deepresearch", limit=6)
    manifest = build_deepresearch(config, tmp_path / "out", BuildContext(quiet=True))
    rows = read_rows(tmp_path / "out")
    assert rows and manifest["splits"]["train"] == len(rows)
    assert manifest["config"]["keyword_thresholds"] == {"n_docs": len(docs), "min_df": 2, "max_df": 11}
    ids = {d["id"] for d in docs}
    for r in rows:
        assert len(r["supporting_doc_ids"]) >= 2 and set(r["supporting_doc_ids"]) <= ids
        assert r["instruction"] and r["rubric"] and not GENERIC & set(r["keywords"])
