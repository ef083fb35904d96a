"""Stage 3: 2-hop chains — the object of hop 1 is the subject of hop 2 — joined with polars.

    (ノルウェイの森, 著者, 村上春樹) ⋈ (村上春樹, 出身地, 京都府)
        →  ノルウェイの森 →著者→ 村上春樹 →出身地→ 京都府

Every candidate pair is kept or dropped with the first rule it breaks:

``cycle``               the chain returns to an entity it already named (answer = subject, bridge = subject,
                        answer = bridge)
``same_relation``       both hops use the same relation (出身地 of the 出身地 is not a question)
``answer_in_question``  the answer equals or appears in the subject or in a relation name (a leak)
``bridge_not_linked``   the bridge is not a linked article, so nobody can open its page for hop 2
``cap_subject`` / ``cap_bridge`` / ``cap_relation_pair``  diversity caps: at most N chains per start
                        entity, per bridge entity, per (relation 1, relation 2); which chains survive a cap
                        is a seeded hash, so it is stable across runs

:func:`join_chains` works on a polars DataFrame: it joins row numbers on the entity key, evaluates the
rules on a chunk of pairs at a time and returns row numbers, drop reasons and only the columns asked for
(1M triples, ~2M pairs: ~1.5 s and ~200 MB peak on 2 busy cores; ``python bench/multihop.py``).
:func:`chain_stage` wraps it for the engine, gathers full columns only for the kept pairs and emits chain
records with JEMHopQA-style ``derivations`` (a JSON string; finished rows hold structs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tansaku.core import jsontext
from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.core.features import derivation_lists
from tansaku.pipelines.multihop import spill
from tansaku.pipelines.multihop.defaults import MAX_PER_BRIDGE, MAX_PER_RELATION_PAIR, MAX_PER_SUBJECT

TRIPLE_COLUMNS = ("triple_id", "subject", "relation", "relation_text", "object", "subject_key", "object_key",
                  "subject_id", "object_id", "subject_title", "object_title", "doc_id", "source", "evidence")
RULES = ("cycle", "same_relation", "answer_in_question", "bridge_not_linked")
CAP_RULES = ("cap_subject", "cap_bridge", "cap_relation_pair")


@dataclass(frozen=True)
class Caps:
    """Diversity caps; ``None`` switches one off."""

    per_subject: int | None = MAX_PER_SUBJECT
    per_bridge: int | None = MAX_PER_BRIDGE
    per_relation_pair: int | None = MAX_PER_RELATION_PAIR

    @classmethod
    def from_options(cls, max_per_subject: int, max_per_bridge: int) -> Caps:
        """``--max-per-subject N`` / ``--max-per-bridge N``: chains kept per subject / bridge entity; 0 = no
        cap (with given triples a user keeps every chain they gave)."""
        for name, value in (("--max-per-subject", max_per_subject), ("--max-per-bridge", max_per_bridge)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"{name} {value!r}: give a whole number ≥ 0 (0 = no cap)")
        return cls(per_subject=max_per_subject or None, per_bridge=max_per_bridge or None)


def triples_frame(triples: Iterable[dict]):
    """Triple records as a frame of :data:`TRIPLE_COLUMNS` + ``object_aliases`` (other keys are left out)."""
    frame = pl.from_dicts(list(triples), schema={**{c: pl.String for c in TRIPLE_COLUMNS},
                                                 "object_aliases": pl.List(pl.String)})
    return frame.with_columns(pl.col("object_aliases").fill_null(pl.lit([], pl.List(pl.String))))


def join_chains(triples, caps: Caps = Caps(), seed: int = 0, require_linked_bridge: bool = True,
                columns: Sequence[str] | None = None, names=None):
    """All 2-hop pairs of ``triples`` (a polars DataFrame with :data:`TRIPLE_COLUMNS`) in the seeded order:
    ``row_1`` / ``row_2`` (the hops' row numbers in ``triples``), ``drop`` (the first rule a pair breaks,
    an Enum of :data:`RULES` + :data:`CAP_RULES`; null = kept) and the named ``columns``: an input column
    of hop 1 or 2 with the suffix ``_1`` / ``_2`` (``subject_1``, ``object_2`` …) or ``chain_id``.
    ``None`` names them all; ``()`` none — then gather them for the rows you keep with :func:`pair_columns`,
    which is what keeps 1M triples (~2M pairs) in a few hundred MB."""

    # Join row numbers on the entity key alone; every other column is gathered by row number later.
    # (The lazy join peaks at ~75 MB for 1M triples, the eager one at ~230 MB.)
    keys = triples.lazy().select("subject_key", "object_key").with_row_index("row")
    pairs = keys.select(pl.col("row").alias("row_1"), pl.col("object_key").alias("_bridge")).join(
        keys.select(pl.col("row").alias("row_2"), pl.col("subject_key").alias("_bridge")),
        on="_bridge", how="inner").select("row_1", "row_2").collect(engine="streaming")
    ids = _triple_hashes(triples, seed)
    drop, order = _rules_and_order(triples, pairs, seed, require_linked_bridge, names, ids)
    # Repeated triple ids repeat chain ids (and their hashes); then row numbers break the ties. A one-key
    # sort is about half the cost of the three-key one, so the tie break is only added when needed.
    tie_break = ["row_1", "row_2"] if ids.n_unique() < len(ids) else []
    # One permutation, then each column through it in turn: sorting the frame whole would hold a sorted copy
    # of every column at once (at 20M triples, ~40M pairs, that copy is the peak).
    by = pl.DataFrame([order, *(pairs.get_column(c) for c in tie_break)]) if tie_break else order.to_frame()
    permutation = by.select(pl.arg_sort_by(by.columns)).to_series()
    del by, order
    columns_sorted = {}
    for name in ("row_1", "row_2"):
        columns_sorted[name] = pairs.get_column(name).gather(permutation)
        pairs = pairs.drop(name)
    pairs = pl.DataFrame({**columns_sorted, "drop": drop.gather(permutation)})
    del columns_sorted, drop, permutation
    if any(cap is not None for cap in (caps.per_subject, caps.per_bridge, caps.per_relation_pair)):
        pairs = pairs.with_columns(_apply_caps(triples, pairs, caps))
    if columns is None:
        columns = ["chain_id", *(f"{c}_{hop}" for hop in (1, 2) for c in triples.columns)]
    return pairs.hstack(pair_columns(triples, pairs, columns))


def _triple_hashes(triples, seed: int):
    """The seeded hash of each triple id (``triple_hash`` when the frame carries it already, as the stage's
    does: it never holds the id strings)."""
    if "triple_hash" in triples.columns:
        return triples.get_column("triple_hash")
    return triples.get_column("triple_id").hash(seed)


RULE_CHUNK = 1 << 17  # pairs whose strings are gathered at once (2 MB per string column; as fast as 2M)


def _rules_and_order(triples, pairs, seed: int, require_linked_bridge: bool, names, triple_hash):
    """The ``drop`` reason of each pair under :data:`RULES` and its seeded ``_order`` (the hash of its
    chain id), computed a chunk of pairs at a time so only one chunk's strings exist at once."""

    reason = pl.Enum([*RULES, *CAP_RULES])
    subject_key, object_key = triples.get_column("subject_key"), triples.get_column("object_key")
    # bridge = subject of hop 1 and answer = bridge are properties of one triple (a self-loop); only
    # answer = subject compares the two hops: first on 8-byte hashes (a random gather of a number is ~4×
    # cheaper than of a string), then on the strings for the few pairs whose hashes agree.
    self_loop = subject_key == object_key
    subject_hash, object_hash = subject_key.hash(), object_key.hash()
    # Relations are few: compare their codes, and gather names from the small table of distinct ones.
    relation_names = triples.get_column("relation").unique(maintain_order=True)
    # Names may be strings, categoricals, or codes into ``names`` (the stage's own dictionary: join_frame).
    text = ((lambda codes: names.gather(codes)) if names is not None
            else (lambda values: values.cast(pl.String)))
    relation_code = triples.select("relation").join(relation_names.to_frame().with_row_index("code"),
                                                    on="relation", how="left",
                                                    maintain_order="left").get_column("code")
    unlinked = (triples.get_column("unlinked") if "unlinked" in triples.columns
                else triples.get_column("object_id").is_null()) & require_linked_bridge
    subject, answer = triples.get_column("subject"), triples.get_column("object")
    a = pl.col("answer")
    # answer_key == s1_key is a leak too, but the cycle rule before it already takes those pairs.
    leak = (pl.col("s1").str.contains(a, literal=True) | pl.col("r1").str.contains(a, literal=True)
            | pl.col("r2").str.contains(a, literal=True))
    drop = (pl.when(pl.col("answer_is_s1") | pl.col("loop_1") | pl.col("loop_2"))
            .then(pl.lit("cycle", reason))
            .when(pl.col("r1_code") == pl.col("r2_code")).then(pl.lit("same_relation", reason))
            .when(leak).then(pl.lit("answer_in_question", reason))
            .when(pl.col("unlinked")).then(pl.lit("bridge_not_linked", reason))
            .otherwise(pl.lit(None, reason)))
    # The seeded hash of the pair of triple-id hashes: the order (and so the caps) depends on the ids and the
    # seed only, and 8-byte numbers stand in for the id strings.
    order = pl.struct("id_1", "id_2").hash(seed)
    chunks = []
    for start in range(0, pairs.height, RULE_CHUNK):
        hop1 = pairs.get_column("row_1").slice(start, RULE_CHUNK)
        hop2 = pairs.get_column("row_2").slice(start, RULE_CHUNK)
        answer_is_s1 = subject_hash.gather(hop1) == object_hash.gather(hop2)
        if answer_is_s1.any():
            at = answer_is_s1.arg_true()
            same = subject_key.gather(hop1.gather(at)) == object_key.gather(hop2.gather(at))
            answer_is_s1 = answer_is_s1.scatter(at, same.fill_null(False))
        r1_code, r2_code = relation_code.gather(hop1), relation_code.gather(hop2)
        chunk = pl.DataFrame({"answer_is_s1": answer_is_s1, "loop_1": self_loop.gather(hop1),
                              "loop_2": self_loop.gather(hop2), "r1_code": r1_code, "r2_code": r2_code,
                              "s1": text(subject.gather(hop1)), "r1": text(relation_names.gather(r1_code)),
                              "r2": text(relation_names.gather(r2_code)), "answer": text(answer.gather(hop2)),
                              "unlinked": unlinked.gather(hop1), "id_1": triple_hash.gather(hop1),
                              "id_2": triple_hash.gather(hop2)})
        chunks.append(chunk.select(drop.alias("drop"), order.alias("_order")))
    if not chunks:
        return pl.Series("drop", [], reason), pl.Series("_order", [], pl.UInt64)
    both = pl.concat(chunks, rechunk=False)  # the chunks as they are: a rechunk would copy ~40M pairs at 20M
    return both.get_column("drop"), both.get_column("_order")


