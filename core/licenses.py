"""Dataset card licenses: carry an input's license on to what is built from it, and check a ``--license``.

The Hub rejects ``license: other`` without a ``license_name`` (``tansaku.data_cards.card_problems``), so a
pipeline's card takes, in order: the ``--license ID`` override (a Hub license id), the input dataset card's
``license``/``license_name``/``license_link``, then the pipeline's own default (JEMHopQA's CC BY-SA 4.0,
Wikipedia's for multihop, the e-Gov terms for egov).

    card = {**(license_card(license) if license else input_license(corpus) or {"license": "cc-by-sa-4.0"})}
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub.repocard import metadata_load

from tansaku.core.errors import InputError
from tansaku.data_cards import HUB_LICENSES

LICENSE_KEYS = ("license", "license_name", "license_link")


def input_license(folder: str | Path | None) -> dict:
    """The license keys of the card (``README.md`` metadata) of the input dataset folder ``folder``; {} when
    it declares none, or only an ``other`` without a name (nothing a derived card could pass on)."""
    readme = Path(folder) / "README.md" if folder is not None else None
    if readme is None or not readme.is_file():
        return {}
    metadata = metadata_load(readme) or {}
    keys = {key: metadata[key] for key in LICENSE_KEYS if isinstance(metadata.get(key), str)}
    return keys if keys.get("license") and (keys["license"] != "other" or keys.get("license_name")) else {}


def license_card(license: str) -> dict:
    """The card keys of a ``--license ID`` override; an id the Hub does not list is refused in one line
    (``other`` too: it needs a ``license_name``, which an id alone cannot give)."""
    if license not in HUB_LICENSES or license == "other":
        raise InputError(f"--license {license!r}: give a Hub license id such as cc-by-sa-4.0, cc-by-4.0, "
                         "apache-2.0 or unknown (https://huggingface.co/docs/hub/repositories-licenses)")
    return {"license": license}
