"""The held-out phrasing split: ``synth build multihop --heldout-phrasing FAMILY`` (template questions only).

A phrasing family is a final phrase form and its frames (``questions.PHRASING_FAMILIES``: ``ask``, ``wh``,
``answer``, ``about``). With families held out, the ``questions`` stage (:func:`template_questions`) writes
every chain's question with the frames outside them, so ``train``, ``rl`` and ``test`` never use a held-out
frame, and for each chain of the ``test`` split (an unseen bridge) one more question, in a frame of a held-out
family drawn per chain from the build's seed among those ``frames_for`` allows its relation pair. That row
carries ``phrasing_family`` and goes to ``test_phrasing`` (``tansaku.core.heldout``); it passes every check
any question passes (``question_problem``, the prefilter, the agent check, the gold check), its drops named
``phrasing_<reason>``. The last stage, ``phrasing_pairs`` (:func:`keep_pairs`), keeps a ``test_phrasing`` row
only when its chain's ``test`` row was kept too: the two splits ask the same chains, so what differs between
them is the phrasing alone.

A relation pair whose every frame is in a held-out family keeps them all for training and gets no held-out
question; a pair with no held-out frame (``about`` needs a person, organisation or work as bridge) gets none
either. Neither is silent: per test chain in the questions stage's funnel (``phrasing_pair_without_holdout``,
``phrasing_no_heldout_frame``), per relation pair in the manifest's ``phrasing`` (:func:`summary`).

    >>> pair_frames("著者", "出生地", ("answer",), DEFAULT).heldout
    (('clause', 'answer'), ('noun', 'answer'), ('known', 'answer'))
    >>> pair_frames("血液型", "色", ("ask", "wh", "answer"), DEFAULT).reason
    'phrasing_pair_without_holdout'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.core.heldout import TEST, TEST_PHRASING, HeldOut
from tansaku.core.store import iter_rows
from tansaku.pipelines.multihop.chains import derivations_of
from tansaku.pipelines.multihop.questions import (
    PHRASING_FAMILIES,
    frame_name,
    frames_for,
    generate_template,
    question_problem,
    template_question,
)
from tansaku.pipelines.multihop.relations import DEFAULT, Relations

FAMILY_COLUMN = "phrasing_family"  # set on test_phrasing rows only: the held-out family that phrased them
EXAMPLES = 20  # relation pairs named in the manifest per count (a full Wikipedia has thousands of pairs)


def check_options(families: list[str], llm: str | None, heldout_share: float) -> tuple[str, ...]:
    """The held-out families, refused before any work (one line, exit 2) when unknown, with ``--llm`` (its
    questions have no frames) or without a test split to ask again."""
    unknown = [f for f in families if f not in PHRASING_FAMILIES]
    if unknown:
        raise InputError(f"--heldout-phrasing {unknown[0]!r}: choose from {', '.join(PHRASING_FAMILIES)} "
                         "(the final forms of the template frames)")
    if families and llm is not None:
        raise InputError("--heldout-phrasing holds out template frames, and --llm writes the questions "
                         "itself: drop one of the two")
    if families and not heldout_share:
        raise InputError("--heldout-phrasing asks the test split's chains again: give --heldout-share > 0")
    return tuple(families)


def family_of(frame: str) -> str:
    """The family of a frame named ``"bridge/final"``.

    >>> family_of("clause/answer")
    'answer'
    """
    return next(name for name, frames in PHRASING_FAMILIES.items() if frame in map(frame_name, frames))


class PairFrames(NamedTuple):
    train: tuple  # the frames train, rl and test questions of the pair are written with
    heldout: tuple  # the frames its test_phrasing question is drawn from
    reason: str | None  # why the pair gets no held-out question (None: it gets one)


@lru_cache(maxsize=65536)
def pair_frames(r1: str, r2: str, families: tuple[str, ...], relations: Relations = DEFAULT) -> PairFrames:
    """The frames of the relation pair (r1, r2) for training and for the held-out question."""
    allowed = tuple(frames_for(relations.phrase(r1), relations.phrase(r2)))
    held = tuple(f for f in allowed if any(f in PHRASING_FAMILIES[name] for name in families))
    train = tuple(f for f in allowed if f not in held)
    if not train:  # a pair is never left without training phrasings: it keeps them all, and no held-out one
        return PairFrames(allowed, (), "phrasing_pair_without_holdout")
    return PairFrames(train, held, None if held else "phrasing_no_heldout_frame")


def template_questions(chain: dict, seed: int, relations: Relations, families: tuple[str, ...],
                       heldout: HeldOut) -> dict | Drop | list:
    """The questions stage with held-out families: the chain's question in a training frame, and for a test
    chain its held-out question (or the Drop saying why it has none) too."""
    if not families:
        return generate_template(chain, seed, relations)  # the draw of a build without the option
    pair = pair_frames(*chain["relations"], families, relations)
    out = generate_template(chain, seed, relations, pair.train)
    if heldout.split_of(chain) != TEST:
        return out
    return [out, heldout_question(chain, seed, relations, pair)]


def heldout_question(chain: dict, seed: int, relations: Relations, pair: PairFrames) -> dict | Drop:
    """The chain asked in a frame of ``pair.heldout``, drawn apart from its training question's frame."""
    if pair.reason:
        return Drop(pair.reason)
    record = template_question(chain, seed, relations, pair.heldout, draw="template-heldout-phrasing")
    problem = question_problem(record["question"], chain)
    return Drop(f"phrasing_{problem}") if problem else {**record, FAMILY_COLUMN: family_of(record["frame"])}


