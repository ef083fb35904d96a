"""bench/zh_detect_fp.py's core on a small fixture: units, false-positive counts per document and per unit, recall
per style and split; and, with the shared data, the held-out false-positive rate itself.

    pytest tests/test_zh_detect_fp.py -q              # the realdata test needs ../shared/data (skipped without)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tansaku.envs.zh_detect import chinese_spans, contains_chinese

BENCH = Path(__file__).resolve().parents[1] / "bench" / "zh_detect_fp.py"
spec = importlib.util.spec_from_file_location("zh_detect_fp", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)

DOCS = [
    "第一条　私権は、公共の福祉に適合しなければならない。\n２　権利の行使及び義務の履行は、信義に従い誠実に行わなければならない。",
    "公正証書ナルトキハ其日付ヲ以テ確定日付トス",
    "「衣帶漸寬終不悔 為伊消得人憔悴」は中国の古典詩です。短い。",  # a quoted Chinese poem: flagged (counted as FP)
    "OK.",
]
ROWS = [
    {"text": "我们需要先搜索一下。", "label": 1, "style": "zh_hans", "split": "dev"},
    {"text": "這個選項不對。", "label": 1, "style": "fragment", "split": "heldout"},
    {"text": "検索する。然后、結果を見る。", "label": 1, "style": "word", "split": "heldout"},  # < 4 Han: missed
    {"text": "まず民法を検索します。", "label": 0, "style": "ja_reasoning", "split": "dev"},
]


def test_units_are_lines_cut_after_sentence_ends():
    assert bench.units("一文目。二文目！\n\n三行目\n  ") == ["一文目。", "二文目！", "三行目"]
    assert bench.units("") == []


def test_false_positive_stats_count_documents_and_units_with_four_han():
    stats = bench.false_positive_stats(DOCS, contains_chinese, chinese_spans)
    assert (stats["documents"], stats["flagged_documents"]) == (4, 1)
    assert stats["units"] == 6  # 2 + 1 + 2 + 1
    assert stats["units_4_han"] == 4  # 「短い。」 and "OK." have fewer than four Han characters
    assert stats["flagged_units"] == 1 and stats["unit_rate"] == pytest.approx(0.25)
    assert stats["flagged_examples"][0]["spans"] == ["「衣帶漸寬終不悔 為伊消得人憔悴」"]
    total = bench.pooled([stats, bench.false_positive_stats([DOCS[0]], contains_chinese)])
    assert (total["documents"], total["flagged_documents"], total["units_4_han"]) == (5, 1, 6)
    assert bench.false_positive_stats([], contains_chinese)["document_rate"] == 0.0


def test_recall_stats_per_style_split_and_headline():
    stats = bench.recall_stats(ROWS, contains_chinese)
    assert stats["all"] == {"items": 3, "detected": 2, "recall": pytest.approx(2 / 3)}
    assert stats["headline"]["recall"] == 1.0  # `word` is left out of the headline
    assert stats["style=word"]["detected"] == 0 and stats["split=heldout"]["items"] == 2
    assert stats["headline_by_split"]["heldout"] == {"items": 1, "detected": 1, "recall": 1.0}
    assert [m["text"] for m in stats["missed"]] == ["検索する。然后、結果を見る。"]


def test_another_detector_file_can_be_measured():
    module = bench.load_detector(str(Path(__file__).resolve().parents[1] / "envs" / "zh_detect.py"))
    assert module.contains_chinese("我们需要先搜索一下。") and not module.contains_chinese("民法を検索する。")


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.mark.realdata
@pytest.mark.skipif(not (SHARED / "jawiki" / "JaQuAD").is_dir(), reason="no shared data")
def test_held_out_japanese_stays_under_half_a_percent():
    """行政手続法's articles, JaQuAD's contexts, MT-Bench's answers (no e-Gov question build: that is the bench's)."""
    articles = bench.egov_articles(SHARED / "egov")
    sources = [articles["行政手続法"], bench.jaquad_contexts(SHARED / "jawiki" / "JaQuAD"),
               bench.mtbench_answers(SHARED / "ja_mt_bench")]
    total = bench.pooled([bench.false_positive_stats(texts, contains_chinese) for texts in sources])
    assert total["documents"] > 1500 and total["units_4_han"] > 10000
    assert total["document_rate"] <= bench.TARGET_FP and total["unit_rate"] <= bench.TARGET_FP
    tune = bench.false_positive_stats(articles["民法"], contains_chinese)
    assert tune["flagged_documents"] == 0
