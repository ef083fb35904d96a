"""``EgovConfig``: every setting of ``synth build egov``, once (the CLI's options, the builder's argument, the
stages' params and the question manifest's ``config`` all read it; ``tansaku.core.build_config``).

    from tansaku.pipelines.egov.build import build_egov
    from tansaku.pipelines.egov.config import EgovConfig
    build_egov(EgovConfig(laws=["../shared/data/egov"], limit=50), out="out/egov")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tansaku.core.build_config import (
    BuildConfig,
    heldout_share_option,
    license_file_option,
    license_option,
    limit_option,
    option,
    rl_share_option,
    seed_option,
)
from tansaku.core.llm.spec import engine_help
from tansaku.core.value_checks import INDEX, INPUT

# Defaults the stage modules share: here, so `synth --help` reads them without importing pyarrow.
LAWS_PER_CHUNK = 50  # law files per checkpoint of the article build (and the unit a --shard takes)
MIN_ARTICLE_CHARS = 40  # shorter articles give the LLM generator too little to ask about
QUESTIONS_PER_CHUNK = 200


@dataclass(frozen=True)
class EgovConfig(BuildConfig):
    laws: list[Path] = option(path=INPUT,
                              help="Folder or zip of e-Gov law XML files (repeat the option for several).")
    llm: str | None = option(None, llm=True, help=f"LLM spec: {engine_help()}")
    index: Path | None = option(None, path=INDEX, help="Search index for the retrieval-rank signal.")
    limit: int | None = limit_option()
    seed: int = seed_option()
    heldout_share: float = heldout_share_option()
    rl_share: float = rl_share_option()
    keep_rejected: bool = option(True, flag="--keep-rejected/--no-keep-rejected",
                                 help="Also write every dropped question (and article) with its stage and "
                                      "reason as the 'rejected' split (cheap: a few thousand small rows).")
    per_article: int = option(2, min=1, help="Without --llm: rule-based questions per article, at most.")
    min_article_chars: int = option(MIN_ARTICLE_CHARS, min=0,
                                    help="With --llm: articles shorter than this get no "
                                         "question (too little to ask about).")
    judge_threshold: float = option(0.75, min=0, max=1,
                                    help="With --llm: keep questions the LLM judge's rubric scores at least "
                                         "this (0–1).")
    dedup_threshold: float = option(0.85, min=0, max=1,
                                    help="Drop a question whose char-3-gram Jaccard similarity (question + "
                                         "answer) to one kept before it is at least this (0–1).")
    retrieval: bool = option(True, flag="--retrieval/--no-retrieval",
                             help="Rank each question's source article in a search for the question "
                                  "(retrieval_rank; the index is built at --out/index unless --index names "
                                  "one, which turns it on).")
    retrieval_k: int = option(20, min=1,
                              help="Search hits the retrieval rank looks through (beyond: no rank).")
    max_retrieval_rank: int | None = option(None, min=1,
                                            help="Drop questions whose source article is not in the top N "
                                                 "hits for the question (default: keep every question).")
    laws_per_chunk: int = option(LAWS_PER_CHUNK, min=1,
                                 help="Law files per checkpoint chunk of the article build (the "
                                      "unit of resume and of --shard).")
    chunk_size: int = option(QUESTIONS_PER_CHUNK, min=1,
                             help="Articles per checkpoint chunk of the question build (the "
                                  "unit of resume).")
    license: str | None = license_option()
    license_file: Path | None = license_file_option()

    def __post_init__(self):
        # One law folder or file, as builders in Python pass it, is the one-element list the CLI makes.
        laws = [self.laws] if isinstance(self.laws, (str, Path)) else self.laws
        object.__setattr__(self, "laws", [Path(p) for p in laws])
