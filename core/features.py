"""Declared column types of the datasets tansaku writes, so ``datasets`` reads the same ``Features`` whatever
the options and whichever rows a split happens to hold.

Arrow infers a column's type from its values: a column that is None in every row of a build (``pass_rate``
without ``--policy``, ``retrieval_rank`` without an index) would come out typed ``null``, and the same column
``double`` in another build. A pipeline passes ``column_types`` (name → Arrow type) to
``tansaku.core.store.build_dataset``; ``declare`` puts them over the inferred schema, and every other column
still typed ``null`` becomes ``string``, ``list<null>`` ``list<string>`` (Arrow and the Hub viewer handle an
all-null string column; a ``null``-typed one breaks concatenation with any later build).

Three columns stay JSON text on purpose. ``tools`` of SFT rows: TRL's own convention (``SFTTrainer`` runs
``json.loads`` on a string ``tools``), and Arrow would merge the tools' different ``parameters`` schemas into
one struct, filling every tool with the others' properties as nulls that chat templates then render. A
corpus's ``meta``: it carries the input's own metadata, whose keys the user chooses per row. e-Gov
``paragraphs``: a recursive tree (items hold subitems to any depth) that Arrow cannot type. Everything with
fixed keys is typed: e-Gov articles' ``meta`` (``pipelines.egov.parse.ARTICLE_META``), ``quality_detail``,
``derivations``, ``prompt``, SFT trajectories' gold ``answer`` (``pipelines.trajectories.format.GOLD``).

    from tansaku.core.features import DERIVATIONS, PROMPT, declare, derivation_structs
    schema = declare(inferred, {"pass_rate": pa.float64(), "prompt": PROMPT})
    derivation_structs([["本A", "著者", ["作家B"]]])
    # [{"subject": "本A", "relation": "著者", "objects": ["作家B"]}]
"""

from __future__ import annotations

import pyarrow as pa

# TRL's conversational prompt: a list of {role, content} messages.
PROMPT = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
# JEMHopQA's [subject, relation, [objects…]] triples, as structs Arrow can type (a mixed list cannot be).
DERIVATIONS = pa.list_(pa.struct([("subject", pa.string()), ("relation", pa.string()),
                                  ("objects", pa.list_(pa.string()))]))
STRINGS = pa.list_(pa.string())

# Columns every question dataset shares, typed the same in every pipeline.
QUESTION_COLUMNS: dict[str, pa.DataType] = {"prompt": PROMPT, "task": pa.string()}


def derivation_structs(derivations: list) -> list[dict]:
    """``[[s, r, [o…]]…]`` (or already structs) as ``[{subject, relation, objects}…]``."""
    out = []
    for d in derivations:
        if isinstance(d, dict):
            out.append({"subject": str(d["subject"]), "relation": str(d["relation"]),
                        "objects": [str(o) for o in d["objects"]]})
        else:
            s, r, objects = d
            out.append({"subject": str(s), "relation": str(r), "objects": [str(o) for o in objects]})
    return out


def derivation_lists(derivations: list) -> list[list]:
    """The inverse of ``derivation_structs``: JEMHopQA's ``[[s, r, [o…]]…]`` form."""
    return [[d["subject"], d["relation"], list(d["objects"])] if isinstance(d, dict) else list(d)
            for d in derivations]


def _no_null(t: pa.DataType) -> pa.DataType:
    """``null`` (a column of Nones) → ``string``, ``list<null>`` (only empty lists) → ``list<string>``."""
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_list(t) and pa.types.is_null(t.value_type):
        return STRINGS
    return t


def declare(schema: pa.Schema, column_types: dict[str, pa.DataType] | None = None) -> pa.Schema:
    """``schema`` with the declared columns' types (declared columns the rows lack are added, so every split
    has them) and any other ``null``-typed column as ``string`` (``list<null>`` as ``list<string>``)."""
    types = column_types or {}
    fields = [pa.field(f.name, types.get(f.name, _no_null(f.type))) for f in schema]
    names = set(schema.names)
    fields += [pa.field(name, t) for name, t in types.items() if name not in names]
    return pa.schema(fields)
