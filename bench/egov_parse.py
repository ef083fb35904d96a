"""Benchmark: parsing 民法 into article records vs ja-law-parser alone, and the full ``build_egov`` time; and
(``--generation``) rule-based question generation for one law as it grows.

    python bench/egov_parse.py [--law PATH] [--repeat 5]
    python bench/egov_parse.py --generation 1000 2000 5000 10000 [--old-max 5000] [--note "…"]

Peers measured in the same run (imports done before timing, median of ``--repeat``):
  * ja-law-parser alone: ``LawParser().parse_from(bytes)`` + every article's ``texts()`` joined;
  * ours: ``parse_law_bytes`` (hardened lxml parse, ja-law-parser per article, records with metadata,
    nested paragraphs JSON, flattened text, ruby readings); target ≤ 1.2× the peer, whole 民法 < 2 s;
  * ours, lxml path only (``prefer="lxml"``), for reference.
Then the whole ``build_egov`` (articles → index → questions) with the cloze generator and with an
instant scripted LLM (generator + judge answer immediately), on the real laws or the demo laws.

``--generation N …``: the rules stage of ``build_egov`` (every rule-based kind) on one synthetic law of N
one-sentence articles (tests/fixtures/egov_articles.py ``synthetic_law``), CPU seconds and ms per article:
linear when the per-article time stays flat. Beside it, up to ``--old-max`` articles, the same stage with the
scans it had before issue 28 (every contradiction check a scan of the whole law text, every distractor pool
sorted for every article: ``lawindex`` switched off, as tests/test_egov_linear.py does), which must give the
same rows. Written to bench/results/egov_generation.md and .json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REAL = ROOT.parent / "shared" / "data" / "egov"


def median_seconds(fn, repeat: int) -> tuple[float, object]:
    """Median CPU seconds of this process (the machine is shared: wall time swings with other jobs)."""
    times, result = [], None
    for _ in range(repeat):
        t = time.process_time()
        result = fn()
        times.append(time.process_time() - t)
    return statistics.median(times), result


def jlp_alone(data: bytes) -> int:
    from ja_law_parser.parser import LawParser

    def walk(node):
        for name in ("parts", "chapters", "sections", "subsections", "divisions"):
            for child in getattr(node, name, None) or []:
                yield from walk(child)
        yield from getattr(node, "articles", None) or []

    law = LawParser().parse_from(data)
    articles = list(walk(law.law_body.main_provision))
    for sp in law.law_body.suppl_provisions or []:
        articles += list(walk(sp))
    return sum(1 for a in articles if "".join(a.texts()) is not None)


def ours(data: bytes, prefer: str) -> int:
    from tansaku.pipelines.egov.parse import parse_law_bytes

    records = [r for r in parse_law_bytes(data, "bench.xml", prefer=prefer) if isinstance(r, dict)]
    return sum(1 for r in records if r["meta"]["kind"] == "article")


def instant_llm(request) -> str:
    prompt = request.messages[0]["content"]
    if "ルーブリック" in prompt:
        return '{"single_correct": 1, "grounded": 1, "plausible_distractors": 1, "no_leak": 1}'
    body = prompt.split("【条文】", 1)[1].split("\n", 1)[1]
    # the first sentence after the article title (第…条　), with any provision references cut out
    head = re.sub(r"第[^、。\s]*?[条項号]|条の[^、。\s]+", "", body.split("\u3000", 1)[-1])[:30]
    return json.dumps({"question": f"次の内容を定める規定について正しいものはどれか。「{head}」",
                       "choices": ["正しい", "誤りA", "誤りB", "誤りC"], "answer_index": 0,
                       "explanation": "条文による。"}, ensure_ascii=False)


def generation(sizes: list[int], old_max: int, note: str) -> None:
    """The rules stage on synthetic laws of ``sizes`` articles, with and (≤ ``old_max``) without lawindex."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fixtures.egov_articles import synthetic_law

    from tansaku.core.engine import Drop
    from tansaku.pipelines.egov import lawindex
    from tansaku.pipelines.egov.build import _rules_stage

    def run(articles):
        t = time.process_time()
        rows = [r.reason if isinstance(r, Drop) else r for r in _rules_stage(0, 2).fn(iter(articles))]
        return time.process_time() - t, rows

    def old_order(self, pos):  # the sort every nearest_values call made before
        return iter(sorted(self.pairs, key=lambda pv: (abs(pv[0] - pos), pv[0], pv[1])))

    results = []
    for n in sizes:
        articles = synthetic_law(n)
        seconds, rows = run(articles)
        row = {"articles": n, "rows": sum(isinstance(r, dict) for r in rows), "cpu_s": seconds}
        if n <= old_max:
            small, nearest = lawindex.SMALL, lawindex.ByPosition.nearest
            lawindex.SMALL, lawindex.ByPosition.nearest = 10**12, old_order
            try:
                row["old_cpu_s"], old_rows = run(articles)
            finally:
                lawindex.SMALL, lawindex.ByPosition.nearest = small, nearest
            row["same_rows"] = json.dumps(old_rows, default=str) == json.dumps(rows, default=str)
        results.append(row)
        print(json.dumps(row), flush=True)
    lines = ["# Rule-based question generation for one law of N one-sentence articles (CPU seconds)", "",
             note, "", "| articles | questions | CPU s | ms / article | before: CPU s | ms / article | speed-up | "
             "same rows |", "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in results:
        old = (f"{r['old_cpu_s']:.2f} | {1000 * r['old_cpu_s'] / r['articles']:.2f} | {r['old_cpu_s'] / r['cpu_s']:.1f}× | "
               f"{'yes' if r['same_rows'] else 'NO'}") if "old_cpu_s" in r else "– | – | – | –"
        lines.append(f"| {r['articles']:,} | {r['rows']:,} | {r['cpu_s']:.2f} | {1000 * r['cpu_s'] / r['articles']:.2f} | "
                     f"{old} |")
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "egov_generation.md").write_text(table, encoding="utf-8")
    (out / "egov_generation.json").write_text(json.dumps({"note": note, "rows": results}, indent=1), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--law", type=Path, default=next(iter(sorted(REAL.glob("129AC0000000089_*.xml"))), None))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--generation", type=int, nargs="*", help="time question generation for laws of these sizes")
    ap.add_argument("--old-max", type=int, default=5000, help="largest size also timed with the scans of before")
    ap.add_argument("--note", default="", help="how the machine was loaded, written with the results")
    args = ap.parse_args()
    if args.generation:
        return generation(args.generation, args.old_max, args.note)
    if args.law is None or not args.law.exists():
        sys.exit("民法 XML not found; pass --law PATH (../shared/data/egov/129AC0000000089_*.xml)")
    import ja_law_parser.model  # noqa: F401  (import cost ~1-2 s, excluded from both peers)

    data = args.law.read_bytes()
    t_jlp, n_jlp = median_seconds(lambda: jlp_alone(data), args.repeat)
    t_ours, n_ours = median_seconds(lambda: ours(data, "ja-law-parser"), args.repeat)
    t_lxml, n_lxml = median_seconds(lambda: ours(data, "lxml"), args.repeat)
    print(f"# parsing {args.law.name} ({len(data) / 1e6:.2f} MB), median CPU seconds of {args.repeat}\n")
    print("| parser | articles | seconds | articles/s | time vs ja-law-parser |")
    print("|---|---:|---:|---:|---:|")
    for name, t, n in (("ja-law-parser alone (parse + texts)", t_jlp, n_jlp),
                       ("tansaku parse_law_bytes (jlp + lxml fallback)", t_ours, n_ours),
                       ("tansaku parse_law_bytes, lxml path only", t_lxml, n_lxml)):
        print(f"| {name} | {n} | {t:.3f} | {n / t:,.0f} | {t / t_jlp:.2f}× |")

    from tansaku.core.context import BuildContext
    from tansaku.core.llm import ScriptedLLM
    from tansaku.pipelines.egov.build import build_egov
    from tansaku.pipelines.egov.config import EgovConfig

    laws = REAL if REAL.exists() else ROOT / "examples" / "laws"
    print(f"\n# build_egov on {laws} (articles dataset + index + questions), wall seconds, one run each\n")
    print("| generator | questions | articles | seconds | vs cloze |")
    print("|---|---:|---:|---:|---:|")
    base = None
    for name, llm in (("cloze (no LLM)", None), ("instant scripted LLM + judge", ScriptedLLM(instant_llm))):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            m = build_egov(EgovConfig(laws=laws, llm=llm), Path(tmp) / "out", BuildContext(quiet=True))
            seconds = time.perf_counter() - t
            funnel = {s["name"]: s["dropped"] for s in m["stages"] if s["dropped"]}
            print(f"<!-- {name} funnel: {json.dumps(funnel, ensure_ascii=False)} -->")
        base = base or seconds
        print(f"| {name} | {m['splits'].get('train', 0)} | {m['articles']['rows']} | {seconds:.2f} | "
              f"{seconds / base:.2f}× |")


if __name__ == "__main__":
    main()
