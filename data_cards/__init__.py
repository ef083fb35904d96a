"""Data cards: render a Hugging Face dataset card (README.md with a YAML header) from a manifest.

The template is ``data_cards/dataset_card.md.jinja``; per-pipeline text (description, task categories,
license, limitations) comes in the ``card`` dict a pipeline passes to ``tansaku.core.store.build_dataset``:

    {"description": "...", "license": "cc-by-sa-4.0", "task_categories": ["question-answering"],
     "limitations": ["..."], "pretty_name": "..."}

The YAML ``configs`` put the data splits in the ``default`` config and a ``rejected`` split (dropped records,
see ``tansaku.core.engine``) in a config of its own, so ``datasets.load_dataset(DIR)`` never mixes the two.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from jinja2 import Environment, StrictUndefined

TEMPLATE = Path(__file__).with_name("dataset_card.md.jinja")


def size_category(n: int) -> str:
    """HF size category for ``n`` rows.

    >>> size_category(999), size_category(1000), size_category(2_000_000)
    ('n<1K', '1K<n<10K', '1M<n<10M')
    """
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
              (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]
    return next((label for bound, label in bounds if n < bound), "n>100M")


def _cell(value, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_card(manifest: dict, samples: list[dict], card: dict) -> str:
    """The card text for a dataset folder; parses with ``huggingface_hub.DatasetCard``."""

    splits = manifest.get("splits", {})
    data_splits = [s for s in splits if s != "rejected"]
    total = sum(splits[s] for s in data_splits)
    configs = [{"config_name": "default", "data_files": [{"split": s, "path": f"data/{s}-*.parquet"}
                                                         for s in data_splits]}]
    if "rejected" in splits:
        configs.append({"config_name": "rejected",
                        "data_files": [{"split": "rejected", "path": "data/rejected-*.parquet"}]})
    header = {
        "pretty_name": card.get("pretty_name", manifest["name"]),
        "license": card.get("license", "other"),
        "language": ["ja"],
        "task_categories": card.get("task_categories", ["text-generation"]),
        "size_categories": [size_category(total)],
        "tags": ["tansaku", manifest["pipeline"], *card.get("tags", [])],
        "configs": configs,
    }
    columns = list(samples[0]) if samples else []
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["cell"] = _cell
    return env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        yaml_header=yaml.safe_dump(header, allow_unicode=True, sort_keys=False).strip(),
        m=manifest,
        card=card,
        total=total,
        columns=columns,
        samples=samples,
        recipe=yaml.safe_dump({"config": manifest["config"], "seed": manifest["seed"],
                               "stage_params": {s["name"]: s["params"] for s in manifest["stages"] if s.get("params")}},
                              allow_unicode=True, sort_keys=False).strip(),
    )
