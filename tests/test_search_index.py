"""Index building and opening: passages, keyword fields of a law-like dataset, reopening in a fresh
process (tokenizers re-registered), safe rebuilds, the CLI entry points.

    pytest tests/test_search_index.py -q
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.errors import InputError
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


def test_timeout_applies_to_queries_that_could_run_long(tmp_path, monkeypatch):
    """A query whose estimated postings are few runs inline; a bigger one runs in a worker process — with the
    same hits — which is killed at the timeout (a stopped worker stands in for a search that never ends)."""
    import os
    import signal
    import time

    from tansaku.envs.search import Limits, embedded
    from tansaku.envs.search.dsl import parse_request

    build_index(fixture.write_dataset(tmp_path / "ds"), tmp_path / "ix")
    backend = embedded.EmbeddedBackend(tmp_path / "ix", Limits(timeout_ms=1000), workers=1)
    monkeypatch.setattr(embedded, "INLINE_POSTINGS_PER_MS", 10)  # 36 documents: every posting list is short
    small = {"term": {"doc_id": "f001"}}
    big = {"bool": {"should": [{"match_phrase": {"text": t}} for t in ("港町大漁祭り", "紅葉谷", "白砂博物館")]}}

    def cost(q):
        return backend.postings(parse_request(q, 1, backend.fields)[0])

    assert cost(small) <= 10 * 1000 < cost(big)
    assert [h.doc_id for h in backend.search(small).hits] == ["f001"] and backend._workers is None
    want = [(h.doc_id, h.score) for h in embedded.EmbeddedBackend(tmp_path / "ix", Limits(timeout_ms=0)).search(big).hits]
    backend.workers().start()
    assert [(h.doc_id, h.score) for h in backend.search(big).hits] == want and len(want) > 2
    (pid,) = backend.workers().pids()
    os.kill(pid, signal.SIGSTOP)  # it takes the next query and never answers
    t0 = time.perf_counter()
    with pytest.raises(QueryError, match="longer than the 1000 ms timeout"):
        backend.search(big)
    assert time.perf_counter() - t0 < 1.0 + 2.0  # the caller waits the timeout, not the query
    assert backend.workers().killed == 1 and pid not in backend.workers().pids()
    with pytest.raises(ProcessLookupError):  # killed and reaped: it uses no more CPU
        os.kill(pid, 0)
    backend.workers().start()  # its replacement answers the next one
    assert [(h.doc_id, h.score) for h in backend.search(big).hits] == want
    pids = backend.workers().pids()
    backend.close()
    for p in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(p, 0)


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


def _truncate_a_segment(ix: Path) -> None:
    segment = sorted(ix.glob("*.store"))[0]
    segment.write_bytes(segment.read_bytes()[: segment.stat().st_size // 2])


DAMAGE = {  # what a crash, a full disk or a stray edit leaves behind (issue 28)
    "meta_not_json": lambda ix: (ix / "tansaku_index.json").write_text("{not json", encoding="utf-8"),
    "meta_a_list": lambda ix: (ix / "tansaku_index.json").write_text("[2]", encoding="utf-8"),
    "meta_missing_keys": lambda ix: (ix / "tansaku_index.json").write_text('{"format": 2}', encoding="utf-8"),
    "meta_not_utf8": lambda ix: (ix / "tansaku_index.json").write_bytes(b"\xff\xfe"),
    "tantivy_meta_missing": lambda ix: (ix / "meta.json").unlink(),
    "segment_truncated": _truncate_a_segment,
    "segment_missing": lambda ix: sorted(ix.glob("*.term"))[0].unlink(),
}


@pytest.fixture(scope="module")
def good_index(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("damage")
    build_index(fixture.write_dataset(base / "ds"), base / "ix")
    return base / "ix"


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_index_is_refused_when_opened_naming_it(damage, good_index, tmp_path):
    ix = tmp_path / "ix"
    shutil.copytree(good_index, ix)
    DAMAGE[damage](ix)
    with pytest.raises(InputError, match=f"^{ix}: damaged search index .*synth index build"):
        open_index(ix)


@pytest.mark.parametrize("command", ["search", "serve-env", "eval"])
@pytest.mark.parametrize("damage", ["meta_not_json", "meta_missing_keys", "tantivy_meta_missing", "segment_truncated"])
def test_commands_on_a_damaged_index_print_one_line(command, damage, good_index, tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_DEBUG", raising=False)
    ix = tmp_path / "ix"
    shutil.copytree(good_index, ix)
    DAMAGE[damage](ix)
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "白砂焼とは？", "answer": "焼き物"}\n', encoding="utf-8")
    (tmp_path / "m.jsonl").write_text('{"content": "{{焼き物}}"}\n', encoding="utf-8")
    app, args = {
        "search": (synth_app, ["search", "--index", str(ix), "港"]),
        "serve-env": (synth_app, ["serve-env", "--task", "multihop_qa", "--index", str(ix), "--port", "18731"]),
        "eval": (train_app, ["eval", "--task", "multihop_qa", "--dataset", str(tmp_path / "q.jsonl"), "--model",
                             f"scripted:{tmp_path / 'm.jsonl'}", "--index", str(ix), "--k", "1"]),
    }[command]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {ix}: damaged search index"), result.stderr


def test_a_build_that_fails_mid_write_leaves_nothing_beside_the_index(tmp_path):
    """tantivy's writer threads are joined before the partial folder is removed: left to the garbage collector
    (the traceback holds the writer), they wrote segment files into it after its removal in about half of
    the failed builds, an unmarked folder no later build could prove its own. Twenty tries for a race."""
    from tansaku.envs.search.embedded_index import build_embedded

    def rows_then_bad_record():
        for i in range(50):
            yield {"id": f"d{i}", "title": f"記事{i}", "text": "鳴沢市は架空の都市である。" * 20}
        raise InputError("a damaged record")

    for attempt in range(20):
        parent = tmp_path / str(attempt)
        parent.mkdir()
        with pytest.raises(InputError):
            build_embedded(rows_then_bad_record(), parent / "ix", quiet=True)
        leftovers = [str(p.relative_to(parent)) for p in parent.rglob("*")]
        assert leftovers in ([], ["ix"]), leftovers
