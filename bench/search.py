"""Search benchmark: the embedded tantivy backend side by side with bm25s on the same documents and tokens.

    python bench/search.py                 # jawiki (~4k docs) + generated 100k-doc corpus (char, sudachi) + ranking
    python bench/search.py --docs 20000    # smaller generated corpus
    python bench/search.py --skip-ranking --no-sudachi

Prints, per corpus and analyzer: index build docs/s and peak RSS (each build in its own process),
p50/p99 latency of match / phrase / bool queries (bm25s has no phrase or bool, so those rows compare
against its match), tool calls/s with 64 concurrent callers and the CPU ms each call cost (this process's
CPU time over the calls: comparable across runs on a shared machine, where calls/s is not); every row
as a ratio to bm25s peers measured in the same run. Peers for the ``char`` analyzer: bm25s on the same
bigram tokens tantivy's ``match`` scores (single-character query words are left out there; the
benchmark queries have none) and bm25s on single characters (the peer of index layout 1).
Ranking: MRR@10 / recall@1 / recall@5 of the char and sudachi analyzers and the bm25s peers on the
labeled fixture queries and, when ../shared/data is present, on JaQuAD dev questions → paragraphs.
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


def peer_tokenizers(mode: str):
    """(document tokens, query tokens) for a bm25s peer: ``char``, ``bigram`` or ``sudachi``."""
    from tansaku.core.analysis import bigrams, get_analyzer

    if mode == "bigram":
        an = get_analyzer("char")
        return (lambda r: bigrams(r["title"]) + bigrams(r["text"]),
                lambda q: [t for t, is_bigram in an.match_terms(q) if is_bigram])
    an = get_analyzer(mode)
    return lambda r: an.tokens(r["title"] + " " + r["text"]), lambda q: list(dict.fromkeys(an.tokens(q)))


def child_build(engine: str, corpus: str, n: int, out: str, analyzer: str) -> dict:
    """Runs in its own process so peak RSS belongs to this build alone."""
    t0 = time.perf_counter()
    if engine == "tantivy":
        from tansaku.envs.search.embedded import build_embedded

        meta = build_embedded(rows_for(corpus, n), out, ["category"], analyzer=analyzer)
        docs = meta["documents"]
    else:
        import bm25s

        doc_tokens, _ = peer_tokenizers(analyzer)
        vocab, ids = {}, []
        for r in rows_for(corpus, n):
            ids.append([vocab.setdefault(t, len(vocab)) for t in doc_tokens(r)])
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
    """bm25s over the same passages and tokens (``peer_tokenizers``), with the same snippet formatting."""

    def __init__(self, rows, mode):
        import bm25s

        doc_tokens, self.query_tokens = peer_tokenizers(mode)
        self.vocab, ids, self.docs = {}, [], []
        for r in rows:
            ids.append([self.vocab.setdefault(t, len(self.vocab)) for t in doc_tokens(r)])
            self.docs.append((r["id"], r["title"], r["text"]))
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=self.vocab), show_progress=False)

    def ids(self, text, k=10):
        q = [self.vocab[t] for t in self.query_tokens(text) if t in self.vocab]
        if not q:
            return []
        docs, _ = self.model.retrieve([q], k=k, show_progress=False, n_threads=1)
        return [int(d) for d in docs[0]]

    def tool(self, text, k=5):
        from tansaku.envs.search.base import make_snippet

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


def calls_per_s(fn, items, callers=64, seconds=4.0) -> tuple[float, float]:
    """(calls/s, CPU ms of this process per call) with ``callers`` threads calling ``fn`` for ``seconds``."""
    stop = time.perf_counter() + seconds
    counts = [0] * callers

    def worker(w):
        i = w
        while time.perf_counter() < stop:
            fn(items[i % len(items)])
            counts[w] += 1
            i += callers

    t0, c0 = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(worker, range(callers)))
    calls = sum(counts)
    return calls / (time.perf_counter() - t0), (time.process_time() - c0) * 1000 / max(1, calls)


PEERS = {"char": ("bigram", "char"), "sudachi": ("sudachi",)}  # first = same tokens as tantivy's match


def bench_corpus(corpus: str, n: int, tmp: Path, analyzer: str = "char"):
    from tansaku.envs.environments import SearchEnvironment
    from tansaku.envs.search.dsl import parse_request
    from tansaku.envs.search.embedded import EmbeddedBackend
    from tansaku.envs.tools import ToolsConfig

    ix = tmp / f"{corpus}_{analyzer}_ix"
    tb = run_child("tantivy", corpus, n, str(ix), analyzer)
    builds = [run_child("bm25s", corpus, n, "-", mode) for mode in PEERS[analyzer]]
    rows = list(rows_for(corpus, n))
    backend = EmbeddedBackend(ix)
    peers = [Bm25sPeer(rows, mode) for mode in PEERS[analyzer]]
    qs = make_queries(rows, 500)
    print(f"\n## {corpus}: {tb['docs']} documents, analyzer {analyzer}")
    print(f"{'metric':<36}{'tantivy':>10}" + "".join(f"{'bm25s/' + m:>14}{'ratio':>8}" for m in PEERS[analyzer]))

    def row(name, a, bs, fmt="{:.3f}"):
        print(f"{name:<36}{fmt.format(a):>10}" + "".join(f"{fmt.format(b):>14}{a / b:>7.2f}x" for b in bs))

    row("index build docs/s", tb["docs_per_s"], [b["docs_per_s"] for b in builds], "{:.0f}")
    row("index build peak RSS MB", tb["peak_rss_mb"], [b["peak_rss_mb"] for b in builds], "{:.0f}")
    bm = [timed(lambda q, p=p: p.ids(q), qs["match"]) for p in peers]
    raw = lambda q: backend.searcher.search(backend.translate(parse_request(q, 10, backend.fields)[0]),  # noqa: E731
                                            10, count=False)
    for kind in ("match", "phrase", "bool"):
        p50, p99 = timed(raw, qs[kind])
        row(f"{kind} p50 ms (engine)", p50, [b[0] for b in bm])
        row(f"{kind} p99 ms (engine)", p99, [b[1] for b in bm])
    for kind in ("match", "phrase", "bool"):
        p50, _ = timed(lambda q: backend.search(q, 10), qs[kind])
        row(f"{kind} p50 ms (+validate, snippets)", p50, [b[0] for b in bm])
    tools = SearchEnvironment(backend, ToolsConfig(top_k=5), max_tool_calls=10**12)  # no budget in a benchmark
    mixed = [x for trio in zip(qs["match"], map(json.dumps, qs["phrase"]), map(json.dumps, qs["bool"])) for x in trio]
    peer_tool = [calls_per_s(p.tool, qs["match"]) for p in peers]
    for name, items in (("mixed", mixed), ("match", qs["match"])):
        rate, cpu = calls_per_s(tools.search, items)
        row(f"tool calls/s, 64 callers ({name})", rate, [r for r, _ in peer_tool], "{:.0f}")
        row(f"tool call CPU ms, 64 callers ({name})", cpu, [c for _, c in peer_tool])


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
    from tansaku.envs.search.embedded import EmbeddedBackend, build_embedded

    print("\n## ranking (plain-text query = multi_match most_fields over title+text)")
    print(f"{'set':<12}{'engine':<18}{'MRR@10':>8}{'R@1':>8}{'R@5':>8}{'queries':>9}")
    for name, (rows, qs) in ranking_sets().items():
        runs = {}
        for an in ("char", "sudachi"):
            build_embedded(rows, tmp / f"rank_{name}_{an}", ["category"], analyzer=an, chunk_chars=100_000)
            b = EmbeddedBackend(tmp / f"rank_{name}_{an}")
            runs[f"tantivy/{an}"] = lambda q, b=b: [h.doc_id for h in b.search(q[:200], 10).hits]
        for mode in ("bigram", "char"):
            peer = Bm25sPeer(rows, mode)
            runs[f"bm25s/{mode}"] = lambda q, peer=peer: [peer.docs[d][0] for d in peer.ids(q, 10)]
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
    ap.add_argument("--no-sudachi", action="store_true", help="skip the sudachi analyzer on the generated corpus")
    args = ap.parse_args()
    if not WAC.exists():
        sys.exit(f"{WAC} is absent: this benchmark needs ../shared/data")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.skip_ranking:
            bench_ranking(tmp)
        bench_corpus("jawiki", 0, tmp)
        bench_corpus("generated", args.docs, tmp)
        if not args.no_sudachi:
            bench_corpus("generated", args.docs, tmp, "sudachi")


if __name__ == "__main__":
    main()
