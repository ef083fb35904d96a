"""Which folders a command may write into, and one build at a time per folder.

A command replaces only what it can prove it made. Each kind of output carries a marker file that tansaku
writes last (so its presence also means "complete"):

    dataset folder   manifest.json        (``synth build …``: a JSON object with ``pipeline`` and
                                          ``fingerprint``)
    search index     tansaku_index.json   (``synth index build``: a JSON object with ``format`` and
                                          ``backend``)
    merged model     tansaku_model.json   (``train merge``: ``{"kind": "merge", …}``)

Outputs written file by file carry a marker written *first*, so a killed command's folder is still provably
its own (:func:`refuse_unmarked` checks them, :func:`write_marker` writes them):

    eval folder      tansaku_eval.json    (``train eval --out``: ``{"kind": "eval", …}``; report.json comes
                                          last)
    training run     tansaku_recipe.json  (``train sft`` / ``train rl`` output_dir: the resolved recipe and
                                          its kind)
    rescore folder   tansaku_rescore.json (``train rescore --out``: ``{"kind": "rescore", …}``)

``foreign_entries(folder, kind)`` lists what in a folder is not provably tansaku's (a dataset folder may
also hold nested tansaku outputs: the egov build keeps ``articles/`` and ``index/`` in its dataset folder,
finished or interrupted). A missing or empty folder is free; anything foreign is refused, never overwritten
or removed. :func:`refuse_overlap` refuses an output that is, lies inside or holds one of the command's inputs
(a build would read its own output back, or replace what it reads).

Outputs swapped in whole (an index, a merged model) are built in a hidden sibling ``.NAME.partial-XXXXXXXX``
and renamed over ``NAME`` (``tansaku.core.swapped_outputs``); :func:`leftover_of` proves such a leftover the
build's own.

``folder_lock(folder, option)`` (``tansaku.core.folder_locks``) holds an exclusive ``flock`` on the folder
itself for the whole build, so a second build into the same folder is refused in one line instead of racing
for the same temp files. The kernel drops the lock when the process exits, even on ``kill -9``, so a killed
build never leaves a stale lock behind, and no lock file is ever written into the user's folder.

    with folder_lock(out, "--out"):
        ...  # check again, then build
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tansaku.core import jsontext, safe_write
from tansaku.core.errors import InputError
from tansaku.core.folder_locks import folder_lock
from tansaku.core.redact import redact_mapping

DATASET_MARKER = "manifest.json"
INDEX_MARKER = "tansaku_index.json"
# What a dataset build writes; LICENSE (tansaku.core.licenses) only after the manifest, so a folder holding it
# is already provably tansaku's.
DATASET_WRITES = ("data", "data.partial", "README.md", DATASET_MARKER, ".work", "LICENSE")
# Sub-builds a dataset build keeps in its folder (egov: OUT/articles, OUT/index): empty, they are what a build
# killed right after creating them leaves.
NESTED_WRITES = ("articles", "index")
MODEL_MARKER = "tansaku_model.json"
EVAL_MARKER = "tansaku_eval.json"
RUN_MARKER = "tansaku_recipe.json"
RESCORE_MARKER = "tansaku_rescore.json"
# Every marker that names its output's kind: a folder holding one of them is that kind's output, whichever
# command is given it (refuse_unmarked names the kind instead of calling it a user's folder).
KIND_MARKERS = (EVAL_MARKER, RUN_MARKER, MODEL_MARKER, RESCORE_MARKER)
PARTIAL_MARKER = ".tansaku_partial.json"
# tempfile.mkdtemp's names: the prefix, then 8 of [a-z0-9_]; "of" is the folder the leftover was made for.
_LEFTOVER = re.compile(r"^\.(?P<of>.+)\.(?P<part>partial|old)-[a-z0-9_]{8}$")


def refuse_other_kind(folder: Path, option: str, kind: str) -> None:
    """InputError when ``folder`` is a file or tansaku output of the other kind (``kind``: dataset | index):
    an index is never built into a dataset folder, nor a dataset into an index."""
    wanted, other = (("dataset folder", "search index") if kind == "dataset"
                     else ("search index", "dataset folder"))
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{option} {folder} is a file, not a {wanted}; choose another {option}")
    if is_index(folder) if kind == "dataset" else is_dataset(folder):
        raise InputError(f"{option} {folder} is a tansaku {other}, not a {wanted}; choose another {option}")


def _shaped(obj: object, keys: tuple[str, ...]) -> bool:
    """Whether ``obj`` has the shape tansaku writes (so reading it back as a recipe cannot fail)."""
    if not isinstance(obj, dict) or not all(k in obj for k in keys):
        return False
    stages, inputs = obj.get("stages") or [], obj.get("inputs") or []
    return (isinstance(stages, list) and all(isinstance(s, dict) and "name" in s for s in stages)
            and isinstance(inputs, list) and all(isinstance(i, dict) for i in inputs)
            and all(isinstance(obj.get(k) or {}, dict) for k in ("config", "heldout", "llm")))


def _read_json(path: Path) -> object:
    """The JSON value in ``path``, or None when it is missing or broken (depth-bounded: a 100k-deep "marker"
    is no marker, not a crash)."""
    try:
        return jsontext.read_file(path)
    except jsontext.JSONInputError:
        return None


def is_dataset(folder: str | Path) -> bool:
    """Whether ``folder`` holds a finished dataset that tansaku wrote (its manifest parses as one)."""
    return _shaped(_read_json(Path(folder) / DATASET_MARKER), ("pipeline", "fingerprint", "stages"))


def is_index(folder: str | Path) -> bool:
    """Whether ``folder`` holds a finished embedded search index that tansaku wrote."""
    return _shaped(_read_json(Path(folder) / INDEX_MARKER), ("format", "backend"))


def work_recipe(out: Path) -> dict | None:
    """The recipe of the unfinished build in ``out/.work`` (None: there is none); InputError when the file is
    there but tansaku did not write it."""
    path = out / ".work" / "recipe.json"
    if not path.exists():
        return None
    recipe = _read_json(path)
    if not _shaped(recipe, ("pipeline", "stages")):
        raise InputError(f"--out {out}: {path.relative_to(out)} is not a recipe tansaku wrote; choose "
                         f"another --out")
    return recipe


def require_named(path: str | Path | None, option: str) -> Path:
    """``path`` as a Path; InputError for an empty name (``--out ''`` would otherwise mean the current
    directory) or one with no last component (``/``, ``..``): such a folder cannot be a build's own."""
    text = "" if path is None else str(path).strip()
    p = Path(text)
    if text in ("", ".") or p.name in ("", ".", ".."):
        raise InputError(f"{option} {text!r} names no folder of its own (empty, the current or a parent "
                         f"folder); give a folder name, e.g. {option} runs/x")
    safe_write.refuse_shared_folder(p, option)  # every output folder passes here, before any work
    return p