def _apply_caps(triples, pairs, caps: Caps):
    """``pairs``' ``drop`` column with the caps applied in turn: per group, the first ``cap`` chains still
    alive in the (seeded) order of ``pairs`` stay, the rest get the cap's reason. Chains another rule or an
    earlier cap dropped are never counted."""

    drop = pairs.get_column("drop").clone()
    alive = pairs.with_row_index("_at").filter(pl.col("drop").is_null())
    for reason, group, cap in (("cap_subject", ["subject_key_1"], caps.per_subject),
                               ("cap_bridge", ["object_key_1"], caps.per_bridge),
                               ("cap_relation_pair", ["relation_1", "relation_2"], caps.per_relation_pair)):
        if cap is None:
            continue
        keys = alive.select("_at").hstack(pair_columns(triples, alive, group))
        # agg keeps each group's rows in frame order, so head(cap) is the first cap in the seeded order
        # (cheaper than group_by().head() or a rank over ~500k groups).
        firsts = keys.group_by(group).agg(pl.col("_at").head(cap)).get_column("_at").explode()
        survives = pl.col("_at").is_in(firsts.implode())
        drop = drop.scatter(alive.filter(~survives).get_column("_at"), reason)
        alive = alive.filter(survives)  # a filter keeps the seeded order for the next cap
    return drop


