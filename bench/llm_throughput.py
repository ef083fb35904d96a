"""How busy each synthesis pipeline keeps an LLM server: streaming LLM stages against batch-by-batch ones.

A local OpenAI-compatible server (``tansaku.testing.canned_server`` in its own process) answers every
synthesis prompt with the stand-in answers of ``examples/stand_in_llm.py`` after a latency drawn per request
(``--latency``; default lognormal, median 0.5 s, σ 0.8), at most ``slots`` requests at a time (the rest queue,
as in vLLM). Each pipeline is built through it by the real ``synth build`` command (``--concurrency SLOTS``,
cache off), once streaming and once batch by batch (``TANSAKU_STREAMING=0``: the engine before issue 19).
Per run: requests, the summed latency the server served, the span from its first to its last answer,
efficiency = (summed latency / slots) / span, the same efficiency until the last request was issued (after it
only the slowest answers drain, which no scheduler can shorten), the most requests in flight, the build's peak
RSS, and its ``version``; the two engines must give the same version and funnel (asserted).

The peer row (``raw client``) is ``openai.AsyncOpenAI`` sending a fixed number of requests straight to the
same server with ``slots`` at once: the best a client does on this machine, tail included.

    python bench/llm_throughput.py                                  # 64 slots, every pipeline, both engines
    python bench/llm_throughput.py --slots 64 512 --pipelines multihop egov --scale 2
    python bench/llm_throughput.py --latency lognormal:0.5,0.8,tail:0.01,20    # 1% of requests 20x slower

Inputs: multihop and trajectories use ``--scale`` seeds of the fictional mini-wiki (244 articles each);
egov and deepresearch read ``../shared/data`` (民法 + 行政手続法; Wikipedia leads) when present, else the
package's small examples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tansaku.core.context import BuildContext  # noqa: E402
from tansaku.pipelines.corpus_config import CorpusConfig  # noqa: E402
from tansaku.pipelines.multihop.config import MultihopConfig  # noqa: E402
from tansaku.testing.canned_server import free_port, wait_for_health  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
RESPONDER = "tansaku.examples.stand_in_llm:respond"
SYNTH = [sys.executable, "-c", "import sys; from tansaku.cli import synth_app; sys.argv[0] = 'synth'; synth_app()"]


# ---------------------------------------------------------------- inputs


def _law_copies(laws: Path, out: Path, copies: int) -> Path:
    """``copies`` renamed copies of every law (another law id and title each), for a longer egov run."""
    if copies <= 1:
        return laws
    if not out.exists():
        out.mkdir(parents=True)
        for xml in sorted(laws.glob("*.xml")):
            if not re.match(r"^\d{3}[A-Z]{2}\d", xml.stem):
                continue  # the XSD
            text = xml.read_text(encoding="utf-8")
            for k in range(copies):
                stem = xml.stem.split("_")
                stem[0] = stem[0][:-4] + f"{k:04d}"  # a law id of the same shape, one per copy
                titled = re.sub(r"(<LawTitle[^>]*>)([^<]*)(</LawTitle>)", rf"\g<1>\g<2>第{k + 1}写\g<3>", text, count=1)
                (out / ("_".join(stem) + ".xml")).write_text(titled, encoding="utf-8")
    return out


def prepare(work: Path, scale: int, law_copies: int = 1) -> dict:
    """Corpora, indexes and the question set the pipelines read (made once per work folder)."""
    from tansaku.envs.search import build_index
    from tansaku.examples.make_miniwiki import make_miniwiki
    from tansaku.pipelines.corpus import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    laws = SHARED / "egov" if (SHARED / "egov").exists() else ROOT / "examples" / "laws"
    inputs = {"wiki": work / f"wiki{scale}", "laws": _law_copies(laws, work / f"laws{law_copies}", law_copies),
              "leads": work / "leads", "questions": work / f"questions{scale}"}
    if not (inputs["wiki"] / "index").exists():
        raw = work / f"wiki{scale}.jsonl"
        with open(raw, "w", encoding="utf-8") as f:
            for seed in range(scale):
                for doc in _renamed(make_miniwiki(seed), seed):
                    f.write(json.dumps(doc, ensure_ascii=False) + "\n")
        build_corpus(CorpusConfig(input=raw), inputs["wiki"] / "corpus", BuildContext(quiet=True))
        build_index(inputs["wiki"] / "corpus", inputs["wiki"] / "index")
    if not (inputs["leads"] / "index").exists():
        wac = SHARED / "jawiki" / "WikipediaAnnotatedCorpus"
        build_corpus(CorpusConfig(input=wac if wac.exists() else ROOT / "examples" / "miniwiki.jsonl"), inputs["leads"] / "corpus", BuildContext(quiet=True))
        build_index(inputs["leads"] / "corpus", inputs["leads"] / "index")
    if not (inputs["questions"] / "manifest.json").exists():  # template questions: no LLM
        build_multihop(MultihopConfig(corpus=inputs["wiki"] / "corpus", index=inputs["wiki"] / "index"), inputs["questions"], BuildContext(quiet=True))
    return inputs


PREFIXES = "東西南北上下中新元本大小"


def _renamed(docs: list[dict], seed: int) -> list[dict]:
    """Seed ``seed``'s articles with every title prefixed (北暁瀬県): seeds draw names from one pool, and the
    same name with other facts in another seed would make every relation look many-valued."""
    if seed == 0:
        return docs
    prefix = PREFIXES[(seed - 1) % len(PREFIXES)] * (1 + (seed - 1) // len(PREFIXES))
    titles = sorted({d["title"] for d in docs}, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, titles)))

    def rename(value):
        if isinstance(value, str):
            return pattern.sub(lambda m: prefix + m.group(0), value)
        return [rename(v) for v in value] if isinstance(value, list) else value

    return [{**{k: rename(v) for k, v in d.items() if k not in ("id", "url")}, "id": f"s{seed}-{d['id']}",
             "url": d["url"]} for d in docs]


def commands(inputs: dict, url: str, out: Path, limit: int | None) -> dict[str, list[str]]:
    llm = f"http:canned@{url}"
    wiki, leads = inputs["wiki"], inputs["leads"]
    return {
        "multihop": ["build", "multihop", "--corpus", str(wiki / "corpus"), "--index", str(wiki / "index"),
                     "--out", str(out), "--llm", llm],
        "egov": ["build", "egov", "--laws", str(inputs["laws"]), "--out", str(out), "--llm", llm],
        "deepresearch": ["build", "deepresearch", "--corpus", str(leads / "corpus"), "--index", str(leads / "index"),
                         "--out", str(out), "--llm", llm],
        "trajectories": ["build", "trajectories", "--dataset", str(inputs["questions"]), "--index", str(wiki / "index"),
                         "--out", str(out), "--teacher", llm, "--n", "1"]
                        + (["--limit", str(limit)] if limit else []),
    }


# ---------------------------------------------------------------- one run


class Server:
    """The latency server in its own process (its CPU is not the build's)."""

    def __init__(self, latency: str, slots: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "tansaku.testing.canned_server", "--port", str(self.port),
                                      "--responder", RESPONDER, "--latency", latency, "--slots", str(slots)],
                                     cwd=ROOT, stderr=subprocess.DEVNULL)
        wait_for_health(self.url)

    def stats(self) -> dict:
        return json.loads(urllib.request.urlopen(f"{self.url}/stats", timeout=30).read())

    def spans(self) -> list[list[float]]:
        """[start, end] of every answer served."""
        return json.loads(urllib.request.urlopen(f"{self.url}/stats/served", timeout=30).read())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def issuing_efficiency(spans: list[list[float]], slots: int) -> float:
    """Efficiency until the last request started: the slots' busy share while the pipeline still had requests
    to hand out. What is left after it is the drain of the slowest answers, which no scheduler can shorten."""
    if not spans:
        return 0.0
    start, last_start = min(a for a, _ in spans), max(a for a, _ in spans)
    if last_start <= start:
        return 0.0
    busy = sum(max(0.0, min(b, last_start) - a) for a, b in spans)
    return busy / slots / (last_start - start)


