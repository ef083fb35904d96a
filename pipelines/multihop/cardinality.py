"""Stage 2: keep only hops whose answer is unique, judged per relation where the data can tell, per subject
where it cannot.

For each relation, over its distinct (subject, value) pairs:

* ``subject_to_one`` — share of subjects with exactly one distinct value,
* ``object_to_one`` — share of values with exactly one distinct subject.

A share ≥ ``threshold`` counts as "one" on that side, which gives 1:1, N:1 (many subjects share one
object: 出身地), 1:N (one subject, many objects: 出演者) or N:N. Whether the answer of a hop is unique
depends on the subject side only, and a share measured on a handful of subjects says little: the relation
is judged as a whole only when it is seen on at least ``min_support`` subjects (default
:func:`min_support_for`
the threshold: 50 at 0.9) *and* the Wilson interval of
``subject_to_one`` at ``confidence`` lies wholly on one side of ``threshold`` (``judged: relation``). Then
a 1:N / N:N relation drops every hop (``relation_1:N``, ``relation_N:N``: a film with one performer listed
still has more), a 1:1 / N:1 one keeps each subject's single value. Everywhere else (``judged:
per_subject``: a small KB, a rare relation) a hop is kept when its subject has exactly one value for the
relation in the data, so "X's spouse's birthplace" is asked when X has one spouse in the data. Either way a
subject with several values is dropped whole (``multi_valued``), and a relation the relation table marks
``set_valued`` (出演者, メンバー …) is never a hop (``relation_set_valued``). Objects nested in each other
(大阪府 / 大阪府大阪市) are one value at two granularities: one hop is kept, the others become
``object_aliases``. With an LLM, the relations judged per subject are confirmed
(``llm_not_single_valued`` otherwise).

Run alone: ``python -m tansaku.pipelines.multihop.cardinality TRIPLES.jsonl`` prints the table.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from statistics import NormalDist

import polars as pl

from tansaku.core.engine import Drop
from tansaku.core.llm import ChatRequest, ask_json
from tansaku.pipelines.multihop import spill
from tansaku.pipelines.multihop.defaults import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD
from tansaku.pipelines.multihop.triples import index_from_triples, link_triple, read_triples_file

CARDINALITY_SCHEMA = {"type": "object", "properties": {"single_valued": {"type": "boolean"}},
                      "required": ["single_valued"]}


def value_classes(triples: list[dict]) -> dict[tuple[str, str, str], str]:
    """Map each (subject, relation, object) key to its value class: objects of one (subject, relation)
    nested in each other (大阪府 ⊂ 大阪府大阪市中央区, 4月16日 ⊂ 1923年4月16日) are one fact written at
    two granularities, so they count as one value; the class is named by the longest spelling.

    >>> ts = [{"subject_key": "s", "relation": "r", "object_key": o}
    ...       for o in ("大阪府", "大阪府大阪市", "京都府")]
    >>> sorted(set(value_classes(ts).values()))
    ['京都府', '大阪府大阪市']
    """
    groups: dict[tuple[str, str], set[str]] = {}
    for t in triples:
        groups.setdefault((t["subject_key"], t["relation"]), set()).add(t["object_key"])
    classes = {}
    for (s, r), objects in groups.items():
        ordered = sorted(objects, key=lambda o: (-len(o), o))
        for o in ordered:
            head = next(h for h in ordered if o in h)  # the longest spelling that contains it
            classes[s, r, o] = head
    return classes


# The rule in one line, for the manifest's cardinality stage (its thresholds are the stage's other params).
RULE = ("relation-level class where min_support subjects and the Wilson interval of subject_to_one at "
        "cardinality_confidence lie on one side of cardinality_threshold (1:N, N:N dropped); else per "
        "subject: kept when the subject has one value; set_valued relations of the table never kept")
GROUP = ["subject_key", "relation"]
REASONS = pl.Enum(["relation_1:N", "relation_N:N", "relation_set_valued", "multi_valued",
                   "llm_not_single_valued", "duplicate_triple", "granularity_variant"])
# A kept hop's ``cardinality``: its relation's class when the relation was judged as a whole, else
# per_subject.
CLASSES = pl.Enum(["1:1", "N:1", "1:N", "N:N", "per_subject"])


def wilson_interval(share: float, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of a share measured on ``n`` subjects (it stays inside [0, 1] and is honest
    at shares near 1 and small n, where the normal approximation is not).

    >>> [round(x, 3) for x in wilson_interval(1.0, 5, 0.95)]   # 5 of 5 subjects single: could be 0.57
    [0.566, 1.0]
    >>> [round(x, 3) for x in wilson_interval(0.98, 400, 0.95)]
    [0.961, 0.99]
    """
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def min_support_for(threshold: float) -> int:
    """Subjects needed before a relation's class is read off the data: enough to expect five subjects with
    several values at the threshold share (the textbook n·(1 − p) ≥ 5 for a share's normal interval).

    >>> min_support_for(0.9), min_support_for(0.8), min_support_for(1.0)
    (50, 25, 1000000)
    """
    return 1_000_000 if threshold >= 1 else math.ceil(5 / (1 - threshold) - 1e-9)


