"""Mix the Japanese agentic set (under its task's system prompt, put there by the format stage) with a general
chat set (no system prompt) at a configured ratio, seeded.

The system prompt is the switch: with it the model thinks in Japanese and searches repeatedly; without
it (general chat) it keeps its old behaviour. ``ratio`` is general rows per agentic row:
``round(ratio × agentic rows)`` general rows are drawn without replacement from a seeded permutation
(capped at what the general set holds; the card reports the ratio actually reached), then the two are
shuffled together with the same seed. Failed trajectories never get here: earlier stages dropped them.

    # JSONL, JSON list, parquet, a dataset folder, hf:ORG/NAME:
    rows = read_chat_rows("data/general.jsonl")
    stage = mix_stage(rows, ratio=0.5, seed=0)
"""

from __future__ import annotations

import json
from pathlib import Path

from tansaku.core import jsontext
from tansaku.core.chat_sources import is_hub_source, read_chat_source
from tansaku.core.engine import global_stage, rng_for
from tansaku.core.errors import InputError
from tansaku.core.store import StoreError, read_records
from tansaku.pipelines.trajectories.format import general_row


def read_chat_rows(path: str | Path) -> list[dict]:
    """Rows with ``messages`` from a JSONL/JSON/parquet file or a dataset folder (split ``train``), or a Hub
    chat set ``hf:OWNER/NAME[:CONFIG][@REVISION][#SPLIT]`` from the local HF cache (its columns mapped to
    ``messages``: ``tansaku.core.chat_sources``), normalized to the trajectory row columns
    (``kind="general"``, leading system message removed)."""

    p = Path(path)
    try:
        raw = (read_chat_source(path, option="--general") if is_hub_source(path)
               else read_records(p, split="train"))
    except StoreError as exc:
        raise InputError(f"general chat set: {exc}") from None
    rows = []
    for i, row in enumerate(raw):
        messages = row.get("messages") if isinstance(row, dict) else None
        if isinstance(messages, str):
            try:
                messages = jsontext.loads(messages)
            except json.JSONDecodeError:
                messages = None
        if not isinstance(messages, list) or not any(isinstance(m, dict) and m.get("role") == "assistant"
                                                     for m in messages):
            raise InputError(f"{p} row {i}: needs a 'messages' list with at least one assistant message")
        rows.append(general_row({**row, "messages": messages}, i))
    if not rows:
        raise InputError(f"general chat set {p} has no rows")
    return rows


def mix_rows(agentic: list[dict], general: list[dict], ratio: float, seed: int) -> list[dict]:
    """Agentic rows + ``round(ratio × len(agentic))`` general rows, shuffled by seed."""
    if ratio < 0:
        raise InputError(f"mix ratio must be >= 0, got {ratio}")
    want = min(len(general), round(ratio * len(agentic)))
    order = list(range(len(general)))
    rng_for(seed, "mix", "general").shuffle(order)
    mixed = agentic + [general[i] for i in sorted(order[:want])]
    rng_for(seed, "mix", "order").shuffle(mixed)
    return mixed


def mix_stage(general: list[dict] | None, ratio: float, seed: int):
    """Global stage ``mix``: the agentic rows + general rows at ``ratio``."""

    def run(rows):
        yield from mix_rows(list(rows), general or [], ratio if general else 0.0, seed)

    # The ratio as asked, with or without a general set (general_rows 0 says it mixed nothing in): a config
    # field named like a param must be that param.
    return global_stage("mix", run, params={"ratio": ratio, "general_rows": len(general) if general else 0})
