"""A build as N independent shards on any scheduler, and the merge that equals the single-machine build.

    synth build corpus --input dump.json.zst --out shards/s0 --shard 0/4     # … one per Slurm array task /
    synth build corpus --input dump.json.zst --out shards/s3 --shard 3/4     #     Kubernetes job index
    synth build corpus --input dump.json.zst --out corpus --from-shards shards     # the folder holding them
    # or name each: --from-shards shards/s0 --from-shards shards/s1 …

No scheduler of tansaku's own: a shard is one process that any scheduler can start, with no shared state but
its input and its own ``--out``. The engine's chunk checkpoints are the unit of work (``tansaku.core.runner``:
chunk ``c`` holds input records ``[c·size, (c+1)·size)``, so a chunk's content depends only on the input and
the recipe). Shard ``i`` of ``N`` runs the pipeline's first record-local segment over the chunks ``c`` with
``c % N == i`` and commits them exactly as a single run would (global stages before that segment run whole in
every shard: they are deterministic and cheap next to what is sharded); its folder holds ``.work/recipe.json``
(the same recipe and fingerprint as the single build) and ``.work/shard.json`` (which shard, how many chunks
the input has). A shard is resumable like any build. What each build shards:

    corpus         parsing and normalizing documents (the CPU and I/O side of a dump)
    multihop       corpus → infobox triples (then cardinality, chain join, questions run on the merge)
    egov           law XML → articles (``--out/articles``); the question build runs on the merge
    trajectories   teacher rollouts, correct-only, the three rewrites, verify, format: everything but the mix
    deepresearch   keyword groups (whole, in each shard), then instructions, single-page and quality checks

The merge is the same build command with ``--from-shards``: it checks that every shard was made from the same
recipe, that the shards are ``0 … N-1`` of one ``N`` and all finished, copies their committed chunks into its
own work folder and runs the pipeline, which finds that segment already done. The global stages (dedup,
cardinality, chain join, balancing, the general-data mix) then run once, over the merged chunks in input
order, on the merging machine, followed by the rest of the pipeline. Rows, funnel and ``version`` equal those
of the single build (tested: 4 shards as processes against one process, and each pipeline above). LLM-bound
stages also spread over many endpoints within one process (``http:MODEL@URL1,URL2,…``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from tansaku.core import jsontext, safe_write
from tansaku.core.engine import StageStats
from tansaku.core.errors import InputError
from tansaku.core.runner import run_pipeline
from tansaku.core.value_checks import INT64_MAX


class ShardError(InputError):
    """Shards that cannot be merged (other recipe, missing or unfinished shards): one line, exit 2."""


@dataclass(frozen=True)
class ShardPlan:
    """What this build does: everything (the default), one shard (``index`` of ``of``), or the merge."""

    index: int | None = None
    of: int | None = None
    merge_from: tuple[Path, ...] = ()  # as given: shard folders, or folders holding them
    sub: str = ""  # a build nested in each shard's --out (e-Gov's articles): where its shard folder lies

    def runs(self, chunk: int) -> bool:
        return self.index is None or chunk % self.of == self.index  # type: ignore[operator]

    @classmethod
    def from_options(cls, shard: str | None = None, merge_from: list[Path] | None = None) -> ShardPlan:
        """The plan of ``--shard I/N`` or ``--from-shards …`` (both at once is refused).

        >>> ShardPlan.from_options("1/4").runs(5), ShardPlan.from_options().runs(5)
        (True, True)
        """
        if shard and merge_from:
            raise InputError("--shard and --from-shards do not go together: build the shards, then merge "
                             "them")
        index, of = parse_shard(shard) if shard else (None, None)
        return cls(index, of, tuple(Path(p) for p in merge_from or ()))

    def under(self, sub: str) -> ShardPlan:
        """The plan for a build a pipeline nests at ``--out/sub`` (the shards' folders are ``…/sub`` too). A
        build after it that must run whole gets a plain ``ShardPlan()`` (e-Gov: the articles are sharded, the
        questions are one build on the merge)."""
        return replace(self, sub=sub)

    def shard_folders(self) -> list[Path]:
        """Each ``merge_from`` as it is when it is a shard, else the shards inside it (sorted by name)."""
        found = []
        for path in self.merge_from:
            if _is_shard(path / self.sub) or not path.is_dir():
                found.append(path / self.sub)  # (a missing one is refused by check_shards, by name)
                continue
            found += (sorted(p / self.sub for p in path.iterdir() if _is_shard(p / self.sub))
                      or [path / self.sub])
        return found


SHARD_FILE = "shard.json"
_SPEC = re.compile(r"^(\d+)/(\d+)$")


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/8"`` → ``(2, 8)``; anything else is one clear line.

    >>> parse_shard("0/4")
    (0, 4)
    """
    match = _SPEC.match(text.strip())
    # N too fits in 64 bits, as every number
    if not match or not 0 <= int(match[1]) < int(match[2]) <= INT64_MAX:
        raise InputError(f"--shard {text!r}: give I/N with 0 <= I < N (e.g. 0/4 for the first of four "
                         f"shards)")
    return int(match[1]), int(match[2])


def _is_shard(folder: Path) -> bool:
    return (folder / ".work" / SHARD_FILE).is_file()


def write_shard_marker(work: Path, plan: ShardPlan, fingerprint: str, segment: str, chunks: int) -> dict:
    """``work/shard.json`` once the shard's chunks are all committed: its index, ``N``, the input's chunk
    count."""
    marker = {"shard": plan.index, "of": plan.of, "fingerprint": fingerprint, "segment": segment,
              "input_chunks": chunks, "complete": True}
    safe_write.write_text_atomic(work / SHARD_FILE, json.dumps(marker, indent=1))
    return marker


def run_shard(plan: ShardPlan, source, stages, work: Path, fingerprint: str, chunk_size: int, progress,
              keep_rejected: bool) -> dict:
    """This shard's chunks of the first segment (``plan``), committed under ``work``, and its marker; returns
    ``{"version": None, "shard": marker, "stages": …, "splits": {}}`` (a shard is no dataset yet)."""
    result = run_pipeline(source, stages, work, chunk_size=chunk_size, progress=progress,
                          keep_rejected=keep_rejected, shard=plan.runs)
    marker = write_shard_marker(work, plan, fingerprint, result.first_segment, result.input_chunks)
    return {"version": None, "shard": marker, "stages": result.stages, "splits": {}}


def check_shards(fingerprint: str, shard_dirs: list[Path]) -> list[tuple[Path, dict]]:
    """Each shard folder with its marker, checked before the merge writes anything: refuses shards of
    another recipe, a missing or unfinished shard, or a gap (``[]`` with no shards: not a merge)."""
    markers = []
    for folder in shard_dirs:
        marker_file = folder / ".work" / SHARD_FILE
        try:
            marker = json.loads(marker_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ShardError(f"--from-shards {folder}: not a finished shard (no readable "
                             f".work/{SHARD_FILE}); "
                             "run its --shard build to the end") from None
        if not isinstance(marker, dict) or marker.get("fingerprint") != fingerprint:
            raise ShardError(f"{folder}: a shard of another recipe (inputs, config or seed differ from this "
                             f"build)")
        markers.append((folder, marker))
    if not markers:
        return []
    ofs = {m["of"] for _, m in markers}
    indices = sorted(m["shard"] for _, m in markers)
    if len(ofs) != 1 or indices != list(range(next(iter(ofs)))):
        raise ShardError(f"--from-shards needs shards 0 … N-1 of one N exactly once; got {indices} of "
                         f"{sorted(ofs)}")
    return markers


def adopt_shards(work: Path, markers: list[tuple[Path, dict]]) -> int:
    """Copy the checked shards' (``check_shards``) committed first-segment chunks into ``work`` and mark that
    segment done; return the number of chunks (0 with no shards, or when a resumed merge already did it)."""
    if not markers:
        return 0
    segment, chunks = markers[0][1]["segment"], markers[0][1]["input_chunks"]
    seg_dir = work / segment
    if (seg_dir / "done.json").exists():  # a resumed merge: adopted already
        return 0
    safe_write.ensure_dir(seg_dir)
    files, rejected, totals = [], [], {}
    for c in range(chunks):
        folder = next(f for f, m in markers if c % m["of"] == m["shard"])
        src, stem = folder / ".work" / segment, f"chunk-{c:06d}"
        # the stats file last: it is the commit marker
        for suffix in (".jsonl", ".rejected.jsonl", ".stats.json"):
            if (src / (stem + suffix)).exists():  # a linked chunk is refused, never copied through its link
                safe_write.copy_file_atomic(src / (stem + suffix), seg_dir / (stem + suffix))
        if not (seg_dir / f"{stem}.stats.json").exists():
            raise ShardError(f"{folder}: chunk {c} of its shard is not committed; rerun that shard")
        files.append(f"{stem}.jsonl")
        if (seg_dir / f"{stem}.rejected.jsonl").exists():
            rejected.append(f"{stem}.rejected.jsonl")
        for stats in json.loads((seg_dir / f"{stem}.stats.json").read_text(encoding="utf-8")):
            totals.setdefault(stats["name"], StageStats(stats["name"])).add(stats)
    done = {"files": files, "stats": [t.as_dict() for t in totals.values()], "rejected": rejected}
    safe_write.write_text_atomic(seg_dir / "done.json", jsontext.dumps(done, indent=1))
    return chunks

