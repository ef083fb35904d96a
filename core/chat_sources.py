"""Where general chat data comes from: a local file or dataset folder, or a Hugging Face Hub dataset read from
the local HF cache through ``datasets.load_dataset``; and how a row of a typical chat set becomes chat
messages. (In core: ``synth build general``, ``synth build trajectories --general`` and ``train sft`` all read
it.)

    hf:OWNER/NAME[:CONFIG][@REVISION][#SPLIT]

is a Hub dataset wherever general data is read (``synth build general --prompts``, ``synth build trajectories
--general``, a ``train sft`` data source's ``path``); anything else is a local path, as before. ``CONFIG``
defaults to the dataset's default config, ``REVISION`` (a branch, tag or full commit sha) to ``main``,
``SPLIT`` to ``train`` (a ``train sft`` source: its ``split:``). The ``hf:`` prefix always means the Hub: a
local folder whose name starts with ``hf:`` is given by its absolute path.

    parse_hub_source("hf:org/chat:ja@v1.0#train_sft")
    # HubSource(repo_id='org/chat', config='ja', revision='v1.0', split='train_sft')
    data = load_hub_rows(parse_hub_source("hf:org/chat"), "--prompts")   # .rows, .revision (the commit sha) …

Nothing is downloaded, ever, online or not: the snapshot is looked up in the local hub cache
(``HF_HUB_CACHE``, else ``HF_HOME/hub``, read when the data is read) with ``local_files_only``, and its files
are read by ``load_dataset(SNAPSHOT_FOLDER, CONFIG, split=SPLIT, streaming=True)`` under offline mode
(nothing is written to the datasets cache either). ``datasets`` itself does not resolve a hub-cache snapshot
offline: ``load_dataset("owner/name")`` with ``HF_HUB_OFFLINE=1`` only finds what an earlier online
``load_dataset`` prepared in its own cache, hence the snapshot folder. A dataset that is not cached is one
line (exit 2) that says how to get it: ``hf download --repo-type dataset OWNER/NAME`` (where there is a
network), or pass a file. The resolved commit sha, config, split, the data files' sha256 and the license the
dataset's card declares (``README.md`` metadata) are what a build records (``HubData.input`` /
``HubData.record``).

Column mapping (``chat_messages``), the first of these a row has (a null column counts as absent):

- ``messages``: ``[{role, content, …}]`` as it is (or that list as JSON text);
- ``conversations``: ShareGPT ``[{from, value}]``, ``from`` human/user → user,
  gpt/assistant/chatgpt/bard/bing/ model → assistant, system → system (an empty system turn is left out);
  ``{role, content}`` items as they are;
- ``prompt`` (text, or TRL's list of messages) + optional ``response`` / ``completion`` (text or messages);
- ``instruction`` + optional ``input`` / ``context`` (appended after a blank line) + optional ``output`` /
  ``response`` (Alpaca, Dolly).

A row with none of them is ``unmappable``; one whose column is malformed (a turn with another ``from``, a
message without text, JSON text that is not JSON) is ``malformed`` (``UnusableRow.reason``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tansaku.core.chat_columns import FORMATS, UnusableRow, chat_messages  # noqa: F401 (re-exported)
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.provenance import describe_input
from tansaku.core.value_checks import repo_id_problem

log = logging.getLogger(__name__)

HUB_PREFIX = "hf:"
GRAMMAR = "hf:OWNER/NAME[:CONFIG][@REVISION][#SPLIT]"
_SHA = re.compile(r"[0-9a-f]{40}")
# Splits a tansaku dataset keeps out of training (tansaku.core.heldout): refused from a tansaku dataset on the
# Hub.
HELDOUT = ("test", "rl")


# ---------------------------------------------------------------- the grammar


@dataclass(frozen=True)
class HubSource:
    """A Hub dataset as ``hf:REPO_ID[:CONFIG][@REVISION][#SPLIT]`` names it (None: not given)."""

    repo_id: str
    config: str | None = None
    revision: str | None = None
    split: str | None = None

    def text(self) -> str:
        return (f"{HUB_PREFIX}{self.repo_id}" + (f":{self.config}" if self.config else "")
                + (f"@{self.revision}" if self.revision else "") + (f"#{self.split}" if self.split else ""))


def is_hub_source(value) -> bool:
    """Whether an input option's value names a Hub dataset (``hf:…``; a ``Path`` too, as the CLI passes
    it)."""
    return isinstance(value, (str, os.PathLike)) and os.fspath(value).startswith(HUB_PREFIX)


def parse_hub_source(value, option: str = "input") -> HubSource | None:
    """The Hub dataset ``value`` names, None when it is a local path; a malformed ``hf:`` value is refused in
    one line naming ``option``.

    >>> parse_hub_source("hf:org/chat:ja@v1.0#train_sft")
    HubSource(repo_id='org/chat', config='ja', revision='v1.0', split='train_sft')
    >>> parse_hub_source("data/general.jsonl") is None
    True
    >>> parse_hub_source("hf:org/chat@", "--prompts")
    Traceback (most recent call last):
    ...
    tansaku.core.errors.InputError: --prompts hf:org/chat@: an empty revision after '@'; write
    hf:OWNER/NAME[:CONFIG][@REVISION][#SPLIT]
    """
    if not is_hub_source(value):
        return None
    text = os.fspath(value)
    rest, hash_, split = text[len(HUB_PREFIX):].partition("#")
    rest, at, revision = rest.partition("@")
    repo_id, colon, config = rest.partition(":")
    for given, mark, what in ((hash_, split, "split after '#'"), (at, revision, "revision after '@'"),
                              (colon, config, "config name after ':'")):
        if given and not mark.strip():
            raise InputError(f"{option} {text}: an empty {what}; write {GRAMMAR}")
    if problem := repo_id_problem(repo_id):
        raise InputError(f"{option} {text}: {problem}; write {GRAMMAR}")
    if any(c.isspace() for c in config + revision + split):
        raise InputError(f"{option} {text}: no spaces in a config, revision or split; write {GRAMMAR}")
    return HubSource(repo_id, config or None, revision or None, split or None)


def repo_id_hint(value) -> str:
    """A hint for a missing local path that reads like a Hub repo id (``owner/name``): how to name the Hub."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else ""
    looks = text.count("/") == 1 and not Path(text).suffix and not text.startswith((".", "/", "~"))
    return f" (a Hub dataset is named {HUB_PREFIX}{text})" if looks and repo_id_problem(text) is None else ""


# ---------------------------------------------------------------- the local cache


def hub_cache() -> Path:
    """The hub cache folder, as ``huggingface_hub`` finds it, read now (its constant is read once, at
    import)."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(
        os.path.expanduser(home), "hub")
    return Path(os.path.expandvars(os.path.expanduser(hub)))


