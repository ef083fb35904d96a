"""How busy each synthesis pipeline keeps an LLM server's slots, against two latency servers and a raw client.

Each pipeline (egov, multihop, deepresearch, trajectories) is built by the real ``synth build`` command
(``--concurrency SLOTS``, cache off) through a local OpenAI-compatible server, in its own process, that answers
with the stand-in answers of ``examples/stand_in_llm.py`` after a drawn latency (``--latency``; default
lognormal, median 0.5 s, σ 0.8), at most ``slots`` requests at a time (the rest queue, as in vLLM). Servers
(``--servers``): ``canned`` is the project's ``tansaku.testing.canned_server`` (latency keyed by the request body,
answer computed after the sleep); ``independent`` is ``bench/latency_server.py``, written here with stdlib
asyncio and nothing from tansaku.testing (latency drawn in arrival order from ``Random(seed)``, answer computed
before the sleep and its time taken off it).

Per row, from the server's own records: ``efficiency`` = Σ latency / slots / (last answer sent − first request
received), the headline; ``until_last_issue``, the same busy share only until the last request took a slot (a
diagnostic: after it only the drain is left); ``bound``, the mean over 30 draws of the best any client can do
with the same n requests on the same slots and no dependencies (each request to the first free slot in
order, ``fifo_bound``); ``peer``, the efficiency of a raw ``openai.AsyncOpenAI`` client sending the
**same n** requests to a fresh server of the same kind and slots; ``vs_peer`` = efficiency / peer; req/s; the
CPU seconds of the build and of the server. The bench also checks that each pipeline's output (manifest
``version`` and funnel) is the same across servers, slot counts and engines, and prints a line if not.

Sizes (``--sizes``): ``short`` sends ≈ 600 requests per pipeline (``--short-limits``: egov 300 provisions,
multihop 180 chains and deepresearch 78 keyword groups on a 1-seed wiki / the leads, trajectories 105
questions); ``long`` is the full inputs at ``--scale`` mini-wiki seeds and ``--law-copies`` (``--long-limits``
to cap them). egov and deepresearch read ``../shared/data`` (民法 + 行政手続法; Wikipedia leads) when present.

    python bench/llm_throughput.py                        # every pipeline, short and long, 64 and 512 slots
    python bench/llm_throughput.py --pipelines egov --sizes short --slots 64 --json rows.json
    python bench/llm_throughput.py --servers independent --latency lognormal:0.5,0.8,tail:0.01,20
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from latency_server import parse_latency  # noqa: E402

from tansaku.core.context import BuildContext  # noqa: E402
from tansaku.pipelines.corpus.config import CorpusConfig  # noqa: E402
from tansaku.pipelines.multihop.config import MultihopConfig  # noqa: E402
from tansaku.testing.canned_server import free_port, wait_for_health  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
RESPONDER = "tansaku.examples.stand_in_llm:respond"
SYNTH = [sys.executable, "-c", "import sys; from tansaku.cli import synth_app; sys.argv[0] = 'synth'; synth_app()"]
PIPELINES = ["egov", "multihop", "deepresearch", "trajectories"]
# ≈ 600 requests each: egov 2 per eligible provision (300 → 578); multihop 244 triples + 2 per chain;
# deepresearch ≈ 7.7 per keyword group; trajectories ≈ 2.9 teacher turns + 3 rewrites per question.
SHORT_LIMITS = {"egov": 300, "multihop": 180, "deepresearch": 78, "trajectories": 105}
NEEDS = {"egov": {"laws"}, "multihop": {"wiki"}, "deepresearch": {"leads"}, "trajectories": {"wiki", "questions"}}


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


def prepare(work: Path, needs: set[str], scale: int, law_copies: int = 1) -> dict:
    """The corpora, indexes and question set that the chosen pipelines read (each made once per work folder)."""
    from tansaku.envs.search import build_index
    from tansaku.examples.make_miniwiki import make_miniwiki
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    laws = SHARED / "egov" if (SHARED / "egov").exists() else ROOT / "examples" / "laws"
    inputs = {"wiki": work / f"wiki{scale}", "laws": laws, "leads": work / "leads", "questions": work / f"questions{scale}"}
    if "laws" in needs:
        inputs["laws"] = _law_copies(laws, work / f"laws{law_copies}", law_copies)
    if needs & {"wiki", "questions"} and not (inputs["wiki"] / "index").exists():
        raw = work / f"wiki{scale}.jsonl"
        with open(raw, "w", encoding="utf-8") as f:
            for seed in range(scale):
                for doc in _renamed(make_miniwiki(seed), seed):
                    f.write(json.dumps(doc, ensure_ascii=False) + "\n")
        build_corpus(CorpusConfig(input=raw), inputs["wiki"] / "corpus", BuildContext(quiet=True))
        build_index(inputs["wiki"] / "corpus", inputs["wiki"] / "index")
    if "leads" in needs and not (inputs["leads"] / "index").exists():
        wac = SHARED / "jawiki" / "WikipediaAnnotatedCorpus"
        build_corpus(CorpusConfig(input=wac if wac.exists() else ROOT / "examples" / "miniwiki.jsonl"), inputs["leads"] / "corpus", BuildContext(quiet=True))
        build_index(inputs["leads"] / "corpus", inputs["leads"] / "index")
    if "questions" in needs and not (inputs["questions"] / "manifest.json").exists():  # template questions: no LLM
        build_multihop(MultihopConfig(corpus=inputs["wiki"] / "corpus", index=inputs["wiki"] / "index"), inputs["questions"], BuildContext(quiet=True))
    return inputs


PREFIXES = "東西南北上下中新元本大小"


def _prefix(seed: int) -> str:
    """Seed ``seed``'s title prefix: ``seed`` in bijective base 12 over ``PREFIXES`` (東 … 小, 東東, 東西 …), so
    every seed ≥ 1 has its own.

    >>> [_prefix(s) for s in (1, 12, 13, 14, 25)]
    ['東', '小', '東東', '東西', '西東']
    """
    prefix = ""
    while seed > 0:
        seed, digit = divmod(seed - 1, len(PREFIXES))
        prefix = PREFIXES[digit] + prefix
    return prefix


def _renamed(docs: list[dict], seed: int) -> list[dict]:
    """Seed ``seed``'s articles with every title prefixed (北暁瀬県): seeds draw names from one pool, and the
    same name with other facts in another seed would make every relation look many-valued."""
    if seed == 0:
        return docs
    prefix = _prefix(seed)
    titles = sorted({d["title"] for d in docs}, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, titles)))

    def rename(value):
        if isinstance(value, str):
            return pattern.sub(lambda m: prefix + m.group(0), value)
        return [rename(v) for v in value] if isinstance(value, list) else value

    return [{**{k: rename(v) for k, v in d.items() if k not in ("id", "url")}, "id": f"s{seed}-{d['id']}",
             "url": d["url"]} for d in docs]


def command(name: str, inputs: dict, url: str, out: Path, limit: int | None) -> list[str]:
    llm = f"http:canned@{url}"
    wiki, leads = inputs["wiki"], inputs["leads"]
    argv = {
        "multihop": ["build", "multihop", "--corpus", str(wiki / "corpus"), "--index", str(wiki / "index"),
                     "--out", str(out), "--llm", llm],
        "egov": ["build", "egov", "--laws", str(inputs["laws"]), "--out", str(out), "--llm", llm],
        "deepresearch": ["build", "deepresearch", "--corpus", str(leads / "corpus"), "--index", str(leads / "index"),
                         "--out", str(out), "--llm", llm],
        "trajectories": ["build", "trajectories", "--dataset", str(inputs["questions"]), "--index", str(wiki / "index"),
                         "--out", str(out), "--teacher", llm, "--n", "1"],
    }[name]
    return argv + (["--limit", str(limit)] if limit else [])


# ---------------------------------------------------------------- servers and metrics


class Server:
    """A latency server of ``kind`` (canned | independent) in its own process, so its CPU is not the client's."""

    def __init__(self, kind: str, latency: str, slots: int, seed: int = 0, latency_by: str = "arrival"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        common = ["--port", str(self.port), "--latency", latency, "--slots", str(slots)]
        argv = ([sys.executable, "-m", "tansaku.testing.canned_server", "--responder", RESPONDER, *common]
                if kind == "canned" else [sys.executable, str(BENCH / "latency_server.py"), "--seed", str(seed),
                                          "--latency-by", latency_by, *common])
        self.proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.DEVNULL)
        wait_for_health(self.url)

    def get(self, path: str):
        return json.loads(urllib.request.urlopen(f"{self.url}{path}", timeout=60).read())

    def close(self) -> float:
        """Stop the server; → the CPU seconds it used."""
        self.proc.kill()
        _, _, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = -9  # reaped here: Popen must not wait for it again
        return usage.ru_utime + usage.ru_stime


