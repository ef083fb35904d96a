"""How cost grows with size: corpus build, index build and search at 10k → 100k → 1M documents, bm25s beside.

    python bench/scale.py                          # 10k, 100k, 1M documents (needs ../shared/data)
    python bench/scale.py --docs 10000 100000      # smaller sizes
    python bench/scale.py --docs --laws --triples 1000000 5000000 20000000   # only the chain join

The documents are jawiki-like: sentences of the real WikipediaAnnotatedCorpus leads (../shared/data)
recombined under invented titles, with the number of sentences per document drawn from the real leads, so
document length and vocabulary follow the real distribution (mean ~90 characters, as the leads). The input is
written as a zstandard-compressed CirrusSearch-style JSON-lines dump (what ``synth build corpus`` reads from a
real dump). Each measured step runs in its own process (peak RSS = that step's ``VmHWM``):

- ``synth build corpus`` (stream-decompress, normalize, dedup, parquet) — seconds, docs/s, peak RSS, disk;
- ``synth index build`` (embedded tantivy, char analyzer) — the same, and its peer: bm25s indexing the same
  documents' bigram tokens (tantivy's ``match`` terms);
- search: p50 / p99 of 300 ``match`` queries on the tantivy index and on the bm25s peer, in this process.

Targets (issue 17, 2 cores): corpus + index peak RSS ≤ 2 GB at 1M documents; docs/s flat (± 20 %) from 10k
to 1M; search p50 at 1M ≤ 1.0× bm25s. The table prints each size's row and the ratio to its peer.

Laws (``--laws 90 900 9000``): the two real laws of ../shared/data/egov replicated under new law ids into one
e-Gov-style bulk zip — 行政手続法 (110 kB, a typical law) for 99 in 100, 民法 (1.5 MB) for the rest — then
``build_articles`` (the article dataset: stream the zip, parse, records, parquet) against ja-law-parser alone
parsing the same members and joining every article's text, each in its own process.

Triples (``--triples``): the multihop chain stage against a plain-Python dict join; see ``bench/scale_chains.py``.
Target: peak RSS ≤ 4 GB at 20M triples.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import scale_chains  # noqa: E402 - bench/scale_chains.py
from search import Bm25sPeer, peer_tokenizers, timed, wac_rows  # noqa: E402 - bench/search.py's peer

from tansaku.core.context import BuildContext  # noqa: E402
from tansaku.pipelines.corpus.config import CorpusConfig  # noqa: E402


def write_dump(path: Path, n: int, seed: int = 0) -> None:
    """``n`` jawiki-like documents as a CirrusSearch-style dump (index line + page line), zstd-compressed."""
    rng = random.Random(seed)
    leads = [r["text"] for r in wac_rows()]
    sentences = [s for text in leads for s in text.split("。") if len(s) > 4]
    per_doc = [max(1, text.count("。")) for text in leads]  # the real leads' sentences per document
    kanji = sorted({c for s in sentences[:3000] for c in s if "\u4e00" <= c <= "\u9fff"})
    with zstandard.open(path, "wt", encoding="utf-8") as f:
        for i in range(n):
            title = "".join(rng.choice(kanji) for _ in range(rng.randint(2, 4))) + rng.choice("市駅寺社川氏")
            body = "。".join(rng.choice(sentences) for _ in range(rng.choice(per_doc))) + "。"
            f.write(json.dumps({"index": {"_id": str(i)}}) + "\n")
            f.write(json.dumps({"title": f"{title}{i}", "text": f"{title}は、{body}", "namespace": 0},
                               ensure_ascii=False) + "\n")


def peak_rss_mb() -> float:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across exec.
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def child(step: str, src: str, out: str) -> dict:
    """One measured step, in its own process; the clock starts after the imports (a fixed cost that would
    make small sizes look slow per document)."""
    import bm25s

    from tansaku.core.store import iter_rows
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus

    t0 = time.perf_counter()
    if step == "corpus":
        docs = build_corpus(CorpusConfig(input=Path(src)), Path(out), BuildContext(quiet=True))["splits"]["train"]
    elif step == "index":
        docs = build_index(src, out)["documents"]
    else:  # bm25s over the corpus dataset's rows, the same bigram tokens tantivy's match scores
        doc_tokens, _ = peer_tokenizers("bigram")
        vocab, ids = {}, []
        for r in iter_rows(Path(src)):
            ids.append([vocab.setdefault(t, len(vocab)) for t in doc_tokens(r)])
        bm25s.BM25().index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
        docs = len(ids)
    seconds = time.perf_counter() - t0
    return {"docs": docs, "seconds": seconds, "docs_per_s": docs / seconds, "peak_rss_mb": peak_rss_mb(),
            "disk_mb": disk_mb(Path(out)) if out != "-" else 0.0}


def run_child(step: str, src: Path, out: Path | str) -> dict:
    cmd = [sys.executable, __file__, "--child", step, str(src), str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{step} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def queries(corpus: Path, n: int, seed: int = 1) -> list[str]:
    from tansaku.core.store import iter_rows

    rng, out = random.Random(seed), []
    for r in iter_rows(corpus):
        if len(out) >= n * 20:
            break
        out.append(r["text"])
    picks = []
    for text in rng.sample(out, min(len(out), n * 2)):
        t = "".join(text.split())
        if len(t) >= 16:
            i = rng.randrange(0, len(t) - 10)
            picks.append(t[i:i + rng.randint(4, 8)])
    return picks[:n]


def measure(n: int, tmp: Path) -> dict:
    from tansaku.core.store import iter_rows
    from tansaku.envs.search.embedded import EmbeddedBackend

    dump = tmp / f"jawiki-like-{n}-cirrussearch-content.json.zst"
    write_dump(dump, n)
    corpus = run_child("corpus", dump, tmp / f"corpus-{n}")
    index = run_child("index", tmp / f"corpus-{n}", tmp / f"index-{n}")
    peer = run_child("bm25s", tmp / f"corpus-{n}", "-")
    qs = queries(tmp / f"corpus-{n}", 300)
    backend = EmbeddedBackend(tmp / f"index-{n}")
    bm25 = Bm25sPeer(iter_rows(tmp / f"corpus-{n}"), "bigram")
    search_p50, search_p99 = timed(lambda q: backend.search(q, 10), qs)
    peer_p50, peer_p99 = timed(lambda q: bm25.ids(q), qs)
    result = {"docs": n, "input_mb": dump.stat().st_size / 2**20, "corpus": corpus, "index": index, "bm25s": peer,
              "search_ms": {"p50": search_p50, "p99": search_p99}, "bm25s_ms": {"p50": peer_p50, "p99": peer_p99}}
    for p in (dump, tmp / f"corpus-{n}", tmp / f"index-{n}"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return result


EGOV = ROOT.parent / "shared" / "data" / "egov"


def write_laws(path: Path, n: int) -> None:
    """``n`` laws in a bulk zip, each member named like e-Gov's ``LAWID_DATE_AMEND.xml`` with its own id."""
    import zipfile

    small = (EGOV / "405AC0000000088_20240401_504AC0100000052.xml").read_bytes()  # 行政手続法
    large = (EGOV / "129AC0000000089_20230614_505AC0000000053.xml").read_bytes()  # 民法
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(n):
            zf.writestr(f"all_xml/9{i % 100:02d}AC{i:010d}_20240401_000000000000000.xml",
                        large if i % 100 == 99 else small)