def _get_it(source: HubSource) -> str:
    revision = f" --revision {source.revision}" if source.revision else ""
    return (f"get it where there is a network with `hf download --repo-type dataset "
            f"{source.repo_id}{revision}` (HF_HUB_CACHE or HF_HOME pointing at the cache this run reads), or "
            f"pass a local file or folder")


def snapshot(source: HubSource, option: str) -> tuple[Path, str]:
    """The cached snapshot folder of ``source`` and its commit sha; never a download."""
    from huggingface_hub import snapshot_download  # datasets, huggingface_hub: only for hf: sources
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        # datasets, huggingface_hub: only for hf: sources
        from huggingface_hub.errors import IncompleteSnapshotError
    except ImportError:  # older huggingface_hub: no completeness check
        IncompleteSnapshotError = LocalEntryNotFoundError  # noqa: N806
    cache = hub_cache()
    try:
        folder = Path(snapshot_download(source.repo_id, repo_type="dataset", revision=source.revision,
                                        cache_dir=cache, local_files_only=True))
    except IncompleteSnapshotError:
        raise MissingInputError(f"{option} {source.text()}: the cached snapshot in {cache} is incomplete; "
                                f"{_get_it(source)}") from None
    except (LocalEntryNotFoundError, FileNotFoundError):
        at = f" at revision {source.revision}" if source.revision else ""
        raise MissingInputError(f"{option} {source.text()}: not in the local Hugging Face cache "
                                f"({cache}){at}; tansaku never downloads: {_get_it(source)}") from None
    except HFValidationError as exc:
        raise InputError(f"{option} {source.text()}: {str(exc).splitlines()[0]}") from None
    if not _SHA.fullmatch(folder.name):
        raise InputError(f"{option} {source.text()}: {folder} is no hub-cache snapshot (snapshots/<commit "
                         f"sha>)")
    return folder, folder.name


