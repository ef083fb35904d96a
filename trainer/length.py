"""SFT rows and ``max_length``: count every row as TRL will tokenize it, and never truncate silently.

TRL's SFTTrainer cuts a tokenized conversation at ``max_length`` (``truncation_mode="keep_start"``): on a long
agentic trajectory that removes the final assistant turn — the answer the row exists to teach — without a
word. ``train sft`` therefore counts each row with the model's tokenizer and chat template, exactly as TRL
renders it (``apply_chat_template(messages, tools=…, tokenize=True)``, TRL's training template when the
tokenizer's own has no ``{% generation %}`` markers), and applies the recipe's ``overlong`` policy to the rows
longer than ``max_length``:

* ``drop`` (default): the row is left out, counted as dropped with reason ``too_long``.
* ``fit``: the text of whole tool results, longest first, is replaced by ``ELIDED`` until the row fits; the
  assistant turns (all trained) are never touched. A row that still does not fit is dropped (``too_long``).
  Tool results carry no loss, but later reasoning may quote what was elided: prefer ``drop`` when the data
  allows.
* ``error``: the first such row stops the run (``RecipeError`` naming source, row and length).

Counts per source (rows, kept, fitted, dropped by reason, token lengths) go to
``<output_dir>/tansaku_data_report.json`` (``write_report``), and a warning line is logged when any row was
dropped or fitted.

>>> elide_tool_results([{"role": "tool", "content": "長い" * 50}, {"role": "tool", "content": "短い"}], 1)[0]
{'role': 'tool', 'content': '…(省略)'}
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from tansaku.core import jsontext, safe_write
from tansaku.trainer.recipe_arguments import OVERLONG
from tansaku.trainer.recipes import RecipeError

log = logging.getLogger(__name__)
ELIDED = "…(省略)"
TOO_LONG = "too_long"
REPORT = "tansaku_data_report.json"


def training_template(processing_class) -> str | None:
    """The chat template TRL renders SFT rows with (``assistant_only_loss``): None = the tokenizer's own."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    if has_generation_markers(processing_class.chat_template):
        return None
    return get_training_chat_template(processing_class)


def count_tokens(processing_class, row: dict, chat_template: str | None = None) -> int:
    """Tokens of one ``{"messages", "tools"}`` row, rendered and tokenized as TRL's SFTTrainer does."""
    tools = row.get("tools")
    tools = json.loads(tools) if isinstance(tools, str) else tools
    out = processing_class.apply_chat_template(row["messages"], tools=tools, tokenize=True, return_dict=True,
                                               chat_template=chat_template)
    return len(out["input_ids"])


def elide_tool_results(messages: list[dict], n: int) -> list[dict]:
    """``messages`` with the ``n`` longest tool results' text replaced by ``ELIDED`` (order kept)."""
    tools = sorted((i for i,
                    m in enumerate(messages) if m.get("role") == "tool" and m.get("content") != ELIDED),
                   key=lambda i: -len(str(messages[i].get("content") or "")))
    chosen = set(tools[:n])
    return [{**m, "content": ELIDED} if i in chosen else m for i, m in enumerate(messages)]


def _fit(processing_class, row: dict, max_length: int, template: str | None) -> tuple[dict | None, int]:
    """The row shortened by eliding its longest tool results until it fits, or None; and its final length."""
    n_tools = sum(m.get("role") == "tool" for m in row["messages"])
    length = count_tokens(processing_class, row, template)
    for n in range(1, n_tools + 1):
        candidate = {**row, "messages": elide_tool_results(row["messages"], n)}
        length = count_tokens(processing_class, candidate, template)
        if length <= max_length:
            return candidate, length
    return None, length


def apply_overlong(rows: list[dict], processing_class, max_length: int, policy: str = "drop",
                   source: str = "data") -> tuple[list[dict], dict]:
    """(rows that fit ``max_length`` under ``policy``, the source's counts for the report)."""
    if policy not in OVERLONG:
        raise RecipeError(f"overlong: one of {', '.join(OVERLONG)} (got {policy!r})")
    template = training_template(processing_class)
    kept, lengths, dropped, fitted = [], [], Counter(), 0
    for i, row in enumerate(rows):
        n = count_tokens(processing_class, row, template)
        lengths.append(n)
        if n <= max_length:
            kept.append(row)
            continue
        if policy == "error":
            raise RecipeError(f"{source} row {i}: {n} tokens > max_length {max_length}, and TRL would cut "
                              "its end (the final answer); raise max_length, or set overlong: drop | fit")
        if policy == "fit":
            short, _ = _fit(processing_class, row, max_length, template)
            if short is not None:
                kept.append(short)
                fitted += 1
                continue
        dropped[TOO_LONG] += 1
    stats = {"rows": len(rows), "kept": len(kept), "fitted": fitted, "dropped": dict(dropped),
             "tokens": {"max": max(lengths, default=0), "mean": round(sum(lengths) / len(lengths), 1)
                        if lengths else 0, "over_max_length": sum(n > max_length for n in lengths)}}
    return kept, stats


def write_report(output_dir: str | Path, report: dict) -> Path:
    """``<output_dir>/tansaku_data_report.json``, and one warning line when rows were dropped or fitted."""
    path = Path(output_dir) / REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_write.write_text_atomic(path, jsontext.dumps(report, indent=2))
    sources = report["sources"]
    dropped = sum(sum(s["dropped"].values()) for s in sources)
    fitted = sum(s["fitted"] for s in sources)
    if dropped or fitted:
        log.warning("train sft: %d of %d rows are longer than max_length=%d: %d dropped (too_long), %d "
                    "fitted by eliding tool results (overlong: %s); see %s", dropped + fitted,
                    sum(s["rows"] for s in sources),
                    report["max_length"], dropped, fitted, report["overlong"], path)
    return path