def law_child(step: str, src: str, out: str) -> dict:
    import zipfile

    sys.path.insert(0, str(ROOT / "bench"))
    from egov_parse import jlp_alone

    from tansaku.pipelines.egov.build import build_articles
    from tansaku.pipelines.egov.config import EgovConfig

    t0 = time.perf_counter()
    if step == "articles":
        laws = len(zipfile.ZipFile(src).namelist())
        build_articles(EgovConfig(laws=[Path(src)]), Path(out), BuildContext(quiet=True))
    else:
        with zipfile.ZipFile(src) as zf:
            names = zf.namelist()
            laws = sum(1 for name in names if jlp_alone(zf.read(name)) >= 0)
    seconds = time.perf_counter() - t0
    return {"laws": laws, "seconds": seconds, "laws_per_s": laws / seconds, "peak_rss_mb": peak_rss_mb()}


def measure_laws(n: int, tmp: Path) -> dict:
    bulk = tmp / f"laws-{n}.zip"
    write_laws(bulk, n)
    ours = run_child("articles", bulk, tmp / f"articles-{n}")
    peer = run_child("jlp", bulk, "-")
    shutil.rmtree(tmp / f"articles-{n}", ignore_errors=True)
    bulk.unlink()
    return {"laws": n, "ours": ours, "peer": peer}


