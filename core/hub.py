"""``synth push``: upload a dataset folder to the HF Hub as a dataset repo, with only what a user of the
dataset needs.

    plan = upload_plan("out/egov")                 # repo path → local file, or the rewritten bytes
    push_to_hub("out/egov", "org/egov", private=True)

What goes up: the rows, every ``manifest.json`` and ``README.md`` (the folder's and its nested datasets',
e.g. egov's ``articles/``). What never does: build checkpoints (``.work/``, ``*.partial``), a killed write's
temporary files (``.NAME.*.tmp``, core/safe_write.py), lock files, and
the search index (``index/``, a folder holding ``tansaku_index.json``) unless ``include_index``; the index is
rebuilt from the rows and holds machine-specific files.

Nothing uploaded holds a secret (``tansaku.core.redact``): builds record manifests, cards and the rejected
split's ``detail`` redacted, and the plan redacts them again, for folders built before that (an LLM URL's
``user:pass@`` or ``?api-key=`` in a manifest, a card, a rejected row's error text).

The uploaded manifests and cards hold no absolute local path: each one becomes relative to the dataset folder
(``articles``), or to the working directory, or else its file name; inputs keep their sha256, which is what
identifies them. The root card declares every nested dataset as a config and must pass ``card_problems``
(the Hub's metadata rules, checked offline) or nothing is uploaded; a license problem's refusal names
the ``--license`` rebuild that fixes it. Offline mode (``HF_HUB_OFFLINE``) and a
push without an explicit ``private`` are refused in one line; ``dry_run`` needs neither network nor token.
"""

from __future__ import annotations

import io
import os
from pathlib import Path, PurePosixPath, PureWindowsPath

import datasets
from huggingface_hub import DatasetCard

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.core.licenses import LICENSE_FIX
from tansaku.core.out_folder import REJECTED
from tansaku.core.ownership import INDEX_MARKER
from tansaku.core.redact import redact_mapping, redact_text
from tansaku.core.store import MANIFEST, read_manifest, validate_for_push
from tansaku.data_cards import card_problems, nested_datasets, subset_configs

CARD = "README.md"


class HubPushError(InputError):
    """The folder cannot go to the Hub as it is (card metadata, offline mode, visibility not chosen)."""


def offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, at call time (its constant is read once, at import)."""
    from huggingface_hub import constants  # huggingface_hub: not at --help

    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in {"1", "ON", "YES", "TRUE"} or constants.is_offline_mode()


def _is_index(folder: Path) -> bool:
    return folder.name == "index" or (folder / INDEX_MARKER).is_file()


def _skipped(rel: PurePosixPath, root: Path, include_index: bool) -> bool:
    """Checkpoints, a killed write's temporary files and lock files always; a search index unless asked
    for."""
    half_written = rel.name.startswith(".") and rel.name.endswith(".tmp")
    if (half_written or rel.name.endswith(".lock")
            or any(p == ".work" or p.endswith(".partial") for p in rel.parts)):
        return True
    folders = [root.joinpath(*rel.parts[: i + 1]) for i in range(len(rel.parts) - 1)]
    return not include_index and any(_is_index(f) for f in folders)


def _absolute(text: str) -> bool:
    return len(text) > 1 and (PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute())


def local_name(path: str, root: Path) -> str:
    """An absolute local path as it may be published: relative to the dataset, else to the working directory,
    else its file name."""
    p = Path(path)
    for base in (root.resolve(), Path.cwd().resolve()):
        if p.is_relative_to(base):
            return p.relative_to(base).as_posix() or "."
    return p.name or "."


def _absolute_strings(value) -> set[str]:
    if isinstance(value, str):
        return {value} if _absolute(value) else set()
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return set().union(*map(_absolute_strings, items)) if items else set()


def _replaced(value, names: dict[str, str]):
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, dict):
        return {k: _replaced(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v, names) for v in value]
    return value


def _public_text(text: str, names: dict[str, str]) -> str:
    for path in sorted(names, key=len, reverse=True):  # longest first: /a/b/c before /a/b
        text = text.replace(path, names[path])
    return text


def _card_for_upload(root: Path, text: str) -> str:
    """The root card with every nested dataset declared as a config (cards of older builds lack them)."""
    card = DatasetCard(text)
    configs = list(card.data.get("configs") or [])
    have = {c.get("config_name") for c in configs}
    missing = [c for c in subset_configs(nested_datasets(root)) if c["config_name"] not in have]
    if missing:
        card.data.configs = configs + missing
    problems = card_problems(card.data.to_dict(), root)
    if problems:
        # A license problem is fixed by rebuilding with a license, so the refusal names the flags that do it.
        fix = f"; {LICENSE_FIX}" if any("license" in p for p in problems) else ""
        raise HubPushError(f"{root / CARD}: the Hub would reject this card: {'; '.join(problems)}{fix}")
    return str(card) if missing else text


def upload_plan(path: str | Path, include_index: bool = False) -> dict[str, Path | bytes]:
    """Every file that would upload, by its path in the repo: the local file, or the bytes of a rewritten
    manifest/card (no absolute local paths, no secret) or rejected split shard (no secret in ``detail``).
    Checks the folder loads (``validate_for_push``) first."""
    root = Path(path)
    quiet = datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # the plan is the output: no per-split progress bars around it
    try:
        for folder in [root, *(root / name for name in nested_datasets(root))]:
            validate_for_push(folder)
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    plan: dict[str, Path | bytes] = {}
    for f in sorted(root.rglob("*")):
        rel = PurePosixPath(f.relative_to(root).as_posix())
        if f.is_file() and not f.is_symlink() and not _skipped(rel, root, include_index):
            plan[str(rel)] = f
    for rel in [r for r in plan if PurePosixPath(r).name == MANIFEST]:
        folder = root / PurePosixPath(rel).parent
        # a list, 100k-deep or broken one: one line naming it, not a traceback
        manifest = redact_mapping(read_manifest(folder))
        names = {p: local_name(p, folder) for p in _absolute_strings(manifest)}
        plan[rel] = (jsontext.dumps(_replaced(manifest, names), indent=2) + "\n").encode()
        card_rel = str(PurePosixPath(rel).with_name(CARD))
        if card_rel in plan:
            text = _public_text(redact_text((folder / CARD).read_text(encoding="utf-8")), names)
            plan[card_rel] = (_card_for_upload(root, text) if card_rel == CARD else text).encode()
    for rel, src in list(plan.items()):
        shard = PurePosixPath(rel)
        if (shard.parent.name == "data" and shard.name.startswith(f"{REJECTED}-")
                and shard.suffix == ".parquet"):
            plan[rel] = _redacted_rejected(src) or src
    return plan


def _redacted_rejected(path: Path) -> bytes | None:
    """A rejected split's shard with its ``detail`` text redacted, as bytes; None when that changes
    nothing."""
    import pyarrow as pa  # huggingface_hub, pyarrow: only when pushing
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if "detail" not in table.column_names:
        return None
    details = table.column("detail").to_pylist()
    clean = [redact_text(d) if isinstance(d, str) else d for d in details]
    if clean == details:
        return None
    column = table.column_names.index("detail")
    table = table.set_column(column, table.schema.field(column),
                             pa.array(clean, type=table.schema.field(column).type))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def push_to_hub(path: str | Path, repo_id: str, private: bool | None, include_index: bool = False,
                token: str | None = None) -> str:
    """Upload the folder's ``upload_plan`` as the dataset repo ``repo_id``; return its URL."""
    plan = upload_plan(path, include_index=include_index)  # the folder's own problems first
    if private is None:
        raise HubPushError("choose who can see the dataset: pass --private or --public")
    if offline():
        raise HubPushError("HF_HUB_OFFLINE is set: synth push needs the network (unset it, or use --dry-run)")
    from huggingface_hub import CommitOperationAdd, HfApi  # huggingface_hub, pyarrow: only when pushing

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    operations = [CommitOperationAdd(path_in_repo=rel,
                                     path_or_fileobj=src if isinstance(src, bytes) else str(src))
                  for rel, src in plan.items()]
    api.create_commit(repo_id, operations, commit_message="Upload dataset with tansaku synth push",
                      repo_type="dataset")
    return f"https://huggingface.co/datasets/{repo_id}"
