"""Stage 3: 2-hop chains — the object of hop 1 is the subject of hop 2 — joined with polars.

    (ノルウェイの森, 著者, 村上春樹) ⋈ (村上春樹, 出身地, 京都府)  →  ノルウェイの森 →著者→ 村上春樹 →出身地→ 京都府

Every candidate pair is kept or dropped with the first rule it breaks:

``cycle``               the chain returns to an entity it already named (answer = subject, bridge = subject,
                        answer = bridge)
``same_relation``       both hops use the same relation (出身地 of the 出身地 is not a question)
``answer_in_question``  the answer equals or appears in the subject or in a relation name (a leak)
``bridge_not_linked``   the bridge is not a linked article, so nobody can open its page for hop 2
``cap_subject`` / ``cap_bridge`` / ``cap_relation_pair``  diversity caps: at most N chains per start
                        entity, per bridge entity, per (relation 1, relation 2); which chains survive a cap
                        is a seeded hash, so it is stable across runs

:func:`join_chains` works on a polars DataFrame (1M triples in seconds); :func:`chain_stage` wraps it
for the engine and emits chain records with JEMHopQA-style ``derivations`` (a JSON string).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pipelines.engine import Drop

TRIPLE_COLUMNS = ("triple_id", "subject", "relation", "object", "subject_key", "object_key", "subject_id",
                  "object_id", "subject_title", "object_title", "doc_id", "source", "evidence")
RULES = ("cycle", "same_relation", "answer_in_question", "bridge_not_linked")


@dataclass(frozen=True)
class Caps:
    """Diversity caps; ``None`` switches one off."""

    per_subject: int | None = 3
    per_bridge: int | None = 10
    per_relation_pair: int | None = 50


def triples_frame(triples: Iterable[dict]):
    import polars as pl

    rows = list(triples)
    columns = {c: [t.get(c) for t in rows] for c in TRIPLE_COLUMNS}
    columns["object_aliases"] = [t.get("object_aliases") or [] for t in rows]
    return pl.DataFrame(columns, schema={**{c: pl.String for c in TRIPLE_COLUMNS},
                                         "object_aliases": pl.List(pl.String)})


def join_chains(triples, caps: Caps = Caps(), seed: int = 0, require_linked_bridge: bool = True):
    """All 2-hop pairs of ``triples`` (a polars DataFrame with :data:`TRIPLE_COLUMNS`), with a ``drop``
    column holding the first rule each pair breaks (null = kept). Columns of hop 1 end in ``_1``,
    of hop 2 in ``_2``."""
    import polars as pl

    hop1 = triples.rename({c: f"{c}_1" for c in triples.columns})
    hop2 = triples.rename({c: f"{c}_2" for c in triples.columns})
    pairs = hop1.join(hop2, left_on="object_key_1", right_on="subject_key_2", how="inner")
    # subject_key_2 is consumed by the join; the bridge key is object_key_1.
    answer_key, s1_key, bridge_key = pl.col("object_key_2"), pl.col("subject_key_1"), pl.col("object_key_1")
    answer = pl.col("object_2")
    leak = (answer_key == s1_key) | pl.col("subject_1").str.contains(answer, literal=True) \
        | pl.col("relation_1").str.contains(answer, literal=True) \
        | pl.col("relation_2").str.contains(answer, literal=True)
    unlinked = pl.col("object_id_1").is_null() if require_linked_bridge else pl.lit(False)
    drop = (pl.when((answer_key == s1_key) | (bridge_key == s1_key) | (answer_key == bridge_key)).then(pl.lit("cycle"))
            .when(pl.col("relation_1") == pl.col("relation_2")).then(pl.lit("same_relation"))
            .when(leak).then(pl.lit("answer_in_question"))
            .when(unlinked).then(pl.lit("bridge_not_linked"))
            .otherwise(pl.lit(None, dtype=pl.String)))
    pairs = pairs.with_columns(drop.alias("drop"),
                               pl.concat_str(["triple_id_1", "triple_id_2"], separator=":").alias("chain_id"))
    pairs = pairs.with_columns(pl.col("chain_id").hash(seed).alias("_order"))
    for reason, group, cap in (("cap_subject", ["subject_key_1"], caps.per_subject),
                               ("cap_bridge", ["object_key_1"], caps.per_bridge),
                               ("cap_relation_pair", ["relation_1", "relation_2"], caps.per_relation_pair)):
        if cap is None:
            continue
        # Rank only the chains still alive, so a cap never counts chains another rule already dropped.
        alive = pl.col("drop").is_null()
        rank = pl.when(alive).then(pl.col("_order")).otherwise(None).rank("ordinal").over(group)
        pairs = pairs.with_columns(pl.when(alive & (rank > cap)).then(pl.lit(reason)).otherwise(pl.col("drop"))
                                   .alias("drop"))
    return pairs.sort("_order").drop("_order")


def derivations_of(record: dict) -> list:
    """A record's derivations as a list. They are stored as a JSON string: parquet cannot hold the mixed
    ``[s, r, [o…]]`` lists of the JEMHopQA format."""
    value = record["derivations"]
    return json.loads(value) if isinstance(value, str) else value


def chain_record(row: dict) -> dict:
    """One kept pair as a chain record: derivations in JEMHopQA form plus hop provenance."""
    subject = row["subject_title_1"] or row["subject_1"]
    bridge = row["subject_title_2"] or row["object_title_1"] or row["object_1"]
    return {
        "chain_id": row["chain_id"],
        "derivations": json.dumps([[subject, row["relation_1"], [row["object_1"]]],
                                   [bridge, row["relation_2"], [row["object_2"]]]], ensure_ascii=False),
        "subject": subject, "bridge": bridge, "answer": row["object_2"],
        "answer_aliases": list(row["object_aliases_2"] or []),
        "relations": [row["relation_1"], row["relation_2"]],
        "page_ids": [row["subject_id_1"], row["subject_id_2"] or row["object_id_1"]],
        "hop_doc_ids": [row["doc_id_1"], row["doc_id_2"]],
        "triple_sources": [row["source_1"], row["source_2"]],
        "evidence": [row["evidence_1"], row["evidence_2"]],
    }


def chain_stage(triples: Iterable[dict], caps: Caps = Caps(), seed: int = 0, limit: int | None = None,
                require_linked_bridge: bool = True) -> Iterator[dict | Drop]:
    """The global stage: triples in, chain records (and one Drop per rejected pair) out."""
    pairs = join_chains(triples_frame(triples), caps, seed, require_linked_bridge)
    kept = 0
    for row in pairs.iter_rows(named=True):
        if row["drop"] is not None:
            yield Drop(row["drop"])
        elif limit is not None and kept >= limit:
            yield Drop("over_limit")
        else:
            kept += 1
            yield chain_record(row)
