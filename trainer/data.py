"""Training data: read SFT conversations from tansaku store folders or files, normalize, mix with ratios.

    sources = recipe.script_args.data                        # the recipe's `data:` (DataSource each)
    dataset = mix_dataset(sources, mix_size=None, seed=42)   # datasets.Dataset of {"messages", "tools"}
    rows = mix_sources(sources, mix_size=None, seed=42)      # the same mix as plain rows

A source is a tansaku dataset folder (``DIR/data/<split>-*.parquet``, read with ``tansaku.core.store``), or
a ``.jsonl`` / ``.json`` / ``.parquet`` file. Each row needs ``messages`` (chat messages, assistant
``tool_calls`` and ``reasoning_content`` allowed, ``tool`` role for results) and may carry ``tools``.

Normalization keeps Arrow from rewriting the conversations: messages go to the wire form
(``tansaku.core.parsing.to_wire``: tool-call ``arguments`` as JSON text) and ``tools`` become a JSON string
(the chat template and TRL both accept strings; Arrow would otherwise merge every dict's keys into one
struct and fill the gaps with nulls). Message keys other than role, content, reasoning_content,
tool_calls, name and tool_call_id are dropped.

Mixing (``mix_datasets``, with ``datasets.interleave_datasets``): each source gets
``round(mix_size × ratio / Σratio)`` rows (at least 1), drawn from a seeded permutation of its rows and
cycling through a fresh permutation when it needs more rows than it has; ``interleave_datasets`` then draws
the sources in proportion to those counts (``probabilities``, ``seed``) with ``stopping_strategy=
"all_exhausted_without_replacement"``, so every drawn row appears exactly once and the per-source counts are
exactly today's. The mix is index-based: the sources' rows are one Arrow table and the mix is an index
mapping over it (``Dataset.select``), never a copy of the rows; ``streaming=True`` gives an
``IterableDataset`` that yields the mix lazily (for ``max_steps`` runs). Same seed → same rows, same order.

Differences from the list-based mix of earlier versions (``mix_by_ratio``, still used for RL prompts): the
order comes from ``interleave_datasets``' seeded source draws, not one uniform shuffle of the whole mix, so
runs of one source are as likely as the probabilities make them; a seed gives a different (but fixed) order
than before. ``train sft`` passes ``fit`` (``tansaku.trainer.length``): rows over ``max_length`` are dropped
or fitted per source before mixing (that pass reads each source's rows once, whole).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tansaku.core import jsontext
from tansaku.core.chat_sources import is_hub_source, read_chat_source
from tansaku.core.parsing import to_wire
from tansaku.core.store import StoreError, read_records
from tansaku.trainer.recipe_arguments import DataSource
from tansaku.trainer.recipes import RecipeError

MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "name", "tool_call_id")
ROLES = ("system", "user", "assistant", "tool")


def read_source(path: str | Path, split: str = "train") -> list[dict]:
    """All rows of one source (store folder, .jsonl, .json list, .parquet, or a Hub chat set
    ``hf:OWNER/NAME[:CONFIG][@REVISION][#SPLIT]`` from the local HF cache: ``tansaku.core.chat_sources``)."""

    if is_hub_source(path):
        return read_chat_source(path, split, "data source")
    try:
        return read_records(path, split)
    except (StoreError, FileNotFoundError) as exc:
        raise RecipeError(f"data source: {exc}") from None


def _as_json_text(value: Any) -> str:
    return value if isinstance(value, str) else jsontext.dumps(value)


def normalize_conversation(row: dict, system_prompt: str | None = None, where: str = "row") -> dict:
    """One training row ``{"messages": [...], "tools": "<json>" | None}``; raise RecipeError when
    malformed."""
    messages = row.get("messages")
    if isinstance(messages, str):
        try:
            messages = jsontext.loads(messages)
        except json.JSONDecodeError:
            raise RecipeError(f"{where}: 'messages' is a string that is not JSON") from None
    if not isinstance(messages, list) or not messages:
        raise RecipeError(f"{where}: needs a non-empty 'messages' list")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RecipeError(f"{where}: message {i} needs a role in {ROLES}, got {message!r:.80}")
        clean = {k: message[k] for k in MESSAGE_KEYS if message.get(k) is not None}
        clean.setdefault("content", "")
        if not clean.get("tool_calls"):
            clean.pop("tool_calls", None)
        out.append(clean)
    try:
        out = to_wire(out)
    except ValueError as exc:  # names the message: "message 2 has a tool call without a function name: …"
        raise RecipeError(f"{where}: {exc}") from None
    if not any(m["role"] == "assistant" for m in out):
        raise RecipeError(f"{where}: has no assistant message, so nothing would be trained")
    if system_prompt and out[0]["role"] == "system" and out[0]["content"] != system_prompt:
        # The rows' own system prompt is the switch RL and eval use (synth build trajectories wrote it there):
        # a second text would train the model under a prompt it never sees again.
        raise RecipeError(f"{where}: already carries a system prompt other than the source's system_prompt "
                          "(a trajectories build puts its task's there; rebuild with --system-prompt, or "
                          "drop system_prompt from this data source)")
    if system_prompt and out[0]["role"] != "system" and row.get("kind") != "general":
        out.insert(0, {"role": "system", "content": system_prompt})  # general chat keeps none: the other side
    tools = row.get("tools")
    return {"messages": out, "tools": _as_json_text(tools) if tools else None}


def _draw(rows: list, count: int, rng: random.Random) -> list:
    """``count`` rows from a seeded permutation, cycling (each cycle reshuffled) when count > len(rows)."""
    drawn: list = []
    while len(drawn) < count:
        order = list(range(len(rows)))
        rng.shuffle(order)
        drawn.extend(rows[i] for i in order[: count - len(drawn)])
    return drawn


def load_sources(sources: list[DataSource]) -> list[tuple[DataSource, list[dict]]]:
    """Each source with its normalized rows."""
    loaded = []
    for src in sources:
        raw = read_source(src.path, src.split)
        if src.max_rows is not None:
            raw = raw[: src.max_rows]
        if not raw:
            raise RecipeError(f"data source {src.path} ({src.split}) has no rows")
        loaded.append((src, [normalize_conversation(r, src.system_prompt, f"{src.path} row {i}")
                             for i, r in enumerate(raw)]))
    return loaded


def as_trained(loaded: list[tuple[DataSource, list[dict]]]) -> list[tuple[DataSource, list[dict]]]:
    """The rows as the training dataset holds them: one Arrow round trip over all sources gives every message
    the keys (None when unset) the chat template sees in training, so a token count here is TRL's count."""
    rows = to_dataset([r for _, group in loaded for r in group], keep_tools=True).to_list()
    out, start = [], 0
    for src, group in loaded:
        out.append((src, rows[start: start + len(group)]))
        start += len(group)
    return out


def mix_dataset(sources: list[DataSource], mix_size: int | None = None, seed: int = 42,
                fit: Callable[[DataSource, list[dict]], list[dict]] | None = None, streaming: bool = False):
    """Read, normalize and mix SFT sources by ratio (see the module docstring); deterministic for a seed.

    ``fit(source, rows)`` returns the rows to keep (``train sft``: the ``overlong`` policy), before mixing, so
    the ratios hold among rows that are trained whole. Returns a ``datasets.Dataset`` (``IterableDataset``
    with ``streaming=True``) with columns ``messages`` and ``tools``."""
    groups, loaded = [], load_sources(sources)
    for src, rows in (as_trained(loaded) if fit is not None else loaded):
        if fit is not None:
            rows = fit(src, rows)
            if not rows:
                raise RecipeError(f"data source {src.path} ({src.split}): no row fits max_length; raise "
                                  "max_length or use overlong: fit")
        groups.append((src, rows))
    # One Arrow table for all sources: every source then has the same features, which interleaving requires.
    table = to_dataset([r for _, rows in groups for r in rows], keep_tools=True)
    parts, start = [], 0
    for _, rows in groups:
        parts.append(table.select(range(start, start + len(rows))))
        start += len(rows)
    return mix_datasets(parts, [src.ratio for src, _ in groups], mix_size, seed, streaming)


def mix_sources(sources: list[DataSource], mix_size: int | None = None, seed: int = 42,
                fit: Callable[[DataSource, list[dict]], list[dict]] | None = None) -> list[dict]:
    """``mix_dataset`` as plain rows, message keys that Arrow filled with None removed again."""
    return [{**row, "messages": [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]}
            for row in mix_dataset(sources, mix_size, seed, fit)]


def quotas(sizes: list[int], ratios: list[float], total: int | None = None) -> list[int]:
    """Rows per source: ``round(total × ratio / Σratio)``, at least 1; ``total`` defaults to Σsizes.

    >>> quotas([6, 4], [3, 1], 40)
    [30, 10]
    """
    total = total or sum(sizes)
    return [max(1, round(total * ratio / sum(ratios))) for ratio in ratios]


def cycled_indices(size: int, count: int, rng: random.Random) -> list[int]:
    """``count`` indices into ``size`` rows: seeded permutations, a fresh one per cycle (see ``_draw``)."""
    return _draw(list(range(size)), count, rng)


def mix_datasets(parts: list, ratios: list[float], total: int | None = None, seed: int = 42,
                 streaming: bool = False):
    """Mix ``datasets.Dataset`` parts (same features) by ratio with ``datasets.interleave_datasets``.

    Each part is first cut or cycled to its quota (``quotas``) through an index mapping; the interleave then
    takes every one of those rows once (``all_exhausted_without_replacement``), drawing parts with
    probabilities proportional to their quotas."""
    from datasets import interleave_datasets

    rng = random.Random(seed)
    counts = quotas([len(p) for p in parts], ratios, total)
    sized = [part.select(cycled_indices(len(part), count, rng)) for part, count in zip(parts, counts)]
    if streaming:
        sized = [part.to_iterable_dataset() for part in sized]
    return interleave_datasets(sized, probabilities=[c / sum(counts) for c in counts], seed=seed,
                               stopping_strategy="all_exhausted_without_replacement")


def mix_by_ratio(groups: list[list], ratios: list[float], total: int | None = None, seed: int = 42) -> list:
    """``round(total × ratio / Σratio)`` rows per group (at least 1), then one seeded shuffle of the mix.

    ``total`` defaults to the groups' combined size.
    """
    total = total or sum(len(g) for g in groups)
    rng = random.Random(seed)
    mixed: list = []
    for rows, ratio in zip(groups, ratios):
        mixed.extend(_draw(rows, max(1, round(total * ratio / sum(ratios))), rng))
    rng.shuffle(mixed)
    return mixed


def to_dataset(rows: list[dict], keep_tools: bool = False):
    """A ``datasets.Dataset`` from normalized rows (``tools`` column dropped when no row has tools)."""
    from datasets import Dataset

    if not keep_tools and all(r.get("tools") is None for r in rows):
        rows = [{"messages": r["messages"]} for r in rows]
    return Dataset.from_list(rows)
