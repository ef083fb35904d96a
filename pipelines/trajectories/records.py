"""Failure tagging for trajectory records: a failed trajectory is kept (tagged), not dropped.

Failures are stored next to the SFT rows (split ``failures``) with the stage and reason that stopped
them, so they can be inspected and never become positive examples. Every stage therefore passes
already-failed records through untouched; ``live_map``/``live_batch`` wrap stage functions to do that.

    from tansaku.pipelines.trajectories.records import fail, live_map
    map_stage("verify", live_map(lambda r: r if ok(r) else fail(r, "verify", "tool_result_altered")))
"""

from __future__ import annotations

from collections.abc import Callable

Record = dict


def fail(record: Record, stage: str, reason: str, detail: str = "") -> Record:
    """``record`` tagged as failed at ``stage`` for ``reason`` (``detail``: free text for humans)."""
    return {**record, "failure": {"stage": stage, "reason": reason, "detail": str(detail)[:500]}}


def is_live(record: Record) -> bool:
    return not record.get("failure")


def live_map(fn: Callable[[Record], Record | list[Record]]) -> Callable[[Record], Record | list[Record]]:
    """Apply ``fn`` to live records only; failed ones pass through."""

    def run(record: Record):
        return fn(record) if is_live(record) else record

    return run


def live_batch(fn: Callable[[list[Record]], list]) -> Callable[[list[Record]], list]:
    """Apply the batch function ``fn`` to the live records of a batch; failed ones pass through in place."""

    def run(batch: list[Record]) -> list:
        live = [r for r in batch if is_live(r)]
        outs = iter(fn(live) if live else [])
        return [next(outs) if is_live(r) else r for r in batch]

    return run