def laws_table(results: list[dict]) -> str:
    lines = ["| laws | build_articles s | laws/s | peak RSS MB | ja-law-parser alone s | laws/s | peak RSS MB | "
             "time vs peer |", "|" + "---|" * 8]
    for r in results:
        o, p = r["ours"], r["peer"]
        lines.append(f"| {r['laws']:,} | {o['seconds']:.1f} | {o['laws_per_s']:.1f} | {o['peak_rss_mb']:.0f} | "
                     f"{p['seconds']:.1f} | {p['laws_per_s']:.1f} | {p['peak_rss_mb']:.0f} | "
                     f"{o['seconds'] / p['seconds']:.2f}x |")
    return "\n".join(lines)


def table(results: list[dict]) -> str:
    base = results[0]
    lines = ["| docs | corpus s | corpus docs/s (vs first) | corpus RSS MB | corpus disk MB | index s | index docs/s "
             "(vs first) | index RSS MB | index disk MB | bm25s index docs/s | bm25s RSS MB | search p50/p99 ms | "
             "bm25s p50/p99 ms | p50 ratio |",
             "|" + "---|" * 14]
    for r in results:
        c, i, b, s, p = r["corpus"], r["index"], r["bm25s"], r["search_ms"], r["bm25s_ms"]
        lines.append(
            f"| {r['docs']:,} | {c['seconds']:.1f} | {c['docs_per_s']:,.0f} ({c['docs_per_s'] / base['corpus']['docs_per_s']:.2f}) "
            f"| {c['peak_rss_mb']:.0f} | {c['disk_mb']:.0f} | {i['seconds']:.1f} | {i['docs_per_s']:,.0f} "
            f"({i['docs_per_s'] / base['index']['docs_per_s']:.2f}) | {i['peak_rss_mb']:.0f} | {i['disk_mb']:.0f} "
            f"| {b['docs_per_s']:,.0f} | {b['peak_rss_mb']:.0f} | {s['p50']:.2f} / {s['p99']:.2f} "
            f"| {p['p50']:.2f} / {p['p99']:.2f} | {s['p50'] / p['p50']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        step = sys.argv[2]
        if step in scale_chains.METHODS:
            print(json.dumps(scale_chains.chain_child(step, int(sys.argv[3]))))
        else:
            print(json.dumps((law_child if step in ("articles", "jlp") else child)(*sys.argv[2:5])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--laws", type=int, nargs="*", default=[90, 900, 9000])
    parser.add_argument("--triples", type=int, nargs="*", default=[1_000_000, 5_000_000, 20_000_000])
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    results, laws, chains = [], [], []
    for n in args.triples:
        started = time.time()
        chains.append({"triples": n, **{m: run_child(m, n, "-") for m in scale_chains.METHODS}})
        assert chains[-1]["join"]["kept"] == chains[-1]["python"]["kept"], chains[-1]  # the same rules
        print(f"[{n:,} triples measured in {time.time() - started:.0f} s]", flush=True)
        print(scale_chains.table(chains), flush=True)
    with tempfile.TemporaryDirectory(prefix="tansaku-scale-") as tmp:
        for n in args.laws:
            started = time.time()
            laws.append(measure_laws(n, Path(tmp)))
            print(f"[{n:,} laws measured in {time.time() - started:.0f} s]", flush=True)
            print(laws_table(laws), flush=True)
        for n in args.docs:
            started = time.time()
            results.append(measure(n, Path(tmp)))
            print(f"[{n:,} docs measured in {time.time() - started:.0f} s]", flush=True)
            print(table(results), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"documents": results, "laws": laws, "triples": chains}, indent=1), encoding="utf-8")
    if results:
        print(f"\nmedian corpus docs/s {statistics.median(r['corpus']['docs_per_s'] for r in results):,.0f}")


if __name__ == "__main__":
    main()
