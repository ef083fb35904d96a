"""Engine + store: counting, drops, checkpoints, resume after a real kill -9, version stability, cards, stage
params in the manifest, the rejected split. (Refusals of a changed recipe: tests/test_fingerprint.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tansaku.core.engine import Drop, batch_stage, global_stage, map_stage, rng_for
from tansaku.core.runner import run_pipeline
from tansaku.core.store import StoreError, build_dataset, read_manifest, read_rows, validate_for_push

ROOT = Path(__file__).resolve().parents[1]


def _src(n=250):
    return [{"id": i, "text": f"文書{i % 97}" if i % 11 else ""} for i in range(n)]


def _nonempty(r):
    return r if r["text"] else Drop("empty")


def _dedup(records):
    seen = set()
    for r in records:
        if r["text"] in seen:
            yield Drop("duplicate")
        else:
            seen.add(r["text"])
            yield r


def _fanout(batch):
    return [[r, {**r, "id": f"{r['id']}b"}] if r["id"] % 5 == 0 else r for r in batch]


def test_counts_and_drops(tmp_path):
    stages = [map_stage("nonempty", _nonempty), batch_stage("fanout", _fanout, 8), global_stage("dedup", _dedup)]
    result = run_pipeline(_src(), stages, tmp_path / "w", chunk_size=40)
    rows = list(result.rows())
    s = {st["name"]: st for st in result.stages}
    assert s["nonempty"] == {**s["nonempty"], "received": 250, "kept": 227, "dropped": {"empty": 23}}
    assert s["fanout"]["kept"] == 227 + sum(1 for i in range(250) if i % 11 and i % 5 == 0)
    assert s["dedup"]["received"] == s["fanout"]["kept"]
    assert s["dedup"]["kept"] == len(rows) == len({r["text"] for r in rows})
    assert sum(s["dedup"]["dropped"].values()) + len(rows) == s["dedup"]["received"]


def test_rerun_reads_checkpoints_instead_of_recomputing(tmp_path):
    calls = []

    def tracked(r):
        calls.append(r["id"])
        return r

    stages = [map_stage("tracked", tracked), global_stage("dedup", _dedup)]
    first = run_pipeline(_src(100), stages, tmp_path / "w", chunk_size=30)
    n_calls = len(calls)
    second = run_pipeline(_src(100), stages, tmp_path / "w", chunk_size=30)
    assert len(calls) == n_calls == 100
    assert list(first.rows()) == list(second.rows()) and first.stages[0]["kept"] == second.stages[0]["kept"]


def test_stage_errors_are_clear(tmp_path):
    with pytest.raises(TypeError, match="returned None"):
        list(run_pipeline([{"a": 1}], [map_stage("bad", lambda r: None)], tmp_path / "a").rows())
    with pytest.raises(ValueError, match="2 results for 1"):
        run_pipeline([{"a": 1}], [batch_stage("b", lambda b: b + b)], tmp_path / "b")
    with pytest.raises(ValueError, match="unique"):
        run_pipeline([], [map_stage("x", _nonempty), map_stage("x", _nonempty)], tmp_path / "c")


def test_rng_for_is_keyed_not_ordered():
    a = [rng_for(7, k).random() for k in ("x", "y")]
    b = [rng_for(7, k).random() for k in ("y", "x")]
    assert a == b[::-1] and rng_for(8, "x").random() != a[0]


def _build(out, source, seed=0, config=None, keep_rejected=False):
    return build_dataset(out=out, name="t", pipeline="test", pipeline_version="1", config=config or {"x": 1},
                         seed=seed, inputs=[], source=source,
                         stages=[map_stage("nonempty", _nonempty, params={"min_chars": 1}), global_stage("dedup", _dedup)],
                         split_of=lambda r: "test" if r["id"] % 10 == 0 else "train", chunk_size=50,
                         card={"license": "cc-by-sa-4.0", "task_categories": ["question-answering"]},
                         keep_rejected=keep_rejected)


def test_store_roundtrip_card_and_version(tmp_path):
    from datasets import load_dataset
    from huggingface_hub import DatasetCard

    m1 = _build(tmp_path / "a", _src())
    m2 = _build(tmp_path / "b", _src())
    assert m1["version"] == m2["version"]  # same inputs + config + seed → same version
    assert _build(tmp_path / "c", _src(96))["version"] != m1["version"]
    for key in ("name", "version", "pipeline", "pipeline_version", "config", "seed", "inputs", "llm", "stages",
                "code", "packages", "created_at", "parents", "chunk_size", "keep_rejected", "fingerprint"):
        assert key in m1
    assert [s["name"] for s in m1["stages"]] == ["nonempty", "dedup"]
    assert m1["stages"][0]["params"] == {"min_chars": 1} and m1["stages"][1]["params"] == {}
    assert "rejected" not in m1["splits"]
    ds = load_dataset(str(tmp_path / "a"))
    assert set(ds) == {"train", "test"} and len(ds["train"]) + len(ds["test"]) == m1["stages"][-1]["kept"]
    ds2 = load_dataset("parquet", data_dir=str(tmp_path / "a" / "data"))
    assert sum(len(d) for d in ds2.values()) == m1["stages"][-1]["kept"]
    card = DatasetCard.load(tmp_path / "a" / "README.md")
    assert card.data.language == ["ja"] and card.data.license == "cc-by-sa-4.0"
    assert "| nonempty | 250 | 227 | empty: 23 |" in card.text
    assert validate_for_push(tmp_path / "a")["version"] == m1["version"]
    assert read_rows(tmp_path / "a", "test")[0]["id"] % 10 == 0


def test_store_refuses_a_folder_from_another_run(tmp_path):
    _build(tmp_path / "a", _src())
    assert _build(tmp_path / "a", _src())["version"]  # same run: returned as it is
    with pytest.raises(StoreError, match="different recipe: config x 1 → 2; remove the folder"):
        _build(tmp_path / "a", _src(), config={"x": 2})
    with pytest.raises(StoreError, match="not a tansaku dataset"):
        read_manifest(tmp_path / "nope")


def test_rejected_split_keeps_every_drop_with_stage_reason_and_record(tmp_path):
    from datasets import load_dataset
    from huggingface_hub import DatasetCard

    m = _build(tmp_path / "r", _src(), keep_rejected=True)
    rejected = read_rows(tmp_path / "r", "rejected")
    by_stage = {name: [r for r in rejected if r["stage"] == name] for name in ("nonempty", "dedup")}
    assert len(by_stage["nonempty"]) == 23 and {r["reason"] for r in by_stage["nonempty"]} == {"empty"}
    # a map stage's drop carries its input record; a global stage's only when it names one (_dedup does not)
    assert all(json.loads(r["record"])["text"] == "" for r in by_stage["nonempty"])
    assert all(r["record"] is None and r["reason"] == "duplicate" for r in by_stage["dedup"])
    assert m["splits"]["rejected"] == len(rejected) == sum(sum(s["dropped"].values()) for s in m["stages"])
    assert m["version"] != _build(tmp_path / "plain", _src())["version"]  # the version covers every split
    ds = load_dataset(str(tmp_path / "r"), cache_dir=str(tmp_path / "hf"))
    assert set(ds) == {"train", "test"}  # the default config never mixes rejected rows in
    assert load_dataset(str(tmp_path / "r"), "rejected", cache_dir=str(tmp_path / "hf"))["rejected"].column_names \
        == ["stage", "reason", "detail", "record"]
    card = DatasetCard.load(tmp_path / "r" / "README.md")
    assert [c["config_name"] for c in card.data.configs] == ["default", "rejected"] and "Rejected records" in card.text
    assert validate_for_push(tmp_path / "r")["splits"]["rejected"] == len(rejected)


def test_no_drops_no_rejected_split(tmp_path):
    from datasets import load_dataset

    m = _build(tmp_path / "e", [{"id": i, "text": f"t{i}"} for i in range(1, 30)], keep_rejected=True)
    assert m["keep_rejected"] and "rejected" not in m["splits"] and not list((tmp_path / "e" / "data").glob("rej*"))
    assert set(load_dataset(str(tmp_path / "e"), cache_dir=str(tmp_path / "hf"))) == {"train", "test"}


SLOW_BUILD = """
import sys, time
sys.path.insert(0, {root!r})
from tansaku.core.context import BuildContext
from tansaku.core.engine import map_stage, global_stage, Drop
from tansaku.core.store import build_dataset

