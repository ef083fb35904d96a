"""Whether a build may write into its ``--out``, decided before any work; and the refusal of a build that
ends with no rows.

Two checks run at different times:

- :func:`precheck_out` at the very start of a build, before its inputs are read or anything is written
  (egov writes ``OUT/articles`` and ``OUT/index`` long before its own dataset): the folder must be missing,
  empty, or tansaku's own output of the *same* pipeline. The full recipe (config, input hashes, stage
  params, LLM identity) is compared by :func:`check_out` when the store claims the folder, still before
  any write of its own; nested outputs (``OUT/articles``) are checked by their own recipes the same way.
- :func:`refuse_empty` after the rows are written: a build whose data splits hold 0 rows is an error (exit 2)
  naming the stage that dropped the last record, its top drop reason and, where the pipeline knows one, the
  option that fixes it. What was written stays for a look (``synth info``, the ``rejected`` split).

    precheck_out(out, pipeline="egov_mcq", inputs={"--laws": laws, "--index": index})
    refuse_empty(manifest, out, hints={"normalize:empty_title": "pass --title-field KEY"})
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import jsontext, ownership
from tansaku.core.errors import InputError, TansakuError
from tansaku.core.recipe import describe_changes, fingerprint, recipe_of_manifest

MANIFEST = ownership.DATASET_MARKER
REJECTED = "rejected"  # the split of dropped records (keep_rejected): no data split
# Drop reasons that mean "the LLM's answer could not be used" (tansaku.core.llm.json_calls)
UNUSABLE_REASONS = frozenset({"llm_error", "llm_bad_json", "llm_bad_output", "judge_error", "judge_bad_json"})


class StoreError(TansakuError, RuntimeError):
    """A dataset folder is missing, incomplete, or belongs to a different run."""


class EmptyBuildError(InputError):
    """A build finished with 0 rows in every data split."""


def read_manifest(path: str | Path) -> dict:
    """The manifest of the dataset folder ``path``, checked; ``StoreError`` (one line naming the file) when
    there is none, when it is not a readable JSON object (``jsontext.read_file``) or its splits and stages are
    malformed."""
    p = Path(path) / MANIFEST
    if not p.exists():
        raise StoreError(f"{path} is not a tansaku dataset (no {MANIFEST}); build it with `synth build …`")
    try:
        manifest = jsontext.read_file(p)
    except jsontext.JSONInputError as exc:  # unreadable, not UTF-8, not JSON, nested too deeply
        raise StoreError(f"{p}: not valid JSON ({exc.msg}); rebuild the dataset") from None
    if not isinstance(manifest, dict):
        raise StoreError(f"{p}: not a tansaku manifest (a JSON {type(manifest).__name__}); rebuild the "
                         f"dataset")
    # What every reader indexes into: row counts per split, one object per stage (else a TypeError far away).
    splits, stages = manifest.get("splits", {}), manifest.get("stages", [])
    if not isinstance(splits, dict) or not all(type(n) is int and n >= 0 for n in splits.values()):
        raise StoreError(f"{p}: 'splits' must map each split to its row count; rebuild the dataset")
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise StoreError(f"{p}: 'stages' must be a list of objects; rebuild the dataset")
    return manifest


# ---------------------------------------------------------------- before any work


def _held_build(out: Path, option: str) -> tuple[dict | None, dict | None]:
    """(finished manifest, unfinished work recipe) of tansaku's build in ``out`` — (None, None) for a missing
    or empty folder; StoreError (one line) for a file, an index, a foreign manifest or anything tansaku did
    not make. Reads markers only, writes nothing."""
    ownership.refuse_other_kind(out, option, "dataset")
    if (out / MANIFEST).exists():
        if not ownership.is_dataset(out):
            raise StoreError(f"{option} {out} holds a {MANIFEST} that tansaku did not write; choose another "
                             f"{option}")
        return read_manifest(out), None
    if (work := ownership.work_recipe(out)) is not None:
        return None, work
    # not provably ours (another tool's, the user's): never touch it
    ownership.refuse_foreign_entries(out, option, StoreError)
    return None, None


def precheck_out(out: str | Path, *, pipeline: str, inputs: dict[str, object] | None = None,
                 option: str = "--out") -> Path:
    """``out`` as a Path when a ``pipeline`` build may write into it: missing, empty, or holding tansaku's own
    build (finished or interrupted) of the same pipeline, and neither one of the build's ``inputs`` (option →
    path or paths) nor inside nor around one (``ownership.refuse_overlap``: a build would read its own recipe
    and rows back as input). Anything else raises one line naming the folder; nothing is read but its
    markers, nothing written. The rest of the recipe (config, inputs, stage params) is compared by
    :func:`check_out` before the store writes, and names every difference."""
    out = ownership.require_named(out, option)
    finished, work = _held_build(out, option)
    held = finished or work
    if held is not None and held.get("pipeline") != pipeline:
        raise StoreError(f"{option} {out} holds a tansaku {held.get('pipeline')} dataset, not a {pipeline} "
                         f"build; choose another {option}")
    ownership.refuse_overlap(out, inputs or {}, option)
    return out


def check_out(out: Path, recipe: dict, fp: str) -> dict | None:
    """Whether ``out`` may be built into, without writing anything: the manifest when it already holds this
    very build, None when it is missing, empty or holds an unfinished build of the same recipe; StoreError
    (one line naming the path and what to do) for anything else (see ``tansaku.core.ownership``)."""
    finished, work = _held_build(out, "--out")
    if finished is not None:
        if finished.get("fingerprint") == fp:
            return finished
        raise StoreError(f"--out {out} was built with a different recipe: "
                         f"{describe_changes(recipe_of_manifest(finished), recipe)}; remove the folder or "
                         "choose another --out")
    if work is not None and fingerprint(work) != fp:
        raise StoreError(f"--out {out} holds an unfinished build with a different recipe: "
                         f"{describe_changes(work, recipe)}; rerun with the original options to resume it, "
                         "or remove the folder or choose another --out")
    return None


# ---------------------------------------------------------------- after the rows are written


def data_rows(manifest: dict) -> int:
    """Rows of the data splits (the ``rejected`` split is no data)."""
    return sum(n for split, n in (manifest.get("splits") or {}).items() if split != REJECTED)


def emptied_by(stages: list[dict]) -> dict | None:
    """The stage that received records and kept none (the first such), or None when the input was empty."""
    return next((s for s in stages if s.get("received") and not s.get("kept")), None)


def empty_reason(manifest: dict, hints: dict[str, str] | None = None) -> str:
    """Why a build has no rows, as one line: the stage that dropped the last record, its top reason with its
    count, and the hint for ``stage:reason`` or ``stage`` (or ``input`` when the input gave no record).

    >>> stages = [{"name": "read", "received": 5, "kept": 5, "dropped": {}},
    ...           {"name": "normalize", "received": 5, "kept": 0,
    ...            "dropped": {"empty_title": 4, "empty_text": 1}}]
    >>> empty_reason({"name": "c", "stages": stages}, {"normalize:empty_title": "pass --title-field KEY"})
    "c: 0 rows: stage 'normalize' dropped all 5 records it received (top reason empty_title: 4 of 5); pass
    --title-field KEY"
    """
    hints = hints or {}
    stage = emptied_by(manifest.get("stages") or [])
    name = manifest.get("name", "the build")
    if stage is None:
        return (f"{name}: 0 rows: the input gave no records"
                + (f"; {hints['input']}" if "input" in hints else ""))
    dropped = stage.get("dropped") or {}
    reason, count = max(dropped.items(), key=lambda kv: (kv[1], kv[0])) if dropped else ("none", 0)
    received = stage["received"]
    if dropped and set(dropped) <= UNUSABLE_REASONS:
        head = (f"{name}: 0 rows: all {sum(dropped.values())} LLM answers were unusable: stage "
                f"{stage['name']!r} dropped every record "
                f"({', '.join(f'{r} {n}' for r, n in sorted(dropped.items()))})")
        default_hint = "see the rejected split or check --llm"
    else:
        head = (f"{name}: 0 rows: stage {stage['name']!r} dropped all {received} records it received "
                f"(top reason {reason}: {count} of {received})")
        default_hint = ""
    hint = hints.get(f"{stage['name']}:{reason}") or hints.get(stage["name"]) or default_hint
    return head + (f"; {hint}" if hint else "")


def refuse_empty(manifest: dict, out: str | Path, hints: dict[str, str] | None = None) -> dict:
    """``manifest`` unchanged when its data splits hold rows; else EmptyBuildError (exit 2, one line, see
    :func:`empty_reason`) saying that what was written stays in ``out``."""
    if data_rows(manifest) or "shard" in manifest:
        return manifest
    raise EmptyBuildError(f"{empty_reason(manifest, hints)} (written to {out} for a look: `synth info "
                          f"{out}`; "
                          "remove it before a rebuild with other options)")
