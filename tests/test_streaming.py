"""Streaming LLM stages (issue 19): slots kept busy across batches and chunks, input order, the same rows and
counts as batch-by-batch, bounded memory when one stage is far slower, bugs still raised, and a kill -9 during a
streaming stage resumes to the same dataset without asking the server again for any answer it had delivered.

    pytest tests/test_streaming.py -q
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tansaku.core import streaming
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, Stage, batch_stage, map_stage
from tansaku.core.runner import run_pipeline
from tansaku.core.store import read_manifest
from tansaku.core.streaming import MIN_WINDOW, WINDOW_PER_SLOT
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.testing.canned_server import ServerThread

ROOT = Path(__file__).resolve().parents[1]


class SlotClient:
    """Stands in for an HTTP client: what a streaming runner reads (``slots``), and a peak of calls at once."""

    def __init__(self, slots: int):
        self.slots, self.now, self.peak, self.calls = slots, 0, 0, 0
        self.lock = threading.Lock()

    def call(self, seconds: float) -> None:
        with self.lock:
            self.now += 1
            self.calls += 1
            self.peak = max(self.peak, self.now)
        time.sleep(seconds)
        with self.lock:
            self.now -= 1


def _answer(client: SlotClient, seconds: float = 0.005):
    """A batch function: one 'LLM call' per record; every 7th record dropped, every 5th fanned out to two."""

    def fn(batch: list[dict]) -> list:
        out = []
        for r in batch:
            client.call(seconds)
            if r["i"] % 7 == 3:
                out.append(Drop("llm_bad_output", detail=f"record {r['i']}"))
            elif r["i"] % 5 == 0:
                out.append([{**r, "part": 0}, {**r, "part": 1}])
            else:
                out.append({**r, "answer": r["i"] * 2})
        return out

    return fn


def _stages(client: SlotClient, seconds: float = 0.005):
    return [map_stage("prepare", lambda r: {**r, "ready": True} if r["i"] % 11 else Drop("not_ready")),
            batch_stage("ask", _answer(client, seconds), 16, client=client),
            map_stage("finish", lambda r: {**r, "done": True})]


def _run(tmp_path: Path, name: str, client: SlotClient, n: int = 120, chunk_size: int = 4, **kw):
    result = run_pipeline([{"i": i} for i in range(n)], _stages(client, **kw), tmp_path / name,
                          chunk_size=chunk_size, keep_rejected=True)
    return list(result.rows()), list(result.rejected()), result.stages


def test_streaming_keeps_every_slot_busy_across_chunks_and_commits_input_order(tmp_path):
    client = SlotClient(slots=8)
    rows, rejected, stages = _run(tmp_path, "w", client, chunk_size=4)  # chunks of 4 < 8 slots: no barrier
    assert client.peak == 8  # every slot in use at once, never more
    assert [(r["i"], r.get("part")) for r in rows] == sorted((r["i"], r.get("part")) for r in rows)
    assert {s["name"]: s["received"] for s in stages} == {"prepare": 120, "ask": 109, "finish": len(rows)}


def test_streaming_gives_the_rows_rejects_and_counts_of_batch_by_batch(tmp_path, monkeypatch):
    streamed = _run(tmp_path, "streamed", SlotClient(slots=8), chunk_size=10)
    monkeypatch.setenv("TANSAKU_STREAMING", "0")
    batched_client = SlotClient(slots=8)
    batched = _run(tmp_path, "batched", batched_client, chunk_size=10)
    assert batched_client.peak == 1  # batch by batch: one call at a time
    assert streamed[0] == batched[0] and streamed[1] == batched[1]
    strip = lambda stages: [{k: v for k, v in s.items() if k != "seconds"} for s in stages]  # noqa: E731
    assert strip(streamed[2]) == strip(batched[2])


class SlowFirstAnswer:
    """Holds record 0's first answer until 30 second-stage answers are in and the chunks behind it have committed
    (or 20 s pass), so "the others go on meanwhile" is tested by what happened, not by how fast the machine ran a
    fixed sleep: a runner that waits for record 0 keeps it held the full 20 s and fails the test."""

    def __init__(self, order: list, work: Path, later_chunks: int):
        self.order, self.work, self.later_chunks = order, work, later_chunks  # order: what _jittered collects

    def wait(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not self._others_done():
            time.sleep(0.01)

    def _others_done(self) -> bool:
        committed = [f for f in self.work.glob("segment-*/chunk-*.stats.json") if f.name != "chunk-000000.stats.json"]
        return sum(1 for s, _ in list(self.order) if s == "second") >= 30 and len(committed) >= self.later_chunks


def _jittered(client: SlotClient, name: str, order: list | None = None, slow: SlowFirstAnswer | None = None):
    """A batch function whose answer time depends on the record (so records finish out of input order),
    with drops and fan-out; ``order`` collects (stage, i) as calls finish; with ``slow``, record 0's first
    answer waits on it."""

    def fn(batch: list[dict]) -> list:
        out = []
        for r in batch:
            held = r["i"] == 0 and name == "first"
            if held and slow is not None:
                slow.wait()
            client.call(0.3 if held and slow is None else (r["i"] * 7919 % 13) / 2000)
            if order is not None:
                order.append((name, r["i"]))
            if (r["i"] + len(name)) % 9 == 0:
                out.append(Drop(f"{name}_bad", detail=str(r["i"])))
            elif r["i"] % 6 == 0:
                out.append([{**r, name: k} for k in range(3)])
            else:
                out.append({**r, name: 1})
        return out

    return fn


def _count_per_chunk(records):
    """A stage with neither a batch nor a record function: it sees a chunk's records as one stream."""
    for n, r in enumerate(records):
        yield {**r, "n_in_chunk": n} if n % 4 else Drop("every_fourth")


