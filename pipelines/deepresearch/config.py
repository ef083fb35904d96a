"""``DeepResearchConfig``: every setting of ``synth build deepresearch``, once (the CLI's options, the
builder's argument, the stages' params and the manifest's ``config`` all read it;
``tansaku.core.build_config``).

    from tansaku.pipelines.deepresearch.build import build_deepresearch
    from tansaku.pipelines.deepresearch.config import DeepResearchConfig
    build_deepresearch(DeepResearchConfig(corpus="out/corpus", index="out/index", llm="scripted:deepresearch",
                                          limit=4), out="out/deepresearch")

The stage modules (``keywords``, ``instructions``, ``quality``, ``rubric``) read their defaults from here, so
the config, the CLI and a stage function called on its own agree; ``KeywordConfig`` (the keyword stage's
settings) lives here too: the config's ``keyword_*`` fields are its fields, and ``synth --help`` reads them
without importing polars or Sudachi.

>>> config = DeepResearchConfig(corpus=Path("c"), index="i", llm="scripted:deepresearch",
...                             keyword_group_size=4)
>>> config.keyword_config().group_size, config.keyword_config().thresholds(3979)["max_df"]
(4, 398)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from tansaku.core.build_config import (
    BuildConfig,
    heldout_share_option,
    license_file_option,
    license_option,
    limit_option,
    option,
    seed_option,
)
from tansaku.core.errors import InputError
from tansaku.core.llm.spec import engine_help
from tansaku.core.value_checks import DATASET, INDEX

MIN_SOURCES, MAX_TURNS, SEARCH_TOP_K = 2, 6, 5
QUALITY_THRESHOLD, QUALITY_FLOOR = 3.5, 2.0
MIN_SPECIFIC, MAX_GENERIC_SHARE = 2, 0.5
SINGLE_PAGE_CHARS, RUBRIC_CHARS = 3000, 600
BATCH_SIZE, CHUNK_SIZE = 16, 64
DEMO_SPEC = "scripted:deepresearch"  # the built-in demo script (demo_llm), a spec no file backs


@dataclass(frozen=True)
class KeywordConfig:
    """The keyword stage's settings (``keywords.keyword_groups``; what each one does: its module
    docstring)."""

    min_df: int = 2              # keyword must occur in this many articles
    max_df_ratio: float = 0.1    # … and in at most this share of them (relative to the corpus) …
    max_df_floor: int = 10       # … but never fewer than this many (small corpora: 20 articles → 10)
    min_chars: int = 2
    max_chars: int = 24
    min_compound_chars: int = 5  # a compound of common nouns only is specific from this length on
    group_size: int = 3          # keywords per group (seed included)
    min_cooccur: int = 2         # articles a seed and a member must share
    min_articles: int = 3        # articles a group must span
    max_overlap: float = 0.5     # Jaccard at or above which a group duplicates a better one
    max_groups: int | None = None
    max_per_doc: int = 100       # keywords per article, most specific first: bounds the pair self-join

    def thresholds(self, n_docs: int) -> dict:
        """The document-frequency bounds this config gives a corpus of ``n_docs`` articles."""
        max_df = max(self.min_df, self.max_df_floor, math.ceil(self.max_df_ratio * n_docs))
        return {"n_docs": n_docs, "min_df": self.min_df, "max_df": max_df}


@dataclass(frozen=True)
class DeepResearchConfig(BuildConfig):
    corpus: Path = option(path=DATASET, help="Document dataset (synth build corpus).")
    index: str = option(path=INDEX, help="Search index over that corpus.")
    llm: str = option(llm=True, builtins=(DEMO_SPEC,), help=f"LLM spec: {engine_help()}.")
    clarify_share: float = option(0.5, min=0, max=1, help="Share of instructions with clarifying Q/A (a "
                                                          "seeded draw per instruction).")
    limit: int | None = limit_option("keyword groups")
    seed: int = seed_option()
    heldout_share: float = heldout_share_option("instructions")
    keep_rejected: bool = option(True, flag="--keep-rejected/--no-keep-rejected",
                                 help="Also write every dropped instruction (stage, reason, record) as the "
                                      "'rejected' split (few rows, each an expensive LLM/agent result).")
    license: str | None = license_option()
    license_file: Path | None = license_file_option()
    name: str | None = option(None, recipe=False, help="Dataset name (default: deepresearch).")
    # The writer agent (instructions.py).
    max_turns: int = option(MAX_TURNS, min=1, help="Turns of the instruction writer's search episode.")
    min_sources: int = option(MIN_SOURCES, min=1,
                              help="Supporting articles the writer must confirm through search.")
    search_top_k: int = option(SEARCH_TOP_K, min=1, help="Hits per search call of the instruction writer.")
    # The judges (instructions.py, quality.py, rubric.py).
    single_page_chars: int = option(SINGLE_PAGE_CHARS, min=1,
                                    help="Characters of each supporting article the "
                                         "single-page judge reads.")
    quality_threshold: float = option(QUALITY_THRESHOLD, min=0, max=5,
                                      help="Keep instructions whose mean quality score "
                                           "(1–5) reaches this.")
    quality_floor: float = option(QUALITY_FLOOR, min=0, max=5,
                                  help="… and whose every quality criterion scores at least "
                                       "this (1–5).")
    min_specific: int = option(MIN_SPECIFIC, min=0,
                               help="Rubric criteria that must name an entity of the instruction.")
    max_generic_share: float = option(MAX_GENERIC_SHARE, min=0, max=1,
                                      help="Most rubric weight on criteria that name none.")
    rubric_chars: int = option(RUBRIC_CHARS, min=1,
                               help="Characters of each supporting article the rubric writer reads.")
    # The keyword groups (keywords.py): KeywordConfig's fields, its defaults.
    keyword_min_df: int = option(KeywordConfig.min_df, min=1,
                                 help="A keyword must occur in at least this many articles …")
    keyword_max_df_ratio: float = option(KeywordConfig.max_df_ratio, min=0, max=1,
                                         help="… and in at most this share of the corpus …")
    keyword_max_df_floor: int = option(KeywordConfig.max_df_floor, min=0,
                                       help="… but that bound is never below this many articles.")
    keyword_min_chars: int = option(KeywordConfig.min_chars, min=1, help="Shortest keyword (characters).")
    keyword_max_chars: int = option(KeywordConfig.max_chars, min=1, help="Longest keyword (characters).")
    keyword_min_compound_chars: int = option(KeywordConfig.min_compound_chars, min=1,
                                             help="A compound of common nouns only is a keyword from this "
                                                  "length on.")
    keyword_group_size: int = option(KeywordConfig.group_size, min=2,
                                     help="Keywords per group (the seed included).")
    keyword_min_cooccur: int = option(KeywordConfig.min_cooccur, min=1,
                                      help="Articles a group's seed and each member must share.")
    keyword_min_articles: int = option(KeywordConfig.min_articles, min=1, help="Articles a group must span.")
    keyword_max_overlap: float = option(KeywordConfig.max_overlap, min=0, max=1,
                                        help="Skip a group this similar (Jaccard) to a better one.")
    keyword_max_groups: int | None = option(KeywordConfig.max_groups, min=1,
                                            help="Stop grouping after this many groups (none: all).")
    keyword_max_per_doc: int = option(KeywordConfig.max_per_doc, min=1,
                                      help="Keywords per article, most specific first.")
    batch_size: int = option(BATCH_SIZE, min=1, help="Records per LLM stage call.")
    chunk_size: int = option(CHUNK_SIZE, min=1,
                             help="Records per checkpoint chunk (documents, then keyword groups; "
                                  "the unit of resume and of --shard).")

    def cross_checks(self) -> None:
        if self.keyword_max_chars < self.keyword_min_chars:
            raise InputError(f"--keyword-max-chars must be >= --keyword-min-chars "
                             f"({self.keyword_min_chars}), got {self.keyword_max_chars}")

    def keyword_config(self) -> KeywordConfig:
        """The keyword stage's settings: the ``keyword_*`` fields."""
        return KeywordConfig(**{f.name: getattr(self, "keyword_" + f.name) for f in fields(KeywordConfig)})


KEYWORD_FIELDS = tuple("keyword_" + f.name for f in fields(KeywordConfig))