DEFAULT_MIN_SUPPORT = min_support_for(DEFAULT_THRESHOLD)


def judged_as(subjects: int, share: float, threshold: float, confidence: float, min_support: int) -> str:
    """``relation`` when the data can tell the relation's class (enough subjects and the share's interval on
    one side of the threshold), else ``per_subject``.

    >>> (judged_as(400, 0.6, 0.9, 0.95, 50), judged_as(80, 0.875, 0.9, 0.95, 50),
    ...  judged_as(12, 0.5, 0.9, 0.95, 50))
    ('relation', 'per_subject', 'per_subject')
    """
    if subjects < min_support:
        return "per_subject"
    low, high = wilson_interval(share, subjects, confidence)
    return "relation" if high < threshold or low >= threshold else "per_subject"


def judged_columns(source: Path | pl.DataFrame, seed: int = 0) -> pl.DataFrame:
    """What the judgement reads, from the spilled file (or a frame of triple columns): names dictionary-
    encoded, the object's length, whether it is linked, and the seeded hash of the triple id (the
    tie-break)."""
    cat = spill.categorical()
    return spill.load(source,
                      *(pl.col(c).cast(cat) for c in ("relation", "subject_key", "object_key", "object")),
                      pl.col("object").str.len_chars().alias("object_len"),
                      pl.col("object_id").is_null().alias("unlinked"),
                      pl.col("triple_id").hash(seed).alias("triple_hash"))


def hop_frame(triples: list[dict], seed: int = 0) -> pl.DataFrame:
    """:func:`judged_columns` of triple dicts (``filter_unique_hops`` reads them from its spill)."""
    keys = ("triple_id", "object", "relation", "subject_key", "object_key", "object_id")
    return judged_columns(pl.from_dicts(triples, schema={c: pl.String for c in keys}), seed)


def _repeated_groups(frame: pl.DataFrame) -> pl.Series:
    """Row numbers of the rows whose (subject, relation) group has more than one row. The two dictionary codes
    packed into one 8-byte key: hashing numbers costs a fraction of hashing a struct of two columns."""
    key = (pl.col("subject_key").to_physical().cast(pl.UInt64) * 2**32
           + pl.col("relation").to_physical().cast(pl.UInt64))
    return frame.select(key.is_duplicated()).to_series().arg_true()


