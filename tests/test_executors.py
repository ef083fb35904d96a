"""A build's shards as tasks on a real Dask cluster (issue 53, item 2): a local two-worker cluster (worker
processes) started here runs ``synth build corpus --executor dask``, whose merged dataset equals the
single-process build; a shard whose worker process dies is submitted again and the dataset is still the
same."""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.executors import ExecutorPlan, build_shard, run_shards, shards_folder
from tansaku.core.shards import ShardPlan
from tansaku.core.store import read_manifest
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig

distributed = pytest.importorskip("distributed")
runner = CliRunner()
CORPUS = "tansaku.pipelines.corpus.build:build_corpus"


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    """2,500 documents (3 engine chunks), with repeats for dedup and short ones for min_length."""
    path = tmp_path_factory.mktemp("docs") / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(2500):
            j = i % 2200
            text = f"架空の町その{j}の記録。" + "本文。" * (j % 7) if j % 11 else "短"
            f.write(json.dumps({"id": f"d{i}", "title": f"町{i}", "text": text}, ensure_ascii=False) + "\n")
    return path


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes; a worker that dies gives its task up at once (allowed-failures 0), so the
    executor's own retry is what brings a lost shard back."""
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None, silence_logs=40) as local:
        yield local


def _funnel(manifest: dict) -> list[tuple]:
    return [(s["name"], s["received"], s["kept"], s["dropped"]) for s in manifest["stages"]]


def test_the_cluster_build_equals_the_single_build(documents, tmp_path, cluster):
    args = ["build", "corpus", "--input", str(documents), "--min-chars", "3", "--quiet"]
    single = runner.invoke(synth_app, [*args, "--out", str(tmp_path / "single")])
    assert single.exit_code == 0, single.output
    out = tmp_path / "cluster"
    built = runner.invoke(synth_app, [*args, "--out", str(out), "--executor", "dask",
                                      "--scheduler", cluster.scheduler_address, "--shards", "3"])
    assert built.exit_code == 0, built.output
    merged, alone = read_manifest(out), read_manifest(tmp_path / "single")
    assert merged["version"] == alone["version"] and _funnel(merged) == _funnel(alone)
    shards = sorted(p.name for p in shards_folder(out).iterdir())
    assert shards == ["s0000", "s0001", "s0002"]


class _DieOnce:
    """A shard task whose first try of shard ``victim`` kills its worker process (as an OOM kill would)."""

    def __init__(self, task, victim: int, marker: str):
        self.task, self.victim, self.marker = task, victim, marker

    def __call__(self, index: int, of: int) -> dict:
        if index == self.victim and not os.path.exists(self.marker):
            Path(self.marker).write_text(str(os.getpid()))
            os._exit(1)
        return self.task(index, of)


def test_a_shard_whose_worker_died_is_retried_and_the_merge_is_unchanged(documents, tmp_path, cluster):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    config = CorpusConfig(input=documents, min_chars=3)
    single = build_corpus(config, tmp_path / "single", BuildContext(quiet=True))
    folder = shards_folder(tmp_path / "merged")
    task = _DieOnce(partial(build_shard, CORPUS, config, str(folder), BuildContext()), 1,
                    str(tmp_path / "died"))
    lines: list[str] = []
    with distributed.Client(cluster.scheduler_address) as client:
        results = run_shards(client, task, 2, retries=2, say=lines.append)
    assert (tmp_path / "died").exists() and any("shard 1/2 lost" in line for line in lines), lines
    assert [r["shard"] for r in results] == [0, 1] and lines[-1].startswith("shards done 2/2")
    merged = build_corpus(config, tmp_path / "merged",
                          BuildContext(shards=ShardPlan.from_options(merge_from=[folder]), quiet=True))
    assert merged["version"] == single["version"] and _funnel(merged) == _funnel(single)


def test_an_input_error_is_not_retried_and_options_are_checked(tmp_path, cluster):
    calls = tmp_path / "calls"

    def refuse(index: int, of: int) -> dict:
        with open(calls, "a") as f:
            f.write(f"{index}\n")
        raise InputError("no such input")

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with distributed.Client(cluster.scheduler_address) as client, pytest.raises(InputError, match="no such"):
        run_shards(client, refuse, 1, retries=3)
    assert calls.read_text().split() == ["0"]
    with pytest.raises(InputError, match="--scheduler"):
        ExecutorPlan.from_options("dask", None)
    with pytest.raises(InputError, match="--executor"):
        ExecutorPlan.from_options(None, "tcp://x:1")
