"""Index building and opening: passages, keyword fields of a law-like dataset, reopening in a fresh
process (tokenizers re-registered), safe rebuilds, the CLI entry points.

    pytest tests/test_search_index.py -q
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tansaku.envs.search import QueryError, build_index, build_index_cli, open_index, search_cli
from tansaku.envs.search.documents import DatasetError, chunk_document

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "search"
_spec = importlib.util.spec_from_file_location("search_fixture", FIX / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)

LAW_ROWS = [
    {"id": f"L{law}-{n}", "title": f"{name} 第{n}条", "text": text, "url": None, "source": "egov", "meta": "{}",
     "law_title": name, "article_num": str(n), "is_suppl": n == 9}
    for law, name, arts in [
        (1, "北浜県文化財保護条例", ["文化財の指定は、教育委員会が行う。", "所有者は、文化財を適切に管理しなければならない。"]),
        (2, "北浜県漁業調整規則", ["タコ漁は、六月から七月まで禁止する。", "漁具の制限は、知事が定める。"]),
    ]
    for n, text in enumerate(arts, 1)
]


def test_chunks_cover_text_exactly():
    row = {"id": "d", "title": "t", "text": "あ。" * 300 + "い" * 500}
    chunks = chunk_document(row, 100)
    assert "".join(c["text"] for c in chunks) == row["text"]
    assert all(len(c["text"]) <= 100 for c in chunks)
    assert [c["offset"] for c in chunks] == [sum(len(x["text"]) for x in chunks[:i]) for i in range(len(chunks))]
    assert {c["chunk_id"] for c in chunks} == {f"d#{i}" for i in range(len(chunks))}
    assert chunks[0]["text"].endswith("。")  # cut at a sentence end when one fits


def test_law_dataset_keyword_filters(tmp_path):
    ds = fixture.write_dataset(tmp_path / "law", LAW_ROWS, keyword_fields=("law_title", "article_num", "is_suppl"))
    meta = build_index(ds, tmp_path / "ix")
    assert meta["documents"] == 4 and meta["keyword_fields"] == ["law_title", "article_num", "is_suppl"]
    b = open_index(tmp_path / "ix")
    q = {"bool": {"must": [{"match": {"text": "禁止"}}], "filter": [{"term": {"law_title": "北浜県漁業調整規則"}}]}}
    assert [h.doc_id for h in b.search(q).hits] == ["L2-1"]
    q = {"bool": {"filter": [{"term": {"article_num": 2}}], "must_not": [{"term": {"law_title": "北浜県漁業調整規則"}}]}}
    assert [h.doc_id for h in b.search(q).hits] == ["L1-2"]
    assert b.get("L1-1")["law_title"] == ["北浜県文化財保護条例"]
    with pytest.raises(QueryError, match="use one of: doc_id, source, title.keyword, law_title"):
        b.search({"term": {"chapter": "1"}})


def test_reopen_in_fresh_process_keeps_phrases_exact(tmp_path):
    ds = fixture.write_dataset(tmp_path / "ds")
    build_index(ds, tmp_path / "ix")
    code = ("from tansaku.envs.search import open_index; b = open_index(%r); "
            "print(sorted(h.doc_id for h in b.search({'match_phrase': {'text': '港町大漁祭り'}}, 10).hits))")
    out = subprocess.run([sys.executable, "-c", code % str(tmp_path / "ix")], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['f006', 'f014', 'f029']"


def test_rebuild_replaces_and_failed_build_keeps_old(tmp_path):
    ds = fixture.write_dataset(tmp_path / "ds")
    build_index(ds, tmp_path / "ix")
    bad = tmp_path / "bad"
    (bad / "data").mkdir(parents=True)
    (bad / "data" / "train-00000-of-00001.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError):  # pyarrow.ArrowInvalid
        build_index(bad, tmp_path / "ix")
    assert open_index(tmp_path / "ix").get("f001")["title"] == "雪村製菓"  # the old index survived
    with pytest.raises(DatasetError, match="no 'train' split"):
        build_index(tmp_path / "empty", tmp_path / "ix2")
    with pytest.raises(FileNotFoundError, match="not a tansaku search index"):
        open_index(tmp_path)


def test_old_index_layout_asks_for_a_rebuild(tmp_path):
    ds = fixture.write_dataset(tmp_path / "ds")
    build_index(ds, tmp_path / "ix")
    meta_path = tmp_path / "ix" / "tansaku_index.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    assert meta["format"] == 2
    meta_path.write_text(json.dumps({**meta, "format": 1}), encoding="utf-8")
    with pytest.raises(ValueError, match="index layout 1.*Rebuild it with `synth index build"):
        open_index(tmp_path / "ix")
    with pytest.raises(ValueError, match="Rebuild"):
        search_cli(str(tmp_path / "ix"), "港")


def test_timeout_applies_to_queries_that_could_run_long(tmp_path):
    """A query whose posting-work bound is small runs inline; a bigger one is cut off at the timeout."""
    import time

    from tansaku.envs.search import Limits
    from tansaku.envs.search.dsl import parse_request
    from tansaku.envs.search.embedded import INLINE_POSTINGS_PER_MS, EmbeddedBackend, _work_bound

    build_index(fixture.write_dataset(tmp_path / "ds"), tmp_path / "ix")
    backend = EmbeddedBackend(tmp_path / "ix", Limits(timeout_ms=20))

    class SlowSearcher:  # stands in for a search that takes 300 ms
        def __init__(self, inner):
            self.inner, self.num_docs = inner, inner.num_docs

        def search(self, *a, **k):
            time.sleep(0.3)
            return self.inner.search(*a, **k)

        def doc(self, addr):
            return self.inner.doc(addr)

    backend.searcher = SlowSearcher(backend.searcher)
    small = {"term": {"doc_id": "f001"}}
    big = {"bool": {"should": [{"match_phrase": {"text": "港町大漁祭り" * 5}}] * 3}}
    def bound(q):
        return backend.searcher.num_docs * _work_bound(parse_request(q, 1, backend.fields)[0])

    assert bound(small) <= INLINE_POSTINGS_PER_MS * 20 < bound(big)
    assert [h.doc_id for h in backend.search(small).hits] == ["f001"]
    t0 = time.perf_counter()
    with pytest.raises(QueryError, match="longer than the 20 ms timeout"):
        backend.search(big)
    assert time.perf_counter() - t0 < 0.25


def test_cli_entry_points(tmp_path):
    ds = fixture.write_dataset(tmp_path / "ds")
    meta = build_index_cli(str(ds), str(tmp_path / "ix"))
    assert meta["documents"] == 36
    res = search_cli(str(tmp_path / "ix"), '{"match_phrase": {"title": "紅葉谷"}}', size=3)
    assert set(res) == {"hits", "took_ms"} and res["hits"][0]["doc_id"] in {"f016", "f017", "f034"}
    assert set(res["hits"][0]) == {"doc_id", "title", "score", "snippet"}
    json.dumps(res, ensure_ascii=False)
    with pytest.raises(QueryError, match="query.regexp"):
        search_cli(str(tmp_path / "ix"), '{"regexp": {"text": "."}}')
    with pytest.raises(QueryError, match="does not exist"):
        search_cli(str(tmp_path / "missing"), "港")
    with pytest.raises(FileNotFoundError):
        build_index_cli(str(tmp_path / "nope"), str(tmp_path / "ix3"))


def test_cli_exit_codes(tmp_path):
    from typer.testing import CliRunner

    from tansaku.cli import synth_app

    ds = fixture.write_dataset(tmp_path / "ds")
    runner = CliRunner()
    res = runner.invoke(synth_app, ["index", "build", "--dataset", str(ds), "--index", str(tmp_path / "ix")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(synth_app, ["search", "--index", str(tmp_path / "ix"), "白砂焼", "--size", "2", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["hits"][0]["doc_id"] == "f024"
    for bad in ['{"script": {"source": "x"}}', '{"regexp": {"text": "."}}', '{"wildcard": {"text": "*a"}}',
                '{"fuzzy": {"text": "a"}}', '{"bool": {"must": [', '{"term": {"text": "a"}}', "  ",
                '{"query": {"match_all": {}}, "size": 99999}', '{"match": {"text": "' + "a" * 999 + '"}}',
                "[" * 100000, '{"bool": {"must": ' * 3000]:
        res = runner.invoke(synth_app, ["search", "--index", str(tmp_path / "ix"), bad])
        assert res.exit_code == 2, (bad, res.output)
        assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