def keep_pairs(rows: Iterable[dict]) -> Iterator[dict | Drop]:
    """The ``phrasing_pairs`` stage (global): every row passes, test_phrasing rows last, each kept only when
    its chain's other row (the test question) came through; else ``phrasing_test_question_dropped``. Only
    chain ids and the test_phrasing rows are held."""
    asked, held_back = set(), []
    for row in rows:
        if row.get(FAMILY_COLUMN):
            held_back.append(row)
        else:
            asked.add(row["chain_id"])
            yield row
    for row in held_back:
        yield row if row["chain_id"] in asked else Drop("phrasing_test_question_dropped", record=row)


def summary(out: Path, splits: dict, families: tuple[str, ...], relations: Relations) -> dict:
    """The manifest's ``phrasing``: the held-out families and frames, the test_phrasing rows, and the relation
    pairs of the written rows that got no held-out question, counted and named (up to :data:`EXAMPLES`)."""
    pairs = set()
    for split, n in splits.items():
        if split != "rejected" and n:
            # finished rows or, with --until, records
            for row in iter_rows(out, split, columns=["derivations"]):
                pairs.add(tuple(relations.canonical(relation) for _, relation, _ in derivations_of(row)[:2]))
    without: dict[str, list[str]] = {"phrasing_pair_without_holdout": [], "phrasing_no_heldout_frame": []}
    for r1, r2 in sorted(pairs):
        reason = pair_frames(r1, r2, families, relations).reason
        if reason:
            without[reason].append(f"{r1}→{r2}")
    return {"phrasing": {
        "families": list(families), "split": TEST_PHRASING, "rows": splits.get(TEST_PHRASING, 0),
        "frames": [frame_name(f) for name in families for f in PHRASING_FAMILIES[name]],
        "relation_pairs": len(pairs),
        "pairs_without_holdout": len(without["phrasing_pair_without_holdout"]),
        "pairs_without_holdout_examples": without["phrasing_pair_without_holdout"][:EXAMPLES],
        "pairs_without_heldout_frame": len(without["phrasing_no_heldout_frame"]),
        "pairs_without_heldout_frame_examples": without["phrasing_no_heldout_frame"][:EXAMPLES]}}
