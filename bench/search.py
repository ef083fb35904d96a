"""Search benchmark: the embedded tantivy backend side by side with bm25s on the same documents and tokens.

    python bench/search.py                 # jawiki (~4k docs) + generated 100k-doc corpus + ranking
    python bench/search.py --docs 20000    # smaller generated corpus
    python bench/search.py --skip-ranking

Prints, per corpus: index build docs/s and peak RSS (each build in its own process), p50/p99 latency of
match / phrase / bool queries (bm25s has no phrase or bool, so those rows compare against its match),
and tool calls/s with 64 concurrent callers; every row as a ratio to bm25s measured in the same run.
Ranking: MRR@10 / recall@1 / recall@5 of the char and sudachi analyzers (and bm25s on char tokens) on
the labeled fixture queries and, when ../shared/data is present, on JaQuAD dev questions → paragraphs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
WAC = DATA / "jawiki" / "WikipediaAnnotatedCorpus" / "wac_docs.derived.jsonl"
JAQUAD = DATA / "jawiki" / "JaQuAD" / "data" / "dev"
FIX = ROOT / "tests" / "fixtures" / "search"
CATEGORIES = ["人物", "地理", "歴史", "企業", "交通", "自然", "文化", "科学"]


def wac_rows():
    with WAC.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            d = json.loads(line)
            yield {"id": d["doc_id"], "title": d.get("title_guess") or "", "text": d["text"], "url": None,
                   "source": "wac", "meta": "{}", "category": CATEGORIES[i % len(CATEGORIES)]}


def generated_rows(n: int, seed: int = 0):
    """n synthetic Japanese documents: sentences of the real corpus recombined under invented titles."""
    rng = random.Random(seed)
    sents = [s for r in wac_rows() for s in r["text"].split("。") if len(s) > 8]
    kanji = sorted({c for s in sents[:3000] for c in s if "\u4e00" <= c <= "\u9fff"})
    for i in range(n):
        title = "".join(rng.choice(kanji) for _ in range(rng.randint(2, 4))) + rng.choice(["市", "駅", "寺", "社", "川", "氏"])
        body = "。".join(rng.choice(sents) for _ in range(rng.randint(2, 5))) + "。"
        yield {"id": f"gen{i:06d}", "title": title, "text": f"{title}は、{body}", "url": None, "source": "gen",
               "meta": "{}", "category": rng.choice(CATEGORIES)}


def rows_for(corpus: str, n: int):
    return wac_rows() if corpus == "jawiki" else generated_rows(n)


def child_build(engine: str, corpus: str, n: int, out: str, analyzer: str) -> dict:
    """Runs in its own process so peak RSS belongs to this build alone."""
    t0 = time.perf_counter()
    if engine == "tantivy":
        from envs.search.embedded import build_embedded

        meta = build_embedded(rows_for(corpus, n), out, ["category"], analyzer=analyzer)
        docs = meta["documents"]
    else:
        import bm25s

        from envs.search.analysis import get_analyzer

        an, vocab, ids = get_analyzer(analyzer), {}, []
        for r in rows_for(corpus, n):
            ids.append([vocab.setdefault(t, len(vocab)) for t in an.tokens(r["title"] + " " + r["text"])])
        bm25s.BM25().index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
        docs = len(ids)
    secs = time.perf_counter() - t0
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across exec.
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
    return {"docs": docs, "seconds": secs, "docs_per_s": docs / secs, "peak_rss_mb": int(hwm.split()[1]) / 1024}


def run_child(engine, corpus, n, out, analyzer="char") -> dict:
    cmd = [sys.executable, __file__, "--child", engine, corpus, str(n), out, analyzer]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


class Bm25sPeer:
    """bm25s over the same passages and the same char tokens, with the same snippet formatting."""

    def __init__(self, rows, analyzer):
        import bm25s

        self.an, self.vocab, ids, self.docs = analyzer, {}, [], []
        for r in rows:
            ids.append([self.vocab.setdefault(t, len(self.vocab)) for t in analyzer.tokens(r["title"] + " " + r["text"])])
            self.docs.append((r["id"], r["title"], r["text"]))
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=self.vocab), show_progress=False)

    def ids(self, text, k=10):
        q = [self.vocab[t] for t in dict.fromkeys(self.an.tokens(text)) if t in self.vocab]
        if not q:
            return []
        docs, _ = self.model.retrieve([q], k=k, show_progress=False, n_threads=1)
        return [int(d) for d in docs[0]]

    def tool(self, text, k=5):
        from envs.search.base import make_snippet

        out = []
        for i, d in enumerate(self.ids(text, k), 1):
            doc_id, title, body = self.docs[d]
            out.append(f"[{i}] doc_id: {doc_id} | title: {title}\n{make_snippet(body, [text], 200)}")
        return "\n\n".join(out)


def make_queries(rows, n, seed=1):
    rng, out = random.Random(seed), {"match": [], "phrase": [], "bool": []}
    for r in rng.sample(rows, min(n, len(rows))):
        t = "".join(r["text"].split())  # no whitespace: every sampled piece is a real phrase
        if len(t) < 30:
            continue
        i = rng.randrange(0, len(t) - 12)
        out["match"].append(t[i:i + rng.randint(4, 8)])
        out["phrase"].append({"match_phrase": {"text": t[i:i + rng.randint(3, 6)]}})
        out["bool"].append({"bool": {"must": [{"match_phrase": {"text": t[i:i + 3]}}],
                                     "must_not": [{"match_phrase": {"text": t[i + 6:i + 8]}}],
                                     "filter": [{"term": {"category": r["category"]}}]}})
    return out


def timed(fn, items):
    lat = []
    for x in items:
        t0 = time.perf_counter()
        fn(x)
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    return statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def calls_per_s(fn, items, callers=64, seconds=4.0):
    stop = time.perf_counter() + seconds
    counts = [0] * callers

    def worker(w):
        i = w
        while time.perf_counter() < stop:
            fn(items[i % len(items)])
            counts[w] += 1
            i += callers

    t0 = time.perf_counter()
    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(worker, range(callers)))
    return sum(counts) / (time.perf_counter() - t0)


def bench_corpus(corpus: str, n: int, tmp: Path):
    from envs.search.analysis import get_analyzer
    from envs.search.embedded import EmbeddedBackend
    from envs.tools import SearchTools, ToolsConfig

    tb = run_child("tantivy", corpus, n, str(tmp / f"{corpus}_ix"))
    bb = run_child("bm25s", corpus, n, "-")
    rows = list(rows_for(corpus, n))
    backend = EmbeddedBackend(tmp / f"{corpus}_ix")
    peer = Bm25sPeer(rows, get_analyzer("char"))
    qs = make_queries(rows, 500)
    print(f"\n## {corpus}: {tb['docs']} documents")
    print(f"{'metric':<34}{'tantivy':>12}{'bm25s':>12}{'ratio':>9}")

    def row(name, a, b, fmt="{:.3f}"):
        print(f"{name:<34}{fmt.format(a):>12}{fmt.format(b):>12}{a / b:>8.2f}x")

    row("index build docs/s", tb["docs_per_s"], bb["docs_per_s"], "{:.0f}")
    row("index build peak RSS MB", tb["peak_rss_mb"], bb["peak_rss_mb"], "{:.0f}")
    bm_p50, bm_p99 = timed(lambda q: peer.ids(q), qs["match"])
    raw = lambda q: backend.searcher.search(backend.translate(__import__("envs.search.dsl", fromlist=["x"])  # noqa: E731
                                            .parse_request(q, 10, backend.fields)[0]), 10, count=False)
    for kind in ("match", "phrase", "bool"):
        p50, p99 = timed(raw, qs[kind])
        row(f"{kind} p50 ms (engine)", p50, bm_p50)
        row(f"{kind} p99 ms (engine)", p99, bm_p99)
    for kind in ("match", "phrase", "bool"):
        p50, _ = timed(lambda q: backend.search(q, 10), qs[kind])
        row(f"{kind} p50 ms (+validate, snippets)", p50, bm_p50)
    tools = SearchTools(backend, ToolsConfig(top_k=5))
    mixed = [x for trio in zip(qs["match"], map(json.dumps, qs["phrase"]), map(json.dumps, qs["bool"])) for x in trio]
    row("tool calls/s, 64 callers (mixed)", calls_per_s(tools.search, mixed), calls_per_s(peer.tool, qs["match"]), "{:.0f}")
    row("tool calls/s, 64 callers (match)", calls_per_s(tools.search, qs["match"]), calls_per_s(peer.tool, qs["match"]),
        "{:.0f}")


def ranking_sets():
    sets = {"fixture": None}
    rows = [json.loads(x) for x in (FIX / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    qs = [json.loads(x) for x in (FIX / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    sets["fixture"] = ([{"id": r["id"], "title": r["title"], "text": r["text"], "category": r["category"],
                         "source": "fx", "url": None, "meta": "{}"} for r in rows],
                       [(q["q"], set(q["relevant"])) for q in qs])
    if JAQUAD.exists():
        rows, qs = [], []
        for f in sorted(JAQUAD.glob("*.json")):
            for art in json.loads(f.read_text(encoding="utf-8"))["data"]:
                for pi, p in enumerate(art["paragraphs"]):
                    pid = f"{art['title']}#{pi}"
                    rows.append({"id": pid, "title": art["title"], "text": p["context"], "category": "q",
                                 "source": "jaquad", "url": None, "meta": "{}"})
                    qs += [(qa["question"], {pid}) for qa in p["qas"]]
        sets["jaquad-dev"] = (rows, random.Random(0).sample(qs, min(1000, len(qs))))
    return sets


def bench_ranking(tmp: Path):
    from envs.search.analysis import get_analyzer
    from envs.search.embedded import EmbeddedBackend, build_embedded

    print("\n## ranking (plain-text query = multi_match most_fields over title+text)")
    print(f"{'set':<12}{'engine':<18}{'MRR@10':>8}{'R@1':>8}{'R@5':>8}{'queries':>9}")
    for name, (rows, qs) in ranking_sets().items():
        runs = {}
        for an in ("char", "sudachi"):
            build_embedded(rows, tmp / f"rank_{name}_{an}", ["category"], analyzer=an, chunk_chars=100_000)
            b = EmbeddedBackend(tmp / f"rank_{name}_{an}")
            runs[f"tantivy/{an}"] = lambda q, b=b: [h.doc_id for h in b.search(q[:200], 10).hits]
        peer = Bm25sPeer(rows, get_analyzer("char"))
        runs["bm25s/char"] = lambda q, peer=peer: [peer.docs[d][0] for d in peer.ids(q, 10)]
        for engine, fn in runs.items():
            mrr = r1 = r5 = 0.0
            for q, rel in qs:
                ids = fn(q)
                rank = next((i + 1 for i, d in enumerate(ids) if d in rel), None)
                mrr += 1 / rank if rank else 0
                r1 += len(set(ids[:1]) & rel) / len(rel)
                r5 += len(set(ids[:5]) & rel) / len(rel)
            n = len(qs)
            print(f"{name:<12}{engine:<18}{mrr / n:>8.3f}{r1 / n:>8.3f}{r5 / n:>8.3f}{n:>9}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        engine, corpus, n, out, analyzer = sys.argv[2:7]
        print(json.dumps(child_build(engine, corpus, int(n), out, analyzer)))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=100_000, help="size of the generated corpus")
    ap.add_argument("--skip-ranking", action="store_true")
    args = ap.parse_args()
    if not WAC.exists():
        sys.exit(f"{WAC} is absent: this benchmark needs ../shared/data")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.skip_ranking:
            bench_ranking(tmp)
        bench_corpus("jawiki", 0, tmp)
        bench_corpus("generated", args.docs, tmp)


if __name__ == "__main__":
    main()
