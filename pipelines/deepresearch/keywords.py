"""Stage 1 of ``synth build deepresearch``: specific keywords from many articles, then groups of keywords
that co-occur across several articles (the seeds of multi-article report instructions).

* **Keywords** are *specific* noun phrases found with Sudachi mode C: runs of nouns (names joined across
  「・」, noun-like suffixes kept: 「蒼井」「焼」 → 「蒼井焼」; leading prefixes, counters after numbers and
  adverb-like tails such as 「中」 dropped). A phrase is specific when it holds a proper noun (固有名詞;
  a lone surname or given name does not count), is an all-caps acronym (NHK), or is a compound of two or
  more common nouns at least ``min_compound_chars`` long (県庁所在地). A lone common noun (意味, 用語,
  施設, デザイン) never is; adverb-like nouns (一部, 場合) and a short list of nouns that describe the
  text rather than a topic (正式名称, 同州, 最大, 国内) break runs — so generic words neither seed nor
  join a group. Each proper-noun part of a
  longer run (「江戸」 in 「江戸時代初期」) and every article title the run spells out token by token
  (never a substring inside a longer word: 「日本」 is not found in 「日本語」) count too, as does the
  article's own title when it is itself specific.
* **Document frequency** with polars. Thresholds scale with the corpus (``thresholds(n_docs)``): a
  keyword must be in ≥ ``min_df`` articles and in ≤ ``max(max_df_floor, ceil(max_df_ratio · n))``.
  Specificity is ``idf = ln(n / df)``.
* **Groups**: every keyword seeds a candidate; members are added greedily by ``idf × co-occurrence with
  the members so far`` among keywords sharing ≥ ``min_cooccur`` articles with the seed (nested phrases
  such as 「アポロ」/「アポロ計画」 are not both taken). A candidate is kept when it spans
  ≥ ``min_articles`` articles (holding ≥ 2 of its keywords) and **no single article holds every
  keyword** (one page could answer it). Candidates are ranked by ``mean idf × ln(1 + articles spanned)``
  — specific *and* connected first — and near duplicates (Jaccard ≥ ``max_overlap`` with a better group)
  are skipped.

A group record: ``{"group_id", "keywords", "doc_ids", "titles", "keyword_df"}`` (``doc_ids``: the articles
holding at least two of the keywords, most keywords first). The settings named above are
``KeywordConfig``'s (``config.py``: the build's ``keyword_*`` options). ``bench/deepresearch_keywords.py``
measures it on the real Wikipedia sets.

    python -c "from tansaku.pipelines.deepresearch.keywords import *; print(keyword_groups(docs))"
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from functools import cache

import polars as pl
from sudachipy import SplitMode

from tansaku.core.analysis import _slices, _sudachi_dictionary
from tansaku.pipelines.deepresearch.config import KeywordConfig

_KANA_ONLY = re.compile(r"^[\u3040-\u309f\u30fcー]+$")
_BAD_CHARS = re.compile(r"[\s、。，．「」『』（）()\[\]【】:：;；!！?？/／\-―…〜~]")
_DOT = "・"
# Suffixes that make a phrase no more specific (「世界大戦中」, 「日本向け」, 「学生ら」): cut from the end.
_GENERIC_TAILS = {"向け", "等", "ら", "達", "たち", "側", "ごと", "毎", "内", "外", "間", "以降", "以前",
                  "以来"}
# Nouns that describe the text rather than a topic (how encyclopedia leads phrase things: 「正式名称」,
# 「同州最大」, 「法令番号」): they break noun runs like adverb-like nouns do, so they never join a phrase.
_GENERIC_NOUNS = frozenset(
    "意味 用語 名称 正式名称 通称 略称 総称 別称 呼称 英称 名前 名義 最大 最小 最初 最後 番号 面積 参照 一定 "
    "期間 一定期間 区分 部分 全体 種類 一種 総数 構成 関係 対象 目的 方法 内容 状態 中心 主要 代表 一般 定義 "
    "概念 事項 事務 所管 所掌 以下 以上 現在 当時 同州 同国 同社 同市 同町 同村 同県 同年 同氏 同校 同局 "
    "同紙 同誌 同党 同地 同島 同名 当地 当社 本社 旧称 旧名 原語 英語 英名 和名 愛称 国内 国外 各地 全国 "
    "一帯 周辺 各種 業界 最大手 初期 中期 後期 末期 前期 前半 後半 位置付け 同時代".split())
# 「NHK」「FIFA」; other Latin words (Inc., University) are generic
_ACRONYM = re.compile(r"^[A-Z][A-Z0-9&]+$")
_ASCII = re.compile(r"^[\x21-\x7e]+$")
_HIRAGANA = re.compile(r"^[\u3040-\u309f]+$")


@cache
def _tokenizer():
    return _sudachi_dictionary().create(SplitMode.C)


def _tokens(text: str) -> list[tuple[str, tuple]]:
    out: list[tuple[str, tuple]] = []
    # Sudachi refuses inputs over ~49k bytes: tokenize sentence-aligned slices.
    for _, piece in _slices(text, 12_000):
        out += [(m.surface(), m.part_of_speech()) for m in _tokenizer().tokenize(piece)]
    return out


def _is_noun(pos: tuple, surface: str = "") -> bool:
    return pos[0] == "名詞" and pos[1] not in ("数詞", "代名詞") and pos[2] != "副詞可能" \
        and surface not in _GENERIC_NOUNS


# A run is a list of units [surface, proper, kind]: proper is "" for common nouns, else Sudachi's last
# proper-noun field (「姓」, 「名」, 「国」, 「一般」 …); kind is "noun" | "suffix" | "dot" (a name still
# being joined). Names written with 「・」 (ジョン・F・ケネディ) are one unit: they stay whole and are proper.
def _runs(tokens: list[tuple[str, tuple]]) -> list[list[list]]:
    runs: list[list[list]] = []
    run: list[list] = []
    after_number = False
    for i, (surface, pos) in enumerate(tokens):
        if pos[1] == "数詞":
            after_number, run = True, _flush(run, runs)
            continue
        # 「1960年代中」「3人」: counters and suffixes right after a number are part of the quantity.
        if after_number and (pos[0] == "接尾辞" or pos[2] in ("助数詞可能", "助数詞")):
            continue
        after_number = False
        nxt_surface, nxt = tokens[i + 1] if i + 1 < len(tokens) else ("", ("",) * 4)
        proper = pos[3] if pos[1] == "固有名詞" else ""
        if surface == _DOT and run and run[-1][2] == "noun" and _is_noun(nxt, nxt_surface):
            run[-1][0] += _DOT
            run[-1][2] = "dot"
        elif _is_noun(pos, surface) and run and run[-1][2] == "dot":
            run[-1][0] += surface
            run[-1][1] = "一般" if (run[-1][1] or proper) else ""  # a joined name is no lone surname
            run[-1][2] = "noun"
        elif _is_noun(pos, surface):
            run.append([surface, proper, "noun"])
        elif pos[0] == "接尾辞" and pos[1] == "名詞的" and run and pos[2] != "副詞可能" \
                and surface not in _GENERIC_TAILS:
            run.append([surface, "", "suffix"])
        elif pos[0] == "接頭辞" and not run:
            continue  # 「各」「同」「本」「第」: leading prefixes only make a phrase less reusable
        else:
            run = _flush(run, runs)
    _flush(run, runs)
    return runs


def _flush(run: list[list], runs: list[list[list]]) -> list:
    while run and run[-1][2] == "dot":  # a dangling 「・」 never ends a phrase
        run[-1][0] = run[-1][0].rstrip(_DOT)
        run[-1][2] = "noun"
    if run:
        runs.append(run)
    return []


def _specific(units: list[list], config: KeywordConfig) -> bool:
    text = "".join(u[0] for u in units)
    if not (config.min_chars <= len(text) <= config.max_chars) or _KANA_ONLY.match(text) \
            or _BAD_CHARS.search(text) or text[0].isdigit():
        return False
    if _ASCII.match(text):
        return bool(_ACRONYM.match(text))
    nouns = [u for u in units if u[2] == "noun"]
    # A reading in kana (「アメリカどくり」 from 「(アメリカどくりつせんそう)」) is no phrase of its own.
    if not nouns or any(not u[1] and _HIRAGANA.match(u[0]) for u in nouns):
        return False
    if len(units) == 1 and units[0][1] in ("姓", "名"):
        # a lone surname or given name (小林, ジャンヌ) names different people in different articles
        return False
    if any(u[1] for u in units):
        return True
    # Common nouns only: a short compound (研究開発, 運営費用) is as generic as its parts.
    return len(nouns) >= 2 and len(text) >= config.min_compound_chars


def _run_phrases(run: list[list], config: KeywordConfig, titles: frozenset[str] = frozenset()) -> set[str]:
    found: set[str] = set()
    if _specific(run, config):
        found.add("".join(u[0] for u in run))
    # Proper-noun parts (「江戸」 of 「江戸時代初期」) link articles that phrase the rest differently.
    i = 0
    while i < len(run):
        if run[i][1]:
            j = i
            while j + 1 < len(run) and (run[j + 1][1] or run[j + 1][2] == "suffix"):
                j += 1
            part = run[i:j + 1]
            if len(part) < len(run) and _specific(part, config):
                found.add("".join(u[0] for u in part))
            i = j + 1
        else:
            i += 1
    if titles:  # titles spelled out by whole units inside the run
        for i in range(len(run)):
            text = ""
            for unit in run[i:i + 8]:
                text += unit[0]
                if text in titles:
                    found.add(text)
    return found


def noun_phrases(text: str, config: KeywordConfig | None = None) -> list[str]:
    """The specific noun phrases of ``text``, in order of first appearance.

    >>> noun_phrases("陶工の柚木玄斎が蒼井焼を広めた。その意味は一部の場合で大きい。")
    ['柚木玄斎', '蒼井焼']
    """
    config = config or KeywordConfig()
    seen: dict[str, None] = {}
    for run in _runs(_tokens(text)):
        for phrase in sorted(_run_phrases(run, config)):
            seen.setdefault(phrase, None)
    return list(seen)


def specific_title(title: str, config: KeywordConfig) -> bool:
    """A title is a keyword when it is one specific noun phrase (「足利尊氏」, 「廃藩置県」), not a lone
    common word (「意味」, 「星座」) or a sentence (guessed titles of the WikipediaAnnotatedCorpus)."""
    runs = _runs(_tokens(title))
    return len(runs) == 1 and "".join(u[0] for u in runs[0]) == title and _specific(runs[0], config)


def document_keywords(doc: dict, titles: frozenset[str], config: KeywordConfig) -> set[str]:
    """The keyword set of one article: its specific noun phrases, the specific titles (``titles``) its
    runs spell out, and its own title when that is specific."""
    found: set[str] = set()
    for run in _runs(_tokens(doc.get("text") or "")):
        found |= _run_phrases(run, config, titles)
    if doc.get("title") in titles:
        found.add(doc["title"])
    return found


def document_frequency(pairs: list[tuple[str, str]], n_docs: int, config: KeywordConfig):
    """polars frame ``keyword, df, idf`` of the keywords inside the df thresholds, most specific first."""

    bounds = config.thresholds(n_docs)
    frame = pl.DataFrame(pairs, schema=["doc_id", "keyword"], orient="row").unique()
    return (frame.group_by("keyword").agg(pl.len().alias("df"))
            .filter((pl.col("df") >= bounds["min_df"]) & (pl.col("df") <= bounds["max_df"]))
            .with_columns((n_docs / pl.col("df")).log().alias("idf"))
            .sort(["df", "keyword"]))


def _nested(a: str, b: str) -> bool:
    return a in b or b in a


def keyword_groups(docs: Iterable[dict], config: KeywordConfig = KeywordConfig()) -> list[dict]:
    """Group records (see the module docstring), deterministic for the same documents and config."""

    docs = [d for d in docs if d.get("id")]
    titles = frozenset(t for t in {d.get("title") or "" for d in docs} if t and specific_title(t, config))
    title_of = {d["id"]: d.get("title") or "" for d in docs}
    pairs = [(d["id"], k) for d in docs for k in document_keywords(d, titles, config)]
    if not pairs:
        return []
    df = document_frequency(pairs, len(docs), config)
    kept = (pl.DataFrame(pairs, schema=["doc_id", "keyword"], orient="row").unique().join(df, on="keyword")
            .sort(["doc_id", "df", "keyword"]).group_by("doc_id", maintain_order=True)
            .head(config.max_per_doc))
    docs_of: dict[str, set[str]] = {k: set(ids) for k, ids in
                                    kept.group_by("keyword").agg(pl.col("doc_id")).iter_rows()}
    # Pair co-occurrence: a self-join on doc_id, counted per (a, b) with a < b.
    co = (kept.select("doc_id", "keyword")
          .join(kept.select("doc_id", pl.col("keyword").alias("other")), on="doc_id")
          .filter(pl.col("keyword") < pl.col("other"))
          .group_by("keyword", "other").agg(pl.len().alias("n")))
    together: dict[tuple[str, str], int] = {}
    neighbours: dict[str, list[str]] = {}
    for a, b, n in co.iter_rows():
        together[a, b] = together[b, a] = n
        if n >= config.min_cooccur:
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)
    df_of = {k: d for k, d, _ in df.iter_rows()}
    idf_of = {k: i for k, _, i in df.iter_rows()}
    candidates = []
    for seed in df["keyword"].to_list():
        members = _grow(seed, sorted(neighbours.get(seed, [])), together, idf_of, docs_of, config)
        if members is None:
            continue
        holders = {d: sum(d in docs_of[k] for k in members)
                   for d in set().union(*(docs_of[k] for k in members))}
        spanning = sorted((d for d, n in holders.items() if n >= 2), key=lambda d: (-holders[d], d))
        if len(spanning) < config.min_articles:
            continue
        score = sum(idf_of[k] for k in members) / len(members) * math.log1p(len(spanning))
        candidates.append((-score, members, spanning))
    groups: list[dict] = []
    taken: list[set[str]] = []
    for _, members, spanning in sorted(candidates):
        group = set(members)
        if any(len(group & t) / len(group | t) >= config.max_overlap for t in taken):
            continue
        taken.append(group)
        group_id = hashlib.sha1("\x1f".join(members).encode()).hexdigest()[:12]
        groups.append({"group_id": group_id, "keywords": members, "doc_ids": spanning,
                       "titles": [title_of[d] for d in spanning], "keyword_df": [df_of[k] for k in members]})
        if config.max_groups and len(groups) >= config.max_groups:
            break
    return groups


def _grow(seed: str, neighbours: list[str], together: dict, idf_of: dict, docs_of: dict,
          config: KeywordConfig) -> list[str] | None:
    """The seed plus greedily the best-linked specific neighbours, or None when too few fit."""
    members = [seed]
    pool = list(neighbours)
    while len(members) < config.group_size:
        best, best_score = None, 0.0
        for other in pool:
            if any(_nested(other, m) for m in members):
                continue
            # Skip a member that would put every keyword on one page (one article could answer).
            if len(members) + 1 == config.group_size and \
                    set.intersection(*(docs_of[k] for k in members), docs_of[other]):
                continue
            score = idf_of[other] * sum(together.get((m, other), 0) for m in members)
            if score > best_score:
                best, best_score = other, score
        if best is None:
            return None
        members.append(best)
        pool.remove(best)
    return members
