"""Every ``synth build`` pipeline over every shared real dataset it accepts, through the installed CLI.

Each case runs the console script ``synth`` as a user would (a child process, the README's commands) on
``../shared/data`` and checks what a user relies on: exit 0; rows in every data split; ``load_dataset(folder)``
loads each non-empty split with the Features the parquet files declare; the card passes the Hub's rules;
``synth push --dry-run`` passes; a rerun is a no-op (exit 0, the same manifest, nothing rewritten).

The chain: WikipediaAnnotatedCorpus (the folder, and its derived JSON lines with ``--title-field``) → corpus →
index → multihop (the stand-in LLM of ``examples/stand_in_llm.py`` extracts triples and writes questions, its
scripted agent solves them) → trajectories (scripted teacher and rewriter) and deepresearch (scripted LLM);
JaQuAD → corpus; JEMHopQA train → multihop (up to chains, and with templates as far as triples alone go) and
the importer (all 'test' by default, and with --as-train); 民法 + 行政手続法 → egov. About 2 minutes on 2 cores.

    pytest tests/test_realdata_cli.py -q -m realdata
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from datasets import Features, load_dataset
from huggingface_hub import DatasetCard

from tansaku.data_cards import card_problems

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WAC = DATA / "jawiki" / "WikipediaAnnotatedCorpus"
WAC_JSONL = WAC / "wac_docs.derived.jsonl"
JAQUAD = DATA / "jawiki" / "JaQuAD"
JEMHOPQA = DATA / "jemhopqa" / "corpus_ver1.2" / "train_ver1.2.json"
LAWS = DATA / "egov"
STAND_IN = f"scripted:{ROOT / 'examples' / 'stand_in_llm.py'}"
REWRITER = f"scripted:{ROOT / 'examples' / 'teacher_script.py'}:rewrite"
SYNTH = Path(sys.executable).with_name("synth")

pytestmark = [pytest.mark.realdata,
              pytest.mark.skipif(not (WAC.exists() and JAQUAD.exists() and JEMHOPQA.exists() and LAWS.exists()),
                                 reason=f"{DATA} is absent (no shared data)")]


def synth(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TANSAKU_QUIET": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(SYNTH), *map(str, args)], capture_output=True, text=True, env=env, timeout=600)


def ok(*args: str | Path) -> subprocess.CompletedProcess:
    done = synth(*args)
    assert done.returncode == 0, (args, done.returncode, done.stderr[-2000:])
    return done


class Built:
    """The outputs of the chain, built once (a module fixture); each test checks one of them."""

    def __init__(self, root: Path):
        self.root, self.commands = root, {}

    def build(self, name: str, *args: str | Path) -> Path:
        out = self.root / name
        command = (*args, "--out", out)
        ok(*command)
        self.commands[name] = command
        return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    b = Built(tmp_path_factory.mktemp("realdata"))
    b.build("jemhopqa-chains", "build", "multihop", "--triples", JEMHOPQA, "--until", "chains")
    b.build("jemhopqa-templates", "build", "multihop", "--triples", JEMHOPQA, "--until", "quality")
    b.build("jemhopqa-import", "import", "jemhopqa", JEMHOPQA)  # an evaluation set: all 'test'
    b.build("jemhopqa-import-as-train", "import", "jemhopqa", JEMHOPQA, "--as-train")
    b.build("jaquad", "build", "corpus", "--input", JAQUAD)
    b.build("egov", "build", "egov", "--laws", LAWS)
    for corpus, source in (("wac", ("--input", WAC)),
                           ("wacjsonl", ("--input", WAC_JSONL, "--title-field", "title_guess", "--id-field", "doc_id",
                                        "--license", "cc-by-sa-4.0"))):  # plain JSON lines: the user names it
        b.build(corpus, "build", "corpus", *source)
        index = b.root / f"{corpus}-index"
        meta = json.loads(ok("index", "build", "--dataset", b.root / corpus, "--index", index, "--json").stdout)
        assert meta["documents"] > 1000, meta
        b.build(f"{corpus}-multihop", "build", "multihop", "--corpus", b.root / corpus, "--index", index,
                "--llm", STAND_IN, "--policy", STAND_IN)
        b.build(f"{corpus}-deepresearch", "build", "deepresearch", "--corpus", b.root / corpus, "--index", index,
                "--llm", "scripted:deepresearch")
        b.build(f"{corpus}-trajectories", "build", "trajectories", "--dataset", b.root / f"{corpus}-multihop",
                "--index", index, "--teacher", STAND_IN, "--translator", REWRITER, "--n", "1", "--limit", "40")
    return b


OUTPUTS = ["jemhopqa-chains", "jemhopqa-templates", "jemhopqa-import", "jemhopqa-import-as-train", "jaquad", "egov", "egov/articles", "wac",
           "wacjsonl", "wac-multihop", "wacjsonl-multihop", "wac-deepresearch", "wacjsonl-deepresearch",
           "wac-trajectories", "wacjsonl-trajectories"]


@pytest.mark.parametrize("name", OUTPUTS)
def test_every_build_loads_with_rows_in_every_split_and_can_be_pushed(built, name):
    folder = built.root / name
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    data_splits = {s: n for s, n in manifest["splits"].items() if s != "rejected"}
    assert data_splits and all(n > 0 for n in data_splits.values()), (name, manifest["splits"])
    loaded = load_dataset(str(folder))  # the session's own cache (tests/conftest.py): no earlier run's rows
    assert set(loaded) == set(data_splits)
    for split, n in data_splits.items():
        declared = Features.from_arrow_schema(pq.read_schema(next((folder / "data").glob(f"{split}-*.parquet"))))
        assert len(loaded[split]) == n and loaded[split].features == declared, (name, split)
    card = DatasetCard.load(folder / "README.md")
    assert card_problems(card.data.to_dict(), folder) == []
    plan = ok("push", folder, "--repo-id", "org/x", "--dry-run").stdout.split()
    assert "README.md" in plan and any(p.startswith("data/") for p in plan)


@pytest.mark.parametrize("name", [n for n in OUTPUTS if n != "egov/articles"])
def test_a_rerun_is_a_no_op(built, name):
    manifest = built.root / name / "manifest.json"
    before = (manifest.read_bytes(), manifest.stat().st_mtime_ns)
    ok(*built.commands[name])
    assert (manifest.read_bytes(), manifest.stat().st_mtime_ns) == before


def test_the_heldout_question_builds_have_a_test_split(built):
    for name in ("jemhopqa-templates", "jemhopqa-import-as-train", "egov", "wac-multihop", "wac-deepresearch"):
        splits = json.loads((built.root / name / "manifest.json").read_text(encoding="utf-8"))["splits"]
        assert splits["train"] > splits["test"] > 0, (name, splits)
    imported = json.loads((built.root / "jemhopqa-import" / "manifest.json").read_text(encoding="utf-8"))["splits"]
    assert list(imported) == ["test"] and imported["test"] > 0, imported  # JEMHopQA: an evaluation set


def test_the_derived_jsonl_without_its_field_names_is_one_line_exit_2(tmp_path):
    done = synth("build", "corpus", "--input", WAC_JSONL, "--out", tmp_path / "c")
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()
    assert len(line) == 1 and "empty_title: 3979 of 3979" in line[0] and "--title-field" in line[0], done.stderr
    assert "title_guess" in line[0]  # the hint names what the records do hold
    done = synth("index", "build", "--dataset", tmp_path / "c", "--index", tmp_path / "i")
    assert done.returncode == 2 and "0 documents" in done.stderr and not (tmp_path / "i").exists()
    done = synth("push", tmp_path / "c", "--repo-id", "org/x", "--dry-run")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr


def test_trajectories_with_the_teacher_as_rewriter_names_translator(built, tmp_path):
    done = synth("build", "trajectories", "--dataset", built.root / "wac-multihop", "--index",
                 built.root / "wac-index", "--teacher", STAND_IN.replace("stand_in_llm.py", "teacher_script.py"),
                 "--n", "1", "--limit", "4", "--out", tmp_path / "t")
    assert done.returncode == 2, done.stderr
    assert "stage 'translate'" in done.stderr and "--translator" in done.stderr and "Traceback" not in done.stderr


def test_multihop_over_a_corpus_without_infoboxes_or_llm_says_to_pass_llm(built, tmp_path):
    done = synth("build", "multihop", "--corpus", built.root / "wac", "--index", built.root / "wac-index",
                 "--out", tmp_path / "m")
    assert done.returncode == 2 and "no_triples" in done.stderr and "--llm" in done.stderr, done.stderr
