"""``DatasetSpec``: what a ``build_dataset`` call makes — the dataset's identity, its rows' source and
stages, how rows split, and what its card and manifest say — as one typed object.

``tansaku.core.store.build_dataset(**fields)`` builds one and runs it; this module holds the parts that
need no file: the recipe the resume fingerprint hashes, the split rule, and the manifest's fields.

    spec = DatasetSpec(out="out/x", name="x", pipeline="toy", pipeline_version="1", config={}, seed=0,
                       inputs=[], source=[{"id": 1}], stages=[])
    spec.recipe()["pipeline"]   # 'toy'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from tansaku.core.engine import Record, Stage
from tansaku.core.heldout import HeldOut
from tansaku.core.out_folder import REJECTED
from tansaku.core.provenance import code_version, package_versions
from tansaku.core.recipe import build_recipe


@dataclass(frozen=True)
class DatasetSpec:
    out: str | Path
    name: str
    pipeline: str
    pipeline_version: str
    config: dict  # the build's settings (its BuildConfig's recipe and what the options came to)
    seed: int
    inputs: list[dict]  # tansaku.core.provenance.describe_input of each input
    source: Iterable[Record] | Callable[[], Iterable[Record]]
    stages: list[Stage]
    split_of: Callable[[Record], str] | None = None  # a row's split, when not by ``heldout``
    card: dict | Callable[[dict], dict] | None = None  # the card's fields, or a function of the manifest
    llm: Any = None
    parents: list[str] | None = None  # versions (or paths) of the datasets the rows come from
    chunk_size: int = 1000  # records per checkpoint: the unit of resume and of --shard
    keep_rejected: bool = False  # also write every dropped record as the ``rejected`` split
    summarize: Callable[[dict], dict] | None = None  # extra manifest keys computed from the written rows
    heldout: HeldOut | None = None  # train/test(/rl) by tansaku.core.heldout (instead of ``split_of``)
    column_types: dict[str, pa.DataType] | None = None  # declared types: none depends on the options
    empty_hints: dict[str, str] | None = None  # ``stage:reason`` → the option that fixes a 0-row build

    def __post_init__(self):
        if self.heldout is not None and self.split_of is not None:
            raise ValueError("give build_dataset either split_of or heldout, not both")

    def recipe(self) -> dict:
        """What the fingerprint hashes: a rerun into the same folder must have the same."""
        return build_recipe(pipeline=self.pipeline, pipeline_version=self.pipeline_version,
                            config=self.config,
                            seed=self.seed, inputs=self.inputs, stages=self.stages, llm=self.llm,
                            chunk_size=self.chunk_size, keep_rejected=self.keep_rejected,
                            heldout=self.heldout.recipe() if self.heldout is not None else None)

    def row_split(self) -> Callable[[Record], str]:
        if self.heldout is not None:
            return self.heldout.split_of
        return self.split_of or (lambda r: "train")

    def split_names(self, rows: Iterable[Record]) -> list[str]:
        """Every split the rule can give (an empty one is written as a typed empty file: a tiny build's
        test)."""
        split_of = self.row_split()
        expected = set(self.heldout.splits) if self.heldout is not None else set()
        splits = sorted(expected | {split_of(r) for r in rows}) or ["train"]
        if REJECTED in splits:
            raise ValueError(f"split name {REJECTED!r} is reserved for dropped records (keep_rejected)")
        return splits

    def llm_description(self) -> dict | None:
        if self.llm is None:
            return None
        info = self.llm.describe() if hasattr(self.llm, "describe") else dict(self.llm)
        if hasattr(self.llm, "cache_stats"):
            info["cache"] = self.llm.cache_stats()
        return info

    def heldout_record(self, counts: dict) -> dict:
        if self.heldout is None:
            return {}
        rl = {"rl_rows": counts.get("rl", 0)} if self.heldout.rl_share > 0 else {}
        return {"heldout": {**self.heldout.recipe(), "rows": counts.get("test", 0), **rl}}

    def manifest(self, *, version: str, fingerprint: str, recipe: dict, result, counts: dict,
                 started: float) -> dict:
        """The manifest of a finished build (before ``summarize`` and redaction)."""
        return {
            "name": self.name, "version": version, "pipeline": self.pipeline,
            "pipeline_version": self.pipeline_version, "fingerprint": fingerprint, "config": self.config,
            "seed": self.seed, "inputs": self.inputs, "llm": self.llm_description(),
            # Each stage's recipe (params, LLM identity) next to its funnel counts.
            "stages": [{"name": s["name"], "params": s["params"], "llm": s["llm"], **funnel}
                       for s, funnel in zip(recipe["stages"], result.stages)],
            "chunk_size": self.chunk_size, "keep_rejected": self.keep_rejected, **self.heldout_record(counts),
            "splits": counts, "resumed_chunks": result.resumed_chunks,
            "seconds": round(time.time() - started, 3),
            "code": code_version(), "packages": package_versions(),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"), "parents": self.parents or [],
        }
