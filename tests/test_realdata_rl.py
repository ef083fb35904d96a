"""Issue 46's commands on the shared real data, through the installed console scripts: a JEMHopQA multihop
build with a phrasing family held out, ``train eval --config`` on its ``test_phrasing`` split, and (slow) an
off-policy ``train rl`` round of the tiny model on its ``rl`` split, searching the WikipediaAnnotatedCorpus index.

    pytest tests/test_realdata_rl.py -q -m realdata            # builds only (about a minute)
    pytest tests/test_realdata_rl.py -q -m "realdata and slow"  # + two GSPO steps of the tiny model
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WAC = DATA / "jawiki" / "WikipediaAnnotatedCorpus"
JEMHOPQA = DATA / "jemhopqa" / "corpus_ver1.2" / "train_ver1.2.json"
TEACHER = f"scripted:{ROOT / 'examples' / 'teacher_script.py'}:respond"
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.realdata,
              pytest.mark.skipif(not (WAC.exists() and JEMHOPQA.exists()), reason=f"{DATA} is absent (no shared data)")]


def run(tool: str, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "TANSAKU_QUIET": "1", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run([str(BIN / tool), *map(str, args)], capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0, (tool, args, done.returncode, done.stderr[-3000:])
    return done


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("realdata-rl")
    run("synth", "build", "multihop", "--triples", JEMHOPQA, "--until", "quality", "--rl-share", "0.35",
        "--heldout-phrasing", "answer", "--out", root / "multihop")
    run("synth", "build", "corpus", "--input", WAC, "--out", root / "wac")
    run("synth", "index", "build", "--dataset", root / "wac", "--index", root / "index")
    recipe = yaml.safe_load((ROOT / "trainer" / "recipes" / "rl-tiny.yaml").read_text(encoding="utf-8"))
    recipe.update(output_dir=str(root / "rl"), max_steps=2, max_completion_length=64, save_steps=10,
                  tasks=[{"name": "multihop_qa", "data": str(root / "multihop"), "index": str(root / "index"),
                          "split": "rl", "reward_weights": {"format_reward": 0.5}}])
    (root / "rl.yaml").write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return root


def test_jemhopqa_holds_its_phrasing_family_out_of_every_training_split(real):
    manifest = json.loads((real / "multihop" / "manifest.json").read_text(encoding="utf-8"))
    splits = manifest["splits"]
    assert splits["train"] > 0 and splits["rl"] > 0 and splits["test"] > 0 and splits["test_phrasing"] > 0, splits
    rows = {split: pq.read_table(next((real / "multihop" / "data").glob(f"{split}-*.parquet"))).to_pylist()
            for split in ("train", "rl", "test", "test_phrasing")}
    for split in ("train", "rl", "test"):
        assert not any(r["frame"].endswith("/answer") for r in rows[split]), split
    assert all(r["phrasing_family"] == "answer" and r["question"].endswith("を答えてください。")
               for r in rows["test_phrasing"])
    assert {r["bridge"] for r in rows["test_phrasing"]} <= {r["bridge"] for r in rows["test"]}


def test_train_eval_with_the_recipe_scores_the_held_out_phrasings_with_its_weights(real):
    out = real / "eval-phrasing"
    run("train", "eval", "--config", real / "rl.yaml", "--split", "test_phrasing", "--model", TEACHER,
        "--k", "1", "--limit", "8", "--out", out)
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["split"] == "test_phrasing" and report["questions"] == 8
    assert report["reward_weights"]["format_reward"] == 0.5  # the recipe's override, not the task's default


@pytest.mark.slow
def test_off_policy_train_rl_on_the_real_rl_split(real):
    run("train", "rl", "--config", real / "rl.yaml", "--skip-readiness")
    state = json.loads((real / "rl" / "trainer_state.json").read_text(encoding="utf-8"))
    steps = [e for e in state["log_history"] if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2]
    assert "reward" in steps[0] and "reward" not in steps[1]  # one rollout round, two optimizer steps
    assert all("clip_ratio/region_mean" in e for e in steps)
    assert json.loads((real / "rl" / "run_report.json").read_text(encoding="utf-8"))["steps"] == 2
