"""``CorpusConfig``: every setting of ``synth build corpus``, once (the CLI's options, the builder's argument,
the stages' params and the manifest's ``config`` all read it; ``tansaku.core.build_config``).

    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.corpus.config import CorpusConfig
    build_corpus(CorpusConfig(input="examples/miniwiki.jsonl", format="jsonl"), out="out/corpus")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tansaku.core.build_config import BuildConfig, license_file_option, license_option, option
from tansaku.core.value_checks import INPUT


def format_names() -> tuple[str, ...]:
    """What ``--format`` takes: ``auto`` and each reader's name (asked when a value is given: ``--help`` stays
    fast)."""
    from tansaku.pipelines.corpus.readers import FORMATS  # the readers' imports: not at --help

    return ("auto", *FORMATS)


@dataclass(frozen=True)
class CorpusConfig(BuildConfig):
    input: Path = option(path=INPUT, help="File or folder of documents.")
    format: str = option("auto", choices=format_names, help="auto | jsonl | cirrus | wac | jaquad")
    min_chars: int = option(1, min=0, help="Drop documents shorter than this.")
    id_field: str = option("id", help="JSON lines: the key holding the document id.")
    title_field: str = option("title", help="JSON lines: the key holding the title.")
    text_field: str = option("text", help="JSON lines: the key holding the text.")
    url_field: str = option("url", help="JSON lines: the key holding the URL.")
    keep_rejected: bool = option(False, flag="--keep-rejected/--no-keep-rejected",
                                 help="Also write every dropped document (stage, reason, record) as the "
                                      "'rejected' split (duplicates of a dump can be many).")
    license: str | None = license_option("the source format's (Wikipedia's cc-by-sa-4.0; JSON lines: none, "
                                         "and push refuses)")
    license_file: Path | None = license_file_option()
    name: str | None = option(None, recipe=False, help="Dataset name (default: corpus-<input file stem>).")
