"""Requests/s of tansaku's HTTP LLM client vs the raw ``openai.AsyncOpenAI`` client, same concurrency,
same local server, measured in the same run (cache off). Target: ratio ≥ 0.95.

The server is ``tansaku.testing.canned_server`` in its own process: it answers at once, so the numbers
measure client overhead (event-loop hand-off, semaphore, result conversion), not a model.

``--messages agent`` sends what a synthesis agent sends on a late turn instead of one short user message: a
system prompt, the question, two assistant tool calls and their search results (~2,600 characters) and the
search tool's schema. There the client's own CPU per request is what caps a build at many slots.

Run: python bench/llm_http.py [--requests 1000] [--concurrency 8 32 64] [--rounds 5] [--messages short|agent]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tansaku.core.llm import ChatRequest, from_spec  # noqa: E402
from tansaku.testing.canned_server import free_port, wait_for_health  # noqa: E402


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tansaku.testing.canned_server", "--port", str(port)],
                            cwd=Path(__file__).resolve().parents[1])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, timeout=30)
    except RuntimeError:
        proc.kill()
        raise
    return proc, url


SEARCH_TOOL = [{"type": "function", "function": {"name": "search", "description": "記事を検索する",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
def messages(i: int, kind: str = "short") -> list[dict]:
    if kind == "short":
        return [{"role": "user", "content": f"ベンチマークの質問 {i}"}]
    found = "\n".join(f"[{k}] 架空の記事{k}: " + "北暁瀬県の県庁所在地は暁瀬市である。" * 8 for k in range(5))
    call = {"type": "function", "function": {"name": "search", "arguments": '{"query": "北暁瀬県 県庁所在地"}'}}
    return [{"role": "system", "content": "あなたは検索ツールを使って質問に答えるエージェントです。" * 8},
            {"role": "user", "content": f"質問 {i}: 北暁瀬県の県庁所在地はどこですか"},
            {"role": "assistant", "content": "<think>検索する</think>", "tool_calls": [{"id": "c1", **call}]},
            {"role": "tool", "tool_call_id": "c1", "content": found},
            {"role": "assistant", "content": "<think>確かめる</think>", "tool_calls": [{"id": "c2", **call}]},
            {"role": "tool", "tool_call_id": "c2", "content": found}]


def tools(kind: str) -> list[dict] | None:
    return SEARCH_TOOL if kind == "agent" else None


def run_raw(url: str, n: int, concurrency: int, kind: str = "short") -> tuple[float, float]:
    from openai import AsyncOpenAI

    async def main() -> tuple[float, float]:
        client = AsyncOpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=0, timeout=60)
        semaphore = asyncio.Semaphore(concurrency)

        async def one(i):
            async with semaphore:
                extra = {"tools": tools(kind)} if tools(kind) else {}
                response = await client.chat.completions.create(
                    model="canned", messages=messages(i, kind), max_tokens=16, temperature=0.0, top_p=1.0, **extra)
                return response.choices[0].message.content

        await asyncio.gather(*(one(i) for i in range(concurrency)))  # warm the connection pool
        start, cpu = time.perf_counter(), time.process_time()
        outs = await asyncio.gather(*(one(i) for i in range(n)))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert all(outs)
        await client.close()
        return n / elapsed, cpu / n * 1e6

    return asyncio.run(main())


def run_ours(url: str, n: int, concurrency: int, kind: str = "short") -> tuple[float, float]:
    client = from_spec(f"http:canned@{url}", cache=False, max_concurrency=concurrency, timeout=60)
    client.chat([ChatRequest(messages=messages(i), max_tokens=16) for i in range(concurrency)])  # warm up
    requests = [ChatRequest(messages=messages(i, kind), max_tokens=16, tools=tools(kind)) for i in range(n)]
    start, cpu = time.perf_counter(), time.process_time()  # process_time counts the client's loop thread too
    results = client.chat(requests)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert all(r.ok for r in results), next(r.error for r in results if not r.ok)
    client.close()
    return n / elapsed, cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", choices=["short", "agent"], default="short")
    args = parser.parse_args()
    proc, url = start_server()
    try:
        rows = []
        for concurrency in args.concurrency:
            raw, ours = [], []
            for _ in range(args.rounds):  # interleave so drift in machine load hits both alike
                raw.append(run_raw(url, args.requests, concurrency, args.messages))
                ours.append(run_ours(url, args.requests, concurrency, args.messages))
            rows.append((concurrency, max(r for r, _ in raw), max(o for o, _ in ours),
                         statistics.median(o for o, _ in ours) / statistics.median(r for r, _ in raw),
                         min(c for _, c in raw), min(c for _, c in ours)))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # Best of N: on a shared machine interference only slows a round down, so the best round is the
    # cleanest estimate; the ratio of medians is printed too. Client CPU µs per request (process time of
    # the client process, all threads) is the overhead itself and hardly moves with machine load.
    print(f"\nHTTP client vs raw openai.AsyncOpenAI — {args.requests} requests ({args.messages} messages), "
          f"best of {args.rounds} rounds")
    print(f"{'concurrency':>11} | {'raw req/s':>9} | {'ours req/s':>10} | {'ratio':>5} | {'median ratio':>12} | "
          f"{'raw CPU µs/req':>14} | {'ours CPU µs/req':>15} | {'CPU ratio':>9}")
    print("-" * 108)
    for concurrency, raw, ours, median_ratio, raw_cpu, ours_cpu in rows:
        print(f"{concurrency:>11} | {raw:>9.0f} | {ours:>10.0f} | {ours / raw:>5.3f} | {median_ratio:>12.3f} | "
              f"{raw_cpu:>14.0f} | {ours_cpu:>15.0f} | {raw_cpu / ours_cpu:>9.3f}")


if __name__ == "__main__":
    main()
