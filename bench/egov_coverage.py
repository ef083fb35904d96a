"""Benchmark: how many main-provision articles of each law get a rule-based question (no ``--llm``).

    python bench/egov_coverage.py [LAW.xml | DIR ...] [--json PATH] [--samples KIND[,KIND] --n 20 --seed 0]

Each law file is built on its own (copied into a temp folder) with ``build_egov`` — the path of
``synth build egov --laws DIR --out OUT`` without ``--llm``; the retrieval stage is skipped, it ranks but drops
nothing without ``--max-retrieval-rank``. Coverage = main-provision (non-supplementary, non-deleted) articles
of ``OUT/articles`` with at least one question in ``OUT`` (train + test) / all such articles. Prints one table
row per law (coverage, questions, questions per kind) and, with ``--samples``, ``--n`` random questions
(fixed ``--seed``) of each named kind with their article's text, for judging by hand.
Default laws: ../shared/data/egov/*.xml (when present) and examples/laws/*.xml.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REAL = ROOT.parent / "shared" / "data" / "egov"
EXAMPLES = ROOT / "examples" / "laws"
os.environ.setdefault("TANSAKU_QUIET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tansaku.core.context import BuildContext  # noqa: E402  (after the path and quiet setup)
from tansaku.core.store import iter_rows  # noqa: E402
from tansaku.pipelines.egov.build import RULE_KINDS, build_egov  # noqa: E402
from tansaku.pipelines.egov.config import EgovConfig  # noqa: E402
from tansaku.pipelines.egov.parse import article_meta  # noqa: E402


def law_files(paths: list[str]) -> list[Path]:
    if not paths:
        paths = [str(p) for p in sorted(REAL.glob("*.xml"))] + [str(p) for p in sorted(EXAMPLES.glob("*.xml"))]
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.glob("*.xml")) if p.is_dir() else [p]
    return out


def measure(law: Path, work: Path) -> dict:
    """Build one law alone; its coverage, question counts per kind, and the rows and articles for samples."""
    laws = work / law.stem / "laws"
    laws.mkdir(parents=True)
    shutil.copy(law, laws / law.name)
    out = work / law.stem / "out"
    build_egov(EgovConfig(laws=laws, retrieval=False), out, BuildContext(quiet=True))
    articles = {a["id"]: a for a in iter_rows(out / "articles")}
    main = {i for i, a in articles.items() if not a["is_suppl"] and not article_meta(a).get("is_deleted")}
    rows = [r for split in ("train", "test") for r in iter_rows(out, split=split)]
    covered = {r["article_id"] for r in rows} & main
    title = next(iter(articles.values()))["law_title"] if articles else law.stem
    return {"law": title, "file": law.name, "articles": len(main), "covered": len(covered),
            "coverage": round(len(covered) / len(main), 3) if main else 0.0, "questions": len(rows),
            "kinds": dict(Counter(r["kind"] for r in rows)), "rows": rows, "by_id": articles}


def table(results: list[dict]) -> str:
    kinds = [k for k in RULE_KINDS if any(k in r["kinds"] for r in results)]
    head = ["law", "articles", "covered", "coverage", "questions", *kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["law"], r["articles"], r["covered"], f"{r['coverage']:.1%}", r["questions"],
                 *(r["kinds"].get(k, 0) for k in kinds)]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def samples(results: list[dict], kind: str, n: int, seed: int) -> str:
    """``n`` questions of ``kind`` drawn with ``seed`` from every measured law, with their article text."""
    pool = [(r, row) for r in results for row in r["rows"] if row["kind"] == kind]
    pool.sort(key=lambda p: p[1]["id"])
    picked = random.Random(f"{seed}-{kind}").sample(pool, min(n, len(pool)))
    out = [f"## {kind} ({len(picked)} of {len(pool)})\n"]
    for k, (r, row) in enumerate(picked, 1):
        article = r["by_id"][row["article_id"]]
        choices = "\n".join(f"   {'*' if i == row['answer_index'] else ' '} {i + 1}. {c}"
                            for i, c in enumerate(row["choices"]))
        out.append(f"### {kind}-{k}  {row['law_title']} {row['article_title']}\n\n```\n{row['question']}\n{choices}\n"
                   f"article: {article['text'][:600]}\n```\n")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("laws", nargs="*", help="law XML files or folders (one build per file)")
    ap.add_argument("--json", help="also write the table as JSON here")
    ap.add_argument("--samples", default="", help="comma-separated kinds to print samples of")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(law, Path(tmp)) for law in law_files(args.laws)]
        print(table(results))
        for kind in filter(None, args.samples.split(",")):
            print("\n" + samples(results, kind, args.n, args.seed))
    if args.json:
        keep = ("law", "file", "articles", "covered", "coverage", "questions", "kinds")
        Path(args.json).write_text(json.dumps([{k: r[k] for k in keep} for r in results], ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
