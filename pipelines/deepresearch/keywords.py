"""Stage 1 of ``synth build deepresearch``: keywords from many articles, then groups of keywords that
co-occur across several articles (the seeds of multi-article report instructions).

* Keywords: Sudachi mode C noun phrases (runs of nouns, with prefixes and noun-like suffixes, so
  「蒼井」「焼」 → 「蒼井焼」) plus every article title.
* Document frequency with polars; keywords in fewer than ``min_df`` articles or in more than
  ``max_df_ratio`` of them are dropped (too rare to connect articles / too common to mean anything).
* Groups: for each seed keyword (most frequent first), the keywords that co-occur with it in at least
  ``min_cooccur`` articles; a group is kept when it spans ``min_articles`` articles and **no single
  article holds every keyword** (such a group could be answered from one page). Near-duplicate groups
  (Jaccard ≥ ``max_overlap``) are skipped.

A group record: ``{"group_id", "keywords", "doc_ids", "titles", "keyword_df"}`` (``doc_ids``: the articles
holding at least two of the keywords, most keywords first).

    python -c "from pipelines.deepresearch.keywords import *; print(keyword_groups(docs))"
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cache

_KANA_ONLY = re.compile(r"^[\u3040-\u309f\u30fcー]+$")
_BAD_CHARS = re.compile(r"[\s\d０-９、。，．・「」『』（）()\[\]【】:：;；!！?？/／\-―…〜~]")


@dataclass(frozen=True)
class KeywordConfig:
    min_df: int = 2              # keyword must occur in this many articles
    max_df_ratio: float = 0.5    # … and in at most this share of them
    min_chars: int = 2
    max_chars: int = 20
    group_size: int = 3          # keywords per group (seed included)
    min_cooccur: int = 2         # articles a seed and a member must share
    min_articles: int = 3        # articles a group must span
    max_overlap: float = 0.6     # Jaccard above which a group duplicates an earlier one
    max_groups: int | None = None
    max_keywords_per_doc: int = 40  # rarest first: bounds the pair self-join on long articles

    def to_dict(self) -> dict:
        return asdict(self)


@cache
def _tokenizer():
    from sudachipy import SplitMode

    from envs.search.analysis import _sudachi_dictionary  # one dictionary (~200 MB) per process

    return _sudachi_dictionary().create(SplitMode.C)


def noun_phrases(text: str) -> list[str]:
    """Maximal runs of nouns (numbers, pronouns, adverb-like nouns excluded) with leading prefixes and
    noun-like suffixes; a run of one common noun is not a topic and is left out.

    >>> noun_phrases("陶工の柚木玄斎が蒼井焼を広めた。")
    ['柚木玄斎', '蒼井焼']
    """
    from envs.search.analysis import _slices

    phrases: list[str] = []
    # Sudachi refuses inputs over ~49k bytes: tokenize sentence-aligned slices.
    for _, piece in _slices(text, 12_000):
        phrases += _noun_runs(piece)
    return phrases


def _noun_runs(text: str) -> list[str]:
    # A lone common noun (意味, 人口, 都市) names no topic: keep runs of 2+ tokens or with a proper noun.
    phrases, run, proper = [], [], False
    for m in [*_tokenizer().tokenize(text), None]:  # None flushes the last run
        pos = m.part_of_speech() if m is not None else ("",)
        noun = pos[0] == "名詞" and pos[1] not in ("数詞", "代名詞") and pos[2] != "副詞可能"
        if noun or (pos[0] == "接尾辞" and pos[1] == "名詞的" and run) or (pos[0] == "接頭辞" and not run):
            run.append(m.surface())
            proper = proper or pos[1] == "固有名詞"
            continue
        if run and (len(run) >= 2 or proper):
            phrases.append("".join(run))
        run, proper = [], False
    return phrases


def is_keyword(phrase: str, config: KeywordConfig) -> bool:
    return (config.min_chars <= len(phrase) <= config.max_chars and not _KANA_ONLY.match(phrase)
            and not _BAD_CHARS.search(phrase))


def document_keywords(doc: dict, titles: list[str], config: KeywordConfig) -> set[str]:
    """The keyword set of one article: its noun phrases, its title, and every title its text mentions."""
    text = doc.get("text") or ""
    found = {p for p in noun_phrases(text) if is_keyword(p, config)}
    found |= {t for t in titles if t and t in text}
    if doc.get("title"):
        found.add(doc["title"])
    return found


def document_frequency(pairs: list[tuple[str, str]], n_docs: int, config: KeywordConfig):
    """polars frame ``keyword, df`` of the keywords inside the df thresholds."""
    import polars as pl

    frame = pl.DataFrame(pairs, schema=["doc_id", "keyword"], orient="row").unique()
    max_df = max(config.min_df, int(config.max_df_ratio * n_docs))
    return (frame.group_by("keyword").agg(pl.len().alias("df"))
            .filter((pl.col("df") >= config.min_df) & (pl.col("df") <= max_df))
            .sort(["df", "keyword"], descending=[True, False]))


def keyword_groups(docs: Iterable[dict], config: KeywordConfig = KeywordConfig()) -> list[dict]:
    """Group records (see the module docstring), deterministic for the same documents and config."""
    import polars as pl

    docs = [d for d in docs if d.get("id")]
    titles = sorted({d["title"] for d in docs if d.get("title")})
    title_of = {d["id"]: d.get("title") or "" for d in docs}
    pairs = [(d["id"], k) for d in docs for k in document_keywords(d, titles, config)]
    if not pairs:
        return []
    df = document_frequency(pairs, len(docs), config)
    kept = (pl.DataFrame(pairs, schema=["doc_id", "keyword"], orient="row").unique().join(df, on="keyword")
            .sort(["doc_id", "df", "keyword"]).group_by("doc_id", maintain_order=True)
            .head(config.max_keywords_per_doc))
    docs_of: dict[str, set[str]] = {k: set(ids) for k, ids in
                                    kept.group_by("keyword").agg(pl.col("doc_id")).iter_rows()}
    # Pair co-occurrence: a self-join on doc_id, counted per (a, b) with a < b.
    co = (kept.select("doc_id", "keyword").join(kept.select("doc_id", pl.col("keyword").alias("other")), on="doc_id")
          .filter(pl.col("keyword") < pl.col("other"))
          .group_by("keyword", "other").agg(pl.len().alias("n"))
          .filter(pl.col("n") >= config.min_cooccur))
    neighbours: dict[str, list[tuple[int, str]]] = {}
    for a, b, n in co.iter_rows():
        neighbours.setdefault(a, []).append((n, b))
        neighbours.setdefault(b, []).append((n, a))
    df_of = dict(df.iter_rows())
    groups: list[dict] = []
    taken: list[set[str]] = []
    for seed in df["keyword"].to_list():
        members = [seed]
        for _, other in sorted(neighbours.get(seed, []), key=lambda x: (-x[0], -df_of[x[1]], x[1])):
            if len(members) >= config.group_size:
                break
            # Skip a member that would put every keyword on one page (one article could answer).
            if len(members) + 1 == config.group_size and set.intersection(*(docs_of[k] for k in members),
                                                                             docs_of[other]):
                continue
            members.append(other)
        if len(members) < config.group_size:
            continue
        group = set(members)
        if any(len(group & t) / len(group | t) >= config.max_overlap for t in taken):
            continue
        holders = {d: sum(d in docs_of[k] for k in members) for d in set().union(*(docs_of[k] for k in members))}
        spanning = sorted((d for d, n in holders.items() if n >= 2), key=lambda d: (-holders[d], d))
        if len(spanning) < config.min_articles:
            continue
        taken.append(group)
        group_id = hashlib.sha1("\x1f".join(members).encode()).hexdigest()[:12]
        groups.append({"group_id": group_id, "keywords": members, "doc_ids": spanning,
                       "titles": [title_of[d] for d in spanning], "keyword_df": [df_of[k] for k in members]})
        if config.max_groups and len(groups) >= config.max_groups:
            break
    return groups
