"""`synth build corpus`: every input format, normalization, drops with reasons, CLI, real WAC data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus.build import CorpusInputError, build_corpus, detect_format, read_documents
from tansaku.pipelines.corpus.config import CorpusConfig

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
runner = CliRunner()


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def test_jsonl_normalizes_keeps_original_and_drops_with_reasons(tmp_path):
    src = _jsonl(tmp_path / "docs.jsonl", [
        {"id": "a", "title": "霧島　硝子", "text": "霧島硝子は、架空の作家。\r\n\n\n\n代表作は『ＡＢＣ』。", "outgoing_link": ["灯台"]},
        {"id": "b", "title": "灯台", "text": "   "},
        {"id": "a", "title": "重複", "text": "別の本文。"},
        {"id": "c", "title": "写し", "text": "霧島硝子は、架空の作家。\n\n代表作は『ABC』。"},
        "{broken json",
        {"title": "無番号", "text": "番号のない文書。"},
    ])
    manifest = build_corpus(CorpusConfig(input=src), tmp_path / "out", BuildContext(quiet=True))
    rows = read_rows(tmp_path / "out")
    assert [r["id"] for r in rows][:1] == ["a"] and len(rows) == 2
    first = rows[0]
    assert first["title"] == "霧島硝子" and first["text"] == "霧島硝子は、架空の作家。\n\n代表作は『ABC』。"
    meta = json.loads(first["meta"])
    assert meta["outgoing_link"] == ["灯台"] and meta["original_text"].startswith("霧島硝子は")
    assert rows[1]["id"].startswith("doc-")  # stable id derived from the content
    stages = {s["name"]: s for s in manifest["stages"]}
    assert stages["normalize"]["dropped"] == {"bad_json_line": 1, "empty_text": 1}
    assert stages["dedup"]["dropped"] == {"duplicate_id": 1, "duplicate_text": 1}
    assert manifest["inputs"][0]["sha256"] and manifest["config"]["detected_format"] == "jsonl"


def test_cirrus_dump(tmp_path):
    lines = [
        {"index": {"_type": "_doc", "_id": "101"}},
        {"title": "青海町", "text": "青海町は架空の町。", "namespace": 0, "outgoing_link": ["白砂県"],
         "source_text": "{{基礎情報 町\n|所属 = 白砂県\n}}", "redirect": [{"namespace": 0, "title": "青海"}],
         "category": ["架空の町"]},
        {"index": {"_id": "102"}},
        {"title": "ノート:青海町", "text": "議論", "namespace": 1},
    ]
    path = tmp_path / "jawiki-20260101-cirrussearch-content.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    assert detect_format(path) == "cirrus"
    manifest = build_corpus(CorpusConfig(input=path), tmp_path / "out", BuildContext(quiet=True))
    (row,) = read_rows(tmp_path / "out")
    meta = json.loads(row["meta"])
    assert row["id"] == "101" and row["url"].startswith("https://ja.wikipedia.org/wiki/")
    assert meta["redirect"] == ["青海"] and "基礎情報" in meta["source_text"]
    assert manifest["stages"][0]["dropped"] == {"not_an_article": 1}


def test_wac_org_files_put_parentheticals_back(tmp_path):
    org = tmp_path / "wac" / "org" / "wiki0001"
    org.mkdir(parents=True)
    (org / "wiki00010001.org").write_text(
        "# S-ID:wiki00010001-00-01 括弧削除 KNP:5.0\n霧島硝子は、北海時代の作家。\n"
        "# S-ID:wiki00010001-00-02 括弧始:（ 括弧終:） 括弧位置:4 KNP:5.0\nきりしま しょうこ\n"
        "# S-ID:wiki00010001-00-03 括弧始:（ 括弧終:） 括弧位置:21 KNP:5.0\n架空\n"
        "# S-ID:wiki00010001-01 KNP:5.0\n灯台守の娘。\n", encoding="utf-8")
    (tmp_path / "wac" / "id").mkdir()
    (tmp_path / "wac" / "id" / "dev.id").write_text("wiki00010001\n")
    build_corpus(CorpusConfig(input=tmp_path / "wac"), tmp_path / "out", BuildContext(quiet=True))
    (row,) = read_rows(tmp_path / "out")
    assert row["text"] == "霧島硝子(きりしま しょうこ)は、北海時代(架空)の作家。灯台守の娘。"
    assert row["title"] == "霧島硝子" and json.loads(row["meta"])["split"] == "dev"


def test_jaquad(tmp_path):
    doc = {"data": [{"title": "架空島", "paragraphs": [{"context": "架空島は海にある。", "qas": []},
                                                    {"context": "架空島は海にある。", "qas": []},
                                                    {"context": "人口は三人。", "qas": []}]}]}
    (tmp_path / "jq").mkdir()
    (tmp_path / "jq" / "a.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    build_corpus(CorpusConfig(input=tmp_path / "jq"), tmp_path / "out", BuildContext(quiet=True))
    (row,) = read_rows(tmp_path / "out")
    assert row["text"] == "架空島は海にある。\n\n人口は三人。" and row["source"] == "jaquad"


def test_bad_paths_and_formats(tmp_path):
    with pytest.raises(CorpusInputError, match="no such file"):
        list(read_documents(tmp_path / "missing.jsonl"))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(CorpusInputError, match="--format"):
        detect_format(tmp_path / "x.csv")
    result = runner.invoke(synth_app, ["build", "corpus", "--input", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no such file" in result.output and "Traceback" not in result.output


def test_cli_build_info_and_help(tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", [{"id": "1", "title": "甲", "text": "甲は乙である。"}])
    result = runner.invoke(synth_app, ["build", "corpus", "--input", str(src), "--out", str(tmp_path / "o"), "-q"])
    assert result.exit_code == 0, result.output
    info = runner.invoke(synth_app, ["info", str(tmp_path / "o"), "--json"])
    assert info.exit_code == 0 and json.loads(info.stdout)["splits"] == {"train": 1}
    for args in (["--help"], ["build", "--help"], ["build", "corpus", "--help"], ["model", "--help"]):
        assert runner.invoke(synth_app, args).exit_code == 0


@pytest.mark.realdata
@pytest.mark.skipif(not (DATA / "jawiki").exists(), reason="../shared/data/jawiki is absent")
def test_real_wikipedia_annotated_corpus(tmp_path):
    manifest = build_corpus(CorpusConfig(input=DATA / "jawiki" / "WikipediaAnnotatedCorpus"), tmp_path / "wac", BuildContext(quiet=True))
    rows = read_rows(tmp_path / "wac")
    n_files = len(list((DATA / "jawiki" / "WikipediaAnnotatedCorpus" / "org").rglob("*.org")))
    assert manifest["stages"][0]["received"] == n_files
    assert len(rows) == manifest["splits"]["train"] > 3900
    by_id = {r["id"]: r for r in rows}
    assert by_id["wiki00010002"]["title"] == "足利尊氏"
    assert "室町時代(南北朝時代)前期" in by_id["wiki00010002"]["text"]
    assert (tmp_path / "wac" / "README.md").exists() and read_manifest(tmp_path / "wac")["pipeline"] == "corpus"