def pair_columns(triples, pairs, names: Sequence[str]) -> list:
    """Columns for ``pairs`` (with ``row_1`` / ``row_2``) by name: ``<input column>_1`` / ``_2``, gathered
    from ``triples`` by row number (polars strings are views: a gather copies 16 bytes a value, no text),
    or ``chain_id`` ("<triple id 1>:<triple id 2>")."""

    out = []
    for name in names:
        if name == "chain_id":
            ids = [triples.get_column("triple_id").gather(pairs.get_column(f"row_{hop}")) for hop in (1, 2)]
            out.append(pl.select(pl.concat_str(*ids, separator=":").alias("chain_id")).to_series())
            continue
        column, _, hop = name.rpartition("_")
        if hop not in ("1", "2") or column not in triples.columns:
            raise ValueError(f"join_chains: no column {name!r}; name an input column + '_1' or '_2', "
                             f"or 'chain_id' (input columns: {', '.join(triples.columns)})")
        out.append(triples.get_column(column).gather(pairs.get_column(f"row_{hop}")).alias(name))
    return out


def derivations_of(record: dict) -> list:
    """A record's derivations as JEMHopQA's ``[[s, r, [o…]]…]``. Chain records store them as a JSON string,
    finished rows as ``{subject, relation, objects}`` structs (``tansaku.core.features``): parquet cannot
    hold the mixed lists."""
    value = record["derivations"]
    return derivation_lists(json.loads(value) if isinstance(value, str) else value)


