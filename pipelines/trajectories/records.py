"""Failed trajectories are dropped with a reason and kept in the dataset's ``rejected`` split.

A stage that rejects a trajectory returns ``fail(record, reason, detail)``: an engine ``Drop`` carrying the
whole trajectory record, so the engine counts it under the stage that dropped it and, with
``keep_rejected`` (on for trajectory builds), writes it to the ``rejected`` split as
``{"stage", "reason", "detail", "record"}`` (``record``: the trajectory as JSON text). A failed trajectory
therefore never reaches a later stage and can never become a positive example.

    from tansaku.pipelines.trajectories.records import fail
    map_stage("verify", lambda r: r if ok(r) else fail(r, "tool_result_altered", "message 4"))

>>> fail({"id": "q1-t0"}, "wrong_answer", "{{東京}}")
Drop(reason='wrong_answer', detail='{{東京}}')
"""

from __future__ import annotations

from tansaku.core.engine import Drop

DETAIL_CHARS = 500  # enough to show a wrong answer or an altered call, short enough for a table cell


def fail(record: dict, reason: str, detail: str = "") -> Drop:
    """Drop the trajectory ``record`` for ``reason`` (``detail``: free text for humans, truncated)."""
    return Drop(reason, record=record, detail=str(detail)[:DETAIL_CHARS])
