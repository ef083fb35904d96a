"""``build_egov`` end to end: article dataset + question dataset through the engine and store, with the
cloze generator and with a scripted LLM; the real 民法/行政手続法 under ``realdata``."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tansaku.core.context import BuildContext
from tansaku.core.llm import ScriptedLLM
from tansaku.core.store import read_manifest, read_rows
from tansaku.envs.tasks import TASKS
from tansaku.pipelines.egov.build import build_egov
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.egov.leak import audit

FIX = Path(__file__).parent / "fixtures" / "egov"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "laws"
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "egov"
QUESTION_COLUMNS = {"question", "choices", "answer_index", "answer", "explanation", "article_id", "law_title",
                    "generator", "retrieval_rank"}


def check_rows(rows: list[dict]) -> None:
    for r in rows:
        assert QUESTION_COLUMNS <= set(r)
        assert len(r["choices"]) == 4 and len(set(r["choices"])) == 4
        assert 0 <= r["answer_index"] <= 3 and r["choices"][r["answer_index"]] == r["answer"]
    assert TASKS["egov_mcq"].gold_failures(rows) == []  # every gold scores 1.0 under the egov_mcq reward
    assert audit(rows) == {}               # the independent checker reports 0 leaks over the final rows


@pytest.fixture(scope="module")
def fixture_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("egov") / "egov_mcq_fixture"
    return out, build_egov(EgovConfig(laws=[FIX, EXAMPLES]), out, BuildContext(quiet=True))


def test_cloze_build_writes_both_datasets(fixture_build):
    out, manifest = fixture_build
    train, test = read_rows(out), read_rows(out, "test")
    rows = train + test
    assert len(train) == manifest["splits"]["train"] and len(test) == manifest["splits"]["test"]
    assert len(rows) >= 20 and test
    # The held-out split keys on the source article: no article has questions on both sides.
    assert manifest["heldout"] == {"split": "test", "share": 0.2, "key": "article_id", "fallback_key": "question",
                                   "seed": 0, "rows": len(test)}
    assert not {r["article_id"] for r in train} & {r["article_id"] for r in test}
    assert f"**Held-out split:** `test` ({len(test)} rows)" in (out / "README.md").read_text(encoding="utf-8")
    check_rows(rows)
    assert {r["generator"] for r in rows} == {"rules"}
    assert all(r["retrieval_rank"] is None or 1 <= r["retrieval_rank"] <= 20 for r in rows)
    assert sum(r["retrieval_rank"] == 1 for r in rows) >= len(rows) // 2
    stages = {s["name"]: s for s in manifest["stages"]}
    assert list(stages) == ["generate", "leak_filter", "dedup", "retrieval", "balance", "gold_check", "leak_audit",
                            "prompt"]
    assert stages["leak_audit"]["dropped"] == {} and stages["gold_check"]["dropped"] == {}
    assert stages["generate"]["dropped"]["deleted_article"] == 2
    # the article dataset: contract columns, funnel of skipped files by reason, indexable
    articles = read_rows(out / "articles")
    assert {"law_id", "article_num", "article_title", "paragraphs", "is_suppl", "text", "meta"} <= set(articles[0])
    art_manifest = read_manifest(out / "articles")
    assert art_manifest["stages"][0]["dropped"] == {"dtd_declared": 2, "not_xml": 1}
    assert art_manifest["config"]["keyword_fields"] == ["law_id", "law_title", "law_type", "era"]
    assert {r["article_id"] for r in rows} <= {a["id"] for a in articles}
    assert "leak_audit" in (out / "README.md").read_text(encoding="utf-8")


def test_rebuild_is_idempotent_and_loads_with_datasets(fixture_build):
    from datasets import load_dataset

    out, manifest = fixture_build
    again = build_egov(EgovConfig(laws=[FIX, EXAMPLES]), out, BuildContext(quiet=True))
    assert again["version"] == manifest["version"]
    ds = load_dataset(str(out), split="train", cache_dir=str(out.parent / "hf-cache"))
    assert len(ds) == manifest["splits"]["train"] and "law_id" in ds.column_names and "paragraphs" not in ds.column_names


def test_cli_wires_build_egov(tmp_path):
    from typer.testing import CliRunner

    from tansaku.cli import synth_app

    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(EXAMPLES), "--out", str(tmp_path / "o"),
                                            "--limit", "5", "--quiet"])
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "o")
    assert rows and len({r["article_id"] for r in rows}) <= 5
    check_rows(rows)


def scripted_mcq(request) -> str:
    """A stand-in LLM: generator prompts get a question built from the article's first 期間; judge prompts get
    a verdict (one article is judged poor, one question leaks its article number)."""
    prompt = request.messages[0]["content"]
    if "ルーブリック" in prompt:
        bad = int("撤去した自転車を保管場所において" not in prompt)
        return json.dumps({"single_correct": bad, "grounded": bad, "plausible_distractors": 1,
                           "no_leak": 1, "comment": "ok"})
    article = prompt.split("【条文】", 1)[1]
    title = re.search(r"第[一二三四五六七八九十]+条", article)
    period = re.search(r"[一二三四五六七八九十百]+(日|年|月)", article.split("\n", 2)[-1])
    if period is None:
        return "条文に期間がありません。"
    answer = period.group(0)
    others = [x + period.group(1) for x in ("二十", "四十", "九十", "十二", "八") if x + period.group(1) != answer][:3]
    caption = re.search(r"\n（([^）]+)）\n", article)
    question = f"「{caption.group(1) if caption else ''}」に関する規定で定められている期間はどれか。"
    if "第三条" in title.group(0):
        question = f"{title.group(0)}で定められている期間はどれか。"  # leaks: must be dropped
    return json.dumps({"question": question, "choices": [*others[:2], answer, others[2]], "answer_index": 2,
                       "explanation": f"{title.group(0)}による。"}, ensure_ascii=False)


def test_llm_build_with_scripted_client(tmp_path):
    client = ScriptedLLM(scripted_mcq)
    manifest = build_egov(EgovConfig(laws=[EXAMPLES], llm=client), tmp_path / "llm", BuildContext(quiet=True))
    rows = read_rows(tmp_path / "llm")
    check_rows(rows)
    assert rows and {r["generator"] for r in rows} == {"llm:mcq_generate_v1"}
    assert all(r["quality"] == 1.0 for r in rows)
    assert all(r["quality_detail"]["grounded"] == 1.0 and r["prompt"][-1]["content"] for r in rows)  # typed, no JSON text
    stages = {s["name"]: s["dropped"] for s in manifest["stages"]}
    assert stages["leak_filter"] == {"leak_provision_number": 1}   # 第三条 of the farm law
    assert stages["judge"] == {"low_quality": 1}                   # 保管 (bicycle law) judged poor
    assert stages["generate"]["llm_bad_json"] >= 1 and stages["dedup"] == {}
    assert manifest["llm"]["backend"] == "scripted" and manifest["config"]["generator"] == "llm"


@pytest.mark.realdata
@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/egov is absent")
def test_realdata_build_minpo_and_apa(tmp_path):
    manifest = build_egov(EgovConfig(laws=REAL), tmp_path / "real", BuildContext(quiet=True))
    rows = read_rows(tmp_path / "real") + read_rows(tmp_path / "real", "test")  # balance is over both splits
    assert len(rows) >= 150
    check_rows(rows)
    counts = Counter(r["answer_index"] for r in rows)
    assert all(abs(c / len(rows) - 0.25) <= 0.02 for c in counts.values()), counts
    assert {r["law_title"] for r in rows} == {"民法", "行政手続法"}
    assert manifest["articles"]["rows"] == 1444
    ranked = [r["retrieval_rank"] for r in rows if r["retrieval_rank"] is not None]
    assert len(ranked) >= len(rows) // 2