def foreign_entries(folder: Path, kind: str) -> list[str]:
    """Names in ``folder`` that no tansaku build provably made (sorted). For a dataset folder (``kind``:
    dataset) nested dataset/index folders are tansaku's and left alone by the build, unless they sit where
    the build writes (``data`` …), and a ``.work`` holding nothing (or only the temp file of its recipe) is a
    build killed before its first write. An index folder is swapped whole, so for ``kind`` index everything in
    it counts."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        real_dir = entry.is_dir() and not entry.is_symlink()
        if kind == "dataset" and real_dir and entry.name not in DATASET_WRITES:
            if is_dataset(entry) or is_index(entry) or _unfinished_build(entry) or leftover_of(entry):
                continue
            if entry.name in NESTED_WRITES and not any(entry.iterdir()):
                continue
        if kind == "dataset" and entry.name == ".work" and _killed_before_writing(entry, "recipe.json"):
            continue
        if kind == "dataset" and (safe_write.temp_of(entry.name) in DATASET_WRITES  # a killed write's temp
                                  or real_dir and safe_write.partial_of(entry.name) == "data"):
            continue
        found.append(entry.name)
    return sorted(found)


def _unfinished_build(folder: Path) -> bool:
    """Whether ``folder`` holds a dataset build that was interrupted: its ``.work`` holds the recipe tansaku
    wrote (or nothing else is there but a ``.work`` killed before its first write)."""
    work = folder / ".work"
    if _shaped(_read_json(work / "recipe.json"), ("pipeline", "stages")):
        return True
    return _killed_before_writing(work, "recipe.json") and os.listdir(folder) == [".work"]


def _killed_before_writing(folder: Path, first: str) -> bool:
    """Whether ``folder`` is a real folder holding nothing but, at most, the temp file of ``first``, the file
    a build writes into it first (``tansaku.core.safe_write`` renames it into place once whole: a kill leaves
    the temp)."""
    if not folder.is_dir() or folder.is_symlink():
        return False
    with os.scandir(folder) as entries:  # a folder under a temp file's name is no killed write's
        return all(safe_write.temp_of(e.name) == first and not e.is_dir(follow_symlinks=False)
                   for e in entries)


def refuse_foreign_entries(folder: Path, option: str, error: type[Exception] = InputError) -> None:
    """``error`` (one line naming a few of them) when ``folder`` holds anything no tansaku build made."""
    if foreign := foreign_entries(folder, "dataset"):
        raise error(f"{option} {folder} is not empty and no tansaku build made it (it holds "
                    f"{describe(foreign)}); choose a new or empty folder for {option}")


def describe(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def make_folder(folder: Path, option: str) -> None:
    """Create ``folder`` (and its parents); an unwritable place is the user's to fix (InputError), not a
    bug."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {folder}: cannot create the folder ({exc.strerror or exc})") from None
    safe_write.refuse_shared_folder(folder, option)  # again: a link planted since the first check is refused


