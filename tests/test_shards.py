"""Builds as N independent shards, merged into the single-machine build (issue 17): 4 shards run as separate
processes give the same rows, funnel and ``version`` as one process; so do the sharded multihop, e-Gov,
trajectory and deepresearch builds; bad merges are one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core import shards
from tansaku.core.store import read_manifest, read_rows
from tansaku.envs.search import build_index
from tansaku.pipelines.corpus import build_corpus
from tansaku.pipelines.deepresearch.build import build_deepresearch
from tansaku.pipelines.egov import build as egov_build
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.chains import Caps
from tansaku.pipelines.trajectories.build import build_trajectories

ROOT = Path(__file__).resolve().parents[1]
MINIWIKI = ROOT / "tests" / "fixtures" / "miniwiki" / "miniwiki.jsonl"
GENERAL = ROOT / "tests" / "fixtures" / "sft" / "general.jsonl"
runner = CliRunner()


def _funnel(manifest: dict) -> list[tuple]:
    return [(s["name"], s["received"], s["kept"], s["dropped"]) for s in manifest["stages"]]


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    """4,500 documents (5 engine chunks), with repeats for dedup and short ones for min_length."""
    path = tmp_path_factory.mktemp("docs") / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(4500):
            j = i % 4000  # documents 4000… repeat 0…: dedup drops them
            text = f"架空の町その{j}の記録。" + "本文。" * (j % 7) if j % 11 else "短"
            f.write(json.dumps({"id": f"d{i}", "title": f"町{i}", "text": text}, ensure_ascii=False) + "\n")
    return path


def test_four_shard_processes_merge_into_the_single_build(documents, tmp_path):
    synth = [sys.executable, "-m", "tansaku.cli", "synth"]
    args = ["build", "corpus", "--input", str(documents), "--min-chars", "3", "--quiet"]
    env = {**os.environ, "TANSAKU_QUIET": "1"}
    procs = [subprocess.Popen([*synth, *args, "--out", str(tmp_path / f"s{i}"), "--shard", f"{i}/4"], env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]  # at once, as an array job
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    markers = [json.loads((tmp_path / f"s{i}" / ".work" / "shard.json").read_text()) for i in range(4)]
    assert [m["shard"] for m in markers] == [0, 1, 2, 3] and {m["input_chunks"] for m in markers} == {5}
    assert not (tmp_path / "s0" / "manifest.json").exists()  # a shard is no dataset yet

    named = [arg for i in (2, 0, 3, 1) for arg in ("--from-shards", str(tmp_path / f"s{i}"))]
    merged = runner.invoke(synth_app, [*args, "--out", str(tmp_path / "merged"), *named])
    assert merged.exit_code == 0, merged.output
    single = build_corpus(documents, tmp_path / "single", min_chars=3, quiet=True)
    got = read_manifest(tmp_path / "merged")
    assert got["version"] == single["version"] and _funnel(got) == _funnel(single)
    assert read_rows(tmp_path / "merged") == read_rows(tmp_path / "single")
    assert dict(single["stages"][-1]["dropped"])  # dedup (a global stage) ran over the merged chunks


def test_sharded_multihop_equals_the_single_build(tmp_path):
    build_corpus(MINIWIKI, tmp_path / "corpus", quiet=True)
    single = build_multihop(corpus=tmp_path / "corpus", out=tmp_path / "single", quiet=True, chunk_size=3)
    try:
        for i in range(3):
            shards.set_plan(f"{i}/3")
            part = build_multihop(corpus=tmp_path / "corpus", out=tmp_path / f"s{i}", quiet=True, chunk_size=3)
            assert part["shard"]["shard"] == i and part["version"] is None
        shards.set_plan(merge_from=[tmp_path / f"s{i}" for i in range(3)])
        merged = build_multihop(corpus=tmp_path / "corpus", out=tmp_path / "merged", quiet=True, chunk_size=3)
    finally:
        shards.set_plan()
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)
    assert part["shard"]["input_chunks"] > 3  # every shard had chunks to do


def test_bad_merges_are_one_line_and_exit_2(documents, tmp_path):
    base = ["build", "corpus", "--input", str(documents), "--quiet"]
    for i in range(2):
        assert runner.invoke(synth_app, [*base, "--out", str(tmp_path / f"s{i}"), "--shard", f"{i}/2"]).exit_code == 0
    cases = {
        "not a finished shard": [*base, "--out", str(tmp_path / "m1"), "--from-shards", str(tmp_path / "nowhere")],
        "shards 0 … N-1": [*base, "--out", str(tmp_path / "m2"), "--from-shards", str(tmp_path / "s0")],
        "another recipe": ["build", "corpus", "--input", str(documents), "--min-chars", "9", "--quiet",
                           "--out", str(tmp_path / "m3"), "--from-shards", str(tmp_path)],  # the folder of shards
        "0 <= I < N": [*base, "--out", str(tmp_path / "m4"), "--shard", "2/2"],
        "do not go together": [*base, "--out", str(tmp_path / "m5"), "--shard", "0/2",
                               "--from-shards", str(tmp_path / "s0")],
    }
    for expected, argv in cases.items():
        result = runner.invoke(synth_app, argv)
        assert result.exit_code == 2 and expected in result.output, (expected, result.output)
        assert len(result.output.strip().splitlines()) == 1
    assert shards.PLAN == shards.ShardPlan()  # the CLI leaves no plan behind


def test_a_shard_resumes_and_a_finished_merge_is_returned_as_it_is(documents, tmp_path):
    base = ["build", "corpus", "--input", str(documents), "--quiet"]
    for _ in range(2):  # the rerun of a finished shard reuses its committed chunks
        assert runner.invoke(synth_app, [*base, "--out", str(tmp_path / "s0"), "--shard", "0/1"]).exit_code == 0
    merge = [*base, "--out", str(tmp_path / "m"), "--from-shards", str(tmp_path / "s0")]
    assert runner.invoke(synth_app, merge).exit_code == 0
    first = read_manifest(tmp_path / "m")
    assert runner.invoke(synth_app, merge).exit_code == 0 and read_manifest(tmp_path / "m") == first


def _shards_then_merge(folder: Path, n: int, build) -> dict:
    """``build(out)`` as shards 0 … n-1 of ``n`` under ``folder``, then merged from that folder; the merge's
    manifest."""
    try:
        for i in range(n):
            shards.set_plan(f"{i}/{n}")
            part = build(folder / f"s{i}")
            assert part["shard"]["shard"] == i and part["version"] is None
        assert part["shard"]["input_chunks"] > n  # every shard had chunks to do
        shards.set_plan(merge_from=[folder])
        return build(folder.parent / "merged")
    finally:
        shards.set_plan()


def test_sharded_egov_equals_the_single_build(tmp_path, monkeypatch):
    """The articles are sharded (law files); the questions are built once, on the merge."""
    monkeypatch.setattr(egov_build, "LAWS_PER_CHUNK", 3)
    law = (ROOT / "tests" / "fixtures" / "egov" / "506AC0000000901_20250401_000000000000000.xml").read_bytes()
    laws = tmp_path / "all_xml.zip"
    with zipfile.ZipFile(laws, "w") as zf:  # 10 laws, each under its own id, as in e-Gov's bulk zip
        for i in range(10):
            zf.writestr(f"all_xml/9{i:02d}AC{i:010d}_20240401_000000000000000.xml", law)
    single = egov_build.build_egov(laws, tmp_path / "single", quiet=True)
    merged = _shards_then_merge(tmp_path / "shards", 3, lambda out: egov_build.build_egov(laws, out, quiet=True))
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)
    assert read_manifest(tmp_path / "merged" / "articles")["version"] == \
        read_manifest(tmp_path / "single" / "articles")["version"]
    assert merged["articles"]["rows"] == single["articles"]["rows"] > 10


def test_sharded_trajectories_equal_the_single_build(tmp_path):
    """Teacher rollouts and rewrites are sharded; the general-data mix runs once, on the merge."""
    build_corpus(ROOT / "examples" / "miniwiki.jsonl", tmp_path / "corpus", fmt="jsonl", quiet=True)
    build_index(tmp_path / "corpus", tmp_path / "index")
    build_multihop(corpus=tmp_path / "corpus", out=tmp_path / "multihop", quiet=True, caps=Caps(None, None, None))
    script = ROOT / "examples" / "teacher_script.py"

    def build(out):
        return build_trajectories(tmp_path / "multihop", out, teacher=f"scripted:{script}", index=tmp_path / "index",
                                  translator=f"scripted:{script}:rewrite", general=GENERAL, ratio=0.5, n=2,
                                  limit=24, seed=1, quiet=True, chunk_size=4)

    single = build(tmp_path / "single")
    merged = _shards_then_merge(tmp_path / "shards", 2, build)
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)
    assert merged["splits"] == single["splits"] and merged["splits"]["train"] > 0


def test_sharded_deepresearch_equals_the_single_build(tmp_path):
    """The keyword groups run whole in each shard; the LLM stages after them are sharded."""
    build_corpus(ROOT / "tests" / "fixtures" / "deepresearch" / "wiki.jsonl", tmp_path / "corpus", quiet=True)
    build_index(tmp_path / "corpus", tmp_path / "index")

    def build(out):
        return build_deepresearch(tmp_path / "corpus", tmp_path / "index", out, "scripted:deepresearch",
                                  quiet=True, chunk_size=2)

    single = build(tmp_path / "single")
    merged = _shards_then_merge(tmp_path / "shards", 2, build)
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)
    assert sum(merged["splits"].values()) > 0


def test_a_nested_build_keeps_the_outer_plan_and_whole_runs_unsharded():
    """``nested_at`` and ``whole`` put back the plan in force before them, also when their block raises."""
    outer = shards.set_plan("1/4")
    try:
        with shards.nested_at("articles") as inner:
            assert shards.PLAN is inner and (inner.index, inner.of, inner.sub) == (1, 4, "articles")
            with shards.whole():
                assert shards.PLAN == shards.ShardPlan()
            assert shards.PLAN is inner
        assert shards.PLAN is outer
        with pytest.raises(RuntimeError), shards.nested_at("articles"):
            raise RuntimeError("a build failed")
        assert shards.PLAN is outer
    finally:
        shards.set_plan()
    assert shards.PLAN == shards.ShardPlan()
