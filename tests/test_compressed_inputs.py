"""Dumps as users download them (issue 17): CirrusSearch and JSON-lines as ``.gz``, ``.bz2`` and ``.zst``
(multi-frame too) stream into the same corpus as the plain file; a truncated archive is one clear line and
exit 2; the e-Gov bulk zip with a zip per law inside reads like the loose files."""

from __future__ import annotations

import bz2
import gzip
import json
import zipfile
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.jsonl import iter_jsonl
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus.build import build_corpus, detect_format
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.egov.parse import iter_articles
from tansaku.pipelines.egov.sources import list_law_sources

LAWS = Path(__file__).resolve().parents[1] / "examples" / "laws"
CIRRUS = [
    {"index": {"_type": "_doc", "_id": "101"}},
    {"title": "青海町", "text": "青海町は架空の町。白砂県にある。", "namespace": 0, "source_text": "{{基礎情報 町\n|所属 = 白砂県\n}}"},
    {"index": {"_id": "102"}},
    {"title": "ノート:青海町", "text": "議論", "namespace": 1},  # the general dump's other namespaces
    {"index": {"_id": "103"}},
    {"title": "白砂県", "text": "白砂県は架空の県。県庁所在地は青海町。", "namespace": 0},
]


def _text(rows) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def _zstd_frames(data: bytes, frames: int) -> bytes:
    """``data`` cut into ``frames`` zstd frames back to back, as ``pzstd`` / ``zstd -T`` write them."""
    step = -(-len(data) // frames)
    return b"".join(zstandard.ZstdCompressor().compress(data[i:i + step]) for i in range(0, len(data), step))


WRITERS = {".gz": gzip.compress, ".bz2": bz2.compress, ".zst": lambda d: _zstd_frames(d, 1),
           ".zst-multiframe": lambda d: _zstd_frames(d, 3)}


@pytest.mark.parametrize("suffix", WRITERS)
def test_compressed_cirrus_dump_builds_the_same_corpus_as_the_plain_file(tmp_path, suffix):
    plain = tmp_path / "jawiki-20260101-cirrussearch-general.json"
    plain.write_bytes(_text(CIRRUS))
    packed = tmp_path / f"jawiki-20260101-cirrussearch-general.json{suffix.split('-')[0]}"
    packed.write_bytes(WRITERS[suffix](_text(CIRRUS)))
    assert detect_format(packed) == "cirrus"
    a = build_corpus(CorpusConfig(input=plain), tmp_path / "a", BuildContext(quiet=True))
    b = build_corpus(CorpusConfig(input=packed), tmp_path / "b", BuildContext(quiet=True))
    assert a["version"] == b["version"] and [r["id"] for r in read_rows(tmp_path / "b")] == ["101", "103"]
    assert b["stages"][0]["dropped"] == {"not_an_article": 1}


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".zst"])
def test_compressed_jsonl_is_sniffed_and_read_line_by_line(tmp_path, suffix):
    rows = [{"id": f"d{i}", "title": f"文書{i}", "text": f"架空の本文その{i}。"} for i in range(50)]
    path = tmp_path / f"docs.jsonl{suffix}"
    path.write_bytes(WRITERS[suffix](_text(rows)))
    assert detect_format(path) == "jsonl"
    assert [n for n, _ in iter_jsonl(path)] == list(range(1, 51))
    build_corpus(CorpusConfig(input=path), tmp_path / "out", BuildContext(quiet=True))
    assert len(read_rows(tmp_path / "out")) == 50


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".zst"])
def test_truncated_archive_is_one_line_and_exit_2_keeping_nothing_half_built(tmp_path, suffix):
    rows = [{"id": f"d{i}", "title": f"文書{i}", "text": "架空の本文。" * 40 + str(i)} for i in range(400)]
    whole = WRITERS[suffix](_text(rows))
    path = tmp_path / f"docs.jsonl{suffix}"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="not a readable"):
        list(iter_jsonl(path))
    result = CliRunner().invoke(synth_app, ["build", "corpus", "--input", str(path), "--out", str(tmp_path / "out"),
                                            "--quiet"])
    assert result.exit_code == 2, result.output
    assert "not a readable" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_egov_bulk_zip_with_a_zip_per_law_reads_like_the_loose_files(tmp_path):
    bulk = tmp_path / "all_xml.zip"
    with zipfile.ZipFile(bulk, "w", zipfile.ZIP_DEFLATED) as outer:
        for law in sorted(LAWS.glob("*.xml")):
            inner = tmp_path / f"{law.stem}.zip"
            with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as zf:
                zf.write(law, f"{law.stem}/{law.name}")
            outer.write(inner, f"all_xml/{inner.name}")
        outer.writestr("all_xml/broken.zip", b"not a zip at all")
    names = list(list_law_sources([bulk]))
    skips = [n for n in names if not isinstance(n, str)]
    assert [s.reason for s in skips] == ["bad_zip"]
    assert all(n.count("!") == 2 for n in names if isinstance(n, str))
    from_bulk = [r for r in iter_articles([bulk]) if isinstance(r, dict)]
    loose = [r for r in iter_articles([LAWS]) if isinstance(r, dict)]
    assert [(r["id"], r["text"]) for r in from_bulk] == [(r["id"], r["text"]) for r in loose] and loose


def test_egov_cli_builds_from_the_nested_bulk_zip(tmp_path):
    bulk = tmp_path / "bulk.zip"
    with zipfile.ZipFile(bulk, "w") as outer:
        for law in sorted(LAWS.glob("*.xml")):
            inner = tmp_path / f"{law.stem}.zip"
            with zipfile.ZipFile(inner, "w") as zf:
                zf.write(law, law.name)
            outer.write(inner, inner.name)
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(bulk), "--out", str(tmp_path / "egov"),
                                            "--quiet"])
    assert result.exit_code == 0, result.output
    articles = read_manifest(tmp_path / "egov" / "articles")
    assert articles["splits"]["train"] > 0