def _jittered_stages(client: SlotClient, order: list | None = None, slow: SlowFirstAnswer | None = None):
    return [batch_stage("first", _jittered(client, "first", order, slow), 8, client=client),
            map_stage("between", lambda r: r if r["i"] % 10 != 7 else Drop("sevens")),
            batch_stage("second", _jittered(client, "second", order, slow), 8, client=client),
            Stage("per_chunk", _count_per_chunk, local=True)]


def test_records_finished_out_of_order_commit_the_rows_of_batch_by_batch(tmp_path, monkeypatch):
    """Records pass each stage as they finish (a stage never waits for the one before it in the input); every
    chunk still commits the rows, rejects and counts a batch-by-batch run commits, in the same order."""
    def run(name):
        result = run_pipeline([{"i": i} for i in range(150)], _jittered_stages(SlotClient(slots=6)),
                              tmp_path / name, chunk_size=20, keep_rejected=True)
        files = sorted((tmp_path / name).glob("segment-*/chunk-*.jsonl"))
        return [f.read_bytes() for f in files], list(result.rejected()), result.stages

    streamed = run("streamed")
    monkeypatch.setenv("TANSAKU_STREAMING", "0")
    batched = run("batched")
    assert streamed[0] == batched[0]  # byte for byte, chunk by chunk
    assert streamed[1] == batched[1] and len(streamed[1]) > 20
    strip = lambda stages: [{k: v for k, v in s.items() if k != "seconds"} for s in stages]  # noqa: E731
    assert strip(streamed[2]) == strip(batched[2])


def test_a_slow_answer_holds_back_neither_later_records_nor_their_next_stage(tmp_path):
    """Record 0's first answer is held back: the others go through both LLM stages meanwhile, and the chunks
    behind it commit first."""
    order: list = []
    stages = _jittered_stages(SlotClient(slots=4), order, SlowFirstAnswer(order, tmp_path / "w", later_chunks=5))
    result = run_pipeline([{"i": i} for i in range(60)], stages, tmp_path / "w", chunk_size=10)
    before_slow = order[:order.index(("first", 0))]
    assert sum(1 for stage, _ in before_slow if stage == "second") >= 30, before_slow
    assert [r["i"] for r in result.rows()] == sorted(r["i"] for r in result.rows())
    stats = sorted((tmp_path / "w").glob("segment-*/chunk-*.stats.json"))
    assert max(stats, key=lambda f: f.stat().st_mtime_ns).name == "chunk-000000.stats.json"


