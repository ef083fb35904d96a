"""No silent empty result, and no write into a folder a build then refuses (fictional fixtures only).

- A build whose data splits end with 0 rows exits 2 with one line naming the stage that dropped the last
  record, its top reason with the count and the option that fixes it; what it wrote stays for a look.
- An empty split of a build that has rows elsewhere (``test`` of a tiny build) is a typed empty parquet file,
  and ``load_dataset(folder)`` still loads the folder.
- Every build refuses an ``--out`` that holds another pipeline's dataset or anything tansaku did not make
  before it reads its inputs: a canary file and every mtime in that folder stay as they were.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from datasets import load_dataset
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.store import read_manifest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MINIWIKI = EXAMPLES / "miniwiki.jsonl"
TEACHER = f"scripted:{EXAMPLES / 'teacher_script.py'}"
# One compositional question whose two hops chain (JEMHopQA's shape), its qid the triples' origin.
JEMHOP = [{"qid": "q1", "type": "compositional", "question": "本Aの著者の出身地は？", "answer": "町C",
           "derivations": [["本A", "著者", ["作家B"]], ["作家B", "出身地", ["町C"]]], "page_ids": ["11", "22"],
           "time_dependent": False}]


def run(*args) -> tuple[int, str]:
    result = CliRunner().invoke(synth_app, [*map(str, args), "-q"])
    return result.exit_code, result.stderr


def one_error_line(code: int, stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, stderr)
    return lines[0]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("empty") / "corpus"
    assert run("build", "corpus", "--input", MINIWIKI, "--out", out)[0] == 0
    return out


def test_a_corpus_whose_records_lack_the_title_key_names_the_option(tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"doc_id": f"d{i}", "title_guess": f"港{i}", "text": f"港{i}の話。"},
                                      ensure_ascii=False) + "\n" for i in range(3)), encoding="utf-8")
    line = one_error_line(*run("build", "corpus", "--input", src, "--out", tmp_path / "c", "--keep-rejected"))
    assert "stage 'normalize' dropped all 3 records" in line and "empty_title: 3 of 3" in line
    assert "--title-field" in line and "title_guess" in line
    assert [r["reason"] for r in load_dataset(str(tmp_path / "c"), "rejected")["rejected"]] == ["empty_title"] * 3
    assert run("build", "corpus", "--input", src, "--out", tmp_path / "c")[0] == 2  # the rerun says it again
    code, _ = run("build", "corpus", "--input", src, "--out", tmp_path / "ok", "--title-field", "title_guess",
                  "--id-field", "doc_id")
    assert code == 0 and [r["id"] for r in load_dataset(str(tmp_path / "ok"))["train"]] == ["d0", "d1", "d2"]


def test_field_options_are_checked_before_any_write(tmp_path):
    line = one_error_line(*run("build", "corpus", "--input", MINIWIKI, "--out", tmp_path / "c",
                               "--title-field", "text"))
    assert "must differ" in line and not (tmp_path / "c").exists()
    line = one_error_line(*run("build", "corpus", "--input", EXAMPLES / "laws", "--out", tmp_path / "c",
                               "--format", "jsonl", "--title-field", "t"))
    assert not (tmp_path / "c").exists()


def test_an_index_over_an_empty_corpus_is_refused_before_it_is_made(tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text(json.dumps({"id": "a", "text": "本文だけ。"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert run("build", "corpus", "--input", src, "--out", tmp_path / "c")[0] == 2
    result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(tmp_path / "c"),
                                            "--index", str(tmp_path / "i")])
    assert "0 documents" in one_error_line(result.exit_code, result.stderr) and not (tmp_path / "i").exists()
    result = CliRunner().invoke(synth_app, ["push", str(tmp_path / "c"), "--repo-id", "o/x", "--dry-run"])
    assert "nothing to push" in one_error_line(result.exit_code, result.stderr)


def test_multihop_without_triples_names_llm_and_trajectories_name_translator(corpus, tmp_path):
    src = tmp_path / "plain.jsonl"  # articles without infobox links: no triple without an LLM
    src.write_text("".join(json.dumps({"id": f"p{i}", "title": f"港{i}", "text": f"港{i}は古い港である。"},
                                      ensure_ascii=False) + "\n" for i in range(4)), encoding="utf-8")
    assert run("build", "corpus", "--input", src, "--out", tmp_path / "plain")[0] == 0
    line = one_error_line(*run("build", "multihop", "--corpus", tmp_path / "plain", "--out", tmp_path / "m"))
    assert "stage 'triples' dropped all 4" in line and "no_triples" in line and "--llm" in line
    assert read_manifest(tmp_path / "m")["splits"] == {"test": 0, "train": 0}  # written, for a look

    assert run("build", "multihop", "--corpus", corpus, "--out", tmp_path / "mh", "--policy",
               f"{TEACHER}:respond_compact", "--k", "1")[0] == 0
    result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(corpus), "--index", str(tmp_path / "i")])
    assert result.exit_code == 0, result.stderr
    line = one_error_line(*run("build", "trajectories", "--dataset", tmp_path / "mh", "--index", tmp_path / "i",
                               "--teacher", f"{TEACHER}:respond_compact", "--n", "1", "--limit", "3",
                               "--out", tmp_path / "t"))
    assert "stage 'translate'" in line and "llm_bad_json" in line and "--translator" in line


def test_an_empty_test_split_is_a_typed_file_and_the_folder_still_loads(tmp_path):
    triples = tmp_path / "j.json"
    triples.write_text(json.dumps(JEMHOP, ensure_ascii=False), encoding="utf-8")
    code, stderr = run("build", "multihop", "--triples", triples, "--until", "quality", "--out", tmp_path / "m")
    assert code == 0, stderr
    splits = read_manifest(tmp_path / "m")["splits"]
    assert sorted(splits) == ["test", "train"] and 0 in splits.values() and sum(splits.values()) == 1
    empty = next(s for s, n in splits.items() if n == 0)
    full = next(s for s, n in splits.items() if n)
    schema = pq.read_schema(next((tmp_path / "m" / "data").glob(f"{empty}-*.parquet")))
    assert schema == pq.read_schema(next((tmp_path / "m" / "data").glob(f"{full}-*.parquet")))
    loaded = load_dataset(str(tmp_path / "m"))
    assert list(loaded) == [full] and len(loaded[full]) == 1


def test_jemhopqa_triples_spill_with_their_source_question(tmp_path):
    """JEMHopQA triples carry the qid they came from (``origin``) through the spilled global stages."""
    triples = tmp_path / "j.json"
    triples.write_text(json.dumps(JEMHOP, ensure_ascii=False), encoding="utf-8")
    code, stderr = run("build", "multihop", "--triples", triples, "--until", "cardinality", "--out", tmp_path / "m")
    assert code == 0, stderr
    assert {r["origin"] for r in load_dataset(str(tmp_path / "m"))["train"]} == {"q1"}
    code, stderr = run("build", "multihop", "--triples", triples, "--until", "chains", "--out", tmp_path / "c")
    assert code == 0, stderr


@pytest.mark.parametrize("command", [
    ["build", "egov", "--laws", EXAMPLES / "laws"],
    ["build", "multihop", "--triples", "{triples}", "--until", "chains"],
    ["import", "jemhopqa", "{triples}"],
    ["build", "trajectories", "--dataset", "{copy}", "--index", "x", "--teacher", f"{TEACHER}:respond"],
    ["build", "deepresearch", "--corpus", "{copy}", "--index", "x", "--llm", "scripted:deepresearch"],
    ["build", "general", "--prompts", EXAMPLES / "general_prompts.jsonl", "--llm", f"{TEACHER}:respond"],
], ids=["egov", "multihop", "jemhopqa", "trajectories", "deepresearch", "general"])
def test_a_build_into_another_pipelines_dataset_is_refused_untouched(corpus, tmp_path, command):
    triples = tmp_path / "j.json"
    triples.write_text(json.dumps(JEMHOP, ensure_ascii=False), encoding="utf-8")
    # an input that is not --out: one that is (the corpus itself) is refused as its own input, before this check
    shutil.copytree(corpus, tmp_path / "copy")
    before = snapshot(corpus)
    args = [str(a).replace("{triples}", str(triples)).replace("{copy}", str(tmp_path / "copy")) for a in command]
    line = one_error_line(*run(*args, "--out", corpus))
    assert "holds a tansaku corpus dataset" in line
    assert snapshot(corpus) == before and not (corpus / "articles").exists() and not (corpus / "index").exists()


def test_a_foreign_folder_with_a_canary_is_refused_before_any_work(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "canary.txt").write_text("mine, not tansaku's", encoding="utf-8")
    before = snapshot(foreign)
    line = one_error_line(*run("build", "egov", "--laws", EXAMPLES / "laws", "--out", foreign))
    assert "no tansaku build made it" in line and "canary.txt" in line
    assert snapshot(foreign) == before
