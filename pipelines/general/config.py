"""``GeneralConfig``: every setting of ``synth build general``, once (the CLI's options, the builder's
argument, the generate stage's params and the manifest's ``config`` all read it;
``tansaku.core.build_config``).

    from tansaku.pipelines.general.build import build_general
    from tansaku.pipelines.general.config import GeneralConfig
    build_general(GeneralConfig(prompts="examples/general_prompts.jsonl", llm="transformers:tiny",
                                max_tokens=256), out="out/general")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tansaku.core.build_config import (
    BuildConfig,
    heldout_share_option,
    license_file_option,
    license_option,
    limit_option,
    option,
    seed_option,
)
from tansaku.core.llm.spec import engine_help
from tansaku.core.value_checks import INPUT


@dataclass(frozen=True)
class GeneralConfig(BuildConfig):
    prompts: Path = option(
        path=INPUT, help="General prompts: a JSONL/JSON/parquet file or dataset folder, or a Hub dataset "
                         "hf:OWNER/NAME (optionally :CONFIG, @REVISION, #SPLIT) read from the local HF cache "
             "(never downloaded). Rows: 'messages', 'conversations' (ShareGPT), 'prompt' or "
             "'instruction' (+ 'input'); a trailing answer is replaced; optional 'id'.")
    # A spec, or a client (demo.py passes the tiny model's, loaded in bf16): the recipe records its identity.
    llm: str = option(llm=True, help=f"The base model you will fine-tune (its own answers): {engine_help()}.")
    reasoning: bool = option(False, help="Keep the model's reasoning as it wrote it (assistant "
                                         "reasoning_content); default: the answer only.")
    max_tokens: int = option(1024, min=1,
                             help="Tokens per answer; an answer cut there is dropped (truncated).")
    temperature: float = option(0.0, min=0,
                                help="Sampling temperature (0: greedy, the model's most likely answer).")
    limit: int | None = limit_option()
    seed: int = seed_option()
    heldout_share: float = heldout_share_option()
    keep_rejected: bool = option(True, flag="--keep-rejected/--no-keep-rejected",
                                 help="Also write every dropped record (stage, reason, record) as the "
                                      "'rejected' split (default: on).")
    license: str | None = license_option()
    license_file: Path | None = license_file_option()
    batch_size: int = option(32, min=1, help="Prompts per generate batch sent to --llm.")
    chunk_size: int = option(64, min=1, help="Prompts per checkpoint chunk (the unit of resume).")