def test_an_offline_engine_gets_thousands_of_prompts_per_call(tmp_path, monkeypatch):
    """vLLM offline (``large_batches``): LARGE_BATCH records per call across chunks, whatever the batch size;
    the chunks still commit one by one with their own counts."""
    monkeypatch.setattr(streaming, "LARGE_BATCH", 120)

    class Offline:
        large_batches, slots = True, None

    sizes = []

    def ask(batch):
        sizes.append(len(batch))
        return [Drop("odd") if r["i"] % 2 else r for r in batch]

    stage = batch_stage("ask", ask, 8, client=Offline())
    result = run_pipeline([{"i": i} for i in range(250)], [stage], tmp_path / "w", chunk_size=100)
    assert sizes == [120, 120, 10]
    assert [r["i"] for r in result.rows()] == list(range(0, 250, 2))
    chunks = sorted((tmp_path / "w").glob("segment-*/chunk-*.stats.json"))
    assert [json.loads(c.read_text())[0]["received"] for c in chunks] == [100, 100, 50]


def test_memory_stays_bounded_when_the_next_stage_is_far_slower(tmp_path):
    """A fast streaming stage before one 100× slower: records read but not finished stay within the windows."""
    fast, slow = SlotClient(slots=4), SlotClient(slots=2)
    pulled, finished, worst = [0], [0], [0]

    def source():
        for i in range(600):
            pulled[0] += 1
            worst[0] = max(worst[0], pulled[0] - finished[0])
            yield {"i": i}

    def slow_fn(batch):
        slow.call(0.002)
        finished[0] += len(batch)
        return batch

    stages = [batch_stage("fast", lambda b: [fast.call(0.00002) or r for r in b], 16, client=fast),
              batch_stage("slow", slow_fn, 16, client=slow)]
    result = run_pipeline(source, stages, tmp_path / "w", chunk_size=10)
    assert sum(1 for _ in result.rows()) == 600
    windows = sum(max(MIN_WINDOW, WINDOW_PER_SLOT * c.slots) for c in (fast, slow))
    assert worst[0] <= windows + 2 * 10 + fast.slots + slow.slots, worst[0]  # not 600: the fast stage waits


def test_a_bug_in_a_streamed_stage_or_upstream_of_it_is_raised(tmp_path):
    client = SlotClient(slots=4)

    def broken(batch):
        if any(r["i"] == 37 for r in batch):
            raise KeyError("bug in the stage")
        return batch

    with pytest.raises(KeyError, match="bug in the stage"):
        run_pipeline([{"i": i} for i in range(100)], [batch_stage("ask", broken, 8, client=client)],
                     tmp_path / "a", chunk_size=10)
    upstream = [map_stage("prepare", lambda r: 1 / (r["i"] - 50) and r), batch_stage("ask", lambda b: b, 8, client=client)]
    with pytest.raises(ZeroDivisionError):
        run_pipeline([{"i": i} for i in range(100)], upstream, tmp_path / "b", chunk_size=10)