@contextmanager
def _offline_and_quiet():
    """``datasets`` and ``huggingface_hub`` in offline mode (a card's remote ``data_files`` cannot download),
    without progress bars or log lines (a failure is raised as one line), for the duration; yields a scratch
    ``cache_dir`` (a builder's lock file goes there, not into the user's datasets cache)."""
    import datasets  # datasets, huggingface_hub: only for hf: sources
    from datasets.utils import logging as datasets_logging
    from huggingface_hub import constants

    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    bars, verbosity = datasets.utils.are_progress_bars_disabled(), datasets_logging.get_verbosity()
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    datasets.disable_progress_bars()
    datasets_logging.set_verbosity(logging.CRITICAL + 1)
    try:
        with tempfile.TemporaryDirectory(prefix="tansaku-hub-") as scratch:
            yield scratch
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved
        datasets_logging.set_verbosity(verbosity)
        if not bars:
            datasets.enable_progress_bars()


def _one_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _sha256_files(root: Path, files: list[Path]) -> str:
    """sha256 of the data files read (names relative to the snapshot, then contents, in order)."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root) if f.is_relative_to(root) else f.name).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _license(folder: Path) -> str | None:
    from huggingface_hub.repocard import metadata_load  # datasets, huggingface_hub: only for hf: sources

    try:
        value = ((metadata_load(folder / "README.md") or {}).get("license")
                 if (folder / "README.md").is_file() else None)
    except Exception:  # noqa: BLE001 - a card whose YAML does not parse declares nothing we can read
        return None
    return value if isinstance(value, str) else None


@dataclass
class HubData:
    """The rows of one Hub dataset split, read from the cache, and what a build records about them."""

    source: HubSource
    folder: Path  # the snapshot folder (the input a build must not write into, the card a license comes from)
    revision: str  # the commit sha
    config: str
    split: str
    files: list[Path]
    rows: list = field(repr=False)
    license: str | None = None

    def text(self) -> str:
        """The resolved spec: what was read, exactly (``hf:ID:CONFIG@SHA#SPLIT``)."""
        return HubSource(self.source.repo_id, self.config, self.revision, self.split).text()

    def input(self) -> dict:
        """The manifest's ``inputs`` entry (the resolved spec, the data files' sha256, the row count)."""
        return {**describe_input(self.text(), len(self.rows), hashed=False),
                "sha256": _sha256_files(self.folder, self.files)}

    def record(self) -> dict:
        """The dataset as a manifest records it beside ``inputs``: id, revision, config, split, license,
        files."""
        return {"repo_id": self.source.repo_id, "revision": self.revision, "requested": self.source.text(),
                "config": self.config, "split": self.split, "license": self.license,
                "data_files": [str(f.relative_to(self.folder)) if f.is_relative_to(self.folder) else f.name
                               for f in self.files]}


def resolve_hub(source: HubSource, option: str, split: str = "train") -> HubData:
    """What ``source`` names in the local cache: its snapshot, commit sha, config, split (``split`` when it
    names none) and data files, its rows not yet read (``load_hub_rows`` reads them)."""
    from datasets import load_dataset_builder  # datasets, huggingface_hub: only for hf: sources

    folder, revision = snapshot(source, option)
    split = source.split or split
    where = f"{option} {source.text()}"
    with _offline_and_quiet() as scratch:
        try:
            builder = load_dataset_builder(str(folder), source.config, cache_dir=scratch)
        except (ValueError, FileNotFoundError, RuntimeError, ConnectionError, OSError, TypeError) as exc:
            # an unknown config (its names listed), no data files, a script dataset, a remote data file …
            raise InputError(f"{where} (snapshot {revision[:12]}): datasets could not read it: "
                             f"{_one_line(exc)}") from None
    files = (builder.config.data_files or {}).get(split)
    if not files:
        splits = ", ".join(map(str, builder.config.data_files or {})) or "none"
        raise InputError(f"{where}: no split {split!r} in config {builder.config.name!r} (splits: {splits}); "
                         "name one with #SPLIT")
    return HubData(source, folder, revision, builder.config.name or "default", split,
                   sorted(Path(str(f)) for f in files), [], _license(folder))


def load_hub_rows(source: HubSource, option: str, split: str = "train") -> HubData:
    """The rows of ``source``'s split (``split`` when it names none), read from the local cache through
    ``datasets.load_dataset`` (offline, streamed: nothing downloaded, nothing written)."""
    from datasets import load_dataset  # datasets, huggingface_hub: only for hf: sources

    data = resolve_hub(source, option, split)
    with _offline_and_quiet() as scratch:
        try:
            data.rows = list(load_dataset(str(data.folder), source.config, split=data.split, streaming=True,
                                          cache_dir=scratch))
        except (ValueError, FileNotFoundError, RuntimeError, ConnectionError, OSError, TypeError) as exc:
            raise InputError(f"{option} {source.text()} (snapshot {data.revision[:12]}): datasets could not "
                             f"read it: {_one_line(exc)}") from None
    log.info("%s %s → %s: %d rows", option, source.text(), data.text(), len(data.rows))
    return data


def describe_source(value, records: int | None, split: str = "train", option: str = "input") -> dict:
    """A manifest ``inputs`` entry for a general data source: a local path as ``describe_input`` has it, a Hub
    dataset as what it resolves to now (``hf:ID:CONFIG@SHA#SPLIT``, its data files' sha256)."""
    source = parse_hub_source(value, option)
    if source is None:
        return describe_input(value, records)
    return {**resolve_hub(source, option, split).input(), "records": records}


def _is_tansaku_dataset(folder: Path) -> bool:
    return (folder / "manifest.json").is_file()


def read_chat_source(value, split: str = "train", option: str = "general chat set") -> list[dict]:
    """The rows of a Hub chat set (``hf:…``) with ``messages`` mapped from its columns (``chat_messages``) and
    ending in an answer, for the readers that train on them (``synth build trajectories --general``, a ``train
    sft`` data source). A row that is ``unmappable``, ``malformed`` or has ``no_answer`` is dropped and
    counted in one warning; none left is refused. A tansaku dataset's held-out split (test, rl) is refused."""
    data = load_hub_rows(parse_hub_source(value, option), option, split)
    if data.split in HELDOUT and _is_tansaku_dataset(data.folder):
        raise InputError(f"{option} {data.text()}: '{data.split}' is a tansaku dataset's held-out split, "
                         "kept for `train eval`; train on 'train'")
    rows, dropped, first = [], Counter(), {}
    for i, row in enumerate(data.rows):
        try:
            _, messages = chat_messages(row)
            if not any(isinstance(m, dict) and m.get("role") == "assistant" and m.get("content")
                       for m in messages):
                raise UnusableRow("no_answer", "no assistant message with text")
        except UnusableRow as exc:
            dropped[exc.reason] += 1
            first.setdefault(exc.reason, f"row {i}: {exc.detail}")
            continue
        rows.append({"id": row.get("id") if isinstance(row.get("id"), (str, int)) else None,
                     **({"tools": row["tools"]} if row.get("tools") else {}), "messages": messages})
    if dropped:
        log.warning("%s %s: dropped %d of %d rows (%s)", option, data.text(), sum(dropped.values()),
                    len(data.rows),
                    "; ".join(f"{reason} {n}, e.g. {first[reason]}" for reason, n in dropped.most_common()))
    if not rows:
        raise InputError(f"{option} {data.text()}: no row is a chat with an answer; each needs {FORMATS}")
    return rows