@contextmanager
def claimed(folder: Path, option: str, check: Callable[[], object]) -> Iterator[object]:
    """``check()`` (it raises for a folder that is not ours and writes nothing), then, unless it returned a
    finished result, create and lock ``folder`` and ``check()`` again under the lock: yields that result."""
    found = check()
    if found is not None:
        yield found
        return
    created = not folder.exists()
    make_folder(folder, option)
    try:
        with folder_lock(folder, option):
            yield check()  # again: a build that held the lock may have finished or started this folder
    except BaseException:
        if created:  # ours and (rmdir succeeds only if) still empty: a failed build leaves no trace
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


# ---------------------------------------------------------------- outputs marked first; inputs never written


def marker_kind(folder: str | Path, marker: str) -> str | None:
    """The ``kind`` that ``folder/marker`` names when tansaku wrote it, else None."""
    obj = _read_json(Path(folder) / marker)
    return obj["kind"] if isinstance(obj, dict) and isinstance(obj.get("kind"), str) else None


def older_output_kind(folder: str | Path) -> str | None:
    """The kind of output a tansaku from before the markers left in ``folder``, proven by its files alone,
    else
    None: a run's recipe copy naming no ``kind`` (``sft``, or ``rl`` when it has ``tasks``), or an eval folder
    (``report.json`` with the keys every eval report has, and ``trajectories.jsonl``, nothing else)."""
    folder = Path(folder)
    recipe = _read_json(folder / RUN_MARKER)
    if isinstance(recipe, dict) and "kind" not in recipe and {"model", "output_dir"} <= recipe.keys():
        return "rl" if "tasks" in recipe else "sft"
    report = _read_json(folder / "report.json")
    if (isinstance(report, dict) and isinstance(report.get("task"), str)
            and ({"pass@1", "episodes"} <= report.keys() or {"mean_token_logprob", "rows"} <= report.keys())
            and set(os.listdir(folder)) <= {"report.json", "trajectories.jsonl"}):
        return "eval"
    return None


