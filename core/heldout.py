"""The held-out splits of a question dataset: which rows training never sees and evaluation reads.

Every question build (``synth build egov | multihop | deepresearch``, ``synth import jemhopqa``) assigns each
row to ``train`` or ``test`` with :func:`heldout_split`: a hash of (the row's stable key, the build seed)
mapped to [0, 1) and compared with ``share``. The assignment depends on nothing else, so a rerun, a resumed
build or a build with more rows puts a row on the same side; changing the seed redraws it.

The key is one column named by the pipeline (:class:`HeldOut` ``key``), falling back to the question text
when the row lacks it. Rows that share a key share a side, which is how a pipeline keeps related questions
together: multihop uses the ``bridge`` entity (two chains through the same bridge share hop-2 facts, often
the answer), e-Gov the source ``article_id`` (several cloze questions per article).

A multihop build with ``--heldout-phrasing`` also writes ``test_phrasing``: its test chains asked again in a
phrasing no other split uses, rows marked in :class:`HeldOut` ``phrasing_column``. :data:`HELDOUT_SPLITS`
names every split training refuses.

>>> heldout_split("q1", 0.2, seed=0), heldout_split("q1", 0.0, seed=0), heldout_split("q1", 0.9999, seed=0)
('train', 'train', 'test')
>>> sum(heldout_split(f"q{i}", 0.2, seed=0) == "test" for i in range(1000))  # about a fifth
192
>>> HeldOut(0.2, "bridge", seed=0).key_of({"bridge": "", "question": "村上春樹の出身地は？"})
'村上春樹の出身地は？'
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tansaku.core.errors import InputError

TEST = "test"
TRAIN = "train"
RL = "rl"  # prompts for `train rl` that SFT never trained on (a policy is not near-deterministic on them)
# test's chains asked again in a phrasing no training row uses (``synth build multihop --heldout-phrasing``)
TEST_PHRASING = "test_phrasing"
HELDOUT_SPLITS = (TEST, TEST_PHRASING)  # what training never reads: `train eval` measures on them
FALLBACK_KEY = "question"  # the key of a row that lacks the pipeline's key column
DEFAULT_SHARE = 0.2
# multihop and egov: --rl-share 0.3 gives RL prompts SFT never sees (off until measured)
DEFAULT_RL_SHARE = 0.0


def heldout_split(key: str, share: float, seed: int, rl_share: float = 0.0) -> str:
    """``"test"`` when sha256(seed, key) as a fraction of 2**64 falls below ``share``, ``"rl"`` when it falls
    below ``share + rl_share``, else ``"train"``: the test side never moves when ``rl_share`` changes.

    >>> [heldout_split(f"q{i}", 0.2, 0, rl_share=0.3) for i in range(6)]
    ['train', 'train', 'test', 'rl', 'train', 'test']
    """
    digest = hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return TEST if u < share else RL if u < share + rl_share else TRAIN


def check_share(share: float) -> float:
    """``share`` as a float in [0, 1); InputError naming ``--heldout-share`` otherwise.

    >>> check_share(1)
    Traceback (most recent call last):
    ...
    tansaku.core.errors.InputError: --heldout-share must be within [0, 1) (0 = no test split), got 1
    """
    if not isinstance(share, (int, float)) or not 0 <= share < 1:
        raise InputError(f"--heldout-share must be within [0, 1) (0 = no test split), got {share}")
    return float(share)


@dataclass(frozen=True)
class HeldOut:
    """A dataset's held-out rule: ``share`` of the keys go to ``test``; ``key`` names the row's key column."""

    share: float
    key: str = "id"
    seed: int = 0
    rl_share: float = 0.0  # of the keys, the share that forms the ``rl`` split (RL prompts SFT never sees)
    # A column that marks a test row asked again in a held-out form (multihop's ``phrasing_family``): a row
    # with a value there goes to ``test_phrasing``. None: no such split.
    phrasing_column: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "share", check_share(self.share))
        rl = self.rl_share
        if not isinstance(rl, (int, float)) or not 0 <= rl < 1 or self.share + rl >= 1:
            raise InputError(f"--rl-share must be within [0, 1) and leave rows for train with "
                             f"--heldout-share {self.share} (0 = no rl split), got {rl}")
        object.__setattr__(self, "rl_share", float(rl))

    @property
    def splits(self) -> list[str]:
        """Every split this rule can give a row to."""
        return ([TRAIN] + ([RL] if self.rl_share > 0 else []) + ([TEST] if self.share > 0 else [])
                + ([TEST_PHRASING] if self.phrasing_column and self.share > 0 else []))

    def key_of(self, row: dict) -> str:
        value = row.get(self.key)
        if value in (None, ""):
            value = row.get(FALLBACK_KEY)
        return str(value)

    def split_of(self, row: dict) -> str:
        """The row's split; a row marked in ``phrasing_column`` must be a test row (its key's side), and goes
        to ``test_phrasing``.

        >>> rule = HeldOut(0.2, "bridge", seed=0, phrasing_column="phrasing_family")
        >>> rule.split_of({"bridge": "q2"}), rule.split_of({"bridge": "q2", "phrasing_family": "answer"})
        ('test', 'test_phrasing')
        """
        split = heldout_split(self.key_of(row), self.share, self.seed, self.rl_share)
        if self.phrasing_column and row.get(self.phrasing_column):
            if split != TEST:  # a builder's bug: the phrasing split would hold questions training saw
                raise ValueError(f"a row marked {self.phrasing_column}={row[self.phrasing_column]!r} has key "
                                 f"{self.key_of(row)!r} on the {split!r} side, not {TEST!r}")
            return TEST_PHRASING
        return split

    def recipe(self) -> dict:
        """What decides the assignment: part of the build's resume fingerprint (``rl_share`` only when there
        is an rl split, so builds without one keep their fingerprints)."""
        return {"split": TEST, "share": self.share, "key": self.key, "fallback_key": FALLBACK_KEY,
                "seed": self.seed,
                **({"rl_split": RL, "rl_share": self.rl_share} if self.rl_share > 0 else {}),
                **({"phrasing_split": TEST_PHRASING, "phrasing_column": self.phrasing_column}
                   if self.phrasing_column else {})}
