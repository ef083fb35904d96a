"""Load on ``synth serve-env`` (the NeMo Gym resources server): many concurrent episodes over HTTP.

Each episode is what a NeMo Gym agent sends: ``/seed_session``, ``--searches`` searches and one ``/open_doc``
(cookie per episode), then ``/verify`` with the rollout as a Responses API response. The server runs in its own
process (uvicorn, one worker); the client is ``httpx.AsyncClient`` with ``--concurrency`` episodes in flight.
Printed per run: episodes, requests, sustained requests/s, p50 / p99 / max latency. The peer is the same tool
work without HTTP: the same episodes on ``SearchEnvironment`` instances called from a thread pool of the same
size, in this process.

    python bench/env_server_load.py                       # 256 concurrent episodes, 1,024 episodes
    python bench/env_server_load.py --concurrency 64 256 --episodes 2048
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402 - the HTTP client the openai package ships with (httpx's API)

from tansaku.core.context import BuildContext  # noqa: E402
from tansaku.pipelines.corpus.config import CorpusConfig  # noqa: E402
from tansaku.testing.canned_server import free_port, wait_for_health  # noqa: E402

QUERIES = ["雪村製菓", "白砂市", "北浜県", "港町", "創業者", "羊羹", "月見坂", "本社"]


def prepare(work: Path) -> Path:
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus

    if not (work / "index").exists():
        build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki_large.jsonl"), work / "corpus", BuildContext(quiet=True))
        build_index(work / "corpus", work / "index")
    return work / "index"


def _response(i: int) -> dict:
    return {"output": [
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": json.dumps({"query": QUERIES[i % 8]})},
        {"type": "function_call_output", "call_id": "c1", "output": "…"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "<think>…</think>{{暁瀬県}}"}]}]}


async def _episodes(url: str, episodes: int, concurrency: int, searches: int) -> list[float]:
    """Every episode's requests, ``concurrency`` episodes at once over one connection pool; each request's latency.
    The episode id ``/seed_session`` answers travels in the ``X-Episode-Id`` header (one pool for all; a NeMo Gym
    agent uses a cookie)."""
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        async def post(route: str, body: dict, episode: str | None) -> dict:
            started = time.perf_counter()
            response = await client.post(route, json=body, headers={"X-Episode-Id": episode} if episode else {})
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            return response.json()

        async def one(i: int) -> None:
            async with gate:
                seeded = await post("/seed_session", {"id": f"e{i}", "question": "暁瀬県の県庁所在地は？",
                                                      "answer": "雫ヶ丘市"}, None)
                episode = seeded["episode_id"]  # drawn by the server
                for k in range(searches):
                    await post("/search", {"query": QUERIES[(i + k) % len(QUERIES)]}, episode)
                await post("/open_doc", {"doc_id": "mwl0001"}, episode)
                await post("/verify", {"responses_create_params": {}, "response": _response(i)}, episode)

        await asyncio.gather(*(one(i) for i in range(episodes)))
    return latencies


def run_http(index: Path, episodes: int, concurrency: int, searches: int) -> dict:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", "import sys; from tansaku.cli import synth_app; "
                               "sys.argv[0] = 'synth'; synth_app()", "serve-env", "--task", "multihop_qa",
                               "--index", str(index), "--port", str(port)], cwd=ROOT, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url)
        started = time.perf_counter()
        latencies = asyncio.run(_episodes(url, episodes, concurrency, searches))
        wall = time.perf_counter() - started
    finally:
        server.kill()
        server.wait()
    return _row("serve-env over HTTP", episodes, concurrency, latencies, wall)


def run_in_process(index: Path, episodes: int, concurrency: int, searches: int) -> dict:
    from tansaku.envs.environments import make_environment_factory
    from tansaku.envs.gym_service import completion_from_response, verify_scores
    from tansaku.envs.tasks import TASKS

    task = TASKS["multihop_qa"]
    factory = make_environment_factory(task, index, require_prompt=False)
    functions = task.scoring_functions()
    latencies: list[float] = []

    def timed(fn, *args):
        started = time.perf_counter()
        out = fn(*args)
        latencies.append(time.perf_counter() - started)
        return out

    def one(i: int) -> None:
        row = {"id": f"e{i}", "question": "暁瀬県の県庁所在地は？", "answer": "雫ヶ丘市"}
        env = timed(lambda: (e := factory(), e.reset(**row), e)[2])
        for k in range(searches):
            timed(env.search, QUERIES[(i + k) % len(QUERIES)])
        timed(env.open_doc, "mwl0001")
        timed(lambda: verify_scores(task, completion_from_response(_response(i)), row, functions))

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, range(episodes)))
    return _row("same episodes in process (peer)", episodes, concurrency, latencies, time.perf_counter() - started)


def _row(what: str, episodes: int, concurrency: int, latencies: list[float], wall: float) -> dict:
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {"what": what, "concurrency": concurrency, "episodes": episodes, "requests": len(latencies),
            "wall_s": round(wall, 2), "requests_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(pick(0.5), 1), "p99_ms": round(pick(0.99), 1), "max_ms": round(ordered[-1] * 1000, 1),
            "mean_ms": round(statistics.fmean(latencies) * 1000, 1)}


COLUMNS = ["what", "concurrency", "episodes", "requests", "wall_s", "requests_per_s", "p50_ms", "p99_ms", "max_ms"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[256])
    parser.add_argument("--episodes", type=int, default=1024)
    parser.add_argument("--searches", type=int, default=4)
    parser.add_argument("--work", type=Path, default=Path("/tmp/tansaku-bench-env"))
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    index = prepare(args.work)
    rows = []
    for concurrency in args.concurrency:
        rows.append(run_http(index, args.episodes, concurrency, args.searches))
        rows.append(run_in_process(index, args.episodes, concurrency, args.searches))
        rows[-2]["vs_peer"] = round(rows[-2]["requests_per_s"] / rows[-1]["requests_per_s"], 2)
    print("| " + " | ".join(COLUMNS + ["vs_peer"]) + " |")
    print("|" + "---|" * (len(COLUMNS) + 1))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "1.00" if c == "vs_peer" else "–")) for c in COLUMNS + ["vs_peer"]) + " |")


if __name__ == "__main__":
    main()
