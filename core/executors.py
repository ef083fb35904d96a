"""A build's shards as tasks on a running Dask distributed cluster: lost shards retried, progress shown, then
the merge that ``--from-shards`` does.

    dask scheduler &  dask worker tcp://head:8786 &  …                  # (or any running cluster)
    synth build corpus --input dump.json.zst --out out/jawiki --executor dask --scheduler tcp://head:8786
    synth build egov --laws all_xml.zip --out out/egov --executor dask --scheduler tcp://head:8786 --shards 16

Each shard ``i/N`` is one task that runs the same builder with ``--shard i/N`` into ``OUT.shards/sIIII``
(``tansaku.core.shards``): a shard is a plain resumable build, so a task whose worker died is simply submitted
again and resumes from the shard's committed chunks. When every shard is in, the build runs here with
``--from-shards OUT.shards``: the same check, adoption and global stages as a hand-run merge, so rows, funnel
and ``version`` equal the single-process build. ``N`` defaults to the cluster's worker count (the result does
not depend on it). The shard folders must be on a filesystem every worker and this machine see (NFS, Lustre).

Why Dask and not Ray: distributed is pure Python (a few hundred kB of wheels, no torch/datasets pins),
connects to a scheduler with one address, and retries a task lost with its worker by itself; Ray brings a
~70 MB native runtime for what is here one task per shard. Without a cluster the Slurm-array route does the
same by hand (``docs/scaling.md``).

    from tansaku.core.executors import ExecutorPlan, build_on_cluster
    manifest = build_on_cluster("tansaku.pipelines.corpus.build:build_corpus", config, out, context,
                                ExecutorPlan.from_options("dask", "tcp://head:8786"))
"""

from __future__ import annotations

import importlib
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.shards import ShardPlan

EXECUTORS = ("dask",)
DEFAULT_RETRIES = 2  # submissions of a lost shard after its first (each resumes from its committed chunks)


@dataclass(frozen=True)
class ExecutorPlan:
    """``--executor dask --scheduler ADDRESS [--shards N] [--shard-retries R]``."""

    kind: str
    scheduler: str
    shards: int | None = None
    retries: int = DEFAULT_RETRIES

    @classmethod
    def from_options(cls, executor: str | None, scheduler: str | None = None, shards: int | None = None,
                     retries: int | None = None) -> ExecutorPlan | None:
        """The plan of the options, None without ``--executor``; a missing address is one clear line.

        >>> ExecutorPlan.from_options("dask", "tcp://127.0.0.1:8786").retries, ExecutorPlan.from_options(None)
        (2, None)
        """
        if executor is None:
            if scheduler is not None or shards is not None:
                raise InputError("--scheduler and --shards go with --executor dask")
            return None
        if executor not in EXECUTORS:
            raise InputError(f"--executor {executor!r}: choose one of {', '.join(EXECUTORS)}")
        if not scheduler:
            raise InputError("--executor dask needs --scheduler ADDRESS (a running scheduler: "
                             "tcp://host:8786)")
        if shards is not None and shards < 1:
            raise InputError(f"--shards {shards}: give at least 1")
        return cls(executor, scheduler, shards, DEFAULT_RETRIES if retries is None else retries)


def shards_folder(out: Path) -> Path:
    """Where a cluster build keeps its shards: ``OUT.shards`` beside ``OUT``."""
    out = Path(out)
    return out.with_name(out.name + ".shards")


def load_builder(builder: str) -> Callable:
    """``"module:function"`` → the builder (imported on the worker that runs it)."""
    module, _, function = builder.partition(":")
    return getattr(importlib.import_module(module), function)


def build_shard(builder: str, config, folder: str, context: BuildContext, index: int, of: int) -> dict:
    """One task: shard ``index`` of ``of`` built into ``folder/sIIII``; returns its shard marker."""
    out = Path(folder) / f"s{index:04d}"
    shard_context = replace(context, shards=ShardPlan(index, of), quiet=True)
    manifest = load_builder(builder)(config, out, shard_context)
    return {"shard": index, "out": str(out), "marker": manifest.get("shard")}


def run_shards(client, task: Callable[[int, int], dict], n: int, retries: int = DEFAULT_RETRIES,
               say: Callable[[str], None] | None = None) -> list[dict]:
    """``task(i, n)`` for every shard on ``client``'s cluster, each lost one (its worker died, the scheduler
    gave it up) submitted again up to ``retries`` times; an input error is raised at once (a retry would fail
    the same way). Returns the results in shard order; ``say`` gets one progress line per event."""
    from distributed import as_completed  # the optional dependency, imported only for a cluster build

    say = say or (lambda line: None)
    tries = dict.fromkeys(range(n), 0)
    futures = {}

    def submit(i: int):
        future = client.submit(task, i, n, key=f"tansaku-shard-{i}-of-{n}-{uuid.uuid4().hex[:8]}", pure=False)
        futures[future] = i
        return future

    results: dict[int, dict] = {}
    started = time.monotonic()
    running = as_completed([submit(i) for i in range(n)])
    for future in running:
        i = futures.pop(future)
        try:
            results[i] = future.result()
        except InputError:
            raise
        except Exception as error:  # noqa: BLE001 - a lost worker (KilledWorker), a dropped connection
            if tries[i] >= retries:
                raise RuntimeError(f"shard {i}/{n} failed {tries[i] + 1} times; last: {error!r}") from error
            tries[i] += 1
            say(f"shard {i}/{n} lost ({type(error).__name__}: {error}); retry {tries[i]} of {retries}")
            running.add(submit(i))
            continue
        say(f"shards done {len(results)}/{n} ({time.monotonic() - started:.0f} s; shard {i} finished)")
    return [results[i] for i in range(n)]


def build_on_cluster(builder: str, config, out, context: BuildContext, plan: ExecutorPlan) -> dict:
    """The build's shards on ``plan``'s cluster, then their merge here; returns the merged manifest."""
    from distributed import Client  # the optional dependency

    if context.shards.index is not None or context.shards.merge_from:
        raise InputError("--executor runs the shards and merges them itself: leave out --shard and "
                         "--from-shards")
    out = Path(out)
    folder = shards_folder(out)
    say = (lambda line: None) if context.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    with Client(plan.scheduler, timeout="30s") as client:
        n = plan.shards or max(1, len(client.scheduler_info()["workers"]))
        say(f"{n} shards on {plan.scheduler} into {folder}")
        task = partial(build_shard, builder, config, str(folder), context)
        run_shards(client, task, n, plan.retries, say)
    say(f"merging {n} shards into {out}")
    merge = replace(context, shards=ShardPlan.from_options(merge_from=[folder]))
    return load_builder(builder)(config, out, merge)
