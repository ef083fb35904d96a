"""Triple records spilled to a parquet file, so the global stages (cardinality, chain join) hold columns of
numbers and dictionary-encoded names instead of millions of Python dicts.

A global stage receives its records as an iterator (``tansaku.core.runner`` reads them from the previous
segment's checkpoints); :func:`spill` writes them :data:`SPILL_ROWS` at a time, the stage computes the few
columns it needs (:func:`load`: names as :func:`categorical`, ids as hashes), and reads whole records back in
file order (:func:`records`) or by row number (:func:`rows_at`). The file lives in a temporary folder
(``$TMPDIR``) that :func:`spilled` removes when the stage is done.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

SPILL_ROWS = 100_000  # records per parquet row group (and per batch of dicts held while spilling)
# Every key a triple record has on its way through the multihop stages (tansaku.pipelines.multihop.triples).
TRIPLE_KEYS = ("triple_id", "subject", "relation", "relation_text", "object", "subject_id", "doc_id",
               "evidence", "source",
               "object_hint", "origin", "subject_title", "subject_key", "object_key", "object_id",
               "object_title", "link", "cardinality")
TRIPLE_SCHEMA = {**{k: pl.String for k in TRIPLE_KEYS}, "object_aliases": pl.List(pl.String)}


@contextmanager
def spilled(records: Iterable[dict], prefix: str) -> Iterator[Path]:
    """``records`` spilled (:func:`spill`) into a temporary folder named ``prefix…``, removed on leaving."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        path = Path(tmp) / "triples.parquet"
        spill(records, path)
        yield path


def spill(records: Iterable[dict], path: Path, schema: dict = TRIPLE_SCHEMA) -> int:
    """Write ``records`` (dicts with keys of ``schema``; a missing key is null) to ``path``; returns how many.
    A key outside ``schema`` is a bug in the stage before (it would be lost): ``ValueError``."""
    writer, n, batch = None, 0, []
    for record in records:
        batch.append(record)
        if len(batch) == SPILL_ROWS:
            writer, n, batch = _write(writer, path, batch, schema), n + len(batch), []
    if batch or writer is None:
        writer, n = _write(writer, path, batch, schema), n + len(batch)
    writer.close()
    return n


def _write(writer, path: Path, batch: list[dict], schema: dict):
    if extra := set().union(*map(dict.keys, batch)) - set(schema):
        raise ValueError(f"triple records with keys the spill schema does not hold: {sorted(extra)}")
    table = pl.from_dicts(batch, schema=schema).to_arrow()
    writer = writer or pq.ParquetWriter(path, table.schema)
    writer.write_table(table)
    return writer


def categorical() -> pl.Categorical:
    """A categorical type with this stage's own dictionary (freed with the frames that use it)."""
    return pl.Categorical(pl.Categories.random())


def load(source: Path | pl.DataFrame, *exprs: pl.Expr) -> pl.DataFrame:
    """``exprs`` over the spilled file (or a frame of the same columns), computed by polars' streaming engine
    so only the results are held, never the file's strings."""
    frame = pl.scan_parquet(source) if isinstance(source, Path) else source.lazy()
    return frame.select(*exprs).collect(engine="streaming")


def rows_at(path: Path, rows: pl.Series) -> pl.DataFrame:
    """Rows ``rows`` (sorted, distinct row numbers) of the file, in that order, in one streaming pass."""
    return (pl.scan_parquet(path).with_row_index("_row").filter(pl.col("_row").is_in(rows.implode()))
            .drop("_row").collect(engine="streaming"))


def records(path: Path) -> Iterator[pl.DataFrame]:
    """The file's records in order, a row group (:data:`SPILL_ROWS`) at a time."""
    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        yield pl.from_arrow(file.read_row_group(group))
