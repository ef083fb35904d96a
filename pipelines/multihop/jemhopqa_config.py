"""``JemhopqaImportConfig``: every setting of ``synth import jemhopqa``, once (the CLI's argument and options,
the builder's argument and the manifest's ``config`` all read it; ``tansaku.core.build_config``).

    from tansaku.pipelines.multihop.jemhopqa import import_jemhopqa
    from tansaku.pipelines.multihop.jemhopqa_config import JemhopqaImportConfig
    import_jemhopqa(JemhopqaImportConfig(path="../shared/data/jemhopqa/corpus_ver1.2/train_ver1.2.json"),
                    out="out/jemhopqa")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tansaku.core.build_config import (
    BuildConfig,
    heldout_share_option,
    license_file_option,
    license_option,
    option,
    seed_option,
)
from tansaku.core.value_checks import INPUT_FILE


@dataclass(frozen=True)
class JemhopqaImportConfig(BuildConfig):
    path: Path = option(argument=True, path=INPUT_FILE, help="JEMHopQA JSON file (e.g. corpus_ver1.2/dev_ver1.2.json).")
    seed: int = seed_option()
    heldout_share: float = heldout_share_option()
    license: str | None = license_option()
    license_file: Path | None = license_file_option()
