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
from tansaku.core.context import BuildContext
from tansaku.core.shards import ShardPlan
from tansaku.core.store import read_manifest, read_rows
from tansaku.envs.search import build_index
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.deepresearch.build import build_deepresearch
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.egov import build as egov_build
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig

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
    single = build_corpus(CorpusConfig(input=documents, min_chars=3), tmp_path / "single", BuildContext(quiet=True))
    got = read_manifest(tmp_path / "merged")
    assert got["version"] == single["version"] and _funnel(got) == _funnel(single)
    assert read_rows(tmp_path / "merged") == read_rows(tmp_path / "single")
    assert dict(single["stages"][-1]["dropped"])  # dedup (a global stage) ran over the merged chunks


def test_sharded_multihop_equals_the_single_build(tmp_path):
    build_corpus(CorpusConfig(input=MINIWIKI), tmp_path / "corpus", BuildContext(quiet=True))
    config = MultihopConfig(corpus=tmp_path / "corpus", chunk_size=3)
    single = build_multihop(config, tmp_path / "single", BuildContext(quiet=True))
    for i in range(3):
        part = build_multihop(config, tmp_path / f"s{i}", BuildContext(shards=ShardPlan.from_options(f"{i}/3")))
        assert part["shard"]["shard"] == i and part["version"] is None
    merge = ShardPlan.from_options(merge_from=[tmp_path / f"s{i}" for i in range(3)])
    merged = build_multihop(config, tmp_path / "merged", BuildContext(shards=merge))
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


def test_a_shard_resumes_and_a_finished_merge_is_returned_as_it_is(documents, tmp_path):
    base = ["build", "corpus", "--input", str(documents), "--quiet"]
    for _ in range(2):  # the rerun of a finished shard reuses its committed chunks
        assert runner.invoke(synth_app, [*base, "--out", str(tmp_path / "s0"), "--shard", "0/1"]).exit_code == 0
    merge = [*base, "--out", str(tmp_path / "m"), "--from-shards", str(tmp_path / "s0")]
    assert runner.invoke(synth_app, merge).exit_code == 0
    first = read_manifest(tmp_path / "m")
    assert runner.invoke(synth_app, merge).exit_code == 0 and read_manifest(tmp_path / "m") == first


def _shards_then_merge(folder: Path, n: int, build) -> dict:
    """``build(out, context)`` as shards 0 … n-1 of ``n`` under ``folder``, then merged from that folder; the
    merge's manifest."""
    for i in range(n):
        part = build(folder / f"s{i}", BuildContext(shards=ShardPlan.from_options(f"{i}/{n}"), quiet=True))
        assert part["shard"]["shard"] == i and part["version"] is None
    assert part["shard"]["input_chunks"] > n  # every shard had chunks to do
    return build(folder.parent / "merged", BuildContext(shards=ShardPlan.from_options(merge_from=[folder]), quiet=True))


def test_sharded_egov_equals_the_single_build(tmp_path):
    """The articles are sharded (law files); the questions are built once, on the merge."""
    law = (ROOT / "tests" / "fixtures" / "egov" / "506AC0000000901_20250401_000000000000000.xml").read_bytes()
    laws = tmp_path / "all_xml.zip"
    with zipfile.ZipFile(laws, "w") as zf:  # 10 laws, each under its own id, as in e-Gov's bulk zip
        for i in range(10):
            zf.writestr(f"all_xml/9{i:02d}AC{i:010d}_20240401_000000000000000.xml", law)
    config = EgovConfig(laws=laws, laws_per_chunk=3)
    single = egov_build.build_egov(config, tmp_path / "single", BuildContext(quiet=True))
    merged = _shards_then_merge(tmp_path / "shards", 3, lambda out, context: egov_build.build_egov(config, out, context))
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)
    assert read_manifest(tmp_path / "merged" / "articles")["version"] == \
        read_manifest(tmp_path / "single" / "articles")["version"]
    assert merged["articles"]["rows"] == single["articles"]["rows"] > 10


def test_sharded_trajectories_equal_the_single_build(tmp_path):
    """Teacher rollouts and rewrites are sharded; the general-data mix runs once, on the merge."""
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), tmp_path / "corpus", BuildContext(quiet=True))
    build_index(tmp_path / "corpus", tmp_path / "index")
    build_multihop(MultihopConfig(corpus=tmp_path / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0), tmp_path / "multihop", BuildContext(quiet=True))
    script = ROOT / "examples" / "teacher_script.py"

    def build(out, context=BuildContext(quiet=True)):
        return build_trajectories(TrajectoriesConfig(
            dataset=tmp_path / "multihop", teacher=f"scripted:{script}", index=tmp_path / "index",
            translator=f"scripted:{script}:rewrite", general=GENERAL, ratio=0.5, n=2, limit=24, seed=1,
            chunk_size=4), out, context)

    single = build(tmp_path / "single")
    merged = _shards_then_merge(tmp_path / "shards", 2, build)
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)
    assert merged["splits"] == single["splits"] and merged["splits"]["train"] > 0


def test_sharded_deepresearch_equals_the_single_build(tmp_path):
    """The keyword groups run whole in each shard; the LLM stages after them are sharded."""
    build_corpus(CorpusConfig(input=ROOT / "tests" / "fixtures" / "deepresearch" / "wiki.jsonl"), tmp_path / "corpus", BuildContext(quiet=True))
    build_index(tmp_path / "corpus", tmp_path / "index")

    config = DeepResearchConfig(corpus=tmp_path / "corpus", index=tmp_path / "index", llm="scripted:deepresearch",
                                chunk_size=2)

    def build(out, context=BuildContext(quiet=True)):
        return build_deepresearch(config, out, context)

    single = build(tmp_path / "single")
    merged = _shards_then_merge(tmp_path / "shards", 2, build)
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)
    assert sum(merged["splits"].values()) > 0


def test_a_nested_build_keeps_the_outer_plan_and_whole_runs_unsharded():
    """``nested`` and ``whole`` make new contexts: the outer one is unchanged (no plan is kept per process)."""
    outer = BuildContext(shards=ShardPlan.from_options("1/4"))
    inner = outer.nested("articles")
    assert (inner.shards.index, inner.shards.of, inner.shards.sub) == (1, 4, "articles")
    assert inner.whole().shards == ShardPlan() and outer.shards.sub == "" and outer.shards.index == 1
