"""``MultihopConfig``: every setting of ``synth build multihop``, once (the CLI's options, the builder's
argument, the stages' params and the manifest's ``config`` all read it; ``tansaku.core.build_config``).

    from tansaku.pipelines.multihop.build import build_multihop
    from tansaku.pipelines.multihop.config import MultihopConfig
    build_multihop(MultihopConfig(corpus="out/corpus", max_per_bridge=0), out="out/mh")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tansaku.core.build_config import (
    BuildConfig,
    license_file_option,
    license_option,
    limit_option,
    option,
    seed_option,
)
from tansaku.core.heldout import DEFAULT_RL_SHARE, DEFAULT_SHARE
from tansaku.core.llm.spec import engine_help
from tansaku.core.value_checks import DATASET, INDEX, INPUT_FILE
from tansaku.pipelines.multihop.defaults import (  # shared with the stage modules, which polars comes with
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD,
    MAX_PER_BRIDGE,
    MAX_PER_RELATION_PAIR,
    MAX_PER_SUBJECT,
    STAGES,
)

LLM_SPEC = f"LLM spec: {engine_help()}"  # made from the engine registry (core.llm.spec.LLM_ENGINES)


def stage_names() -> tuple[str, ...]:
    """What ``--until`` takes: the build's stages."""
    return STAGES


def phrasing_families() -> tuple[str, ...]:
    """What ``--heldout-phrasing`` takes: the template frames' final forms
    (``questions.PHRASING_FAMILIES``)."""
    from tansaku.pipelines.multihop.questions import PHRASING_FAMILIES

    return tuple(PHRASING_FAMILIES)


@dataclass(frozen=True)
class MultihopConfig(BuildConfig):
    corpus: Path | None = option(None, path=DATASET, help="Document dataset (synth build corpus).")
    triples: Path | None = option(None, path=INPUT_FILE,
                                  help="JSONL triples or JEMHopQA JSON to start from instead of the corpus.")
    index: Path | None = option(None, path=INDEX,
                                help="Search index for the solvability checks (default: the corpus, "
                                     "indexed into the work folder).")
    llm: str | None = option(None, llm=True,
                             help=LLM_SPEC + " (questions and the quality loop; none: templates).")
    policy: str | None = option(None, llm=True, help="LLM spec of the agent that must solve each question.")
    k: int = option(4, min=1, help="Agent tries per question.")
    m: int | None = option(None, min=0,
                           help="Keep questions solved at least m of k times, instead of --min-pass-rate "
                                "(not both).")
    min_pass_rate: float | None = option(None, min=0, max=1,
                                         help="Keep questions solved in at least this share of the k tries "
                                              "(default 0.5: solved stably).")
    max_pass_rate: float = option(1.0, min=0, max=1,
                                  help="Keep questions solved in at most this share (1.0 keeps the "
                                       "always-solved; e.g. 0.75 for RL, whose always-solved questions "
                                            "teach nothing).")
    until: str | None = option(None, choices=stage_names,
                               help="Stop after this stage and write the records (triples, link, "
                                    "cardinality, chains, questions, quality, prefilter, solve).")
    limit: int | None = limit_option("chains")
    seed: int = seed_option()
    heldout_share: float = option(DEFAULT_SHARE, min=0, max=1, max_open=True,
                                  help="Share of bridge entities whose questions form the 'test' "
                                       "split (0: none).")
    rl_share: float = option(DEFAULT_RL_SHARE, min=0, max=1, max_open=True,
                             help="Share of bridge entities whose questions form the 'rl' "
                                  "split: train rl's prompts, never in SFT's train split.")
    heldout_phrasing: list[str] = option(
        factory=list, choices=phrasing_families, split=",",
        help="Phrasing families held out of every split but 'test_phrasing' (repeat the option or "
             "separate by commas): ask, wh, answer, about (the template frames' final forms); each "
                           "'test' chain is asked again in one of them. Template questions only (not with "
                           "--llm).")
    keep_rejected: bool = option(False, flag="--keep-rejected/--no-keep-rejected",
                                 help="Also write every dropped record (stage, reason, record) as the "
                                      "'rejected' split (most drops are triples, many on a full Wikipedia).")
    max_per_subject: int = option(MAX_PER_SUBJECT, min=0, help="Chains kept per subject entity (0 = no cap).")
    max_per_bridge: int = option(MAX_PER_BRIDGE, min=0, help="Chains kept per bridge entity (0 = no cap).")
    max_per_relation_pair: int = option(MAX_PER_RELATION_PAIR, min=0,
                                        help="Chains kept per (hop-1, hop-2) relation pair (0 = no cap).")
    relations: Path | None = option(None, path=INPUT_FILE,
                                    help="JSON table merged over the built-in relation names and phrasings "
                                         "(pipelines/multihop/relations.json).")
    cardinality_threshold: float = option(DEFAULT_THRESHOLD, min=0, max=1,
                                          help="A relation is 1:1 / N:1 when this share of its "
                                               "subjects has one object.")
    cardinality_confidence: float = option(DEFAULT_CONFIDENCE, min=0, max=1, min_open=True, max_open=True,
                                           help="A relation is judged as a whole only when the interval of "
                                                "its one-object share at this confidence lies on one side of "
                                                "--cardinality-threshold; otherwise each subject's hop is "
                                                "kept when it has one object in the data.")
    min_support: int | None = option(None, min=1,
                                     help="Relations seen on fewer subjects are judged per subject (and "
                                          "confirmed by the LLM when there is one); default 5 / (1 − "
                                               "--cardinality-threshold), 50 at 0.9: enough subjects to "
                                               "expect five exceptions at the threshold.")
    max_rounds: int = option(2, min=0, help="Quality loop: judge → fix rounds per question.")
    min_natural: int = option(3, min=1, max=5, help="Quality judge's naturalness bar (1–5).")
    question_temperature: float = option(0.7, min=0, help="Sampling temperature of the LLM question writer.")
    prefilter_size: int = option(10, min=1, help="Top hits searched per hop in the retrievability prefilter.")
    chunk_size: int = option(1000, min=1,
                             help="Records per checkpoint chunk (the unit of resume and of --shard).")
    license: str | None = license_option("the corpus card's, else Wikipedia's cc-by-sa-4.0")
    license_file: Path | None = license_file_option()

    def __post_init__(self):
        # `--heldout-phrasing answer,about` and the option twice are one list; Python may pass one name as a
        # str.
        given = ([self.heldout_phrasing] if isinstance(self.heldout_phrasing, str)
                 else self.heldout_phrasing or [])
        names = [n.strip() for value in given for n in str(value).split(",") if n.strip()]
        object.__setattr__(self, "heldout_phrasing", sorted(set(names)))  # a set: one recipe for any order

    def resolved_min_support(self) -> int:
        """``min_support``, or the one the threshold implies (``cardinality.min_support_for``)."""
        from tansaku.pipelines.multihop.cardinality import min_support_for  # polars: not at `synth --help`

        return self.min_support or min_support_for(self.cardinality_threshold)

    def caps(self):
        """The diversity caps (``chains.Caps``; 0 = no cap)."""
        from tansaku.pipelines.multihop.chains import Caps  # polars: not at `synth --help`

        caps = Caps.from_options(self.max_per_subject, self.max_per_bridge)
        return Caps(caps.per_subject, caps.per_bridge, self.max_per_relation_pair or None)