def test_an_interrupted_stream_resumes_from_its_committed_chunks(tmp_path):
    client = SlotClient(slots=4)
    calls = []

    def flaky(batch, fail_at=[63]):  # noqa: B006 - fails once, the first time record 63 is asked for
        for r in batch:
            calls.append(r["i"])
            if r["i"] == fail_at[0]:
                fail_at[0] = -1
                raise RuntimeError("the run dies here")
        return batch

    stages = [batch_stage("ask", flaky, 8, client=client)]
    with pytest.raises(RuntimeError):
        run_pipeline([{"i": i} for i in range(100)], stages, tmp_path / "w", chunk_size=10)
    committed = len(list((tmp_path / "w").glob("segment-*/chunk-*.stats.json")))
    assert committed >= 1
    first_calls = len(calls)
    calls.clear()
    result = run_pipeline([{"i": i} for i in range(100)], stages, tmp_path / "w", chunk_size=10)
    assert [r["i"] for r in result.rows()] == list(range(100)) and result.resumed_chunks == committed
    assert len(calls) == 100 - 10 * committed  # committed chunks are not asked again
    assert first_calls >= 10 * committed


# ---------------------------------------------------------------- kill -9 over HTTP, counted by the server

RUN = """
import sys
from tansaku.cli import synth_app
sys.argv = ["synth", *sys.argv[1:]]
synth_app()
"""


def _stats(url: str) -> dict:
    return json.loads(urllib.request.urlopen(f"{url}/stats", timeout=10).read())


def _reset(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{url}/stats/reset", method="POST"), timeout=10).read()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus

    root = tmp_path_factory.mktemp("stream_corpus")
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki_large.jsonl"), root / "corpus", BuildContext(quiet=True))
    build_index(root / "corpus", root / "index")
    return root


def _build(corpus: Path, out: Path, url: str, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "TANSAKU_CACHE": str(cache), "TANSAKU_QUIET": "1", "TANSAKU_STREAMING": "1"}
    env.pop("TANSAKU_NO_CACHE", None)
    args = ["build", "multihop", "--corpus", str(corpus / "corpus"), "--index", str(corpus / "index"),
            "--out", str(out), "--llm", f"http:canned@{url}", "--concurrency", str(SLOTS)]
    return subprocess.Popen([sys.executable, "-c", RUN, *args], env=env, stderr=subprocess.PIPE, text=True)


SLOTS = 8


def test_kill_9_during_a_streaming_stage_resumes_identically_and_asks_nothing_twice(corpus, tmp_path):
    """multihop with an LLM over the 244-article mini-wiki: ~1,400 requests (triples, questions, quality)."""
    from tansaku.examples.stand_in_llm import respond

    with ServerThread("a", responder=respond, latency="fixed:0.01", slots=SLOTS) as url:
        ref = _build(corpus, tmp_path / "ref", url, tmp_path / "cache-ref")
        assert ref.wait(timeout=600) == 0, ref.stderr.read()
        total = _stats(url)["requests"]
        assert total >= 1000 and _stats(url)["max_in_flight"] == SLOTS
        _reset(url)

        proc = _build(corpus, tmp_path / "out", url, tmp_path / "cache")
        while _stats(url)["requests"] < total // 3:
            assert proc.poll() is None, "the build finished before it could be killed"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at, answered_before = time.time(), _stats(url)["requests"]
        assert not (tmp_path / "out" / "manifest.json").exists()

        again = _build(corpus, tmp_path / "out", url, tmp_path / "cache")
        assert again.wait(timeout=600) == 0, again.stderr.read()
        stats = _stats(url)
    assert read_manifest(tmp_path / "out")["version"] == read_manifest(tmp_path / "ref")["version"]
    # Asked again: only requests in flight or in transit at the kill (answered within its last second: on two
    # cores the build's threads, busy with the stand-in's ~8 triples per article, can take that long to read an
    # answer off the socket into the cache), never an answer the build had received before; without the cache
    # it would be every one of them.
    # (Identical prompts inside one run may both miss the cache while in flight together: only repeats after the
    # kill count.)
    again_after_kill = [answered for came, answered in stats["repeated_answered_at"] if came >= killed_at]
    assert all(t >= killed_at - 1.0 for t in again_after_kill), (killed_at, again_after_kill)
    assert len(again_after_kill) <= max(SLOTS, answered_before // 20), (len(again_after_kill), answered_before)
