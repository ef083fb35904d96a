"""Stage 2: relation cardinality from triple statistics, keeping only hops whose answer is unique.

For each relation, over its distinct (subject, object) pairs:

* ``subject_to_one`` — share of subjects with exactly one distinct object,
* ``object_to_one`` — share of objects with exactly one distinct subject.

A share ≥ ``threshold`` counts as "one" on that side, which gives 1:1, N:1 (many subjects share one
object: 出身地), 1:N (one subject, many objects: 出演者) or N:N. A hop is kept when its relation is
1:1 or N:1 *and* its own (subject, relation) has exactly one object; drops are counted as
``relation_1:N``, ``relation_N:N`` and ``multi_valued``. Objects nested in each other (大阪府 /
大阪府大阪市) are one value at two granularities: one hop is kept, the others become ``object_aliases``. Relations seen on fewer than ``min_support``
subjects have weak statistics; with an LLM they are confirmed (``llm_not_single_valued`` otherwise).

Run alone: ``python -m tansaku.pipelines.multihop.cardinality TRIPLES.jsonl`` prints the table.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

import polars as pl

from tansaku.core.engine import Drop
from tansaku.core.llm import ChatRequest, ask_json
from tansaku.pipelines.multihop.triples import index_from_triples, link_triple, read_triples_file

DEFAULT_THRESHOLD = 0.9
CARDINALITY_SCHEMA = {"type": "object", "properties": {"single_valued": {"type": "boolean"}},
                      "required": ["single_valued"]}


def value_classes(triples: list[dict]) -> dict[tuple[str, str, str], str]:
    """Map each (subject, relation, object) key to its value class: objects of one (subject, relation)
    nested in each other (大阪府 ⊂ 大阪府大阪市中央区, 4月16日 ⊂ 1923年4月16日) are one fact written at
    two granularities, so they count as one value; the class is named by the longest spelling.

    >>> ts = [{"subject_key": "s", "relation": "r", "object_key": o} for o in ("大阪府", "大阪府大阪市", "京都府")]
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


def relation_stats(triples: list[dict], threshold: float = DEFAULT_THRESHOLD) -> dict[str, dict]:
    """Per relation: counts, the two to-one shares and the class (``1:1``, ``N:1``, ``1:N``, ``N:N``)."""

    if not triples:
        return {}
    value_of = value_classes(triples)
    pairs = pl.DataFrame({"r": [t["relation"] for t in triples], "s": [t["subject_key"] for t in triples],
                          "o": [value_of[t["subject_key"], t["relation"], t["object_key"]] for t in triples]}).unique()
    per_s = pairs.group_by("r", "s").agg(pl.len().alias("n"))
    per_o = pairs.group_by("r", "o").agg(pl.len().alias("n"))
    s_side = per_s.group_by("r").agg(pl.len().alias("subjects"), (pl.col("n") == 1).mean().alias("subject_to_one"))
    o_side = per_o.group_by("r").agg(pl.len().alias("objects"), (pl.col("n") == 1).mean().alias("object_to_one"))
    table = s_side.join(o_side, on="r")
    stats = {}
    for row in table.iter_rows(named=True):
        left = "1" if row["object_to_one"] >= threshold else "N"
        right = "1" if row["subject_to_one"] >= threshold else "N"
        stats[row["r"]] = {"subjects": row["subjects"], "objects": row["objects"],
                           "subject_to_one": round(row["subject_to_one"], 4),
                           "object_to_one": round(row["object_to_one"], 4), "class": f"{left}:{right}"}
    return stats


def confirm_with_llm(relations: list[str], llm, seed: int = 0) -> dict[str, bool | None]:
    """Ask the LLM whether each relation has one value per subject; None where it gave no usable answer."""

    requests = [ChatRequest(messages=[{"role": "user", "content": (
        f"関係「{r}」について、ある主語に対して値（目的語）は常に一つに決まりますか。"
        '例:「出身地」は一つ、「出演者」は複数。JSON だけで答えてください: {"single_valued": true または false}')}],
        max_tokens=32, temperature=0.0, seed=seed, json_schema=CARDINALITY_SCHEMA) for r in relations]
    verdicts: dict[str, bool | None] = {}
    for r, answer in zip(relations, ask_json(llm, requests)):
        value = None if isinstance(answer, Drop) else answer.get("single_valued")
        verdicts[r] = value if isinstance(value, bool) else None
    return verdicts


def judge_hops(rows: list[dict], stats: dict[str, dict], confirmed: dict[str, bool | None] | None = None
               ) -> Iterator[tuple[dict, str | None]]:
    """``(triple, None)`` for each kept hop (annotated), ``(triple, reason)`` for each dropped one."""
    confirmed = confirmed or {}
    value_of = value_classes(rows)
    groups: dict[tuple[str, str], list[dict]] = {}
    for t in rows:
        groups.setdefault((t["subject_key"], t["relation"]), []).append(t)
    for (s, r), group in groups.items():
        cls = stats[r]["class"]
        reason = None
        if cls in ("1:N", "N:N"):
            reason = f"relation_{cls}"
        elif len({value_of[s, r, t["object_key"]] for t in group}) > 1:
            reason = "multi_valued"
        elif confirmed.get(r) is False:
            reason = "llm_not_single_valued"
        if reason:
            yield from ((t, reason) for t in group)
            continue
        # One hop per (subject, relation): a linked spelling first (it can be a bridge), else the longest;
        # the other spellings of the same value become answer aliases.
        best = min(group, key=lambda t: (t.get("object_id") is None, -len(t["object"]), t["triple_id"]))
        aliases = sorted({t["object"] for t in group} - {best["object"]})
        for t in group:
            if t is not best:
                yield t, "duplicate_triple" if t["object_key"] == best["object_key"] else "granularity_variant"
        yield {**best, "cardinality": cls, "object_aliases": aliases}, None


def filter_unique_hops(triples: Iterable[dict], threshold: float = DEFAULT_THRESHOLD, llm=None,
                       min_support: int = 3, seed: int = 0) -> Iterator[dict | Drop]:
    """The global stage: annotate each triple with its relation's class and drop non-unique hops."""
    rows = list(triples)
    stats = relation_stats(rows, threshold)
    confirmed: dict[str, bool | None] = {}
    if llm is not None:
        weak = sorted(r for r, s in stats.items() if s["subjects"] < min_support and s["class"] in ("1:1", "N:1"))
        confirmed = confirm_with_llm(weak, llm, seed) if weak else {}
    for triple, reason in judge_hops(rows, stats, confirmed):
        yield triple if reason is None else Drop(reason, record=triple)


def main(argv: list[str]) -> None:
    triples = list(read_triples_file(argv[0]))
    index = index_from_triples(triples)
    stats = relation_stats([link_triple(t, index) for t in triples])
    for r, s in sorted(stats.items(), key=lambda kv: -kv[1]["subjects"])[:50]:
        print(f"{s['class']:4} {s['subjects']:6} {s['objects']:6} {s['subject_to_one']:.2f} {s['object_to_one']:.2f} {r}")


if __name__ == "__main__":
    main(sys.argv[1:])
