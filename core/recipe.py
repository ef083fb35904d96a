"""The recipe of a build and its fingerprint: what a rerun into the same ``--out`` must match to resume.

A recipe is everything that decides a dataset's rows: pipeline and version, config, seed, inputs (with their
hashes), the LLM identity (backend + model), each stage's name, ``params`` and LLM identity, the chunk size
and whether rejected records are kept. ``tansaku.core.store.build_dataset`` keeps it in
``OUT/.work/recipe.json`` while building and in ``manifest.json`` (``config``, ``seed``, ``inputs``,
``stages[].params``/``llm`` …) after, and refuses a rerun whose recipe differs, naming the differences with
:func:`recipe_changes`:

    old, new = recipe_of_manifest(read_manifest(out)), build_recipe(...)
    "; ".join(recipe_changes(old, new))
    # "stage 'judge' param threshold 0.75 → 0.9; llm scripted:a → scripted:b"

>>> a = build_recipe(pipeline="p", pipeline_version="1", config={"k": 4}, seed=0, inputs=[], stages=[],
...                  llm={"backend": "scripted", "model": "scripted:a.jsonl"})
>>> b = {**a, "config": {"k": 8}, "llm": {"backend": "scripted", "model": "scripted:b.jsonl"}}
>>> recipe_changes(a, b)
['config k 4 → 8', 'llm scripted:a.jsonl → scripted:b.jsonl']
>>> fingerprint(a) == fingerprint(json.loads(canonical_json(a))) != fingerprint(b)
True
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tansaku.core import jsontext
from tansaku.core.engine import Stage, llm_identity
from tansaku.core.redact import redact_mapping

MAX_CHANGES = 6  # named in a refusal; the rest are counted


def canonical_json(obj: Any) -> str:
    """One spelling per value, for hashing: sorted keys, no spaces, UTF-8 kept.

    >>> canonical_json({"b": 1, "a": "探索"})
    '{"a":"探索","b":1}'
    """
    return jsontext.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def build_recipe(*, pipeline: str, pipeline_version: str, config: dict, seed: int, inputs: list[dict],
                 stages: list[Stage], llm: Any = None, chunk_size: int = 1000, keep_rejected: bool = False,
                 heldout: dict | None = None) -> dict:
    """The recipe as plain JSON values (tuples become lists, paths strings), so a stored one compares equal.

    ``heldout`` (``tansaku.core.heldout.HeldOut.recipe()``) is only a key when given, so datasets without a
    held-out split keep the fingerprints they had."""
    recipe = {
        "pipeline": pipeline, "pipeline_version": pipeline_version, "config": config, "seed": seed,
        "inputs": inputs, "llm": llm_identity(llm), "stages": [s.recipe() for s in stages],
        "chunk_size": chunk_size, "keep_rejected": keep_rejected,
    }
    if heldout is not None:
        recipe["heldout"] = heldout
    # Redacted as the manifest is (tansaku.core.redact): OUT/.work/recipe.json holds no secret, and a rerun
    # compares equal to the manifest it wrote. A password or key never decides the rows anyway.
    return json.loads(canonical_json(redact_mapping(recipe)))


def fingerprint(recipe: dict) -> str:
    return hashlib.sha256(canonical_json(recipe).encode()).hexdigest()[:16]


def recipe_of_manifest(manifest: dict) -> dict:
    """The recipe a finished dataset folder was built with, read back from its manifest."""
    recipe = {
        "pipeline": manifest.get("pipeline"), "pipeline_version": manifest.get("pipeline_version"),
        "config": manifest.get("config"), "seed": manifest.get("seed"), "inputs": manifest.get("inputs"),
        "llm": llm_identity(manifest.get("llm")),
        "stages": [{"name": s.get("name"), "params": s.get("params"), "llm": s.get("llm")}
                   for s in manifest.get("stages", [])],
        "chunk_size": manifest.get("chunk_size"), "keep_rejected": manifest.get("keep_rejected"),
    }
    if manifest.get("heldout") is not None:  # the manifest adds the row count, which is no part of the recipe
        recipe["heldout"] = {k: v for k, v in manifest["heldout"].items() if k not in ("rows", "rl_rows")}
    return json.loads(canonical_json(redact_mapping(recipe)))  # an older manifest may hold what is masked now


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else jsontext.dumps(value, sort_keys=True)
    return text if len(text) <= 48 else text[:47] + "…"


def _llm_label(identity: dict | None) -> str:
    if not identity:
        return "none"
    backend, model = str(identity.get("backend")), str(identity.get("model"))
    return model if model.startswith(backend + ":") else f"{backend}:{model}"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b": leaf}`` so a change names the innermost key."""
    if not isinstance(value, dict) or not value:
        return {prefix: value} if prefix else {}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _dict_changes(label: str, old: Any, new: Any) -> list[str]:
    a, b = _flat(old or {}), _flat(new or {})
    return [f"{label} {key} {_show(a.get(key))} → {_show(b.get(key))}"
            for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


def recipe_changes(old: dict, new: dict) -> list[str]:
    """What differs between two recipes, one short phrase each (``config limit 5 → 10``)."""
    changes = [f"{key} {_show(old.get(key))} → {_show(new.get(key))}"
               for key in ("pipeline", "pipeline_version", "seed", "chunk_size", "keep_rejected")
               if old.get(key) != new.get(key)]
    changes += _dict_changes("config", old.get("config"), new.get("config"))
    changes += _dict_changes("heldout", old.get("heldout"), new.get("heldout"))
    old_inputs = {i.get("path"): i for i in old.get("inputs") or []}
    new_inputs = {i.get("path"): i for i in new.get("inputs") or []}
    for path in dict.fromkeys([*old_inputs, *new_inputs]):
        a, b = old_inputs.get(path), new_inputs.get(path)
        if a is None or b is None:
            changes.append(f"input {path} {'added' if a is None else 'removed'}")
        elif a != b:
            changes.append(f"input {path} changed" + (f" (sha256 {str(a.get('sha256'))[:8]} → "
                                                      f"{str(b.get('sha256'))[:8]})"
                                                      if a.get("sha256") != b.get("sha256") else ""))
    # LLM changes: one phrase per (old → new) pair; stages are named unless the build-level LLM made that
    # change.
    top = ((_llm_label(old.get("llm")), _llm_label(new.get("llm"))) if old.get("llm") != new.get("llm")
           else None)
    llms: dict[tuple[str, str], list[str]] = {top: []} if top else {}
    old_stages, new_stages = old.get("stages") or [], new.get("stages") or []
    if [s["name"] for s in old_stages] != [s["name"] for s in new_stages]:
        changes.append(f"stages {', '.join(s['name'] for s in old_stages)} → "
                       f"{', '.join(s['name'] for s in new_stages)}")
    else:
        for a, b in zip(old_stages, new_stages):
            changes += _dict_changes(f"stage '{a['name']}' param", a.get("params"), b.get("params"))
            pair = (_llm_label(a.get("llm")), _llm_label(b.get("llm")))
            if a.get("llm") != b.get("llm") and pair != top:
                llms.setdefault(pair, []).append(a["name"])
    changes += [f"llm {a} → {b}" + (f" (stage {', '.join(stages)})" if stages else "")
                for (a, b), stages in llms.items()]
    return changes


def describe_changes(old: dict, new: dict) -> str:
    """The changes as one line (at most ``MAX_CHANGES`` named)."""
    changes = recipe_changes(old, new) or [f"fingerprint {fingerprint(old)} → {fingerprint(new)}"]
    more = len(changes) - MAX_CHANGES
    return "; ".join(changes[:MAX_CHANGES]) + (f"; and {more} more" if more > 0 else "")
