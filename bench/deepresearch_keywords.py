"""Benchmark deepresearch keyword grouping on the real Wikipedia sets, against the cost of plain Sudachi
tokenization of the same text (the peer, measured in the same run: grouping cannot be cheaper).

    python bench/deepresearch_keywords.py            # builds the corpora under /tmp if needed
    python bench/deepresearch_keywords.py --examples 8

Prints, per corpus: documents, characters, tokenize-only seconds, keyword_groups seconds, their ratio,
the groups found, the articles they span (median), and the share of group keywords that are a lone
non-acronym common-noun token (should be 0: generic words must not join groups).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from tansaku.core.context import BuildContext
from tansaku.pipelines.corpus.config import CorpusConfig

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "jawiki"
SOURCES = {"wac": DATA / "WikipediaAnnotatedCorpus", "jaquad": DATA / "JaQuAD" / "data" / "dev"}


def load(name: str, work: Path) -> list[dict]:
    from tansaku.core.store import iter_rows
    from tansaku.pipelines.corpus.build import build_corpus

    out = work / name
    if not (out / "manifest.json").exists():
        build_corpus(CorpusConfig(input=SOURCES[name]), out, BuildContext(quiet=True))
    return list(iter_rows(out))


def tokenize_only(docs: list[dict]) -> float:
    from tansaku.pipelines.deepresearch.keywords import _tokens

    start = time.perf_counter()
    for d in docs:
        _tokens(d["text"])
    return time.perf_counter() - start


def lone_common_noun(keyword: str) -> bool:
    from tansaku.pipelines.deepresearch.keywords import _tokens

    tokens = _tokens(keyword)  # all-caps acronyms (TOPIX) are tagged common nouns but are kept on purpose
    return not keyword.isascii() and len(tokens) == 1 and tokens[0][1][:2] == ("名詞", "普通名詞")


def main() -> None:
    from tansaku.pipelines.deepresearch.keywords import KeywordConfig, keyword_groups

    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default="/tmp/bench_deepresearch")
    parser.add_argument("--examples", type=int, default=5)
    args = parser.parse_args()
    config = KeywordConfig()
    rows, examples = [], {}
    for name in SOURCES:
        docs = load(name, Path(args.work))
        tokenize_only(docs[:20])  # loads the dictionary outside the timings
        peer = tokenize_only(docs)
        start = time.perf_counter()
        groups = keyword_groups(docs, config)
        seconds = time.perf_counter() - start
        keywords = [k for g in groups for k in g["keywords"]]
        generic = sum(map(lone_common_noun, keywords)) / max(1, len(keywords))
        spans = statistics.median(len(g["doc_ids"]) for g in groups) if groups else 0
        rows.append((name, len(docs), sum(len(d["text"]) for d in docs), peer, seconds, seconds / peer,
                     len(groups), spans, generic, config.thresholds(len(docs))["max_df"]))
        examples[name] = groups[: args.examples]
    print(f"{'corpus':8} {'docs':>6} {'chars':>8} {'tok s':>6} {'group s':>7} {'ratio':>6} {'groups':>6} "
          f"{'span':>5} {'generic':>7} {'max_df':>6}")
    for name, n, chars, peer, seconds, ratio, n_groups, spans, generic, max_df in rows:
        print(f"{name:8} {n:6d} {chars:8d} {peer:6.2f} {seconds:7.2f} {ratio:6.2f} {n_groups:6d} {spans:5.1f} "
              f"{generic:7.1%} {max_df:6d}")
    for name, groups in examples.items():
        print(f"\n{name}:")
        for g in groups:
            print(f"  {'、'.join(g['keywords'])}  df={g['keyword_df']}  articles={len(g['doc_ids'])}")


if __name__ == "__main__":
    main()
