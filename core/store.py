"""The versioned dataset store: every ``synth build …`` writes one folder

    DIR/data/<split>-00000-of-0000N.parquet   rows (``datasets.load_dataset(DIR)`` loads them)
    DIR/data/rejected-…parquet                dropped records (``keep_rejected``): stage, reason, detail,
                                              record
    DIR/manifest.json                         the recipe: config, seed, inputs, llm, stage params + funnel,
                                              code
    DIR/README.md                             an HF dataset card rendered from the manifest (see
                                              ``data_cards``)

``build_dataset`` glues the engine to the store: it runs the stages with checkpoints under ``DIR/.work``
(a rerun with the same ``--out`` resumes), writes the rows, the manifest and the card, then removes the
work folder. The dataset ``version`` hashes the rows' content (every split): same inputs, config, seed → same
version.

A rerun is only allowed with the same recipe (``tansaku.core.recipe``: pipeline, config, seed, inputs,
LLM identity, every stage's name/params/LLM, chunk size, ``keep_rejected``); otherwise ``StoreError`` says
what changed in one line and nothing in the folder is touched. A folder that no tansaku build made (any
file but a manifest or work folder of this recipe, ``tansaku.core.ownership``) is refused, never written.
One build at a time: a second one into the same ``--out`` is refused while the first holds its lock.

Question builds pass ``heldout`` (``tansaku.core.heldout``): a stable share of rows goes to a ``test`` split
that training never reads. The ``rejected`` split is its own card config, so ``datasets.load_dataset(DIR)``
gives the data splits only and ``load_dataset(DIR, "rejected")`` the dropped records.

    rows = list(iter_rows("out/corpus"))           # read a split back
    manifest = read_manifest("out/corpus")
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from tansaku.core import jsontext, ownership, safe_write, shards, swapped_outputs
from tansaku.core.context import BuildContext
from tansaku.core.dataset_spec import DatasetSpec
from tansaku.core.engine import Record
from tansaku.core.errors import MissingInputError
from tansaku.core.features import declare
from tansaku.core.jsonl import iter_jsonl
from tansaku.core.out_folder import REJECTED, StoreError, check_out, data_rows, read_manifest, refuse_empty
from tansaku.core.progress import BuildProgress
from tansaku.core.recipe import canonical_json, fingerprint
from tansaku.core.redact import redact_mapping
from tansaku.core.runner import PipelineResult, run_pipeline
from tansaku.data_cards import nested_datasets, render_card

ROWS_PER_SHARD = 100_000
ROWS_PER_GROUP = 5_000  # parquet row group = what is held in memory while writing
MANIFEST = "manifest.json"
REJECTED_SCHEMA = pa.schema([(c, pa.string()) for c in ("stage", "reason", "detail", "record")])


# ---------------------------------------------------------------- writing


def _shard_names(split: str, n: int) -> list[str]:
    return [f"{split}-{i:05d}-of-{n:05d}.parquet" for i in range(n)]


def write_rows(out_dir: str | Path, rows_by_split: dict[str, Callable[[], Iterable[Record]]],
               rows_per_shard: int = ROWS_PER_SHARD, fixed_schemas: dict[str, pa.Schema] | None = None,
               column_types: dict[str, pa.DataType] | None = None) -> tuple[str, dict[str, int]]:
    """Write each split as parquet shards under ``out_dir/data``; return (content version, row counts).

    ``rows_by_split`` maps split names to zero-argument callables that stream the rows: they are read
    twice (schema + hash, then writing) so memory stays bounded by one shard. ``fixed_schemas``: a schema
    per split that is not inferred from the rows (the rejected split's, even when empty); ``column_types``:
    declared types over the inferred ones (``tansaku.core.features.declare``). An empty split gets the
    schema of the other splits, so it is one typed, empty parquet file that ``datasets`` loads.
    """
    data_dir = Path(out_dir) / "data"
    safe_write.sweep_partials(data_dir)  # what killed builds left
    tmp_dir = safe_write.fresh_dir(data_dir)  # mkdtemp: never a fixed name that a planted link redirects
    try:
        version, counts = _write_splits(tmp_dir, rows_by_split, rows_per_shard, fixed_schemas or {},
                                        column_types)
    except BaseException:  # a failed write (a full disk): its space back now, not only at the next build
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    safe_write.replace_dir(tmp_dir, data_dir)
    return version, counts


def _write_splits(
    tmp_dir: Path, rows_by_split: dict[str, Callable[[], Iterable[Record]]], rows_per_shard: int,
    fixed: dict[str, pa.Schema], column_types: dict[str, pa.DataType] | None) -> tuple[str, dict[str, int]]:
    """:func:`write_rows` into the new folder ``tmp_dir``: each shard written, then synced (a full disk that
    the file system reports only at the sync fails the build, not the rows)."""
    version = hashlib.sha256()
    counts: dict[str, int] = {}
    inferred: dict[str, list[pa.Schema]] = {}
    for split in sorted(rows_by_split):  # pass 1: counts, content hash, the schema of each batch
        schemas, n = [], 0
        batch: list[Record] = []
        version.update(f"\x00split:{split}\x00".encode())
        for row in rows_by_split[split]():
            version.update(canonical_json(row).encode())
            version.update(b"\n")
            batch.append(row)
            n += 1
            if len(batch) >= 10_000:
                schemas.append(pa.Table.from_pylist(batch).schema)
                batch = []
        if batch:
            schemas.append(pa.Table.from_pylist(batch).schema)
        counts[split], inferred[split] = n, schemas
    every_data_split = [s for split in sorted(inferred) if split not in fixed for s in inferred[split]]
    for split in sorted(rows_by_split):  # pass 2: the rows, one row group at a time
        schemas = inferred[split] or every_data_split
        schema = fixed.get(split) or declare(pa.unify_schemas(schemas, promote_options="permissive")
                                             if schemas else pa.schema([]), column_types)
        n_shards = max(1, -(-counts[split] // rows_per_shard))
        names = iter(_shard_names(split, n_shards))
        rows = iter(rows_by_split[split]())
        for _ in range(n_shards):
            # A shard goes out a row group at a time: 100k e-Gov articles as dicts + Arrow were 1.2 GB at once
            with pq.ParquetWriter(shard := tmp_dir / next(names), schema) as writer:
                left = rows_per_shard
                while left and (group := [r for _, r in zip(range(min(ROWS_PER_GROUP, left)), rows)]):
                    writer.write_table(pa.Table.from_pylist(group, schema=schema))
                    left -= len(group)
                if left == rows_per_shard:  # an empty split still gets its (empty, typed) file
                    writer.write_table(schema.empty_table())
            safe_write.sync_file(shard)
    return version.hexdigest()[:16], counts


def _write_json(path: Path, obj: Any) -> None:
    safe_write.write_text_atomic(path, jsontext.dumps(obj, indent=2))


def write_manifest(out_dir: str | Path, manifest: dict) -> None:
    _write_json(Path(out_dir) / MANIFEST, redact_mapping(manifest))


def _sweep_killed_writes(out: Path, finished: bool) -> None:
    """Remove what a build killed in ``out`` left that no build writes again: the temp files of its card and
    manifest (this build holds the lock, or the manifest is there and nothing writes them any more), what a
    nested output swapped in whole left (egov's ``.index.old-*``: a kill after the swap, and the index is
    never built again; a live build's leftovers are locked, and stay) and, once the manifest is there, its
    checkpoints (``.work``: a whole copy of the rows, were it killed before removing it)."""
    safe_write.sweep_temps(out, ("README.md", MANIFEST))
    for nested in {ownership.leftover_of(entry) for entry in out.iterdir()} - {None}:
        swapped_outputs.sweep_leftovers(out / nested)
    work = out / ".work"
    # rmtree refuses a link: remove the link itself, never what it points to
    if finished and work.is_symlink():
        with suppress(OSError):  # tidying only (a read-only folder keeps it)
            work.unlink()
    elif finished:
        shutil.rmtree(work, ignore_errors=True)


def build_dataset(*, context: BuildContext | None = None, **fields) -> dict:
    """Run a build (``fields``: a ``tansaku.core.dataset_spec.DatasetSpec``'s) into the dataset folder
    ``fields["out"]`` and return its manifest.

    A finished folder with the same recipe (see the module docstring) is returned as it is; an unfinished
    one resumes from its checkpoints; a folder made with another recipe is refused rather than mixed. A build
    whose data splits end with 0 rows raises ``EmptyBuildError`` after writing everything
    (``tansaku.core.out_folder.refuse_empty``, with the spec's ``empty_hints``). ``context``: the shard plan
    and progress output (``tansaku.core.context.BuildContext``; default: the whole build, with progress)."""
    spec, context = DatasetSpec(**fields), context or BuildContext()
    out = ownership.require_named(spec.out, "--out")
    recipe = spec.recipe()
    fp = fingerprint(recipe)
    # a bad TANSAKU_LOG_EVERY: refused before writing
    progress = BuildProgress(spec.pipeline, quiet=context.quiet)
    progress.watch(spec.stages)  # the lines of LLM stages add requests in flight, req/s, tok/s, cache hits
    # --from-shards: refused before any write
    merging = shards.check_shards(fp, context.shards.shard_folders())
    # --out is checked before any write (a refused folder is left untouched), then locked to the build's end.
    with ownership.claimed(out, "--out", lambda: check_out(out, recipe, fp)) as finished:
        _sweep_killed_writes(out, finished is not None)
        if finished is not None:
            return refuse_empty(finished, out, spec.empty_hints)
        work = safe_write.ensure_dir(out / ".work")
        _write_json(work / "recipe.json", recipe)  # before any checkpoint: proves whose checkpoints they are
        # one shard of the build: its part of the first segment, no dataset
        if context.shards.index is not None:
            with progress:
                return {"name": spec.name, "pipeline": spec.pipeline, **shards.run_shard(
                    context.shards, spec.source, spec.stages, work, fp, spec.chunk_size, progress,
                    spec.keep_rejected)}
        shards.adopt_shards(work, merging)  # the merge of shards (when there are any)
        started = time.time()
        with progress:  # a bar or log lines per stage
            result: PipelineResult = run_pipeline(spec.source, spec.stages, work, chunk_size=spec.chunk_size,
                                                  progress=progress, keep_rejected=spec.keep_rejected)
        splits = spec.split_names(result.rows())
        version, counts = _write_build_rows(out, spec, result, splits)
        manifest = spec.manifest(version=version, fingerprint=fp, recipe=recipe, result=result, counts=counts,
                                 started=started)
        if spec.summarize is not None:
            manifest.update(spec.summarize(manifest))
        # What is recorded holds no secret: an LLM URL's user:pass@ or ?api-key=, a key in a config
        # (tansaku.core.redact). The card is rendered from the same redacted manifest; its sample rows are
        # data.
        manifest = redact_mapping(manifest)
        _write_card(out, manifest, spec.card, splits)
        write_manifest(out, manifest)  # written last: its presence means the folder is complete
        shutil.rmtree(work, ignore_errors=True)
        return refuse_empty(manifest, out, spec.empty_hints)


def _write_build_rows(out: Path, spec: DatasetSpec, result: PipelineResult,
                      splits: list[str]) -> tuple[str, dict]:
    """Write each split's rows (and the dropped records with ``keep_rejected``); (version, row counts)."""
    split_of = spec.row_split()
    rows_by_split = {s: (lambda s=s: (r for r in result.rows() if split_of(r) == s)) for s in splits}
    # no drops: no split (an empty parquet does not load with `datasets`)
    if spec.keep_rejected and next(result.rejected(), None) is not None:
        rows_by_split[REJECTED] = result.rejected
    return write_rows(out, rows_by_split, fixed_schemas={REJECTED: REJECTED_SCHEMA},
                      column_types=spec.column_types)


def _write_card(out: Path, manifest: dict, card, splits: list[str]) -> None:
    """The HF dataset card, rendered from the (redacted) manifest with three sample rows."""
    samples = [r for _, r in zip(range(3), iter_rows(out, split="train" if "train" in splits else splits[0]))]
    card_info = redact_mapping(card(manifest) if callable(card) else card or {})
    safe_write.write_text_atomic(out / "README.md",
                                 render_card(manifest, samples, card_info, nested_datasets(out)))


# ---------------------------------------------------------------- reading


def shard_files(path: str | Path, split: str = "train") -> list[Path]:
    files = sorted((Path(path) / "data").glob(f"{split}-*.parquet"))
    if not files:
        raise StoreError(f"{path} has no '{split}' split (looked for data/{split}-*.parquet)")
    return files


def iter_rows(path: str | Path, split: str = "train", columns: list[str] | None = None) -> Iterator[Record]:
    """Stream the rows of one split, a record batch at a time."""

    for f in shard_files(path, split):
        try:
            batches = pq.ParquetFile(f).iter_batches(batch_size=4096, columns=columns)
        except pa.ArrowInvalid as exc:  # a truncated or foreign file: the dataset is unusable, not a bug
            raise StoreError(f"{f}: not a readable parquet file ({exc})") from None
        for batch in batches:
            yield from batch.to_pylist()


def read_rows(path: str | Path, split: str = "train") -> list[Record]:
    return list(iter_rows(path, split))


def read_records(path: str | Path, split: str = "train") -> list[Record]:
    """Rows from a dataset folder (its ``split``) or a ``.jsonl`` / ``.json`` (list) / ``.parquet`` file.

    Raises MissingInputError for a missing path and StoreError (naming file and line) for anything unreadable.
    """
    p = Path(path)
    if p.is_dir():
        return read_rows(p, split)
    if not p.is_file():
        raise MissingInputError(f"{p} not found (expected a dataset folder or a .jsonl/.json/.parquet file)")
    if p.suffix == ".jsonl":
        return [row for _, row in iter_jsonl(p, objects=False, error=StoreError)]
    if p.suffix == ".json":
        try:
            rows = jsontext.loads(p.read_bytes())  # nesting bounded, lone surrogates read as U+FFFD
        except json.JSONDecodeError as exc:  # also not UTF-8 or nested too deeply (jsontext.JSONInputError)
            raise StoreError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(rows, list):
            raise StoreError(f"{p}: expected a JSON list of rows")
        return rows
    if p.suffix == ".parquet":
        try:
            return pq.read_table(p).to_pylist()
        except pa.ArrowInvalid as exc:
            raise StoreError(f"{p}: not a readable parquet file ({exc})") from None
    raise StoreError(f"{p}: unsupported file type {p.suffix!r} (use a dataset folder, .jsonl, .json or "
                     f".parquet)")


def validate_for_push(path: str | Path) -> dict:
    """Everything the Hub will need, checked locally: the card parses, the manifest is there, every split
    loads with ``datasets``. Returns the manifest."""
    from datasets import load_dataset
    from huggingface_hub import DatasetCard

    manifest = read_manifest(path)
    if not data_rows(manifest):
        raise StoreError(f"{path} holds 0 rows in every data split (`synth info {path}` shows the stage that "
                         "dropped them): nothing to push")
    card = Path(path) / "README.md"
    if not card.is_file():
        raise StoreError(f"{card}: missing; rebuild the dataset (the card is written with the rows)")
    try:  # broken YAML front matter, a header that is no mapping, not UTF-8: one line naming the card
        DatasetCard.load(card)
    except (ValueError, OSError, yaml.YAMLError) as exc:
        raise StoreError(f"{card}: not a valid dataset card ({type(exc).__name__}: "
                         f"{(str(exc).strip().splitlines() or [''])[0]}); fix its YAML header or "
                         f"rebuild") from None
    for split, n in manifest["splits"].items():
        # a truncated or foreign file, named here, not deep inside `datasets`
        for f in shard_files(path, split):
            try:
                pq.read_metadata(f)
            except (pa.ArrowInvalid, OSError) as exc:
                raise StoreError(f"{f}: not a readable parquet file ({exc}); rebuild the dataset") from None
        if not n:  # an empty split is a typed empty file that `datasets` cannot load (and no card config)
            continue
        # A cache of its own: `datasets` keeps what it read of a path and serves it again after a rebuild of
        # the same folder (seen: last build's row count and columns), which would check the old rows, not
        # these.
        with tempfile.TemporaryDirectory(prefix="tansaku-push-check-") as cache:
            ds = load_dataset("parquet", data_files=[str(f) for f in shard_files(path, split)], split="train",
                              cache_dir=cache)
            n_loaded = len(ds)
        if n_loaded != n:
            raise StoreError(f"{path}: split {split} has {n_loaded} rows, manifest says {n}")
    return manifest