def with_values(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``value``: each row's value class (:func:`value_classes`), computed in Python only for
    the (subject, relation) groups that have several rows — every other row is its own value."""
    at = _repeated_groups(frame)
    several = frame.select(pl.col(c).gather(at).cast(pl.String) for c in (*GROUP, "object_key"))
    keyed = [dict(zip(("subject_key", "relation", "object_key"), key)) for key in several.iter_rows()]
    classes = value_classes(keyed)
    values = pl.Series([classes[k["subject_key"], k["relation"], k["object_key"]] for k in keyed],
                       dtype=pl.String)
    value = (frame.get_column("object_key").scatter(at, values.cast(frame.schema["object_key"])) if len(at)
             else frame.get_column("object_key"))
    return frame.with_columns(value.alias("value"))


def relation_stats(triples: list[dict] | pl.DataFrame, threshold: float = DEFAULT_THRESHOLD,
                   confidence: float = DEFAULT_CONFIDENCE,
                   min_support: int = DEFAULT_MIN_SUPPORT) -> dict[str, dict]:
    """Per relation: counts, the two to-one shares, the class (``1:1``, ``N:1``, ``1:N``, ``N:N``) and how
    its hops are judged (``judged``: ``relation`` or ``per_subject``, :func:`judged_as`).
    ``triples``: dicts, or a frame from :func:`with_values`."""

    frame = triples if isinstance(triples, pl.DataFrame) else with_values(hop_frame(triples))
    if frame.is_empty():
        return {}
    # Distinct (relation, subject, value) as two packed 8-byte keys: (relation, subject) and (relation,
    # value).
    r = pl.col("relation").to_physical().cast(pl.UInt64) * 2**32
    pairs = (frame.select(rs=r + pl.col("subject_key").to_physical(), ro=r + pl.col("value").to_physical())
             .unique())
    per_s = pairs.group_by("rs").agg(pl.len().alias("n")).select((pl.col("rs") // 2**32).alias("r"), "n")
    per_o = pairs.group_by("ro").agg(pl.len().alias("n")).select((pl.col("ro") // 2**32).alias("r"), "n")
    relation = frame.get_column("relation").unique()
    names = dict(zip(relation.to_physical().to_list(), relation.cast(pl.String).to_list()))
    s_side = (per_s.group_by("r")
              .agg(pl.len().alias("subjects"), (pl.col("n") == 1).mean().alias("subject_to_one")))
    o_side = (per_o.group_by("r")
              .agg(pl.len().alias("objects"), (pl.col("n") == 1).mean().alias("object_to_one")))
    table = (s_side.join(o_side, on="r")
             .with_columns(pl.col("r").replace_strict(names, return_dtype=pl.String)))
    stats = {}
    for row in table.iter_rows(named=True):
        left = "1" if row["object_to_one"] >= threshold else "N"
        right = "1" if row["subject_to_one"] >= threshold else "N"
        stats[row["r"]] = {"subjects": row["subjects"], "objects": row["objects"],
                           "subject_to_one": round(row["subject_to_one"], 4),
                           "object_to_one": round(row["object_to_one"], 4), "class": f"{left}:{right}",
                           "judged": judged_as(row["subjects"], row["subject_to_one"], threshold, confidence,
                                               min_support)}
    return stats


def confirm_with_llm(relations: list[str], llm, seed: int = 0) -> dict[str, bool | None]:
    """Ask the LLM whether each relation has one value per subject; None where it gave no usable answer."""

    requests = [ChatRequest(messages=[{"role": "user", "content": (
        f"関係「{r}」について、ある主語に対して値（目的語）は常に一つに決まりますか。"
        '例:「出身地」は一つ、「出演者」は複数。JSON だけで答えてください: {"single_valued": true または '
        'false}')}],
        max_tokens=32, temperature=0.0, seed=seed, json_schema=CARDINALITY_SCHEMA) for r in relations]
    verdicts: dict[str, bool | None] = {}
    for r, answer in zip(relations, ask_json(llm, requests)):
        value = None if isinstance(answer, Drop) else answer.get("single_valued")
        verdicts[r] = value if isinstance(value, bool) else None
    return verdicts


def relation_verdict(stat: dict, set_valued: bool, llm_no: bool) -> str | None:
    """Why every hop of a relation is dropped, or None when its hops are judged one subject at a time.

    >>> relation_verdict({"class": "1:N", "judged": "relation"}, False, False)
    'relation_1:N'
    >>> relation_verdict({"class": "1:N", "judged": "per_subject"}, False, False) is None
    True
    >>> relation_verdict({"class": "N:1", "judged": "relation"}, True, False)
    'relation_set_valued'
    """
    if set_valued:
        return "relation_set_valued"
    if stat["judged"] == "relation" and stat["class"] in ("1:N", "N:N"):
        return f"relation_{stat['class']}"
    return "llm_not_single_valued" if llm_no else None


def verdicts(frame: pl.DataFrame, stats: dict[str, dict], confirmed: dict[str, bool | None] | None = None,
             set_valued: frozenset[str] = frozenset()) -> tuple[pl.DataFrame, dict[int, list[str]]]:
    """Per row of ``frame`` (from :func:`with_values`), in order: ``reason`` (null = kept) and ``cls`` (its
    relation's class, or ``per_subject``); and, by row number, the ``aliases`` of each kept hop that has any
    (the other spellings of its value).

    A (subject, relation) group is dropped whole when its relation is dropped (:func:`relation_verdict`) or
    when it has several values; otherwise one hop is kept — a linked spelling first (it can be a bridge),
    else the longest, then the smallest seeded id hash — and the others are ``duplicate_triple`` (the same
    key) or ``granularity_variant`` (another spelling of the value). Most groups are one row: only the
    repeated ones are ranked."""
    confirmed = confirmed or {}
    table = pl.DataFrame({"relation": list(stats),
                          "cls": [v["class"] if v["judged"] == "relation" else "per_subject"
                                  for v in stats.values()],
                          "dropped": [relation_verdict(v, r in set_valued, confirmed.get(r) is False)
                                      for r, v in stats.items()]},
                         schema={"relation": pl.String, "cls": CLASSES, "dropped": pl.String}
                         ).cast({"relation": frame.schema["relation"]})
    by_relation = frame.select("relation").join(table, on="relation", how="left", maintain_order="left")
    cls = by_relation.get_column("cls")
    reason = by_relation.get_column("dropped").cast(REASONS)
    at = _repeated_groups(frame)
    if not len(at):
        return pl.DataFrame({"reason": reason, "cls": cls}), {}
    rank = [pl.col("unlinked"), pl.col("object_len"), pl.col("triple_hash")]
    best_first = dict(descending=[False, True, False])
    groups = frame[at].with_columns(_row=at, _reason=reason.gather(at)).with_columns(
        # the relation's verdict first, then several values, then the LLM's word
        group_reason=pl.when(pl.col("_reason").cast(pl.String).str.starts_with("relation_"))
        .then(pl.col("_reason").cast(pl.String))
        .when(pl.col("value").n_unique().over(GROUP) > 1).then(pl.lit("multi_valued"))
        .otherwise(pl.col("_reason").cast(pl.String)),
        best=pl.col("_row") == pl.col("_row").sort_by(rank, **best_first).first().over(GROUP),
        best_key=pl.col("object_key").sort_by(rank, **best_first).first().over(GROUP))
    decided = groups.select("_row", *GROUP, "object", "best", (
        pl.when(pl.col("group_reason").is_not_null()).then(pl.col("group_reason"))
        .when(pl.col("best")).then(None)
        .when(pl.col("object_key") == pl.col("best_key")).then(pl.lit("duplicate_triple"))
        .otherwise(pl.lit("granularity_variant"))).cast(REASONS).alias("reason"))
    reason = reason.scatter(at, decided.get_column("reason"))
    kept = decided.filter(pl.col("reason").is_null().any().over(GROUP))
    aliases = kept.group_by(GROUP).agg(pl.col("object").cast(pl.String).unique().alias("objects"),
                                      pl.col("object").filter(pl.col("best")).first().cast(pl.String)
                                      .alias("kept"), pl.col("_row").filter(pl.col("best")).first())
    found = {row: sorted(set(objects) - {best}) for objects, best, row in
             aliases.select("objects", "kept", "_row").iter_rows()}
    return pl.DataFrame({"reason": reason, "cls": cls}), {row: a for row, a in found.items() if a}


# triples judged at once: a dump's relations are split into buckets of about this many
BUCKET_ROWS = 2_000_000


def relation_buckets(frame: pl.DataFrame) -> list[pl.Series]:
    """Row numbers of ``frame`` split by relation into buckets of about :data:`BUCKET_ROWS` rows. Every
    judgement is within one relation, so the buckets are judged one after another and memory follows the
    bucket, not the dump (a relation is never split: one with more rows makes a larger bucket)."""
    k = max(1, -(-frame.height // BUCKET_ROWS))
    if k == 1:
        return [pl.Series(range(frame.height), dtype=pl.UInt32)] if frame.height else []
    bucket = frame.get_column("relation").to_physical() % k
    return [at for b in range(k) if len(at := (bucket == b).arg_true())]


def judge_hops(rows: list[dict], stats: dict[str, dict], confirmed: dict[str, bool | None] | None = None,
               set_valued: frozenset[str] = frozenset()) -> Iterator[tuple[dict, str | None]]:
    """``(triple, None)`` for each kept hop (annotated), ``(triple, reason)`` for each dropped one, in
    order."""
    judged, aliases = verdicts(with_values(hop_frame(rows)), stats, confirmed, set_valued)
    for k, (t, (reason, cls)) in enumerate(zip(rows, judged.iter_rows())):
        yield (({**t, "cardinality": cls, "object_aliases": aliases.get(k, [])}, None) if reason is None
               else (t, reason))


def filter_unique_hops(triples: Iterable[dict], threshold: float = DEFAULT_THRESHOLD, llm=None,
                       min_support: int = DEFAULT_MIN_SUPPORT, seed: int = 0,
                       confidence: float = DEFAULT_CONFIDENCE,
                       set_valued: frozenset[str] = frozenset()) -> Iterator[dict | Drop]:
    """The global stage: annotate each triple with its relation's class and drop non-unique hops, in input
    order. ``set_valued``: relation names whose hops are never kept (the relation table's ``set_valued``).
    The triples are spilled to parquet (``tansaku.pipelines.multihop.spill``) and judged on a
    dictionary-encoded frame of seven columns; the records are read back a row group at a time."""
    with spill.spilled(triples, "tansaku-hops-") as path:
        frame = judged_columns(path, seed)
        buckets = relation_buckets(frame)
        stats: dict[str, dict] = {}
        # each bucket's value classes, kept for the verdicts
        value = frame.get_column("object_key").alias("value")
        for at in buckets:
            part = with_values(frame[at])
            stats |= relation_stats(part, threshold, confidence, min_support)
            value = value.scatter(at, part.get_column("value"))
        frame = frame.with_columns(value)
        confirmed: dict[str, bool | None] = {}
        if llm is not None:
            # the relations the data cannot judge, that the table does not already call set-valued
            weak = sorted(r for r, s in stats.items() if s["judged"] == "per_subject" and r not in set_valued)
            confirmed = confirm_with_llm(weak, llm, seed) if weak else {}
        reason, cls = pl.repeat(None, frame.height, dtype=REASONS, eager=True), pl.repeat(None, frame.height,
                                                                                         dtype=CLASSES,
                                                                                         eager=True)
        aliases: dict[int, list[str]] = {}
        for at in buckets:
            part, found = verdicts(frame[at], stats, confirmed, set_valued)
            reason, cls = reason.scatter(at, part.get_column("reason")), cls.scatter(at,
                                                                                     part.get_column("cls"))
            aliases |= {at[row]: objects for row, objects in found.items()}
        judged = pl.DataFrame({"reason": reason, "cls": cls})
        del frame
        done = 0
        for batch in spill.records(path):
            rows = batch.drop("cardinality", "object_aliases").iter_rows(named=True)
            for k, (row, (reason, cls)) in enumerate(zip(rows, judged.slice(done, batch.height).iter_rows()),
                                                     done):
                yield ({**row, "cardinality": cls, "object_aliases": aliases.get(k, [])} if reason is None
                       else Drop(reason, record=row))
            done += batch.height


def main(argv: list[str]) -> None:
    triples = list(read_triples_file(argv[0]))
    index = index_from_triples(triples)
    stats = relation_stats([link_triple(t, index) for t in triples])
    for r, s in sorted(stats.items(), key=lambda kv: -kv[1]["subjects"])[:50]:
        print(f"{s['class']:4} {s['judged']:11} {s['subjects']:6} {s['objects']:6} {s['subject_to_one']:.2f} "
              f"{s['object_to_one']:.2f} {r}")


if __name__ == "__main__":
    main(sys.argv[1:])