def issuing_efficiency(spans: list[list[float]], slots: int) -> float:
    """Efficiency until the last request took a slot: the slots' busy share while the client still had requests
    to hand out. What is left after it is the drain of the slowest answers, which no scheduler can shorten."""
    if not spans:
        return 0.0
    start, last_start = min(a for a, _ in spans), max(a for a, _ in spans)
    if last_start <= start:
        return 0.0
    busy = sum(max(0.0, min(b, last_start) - a) for a, b in spans)
    return busy / slots / (last_start - start)


def measured(stats: dict, spans: list, slots: int) -> dict:
    """The headline numbers, from the server's own records: its first request received, its last answer."""
    span = (stats["last_at"] or 0) - (stats["first_at"] or 0)
    return {"requests": stats["requests"], "latency_s": round(stats["busy_seconds"], 1), "span_s": round(span, 2),
            "efficiency": round(stats["busy_seconds"] / slots / span, 3) if span > 0 else 0.0,
            "until_last_issue": round(issuing_efficiency(spans, slots), 3),
            "req_s": round(stats["requests"] / span) if span > 0 else 0, "max_in_flight": stats["max_in_flight"]}


def fifo_efficiencies(n: int, slots: int, latency: str, draws: int = 30) -> list[float]:
    """Σ latency / slots / span of n requests with no dependencies, each sent the moment a slot is free, in
    order, for each of ``draws`` seeds (seed i's latencies are the independent server's seed-i draws)."""
    draw, effs = parse_latency(latency), []
    for seed in range(draws):
        rng = random.Random(seed)
        latencies = [draw(rng) for _ in range(n)]
        free, end = [0.0] * slots, 0.0
        for seconds in latencies:
            done = heapq.heappop(free) + seconds
            heapq.heappush(free, done)
            end = max(end, done)
        effs.append(sum(latencies) / slots / end)
    return effs


