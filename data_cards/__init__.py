"""Data cards: render a Hugging Face dataset card (README.md with a YAML header) from a manifest.

The template is ``data_cards/dataset_card.md.jinja``; per-pipeline text (description, task categories,
license, limitations) comes in the ``card`` dict a pipeline passes to ``tansaku.core.store.build_dataset``:

    {"description": "...", "license": "cc-by-sa-4.0", "task_categories": ["question-answering"],
     "limitations": ["..."], "pretty_name": "..."}

The YAML ``configs`` put the data splits in the ``default`` config and a ``rejected`` split (dropped records,
see ``tansaku.core.engine``) in a config of its own, so ``datasets.load_dataset(DIR)`` never mixes the two.
A dataset folder nested in the folder (egov's ``DIR/articles``, see ``nested_datasets``) is a config of its
own too (``load_dataset(DIR, "articles")``). ``license: other`` comes with the card's ``license_name`` /
``license_link``; ``card_problems`` checks, offline, the metadata the Hub rejects a card for.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from jinja2 import Environment, StrictUndefined

TEMPLATE = Path(__file__).with_name("dataset_card.md.jinja")
# The license ids the Hub accepts in a card's `license`
# (https://huggingface.co/docs/hub/repositories-licenses).
HUB_LICENSES = frozenset("""
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0
bigcode-openrail-m afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc
cc0-1.0 cc-by-2.0
cc-by-2.5 cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0
cc-by-nc-nd-3.0 cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0
cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0
gfdl
gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc h-research intel-research lppl-1.3c ms-pl apple-ascl apple-amlr
mpl-2.0 odc-by odbl openrail++ osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib pddl lgpl-lr
deepfloyd-if-license fair-noncommercial-research-license llama2 llama3 llama3.1 llama3.2 llama3.3 llama4 gemma
unknown other
""".split())
SIZE_CATEGORIES = frozenset(["n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M", "10M<n<100M",
                             "n>100M"])
# the Hub's form for an `other` license's id, e.g. egov-terms
LICENSE_NAME = re.compile(r"[a-z0-9][a-z0-9.+-]*")


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


def nested_datasets(folder: str | Path) -> dict[str, list[str]]:
    """The tansaku datasets inside ``folder`` (a child folder with a ``manifest.json``): name → data
    splits."""
    nested = {}
    for child in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []:
        try:
            splits = json.loads((child / "manifest.json").read_text(encoding="utf-8"))["splits"]
            nested[child.name] = [s for s, n in splits.items() if s != "rejected" and n]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue  # not a dataset folder (index/, .work/ …), or a damaged one: validate_for_push names it
    return nested


def subset_configs(subsets: dict[str, list[str]]) -> list[dict]:
    """One card config per nested dataset, its files under ``<name>/data/``."""
    return [{"config_name": name,
             "data_files": [{"split": s, "path": f"{name}/data/{s}-*.parquet"} for s in splits]}
            for name, splits in subsets.items() if splits]


def card_problems(metadata: dict, root: str | Path) -> list[str]:
    """What the Hub would reject in a card's YAML ``metadata`` for the repo folder ``root`` (offline checks:
    license ids, ``license_name`` with ``other``, a relative ``license_link`` that names a file, size
    categories, configs whose ``data_files`` exist)."""
    problems = []
    licenses = metadata.get("license") or []
    for lic in [licenses] if isinstance(licenses, str) else licenses:
        if lic not in HUB_LICENSES:
            problems.append(f"license {lic!r} is not a Hub license id (use `other` with license_name)")
    if "other" in ([licenses] if isinstance(licenses, str) else licenses):
        name = metadata.get("license_name")
        if not isinstance(name, str) or not LICENSE_NAME.fullmatch(name):
            problems.append(f"license: other needs a license_name like `my-license-1.0` (got {name!r})")
    link = metadata.get("license_link")
    if isinstance(link, str) and "://" not in link and not (Path(root) / link).is_file():
        problems.append(f"license_link {link!r} names no file of the dataset folder")  # a relative link: ours
    for size in metadata.get("size_categories") or []:
        if size not in SIZE_CATEGORIES:
            problems.append(f"size_categories {size!r} is not one of the Hub's")
    names = [c.get("config_name") for c in metadata.get("configs") or []]
    if len(set(names)) != len(names):
        problems.append(f"configs repeat a config_name: {names}")
    for config in metadata.get("configs") or []:
        for files in config.get("data_files") or [{}]:
            path = files.get("path") if isinstance(files, dict) else files
            if not isinstance(path, str) or not any(Path(root).glob(path)):
                problems.append(f"config {config.get('config_name')!r}: data_files {path!r} match no file")
    return problems


def render_card(manifest: dict, samples: list[dict], card: dict,
                subsets: dict[str, list[str]] | None = None) -> str:
    """The card text for a dataset folder; parses with ``huggingface_hub.DatasetCard``.

    ``subsets``: the folder's nested datasets (``nested_datasets``), each declared as a config of its own.
    """

    splits = manifest.get("splits", {})
    data_splits = [s for s in splits if s != "rejected"]
    total = sum(splits[s] for s in data_splits)
    # An empty split keeps its typed parquet file but no config entry: `datasets` (5.x) cannot load a split
    # with no rows ("corresponds to no data"), and one empty split would make the whole folder unloadable.
    configs = [{"config_name": "default", "data_files": [{"split": s, "path": f"data/{s}-*.parquet"}
                                                         for s in data_splits if splits[s]]}]
    configs = [c for c in configs if c["data_files"]]
    if "rejected" in splits:
        configs.append({"config_name": "rejected",
                        "data_files": [{"split": "rejected", "path": "data/rejected-*.parquet"}]})
    configs += subset_configs(subsets or {})
    header = {
        "pretty_name": card.get("pretty_name", manifest["name"]),
        "license": card.get("license", "other"),
        # The Hub needs an id (and a link) for a license that is not on its list.
        **{key: card[key] for key in ("license_name", "license_link") if card.get(key)},
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
                               "stage_params": {s["name"]: s["params"] for s in manifest["stages"]
                                                if s.get("params")}},
                              allow_unicode=True, sort_keys=False).strip(),
    )