CHAIN_RECORD_COLUMNS = ("chain_id", "subject_1", "relation_1", "relation_text_1", "relation_text_2",
                        "object_1", "subject_title_1", "object_title_1",
                        "subject_id_1", "object_id_1", "doc_id_1", "source_1", "evidence_1", "relation_2",
                        "object_2", "subject_title_2", "subject_id_2", "object_aliases_2", "doc_id_2",
                        "source_2", "evidence_2")


def chain_record(row: dict) -> dict:
    """One kept pair as a chain record: derivations in JEMHopQA form plus hop provenance."""
    subject = row["subject_title_1"] or row["subject_1"]
    bridge = row["subject_title_2"] or row["object_title_1"] or row["object_1"]
    return {
        "chain_id": row["chain_id"],
        # the source's spelling of each relation (JEMHopQA's own 生年月日, not the canonical 生年)
        "derivations": jsontext.dumps([
            [subject, row.get("relation_text_1") or row["relation_1"], [row["object_1"]]],
            [bridge, row.get("relation_text_2") or row["relation_2"], [row["object_2"]]]]),
        "subject": subject, "bridge": bridge, "answer": row["object_2"],
        "answer_aliases": list(row["object_aliases_2"] or []),
        "relations": [row["relation_1"], row["relation_2"]],
        "page_ids": [row["subject_id_1"], row["subject_id_2"] or row["object_id_1"]],
        "hop_doc_ids": [row["doc_id_1"], row["doc_id_2"]],
        "triple_sources": [row["source_1"], row["source_2"]],
        "evidence": [row["evidence_1"], row["evidence_2"]],
    }


RECORD_BATCH = 100_000  # kept chains whose columns are read back and turned into records at once
JOIN_NAMES = ("subject", "relation", "object", "subject_key", "object_key")  # dictionary-encoded for the join


def join_frame(path: Path, seed: int = 0):
    """The columns of spilled triples that the rules and caps read, and the names they stand for: every name
    as a 4-byte code into one sorted dictionary of the distinct names (a polars categorical costs ~140 bytes a
    distinct name, this ~30), whether the bridge is linked, and the seeded hash of the triple id (all the
    order needs of it). Returns ``(frame, names)``; ``join_chains(frame, …, names=names)``."""
    scan = pl.scan_parquet(path)
    names = (pl.concat([scan.select(pl.col(c).alias("name")) for c in JOIN_NAMES]).unique().sort("name")
             .collect(engine="streaming").get_column("name"))
    codes = [scan.select(pl.col(c).alias("name")).join(names.to_frame().lazy().with_row_index("code"),
                                                       on="name", how="left", maintain_order="left")
             .select(pl.col("code").alias(c)).collect(engine="streaming") for c in JOIN_NAMES]
    rest = spill.load(path, pl.col("object_id").is_null().alias("unlinked"),
                      pl.col("triple_id").hash(seed).alias("triple_hash"))
    return pl.concat([*codes, rest], how="horizontal"), names


def chain_stage(triples: Iterable[dict], caps: Caps = Caps(), seed: int = 0, limit: int | None = None,
                require_linked_bridge: bool = True) -> Iterator[dict | Drop]:
    """The global stage: triples in, one Drop per rejected pair, then the chain records in the seeded order.

    Memory stays bounded by the join, not by the triples' text: the records are spilled to a parquet file
    (``tansaku.pipelines.multihop.spill``), joined on a dictionary-encoded frame of the few columns the rules
    need, and the kept chains get their full columns read back from the file :data:`RECORD_BATCH` at a time
    (20M triples: ``python bench/scale.py --triples``)."""

    with spill.spilled(triples, "tansaku-chains-") as path:
        frame, names = join_frame(path, seed)
        pairs = join_chains(frame, caps, seed, require_linked_bridge, columns=(), names=names)
        del frame, names
        for reason, count in pairs.get_column("drop").drop_nulls().value_counts(sort=True).iter_rows():
            drop = Drop(reason)
            for _ in range(count):
                yield drop
        kept = pairs.filter(pl.col("drop").is_null()).select("row_1", "row_2")
        del pairs
        if limit is not None and kept.height > limit:
            drop = Drop("over_limit")
            for _ in range(kept.height - limit):
                yield drop
            kept = kept.head(limit)
        for batch in kept.iter_slices(RECORD_BATCH):
            rows = pl.concat([batch.get_column("row_1"), batch.get_column("row_2")]).unique().sort()
            hops = spill.rows_at(path, rows)  # row k of hops = row rows[k] of the file
            local = batch.select(pl.col(f"row_{hop}").map_batches(rows.search_sorted) for hop in (1, 2))
            yield from map(chain_record,
                           local.hstack(pair_columns(hops, local, CHAIN_RECORD_COLUMNS))
                           .iter_rows(named=True))