log = open({log!r}, "a")
def slow(r):
    log.write(f"{{r['id']}}\\n"); log.flush()
    time.sleep({delay})
    return r if r["id"] % 7 else Drop("sevens")
def dedup(rs):
    seen = set()
    for r in rs:
        if r["text"] in seen: yield Drop("duplicate")
        else: seen.add(r["text"]); yield r
src = lambda: ({{"id": i, "text": f"t{{i % 150}}"}} for i in range(400))
m = build_dataset(out={out!r}, name="k", pipeline="kill", pipeline_version="1", config={{}}, seed=0,
                  inputs=[], source=src, stages=[map_stage("slow", slow), global_stage("dedup", dedup)],
                  chunk_size=25, context=BuildContext(quiet=True))
print(m["version"])
"""


def _script(tmp_path, name, out, delay):
    path = tmp_path / f"{name}.py"
    path.write_text(SLOW_BUILD.format(root=str(ROOT), log=str(tmp_path / f"{name}.log"), out=str(out),
                                      delay=delay))
    return path


def test_resume_after_kill_9_equals_uninterrupted_run(tmp_path):
    ref = subprocess.run([sys.executable, _script(tmp_path, "ref", tmp_path / "ref", 0)], capture_output=True,
                         text=True, check=True).stdout.strip()
    out = tmp_path / "killed"
    script = _script(tmp_path, "run", out, 0.01)
    proc = subprocess.Popen([sys.executable, script])
    deadline = time.time() + 60
    seg = None
    while time.time() < deadline:  # wait until a few chunks are committed, then kill -9 mid-chunk
        segs = list((out / ".work").glob("segment-00-*"))
        if segs and len(list(segs[0].glob("chunk-*.stats.json"))) >= 4:
            seg = segs[0]
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert seg is not None and not (out / "manifest.json").exists()
    committed = len(list(seg.glob("chunk-*.stats.json")))
    calls_before = len((tmp_path / "run.log").read_text().split())
    version = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True).stdout.strip()
    assert version == ref
    calls_after = len((tmp_path / "run.log").read_text().split()) - calls_before
    assert calls_after <= 400 - committed * 25  # committed chunks were not redone
    assert read_rows(out) == read_rows(tmp_path / "ref")
    m, mref = read_manifest(out), read_manifest(tmp_path / "ref")
    assert [(s["received"], s["kept"], s["dropped"]) for s in m["stages"]] == \
        [(s["received"], s["kept"], s["dropped"]) for s in mref["stages"]]
    assert m["resumed_chunks"] >= committed and not (out / ".work").exists()
    assert json.loads((out / "manifest.json").read_text())["version"] == ref
