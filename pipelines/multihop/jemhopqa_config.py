"""``JemhopqaImportConfig``: every setting of ``synth import jemhopqa``, once (the CLI's argument and options,
the builder's argument and the manifest's ``config`` all read it; ``tansaku.core.build_config``).

    from tansaku.pipelines.multihop.jemhopqa import import_jemhopqa
    from tansaku.pipelines.multihop.jemhopqa_config import JemhopqaImportConfig
    import_jemhopqa(JemhopqaImportConfig(path="../shared/data/jemhopqa/corpus_ver1.2/train_ver1.2.json"),
                    out="out/jemhopqa")                  # every question in 'test'
    import_jemhopqa(JemhopqaImportConfig(path=…, as_train=True), out=…)  # 'train' + held-out 'test', warned

JEMHopQA is an evaluation set in the recipe this toolkit follows, so an import holds no ``train`` split unless
``as_train`` (``--as-train``) asks for one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tansaku.core.build_config import (
    BuildConfig,
    license_file_option,
    license_option,
    option,
    seed_option,
)
from tansaku.core.heldout import DEFAULT_SHARE
from tansaku.core.value_checks import INPUT_FILE


@dataclass(frozen=True)
class JemhopqaImportConfig(BuildConfig):
    path: Path = option(argument=True, path=INPUT_FILE,
                        help="JEMHopQA JSON file (e.g. corpus_ver1.2/dev_ver1.2.json).")
    seed: int = seed_option()
    as_train: bool = option(False, flag="--as-train/--no-as-train",
                            help="Import the questions as training data: 'train' plus a held-out 'test' "
                                 "(--heldout-share), with a warning. JEMHopQA is an evaluation set: by "
                                 "default every question goes to 'test' (the dev file: 'validation').")
    heldout_share: float = option(DEFAULT_SHARE, min=0, max=1, max_open=True,
                                  help="With --as-train: share of questions held out as the 'test' split (0: "
                                       "none). Without it every question is in 'test' (or 'validation').")
    license: str | None = license_option()
    license_file: Path | None = license_file_option()