def _row(what: str, engine: str, slots: int, stats: dict, spans: list, wall: float, rss_mb: float | None,
         extra: dict) -> dict:
    span = (stats["last_at"] or 0) - (stats["first_at"] or 0)
    efficiency = stats["busy_seconds"] / slots / span if span > 0 else 0.0
    return {"pipeline": what, "engine": engine, "slots": slots, "requests": stats["requests"],
            "latency_s": round(stats["busy_seconds"], 1), "span_s": round(span, 1), "wall_s": round(wall, 1),
            "efficiency": round(efficiency, 3), "until_last_issue": round(issuing_efficiency(spans, slots), 3),
            "max_in_flight": stats["max_in_flight"], "peak_rss_mb": None if rss_mb is None else round(rss_mb), **extra}


def run_build(name: str, engine: str, slots: int, latency: str, inputs: dict, work: Path, limit: int | None) -> dict:
    server = Server(latency, slots)
    out = work / "runs" / f"{name}-{engine}-{slots}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    env = {**os.environ, "TANSAKU_STREAMING": "1" if engine == "streaming" else "0", "TANSAKU_QUIET": "1",
           "TANSAKU_NO_CACHE": "1"}
    argv = [*SYNTH, *commands(inputs, server.url, out, limit)[name], "--concurrency", str(slots)]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{name} ({engine}) failed: {proc.stderr.read()[-2000:]}")
        stats, spans = server.stats(), server.spans()
        (work / "runs" / f"{name}-{engine}-{slots}.served.json").write_text(json.dumps(spans))
    finally:
        server.close()
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    funnel = [(s["name"], s["received"], s["kept"]) for s in manifest["stages"]]
    return _row(name, engine, slots, stats, spans, wall, usage.ru_maxrss / 1024,
                {"version": manifest["version"], "funnel": funnel})


