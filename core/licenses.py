"""Dataset card licenses: carry an input's license on to what is built from it, and check a ``--license``.

The Hub rejects ``license: other`` without a ``license_name`` (``tansaku.data_cards.card_problems``), so a
pipeline's card takes, in order: the ``--license ID`` override (a Hub license id), the input dataset card's
``license``/``license_name``/``license_link``, then the pipeline's own default (JEMHopQA's CC BY-SA 4.0,
Wikipedia's for multihop, the e-Gov terms for egov).

    card = {**(license_card(license) if license else input_license(corpus) or {"license": "cc-by-sa-4.0"})}

A license the Hub does not list is ``--license other:NAME``: the card gets ``license: other``,
``license_name: NAME`` and ``license_link: LICENSE``, and the license text (``--license-file FILE``, or the
``LICENSE`` the input folder ships) is copied into the dataset folder as ``LICENSE``. ``choose_license``
checks all of it before a build does any work; the build puts ``recipe()`` in its config (another license
is another recipe, refused on a rerun rather than mixed) and calls ``write`` once the dataset is finished:

    chosen = choose_license(license, license_file, source=corpus, default={"license": "cc-by-sa-4.0"})
    manifest = chosen.write(out, build_dataset(..., config={**config, **chosen.recipe()},
                                               card={**chosen.card}))
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub.repocard import metadata_load

from tansaku.core import safe_write
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.folder_locks import folder_lock
from tansaku.data_cards import HUB_LICENSES, LICENSE_NAME

LICENSE_KEYS = ("license", "license_name", "license_link")
LICENSE_FILE = "LICENSE"  # the license text's name in a dataset folder, and a custom license's license_link
CUSTOM = "other:"
LICENSE_FIX = "rebuild with --license ID (e.g. cc-by-sa-4.0) or --license other:NAME --license-file FILE"
# The text licenses of the collections `synth build corpus` reads, by format: Wikipedia's (CirrusSearch dumps,
# WikipediaAnnotatedCorpus) and JaQuAD's. A plain JSONL file can hold anything, so it has none.
SOURCE_LICENSES = {"wac": {"license": "cc-by-sa-4.0"}, "jaquad": {"license": "cc-by-sa-3.0"},
                   "cirrus": {"license": "cc-by-sa-4.0"}}


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
    """The card keys of a ``--license ID`` override (``other:NAME``: ``custom_card``); an id the Hub does not
    list is refused in one line (``other`` too: it needs a ``license_name``, which an id alone cannot
    give)."""
    if license.startswith(CUSTOM):
        return custom_card(license)
    if license not in HUB_LICENSES or license == "other":
        raise InputError(f"--license {license!r}: give a Hub license id such as cc-by-sa-4.0, cc-by-4.0, "
                         "apache-2.0 or unknown (https://huggingface.co/docs/hub/repositories-licenses), "
                         "or other:NAME with --license-file FILE for a license the Hub does not list")
    return {"license": license}


def custom_card(license: str) -> dict:
    """The card keys of ``--license other:NAME``; a NAME the Hub would refuse is refused here, in one line."""
    name = license[len(CUSTOM):]
    if not LICENSE_NAME.fullmatch(name):
        raise InputError(f"--license {license!r}: write other:NAME with NAME of lowercase letters, digits "
                         "and '-', '.' or '+' (e.g. other:my-license-1.0)")
    return {"license": "other", "license_name": name, "license_link": LICENSE_FILE}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _linked_file(folder: str | Path | None, card: dict) -> Path | None:
    """The license text a card links inside its own folder (``license_link: LICENSE``), when it is there."""
    link = card.get("license_link")
    if folder is None or not isinstance(link, str) or "://" in link or not Path(folder).is_dir():
        return None
    path = Path(folder) / link
    return path if path.is_file() else None


@dataclass(frozen=True)
class ChosenLicense:
    """A build's license: its card keys, the text copied into the folder as LICENSE (or None), and what the
    user asked for (``--license``), which the recipe records."""

    card: dict
    file: Path | None = None
    asked: str | None = None

    def recipe(self) -> dict:
        """Config keys: none without ``--license``/``--license-file`` (the recipe of earlier builds,
        unchanged), else the license asked for and the sha256 of the text written (a new text is a new
        recipe)."""
        keys = {"license": self.asked} if self.asked else {}
        return keys | ({"license_file": _sha256(self.file)} if self.file is not None else {})

    def write(self, out: str | Path, manifest: dict) -> dict:
        """Copy the license text into the finished dataset folder ``out`` (after its manifest, so the folder
        is provably tansaku's when it appears); a shard is no dataset and gets none. Returns ``manifest``."""
        target = Path(out) / LICENSE_FILE
        if self.file is None or "shard" in manifest:
            return manifest
        # Written after the build released --out: a rerun that finds the build finished may write it at the
        # same time, so one at a time (the lock), and only then is a temp file left beside it a killed
        # write's.
        with folder_lock(Path(out), "--out"):
            safe_write.sweep_temps(out, (LICENSE_FILE,))
            if target.is_file():
                if _sha256(target) == _sha256(self.file):
                    return manifest  # a rerun of the finished build: nothing to write
                # A pipeline whose recipe does not hold the license text would otherwise swap it under its
                # rows.
                raise InputError(f"--out {out} holds another license text in {LICENSE_FILE}; remove the "
                                 "folder or choose another --out")
            # the file the user named (a link they made is followed), written through a fresh temp name
            safe_write.write_bytes_atomic(target, Path(self.file).read_bytes())
        return manifest


def choose_license(license: str | None, license_file: str | Path | None, source: str | Path | None = None,
                   default: dict | None = None) -> ChosenLicense:
    """The license of a build, checked before any work: ``license`` (``--license``: a Hub id or
    ``other:NAME``), else the card of the input folder ``source``, else ``default`` (else ``license: other``,
    which ``synth push`` refuses until a rebuild names one). The text written as LICENSE: ``license_file``,
    else, for ``other:NAME`` or an inherited card that links one, the ``LICENSE`` the input folder ships;
    ``other:NAME`` with neither is refused (MissingInputError), as is a ``license_file`` that is not a
    file."""
    file = Path(license_file) if license_file is not None else None
    if file is not None and not file.is_file():
        raise MissingInputError(f"--license-file {file}: no such file")
    if license is None:
        inherited = input_license(source)
        card = inherited or dict(default or {"license": "other"})
        return ChosenLicense(card, file or _linked_file(source, inherited), None)
    if license.startswith(CUSTOM):
        card = custom_card(license)
        file = file or _linked_file(source, card)
        if file is None:
            raise MissingInputError(f"--license {license} needs --license-file FILE: the license text, "
                                    f"written into the dataset folder as {LICENSE_FILE}")
        return ChosenLicense(card, file, license)
    return ChosenLicense(license_card(license), file, license)