def fifo_bound(n: int, slots: int, latency: str, draws: int = 30) -> float:
    """The mean of ``fifo_efficiencies``. No client sending n requests does better on average: the span
    cannot end before the slowest answer, and the last requests leave slots idle while they drain."""
    if n <= 0:
        return 0.0
    return round(statistics.mean(fifo_efficiencies(n, slots, latency, draws)), 3)


# ---------------------------------------------------------------- runs


def run_build(name: str, size: str, engine: str, kind: str, slots: int, args, inputs: dict, limit: int | None) -> dict:
    # stream_efficiency.py asks for latencies by content (its runs must share a workload); here: arrival.
    server = Server(kind, args.latency, slots, args.seed, getattr(args, "latency_by", "arrival"))
    label = f"{name}-{size}-{engine}-{kind}-{slots}"
    out = args.work / "runs" / label
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "TANSAKU_STREAMING": "1" if engine == "streaming" else "0", "TANSAKU_QUIET": "1",
           "TANSAKU_NO_CACHE": "1"}
    argv = [*SYNTH, *command(name, inputs, server.url, out, limit), "--concurrency", str(slots)]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise RuntimeError(f"{label} failed: {proc.stderr.read()[-2000:]}")
        stats, spans = server.get("/stats"), server.get("/stats/served")
        (args.work / "runs" / f"{label}.served.json").write_text(json.dumps(spans))
        if kind == "independent":  # [arrival, start, end, sent, latency] per request
            records = server.get("/stats/records")
            (args.work / "runs" / f"{label}.records.json").write_text(json.dumps(records))
    finally:
        server_cpu = server.close()
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return {"pipeline": name, "size": size, "engine": engine, "slots": slots, "server": kind,
            **measured(stats, spans, slots), "wall_s": round(wall, 1),
            "cpu_build_s": round(usage.ru_utime + usage.ru_stime, 1), "cpu_server_s": round(server_cpu, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "version": manifest["version"],
            "funnel": [[s["name"], s["received"], s["kept"]] for s in manifest["stages"]]}


def run_peer(kind: str, slots: int, latency: str, requests: int, seed: int = 0) -> dict:
    """The raw client: ``requests`` independent requests, ``slots`` at once, to a fresh server of ``kind``."""
    from openai import AsyncOpenAI

    server = Server(kind, latency, slots, seed)

    async def main() -> None:
        gate = asyncio.Semaphore(slots)
        # Closed inside the loop: left to the garbage collector, its pool's close would run on a closed loop.
        async with AsyncOpenAI(base_url=server.url + "/v1", api_key="EMPTY", max_retries=0, timeout=600) as client:

            async def one(i: int) -> None:
                async with gate:  # each message differs, so the canned server draws another latency for each
                    await client.chat.completions.create(
                        model="canned", max_tokens=16, messages=[{"role": "user", "content": f"ルーブリック {i}"}])

            await asyncio.gather(*(one(i) for i in range(requests)))

    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        asyncio.run(main())
        stats, spans = server.get("/stats"), server.get("/stats/served")
    finally:
        server_cpu = server.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {**measured(stats, spans, slots), "cpu_client_s": round(after.ru_utime + after.ru_stime
                                                                    - before.ru_utime - before.ru_stime, 1),
            "cpu_server_s": round(server_cpu, 1)}


def check_same_output(rows: list[dict]) -> list[str]:
    """One line per pipeline and size whose version or funnel differs across servers, slots or engines: the
    output must not depend on timing or on the latency model."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        key = (r["version"], json.dumps(r["funnel"]))
        groups[(r["pipeline"], r["size"])][key].append(f"{r['server']}/{r['slots']}/{r['engine']}")
    lines = []
    for (name, size), outputs in groups.items():
        if len(outputs) > 1:
            lines.append(f"OUTPUT DIFFERS: {name} {size}: {len(outputs)} different outputs (server/slots/engine)")
            for (version, funnel), where in outputs.items():
                lines.append(f"  {version} ({', '.join(where)}): {funnel}")
    return lines


# ---------------------------------------------------------------- table


COLUMNS = ["pipeline", "size", "slots", "server", "requests", "span_s", "efficiency", "until_last_issue", "bound",
           "peer", "vs_peer", "req_s", "cpu_build_s", "cpu_server_s"]


def print_table(rows: list[dict], columns: list[str]) -> None:
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join("–" if r.get(c) is None else str(r[c]) for c in columns) + " |")


def _pairs(values: list[str]) -> dict[str, int]:
    """``["egov=300", "multihop=180"]`` → ``{"egov": 300, "multihop": 180}``."""
    pairs = {}
    for value in values:
        name, _, number = value.partition("=")
        if name not in PIPELINES or not number.isdigit():
            raise SystemExit(f"limit {value!r}: use PIPELINE=N with PIPELINE one of {', '.join(PIPELINES)}")
        pairs[name] = int(number)
    return pairs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=PIPELINES)
    parser.add_argument("--sizes", nargs="+", choices=["short", "long"], default=["short", "long"])
    parser.add_argument("--slots", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--servers", nargs="+", choices=["canned", "independent"], default=["canned", "independent"])
    parser.add_argument("--engines", nargs="+", choices=["streaming", "batch"], default=["streaming"],
                        help="batch: TANSAKU_STREAMING=0, the engine before issue 19 (100-870 s per long build)")
    parser.add_argument("--latency", default="lognormal:0.5,0.8")
    parser.add_argument("--seed", type=int, default=0,
                        help="the independent server's latency seed (build and peer get the same draws in arrival order)")
    parser.add_argument("--short-limits", nargs="*", default=[], metavar="PIPELINE=N",
                        help="override the short run's --limit (default " +
                        " ".join(f"{k}={v}" for k, v in SHORT_LIMITS.items()) + ")")
    parser.add_argument("--long-limits", nargs="*", default=[], metavar="PIPELINE=N", help="cap a long run")
    parser.add_argument("--scale", type=int, default=4, help="mini-wiki seeds of a long run (244 articles each)")
    parser.add_argument("--law-copies", type=int, default=1, help="renamed copies of each law in a long egov run")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tansaku-bench-llm"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)

    limits = {"short": {**SHORT_LIMITS, **_pairs(args.short_limits)}, "long": _pairs(args.long_limits)}
    needs = set().union(*(NEEDS[name] for name in args.pipelines))
    args.work.mkdir(parents=True, exist_ok=True)
    rows, started = [], time.monotonic()
    for size in args.sizes:
        # A short run reads a 1-seed wiki and one copy of the laws; its limits bring it to ≈ 600 requests.
        inputs = (prepare(args.work, needs, 1) if size == "short"
                  else prepare(args.work, needs, args.scale, args.law_copies))
        for slots in args.slots:
            for kind in args.servers:
                for name in args.pipelines:
                    for engine in args.engines:
                        row = run_build(name, size, engine, kind, slots, args, inputs, limits[size].get(name))
                        # The peer sends exactly the build's n (on the independent server it also gets the
                        # same latencies in arrival order), so vs_peer compares like with like.
                        peer = run_peer(kind, slots, args.latency, row["requests"], args.seed)
                        row.update(bound=fifo_bound(row["requests"], slots, args.latency), peer=peer["efficiency"],
                                   vs_peer=round(row["efficiency"] / peer["efficiency"], 3) if peer["efficiency"] else None,
                                   peer_run=peer)
                        rows.append(row)
                        print(f"[{time.monotonic() - started:5.0f} s] {name} {size} {engine} {kind} {slots}: "
                              f"{row['requests']} requests, efficiency {row['efficiency']}, peer {row['peer']}",
                              file=sys.stderr, flush=True)

    columns = COLUMNS if len(args.engines) == 1 else [*COLUMNS[:4], "engine", *COLUMNS[4:]]
    print(f"\nlatency {args.latency}; efficiency = Σ latency / slots / (last answer sent − first request received), "
          "from the server's records; bound = no-dependency FIFO, mean of 30 draws; peer = raw client, same n\n")
    print_table(rows, columns)
    reached = [r for r in rows if r["efficiency"] >= 0.90]
    print(f"\nefficiency ≥ 0.90: {len(reached)} of {len(rows)} rows; "
          f"{sum(r['bound'] < 0.90 for r in rows)} rows have bound < 0.90 (n too small for the slots: no client reaches it)")
    differs = check_same_output(rows)
    print("\n".join(differs) if differs else "same version and funnel across servers, slots and engines for every "
          "pipeline and size")
    if args.json:
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