def run_peer(slots: int, latency: str, requests: int) -> dict:
    from openai import AsyncOpenAI

    server = Server(latency, slots)

    async def main() -> None:
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="EMPTY", max_retries=0, timeout=600)
        gate = asyncio.Semaphore(slots)

        async def one(i: int) -> None:
            async with gate:
                await client.chat.completions.create(
                    model="canned", max_tokens=16, messages=[{"role": "user", "content": f"ルーブリック {i}"}])

        await asyncio.gather(*(one(i) for i in range(requests)))

    started = time.monotonic()
    try:
        asyncio.run(main())
        stats, spans = server.stats(), server.spans()
    finally:
        server.close()
    return _row("raw client (peer)", "-", slots, stats, spans, time.monotonic() - started, None, {})


# ---------------------------------------------------------------- table


COLUMNS = ["pipeline", "engine", "slots", "requests", "latency_s", "span_s", "wall_s", "efficiency",
           "until_last_issue", "max_in_flight", "peak_rss_mb"]


def print_table(rows: list[dict]) -> None:
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        print("| " + " | ".join("–" if r.get(c) is None else str(r[c]) for c in COLUMNS) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[64])
    parser.add_argument("--latency", default="lognormal:0.5,0.8")
    parser.add_argument("--pipelines", nargs="+", default=["multihop", "egov", "deepresearch", "trajectories"])
    parser.add_argument("--engines", nargs="+", default=["streaming", "batch"])
    parser.add_argument("--scale", type=int, default=4, help="mini-wiki seeds (244 articles each)")
    parser.add_argument("--trajectories-limit", type=int, default=None, help="questions the teacher answers")
    parser.add_argument("--law-copies", type=int, default=1, help="renamed copies of each law (a longer egov run)")
    parser.add_argument("--peer-requests", type=int, default=6000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/tansaku-bench-llm"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)

    args.work.mkdir(parents=True, exist_ok=True)
    inputs = prepare(args.work, args.scale, args.law_copies)
    rows = []
    for slots in args.slots:
        rows.append(run_peer(slots, args.latency, args.peer_requests))
        print_table(rows[-1:])
        for name in args.pipelines:
            done = {}
            for engine in args.engines:
                row = run_build(name, engine, slots, args.latency, inputs, args.work, args.trajectories_limit)
                rows.append(row)
                done[engine] = row
                print_table([row])
            if len(done) == 2:  # the same dataset either way
                a, b = done.values()
                assert (a["version"], a["funnel"]) == (b["version"], b["funnel"]), (name, a, b)
    print(f"\nlatency {args.latency}; efficiency = (summed latency / slots) / span of answers")
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