def refuse_unmarked(folder: str | Path | None, option: str, marker: str, kind: str, what: str,
                    spare: Callable[[Path], bool] = lambda entry: False) -> Path:
    """``folder`` as a Path when a command writing a ``what`` (``eval folder``, ``sft run`` …) may write into
    it: missing, empty, holding ``marker`` of ``kind``, or an older tansaku's output of ``kind``
    (:func:`older_output_kind`). Else InputError, one line, nothing written: a file, a dataset or index,
    another kind's output (current: any of :data:`KIND_MARKERS`; or older), or a folder holding anything but
    the entries ``spare(entry)`` lets through. A marker that lists the
    ``files`` its command wrote (an output replaced whole) proves only those: anything added since is
    refused."""
    folder = require_named(folder, option)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{option} {folder} is a file, not a {what}; choose another {option}")
    for other, proof in (("dataset folder", is_dataset), ("search index", is_index)):
        if proof(folder):
            raise InputError(f"{option} {folder} is a tansaku {other}, not a {what}; choose another {option}")
    marked = marker_kind(folder, marker)
    others = (marker_kind(folder, m) for m in KIND_MARKERS if m != marker)
    found = marked or next((k for k in others if k is not None), None) or (
        older_output_kind(folder) if folder.is_dir() else None)
    if found is not None and found != kind:
        raise InputError(f"{option} {folder} holds a tansaku {found} output, not a {what}; "
                         f"choose another {option}")
    if found == kind:
        written = _read_json(folder / marker).get("files") if marked else None
        ours = {marker, PARTIAL_MARKER, *map(str, written)} if isinstance(written, list) else None
        # a killed write's temp file (tansaku.core.safe_write) of one of them is theirs too
        if ours is not None and (added := sorted(n for n in os.listdir(folder)
                                                 if n not in ours and safe_write.temp_of(n) not in ours)):
            raise InputError(f"{option} {folder} is a tansaku {what} with files added since "
                             f"({describe(added)}), which replacing it would delete; move them out or choose "
                             f"another {option}")
        return folder
    if not folder.is_dir():
        return folder
    if foreign := sorted(e.name for e in folder.iterdir()
                         if not spare(e) and safe_write.temp_of(e.name) != marker):
        raise InputError(f"{option} {folder} is not empty and no tansaku {what} made it (it holds "
                         f"{describe(foreign)}); choose a new or empty folder for {option}")
    return folder


def write_marker(folder: Path, marker: str, info: dict, option: str = "--out") -> None:
    """Create ``folder`` and write ``info`` as its ``marker``: before anything else goes into it. A marker
    records what ran (a run's recipe copy: judge keys, --hub_token), so it is redacted
    (``tansaku.core.redact``)."""
    make_folder(folder, option)
    info = redact_mapping(info)
    safe_write.write_text_atomic(folder / marker, jsontext.dumps(info, indent=2, default=str))


_REMOTE = re.compile(r"^(https?://|opensearch:)")  # an input that names a service, not a path


def refuse_overlap(out: str | Path, inputs: Mapping[str, object], option: str = "--out") -> None:
    """InputError (one line) when ``out`` is one of ``inputs`` (option → a path, a list of paths or None;
    other values such as OpenSearch targets or clients are skipped), lies inside one, or holds one: the
    command would read its own output back as input, or write over what it reads. Paths are compared resolved
    (links followed)."""
    target = Path(os.path.realpath(out))
    for name, given in inputs.items():
        for path in given if isinstance(given, (list, tuple)) else [given]:
            if not isinstance(path, (str, Path)) or not str(path) or _REMOTE.match(str(path)):
                continue
            source = Path(os.path.realpath(path))
            relation = ("is" if target == source else "is inside" if source in target.parents
                        else "holds" if target in source.parents else None)
            if relation:
                raise InputError(f"{option} {out} {relation} the input {name} {path}: a command never writes "
                                 f"where it reads; choose an {option} outside every input")


# ---------------------------------------------------------------- leftovers of outputs swapped in whole


def leftover_of(entry: Path) -> str | None:
    """The folder name a hidden ``.NAME.partial-*`` / ``.NAME.old-*`` sibling was made for, when it provably
    is what ``tansaku.core.swapped_outputs.swapped_in`` left (marked with that name, empty, or an old one
    holding the output it replaced)."""
    match = _LEFTOVER.match(entry.name)
    if match is None or entry.is_symlink() or not entry.is_dir():
        return None
    partial = _read_json(entry / PARTIAL_MARKER)
    if (_killed_before_writing(entry, PARTIAL_MARKER)
            or (isinstance(partial, dict) and partial.get("of") == match["of"])):
        return match["of"]
    if match["part"] == "old" and (is_index(entry) or marker_kind(entry, MODEL_MARKER) == "merge"):
        return match["of"]
    return None
