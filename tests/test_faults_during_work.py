"""Faults while a command works, beside bad values (issue 48): a kill at any point, a second writer, a full disk.

The contract, for ``synth build corpus`` and ``synth build egov``:

- killed (``kill -9``) at a point where the build changes the file system (``tests/fixtures/fault_points.py``:
  corpus before and after each of its 13 renames and before each of its 11 removals, 37 points; e-Gov before 13
  renames at the places its build differs, all 140 of its points under ``slow``), the next run resumes to the
  *same* dataset as an uninterrupted build (rows of every split, recipe, version, funnel, the same files and
  nothing else), reading back the chunks the killed run committed;
- a second build into the same ``--out`` while the first is paused before each of those renames is refused in one
  line (exit 2), and the first finishes to that same dataset;
- a full disk at any write (each file's sync: chunks, rows, card, manifest, LICENSE, index marker; tantivy's own
  error) is one line naming the output, exit 2, with no temp file left; what was finished stays, and the next run
  (with space again) finishes to the same dataset; a finished dataset is never written again.

And for ``train sft`` / ``train rl``: a second run into a locked ``output_dir`` is refused in one line before it
writes; a checkpoint save cut short by a full disk (torch's, safetensors' and transformers' own errors, on a real
``Trainer`` over a tiny random model) is one line, and ``resume_from_checkpoint: latest`` passes over that
unfinished checkpoint to the same final weights as an uninterrupted run.

The kill and pause sweeps fork one child per point from a process that imported the CLI once (a few tenths of a
second each).

    pytest tests/test_faults_during_work.py -q
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fixtures.cli_checks import snapshot
from fixtures.fault_checks import (
    FULL,
    ROOT,
    build_args,
    cut_save,
    dataset_state,
    full_at,
    one_line,
    sweep,
    temps_left,
    tiny_trainer,
)
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.folder_locks import locked
from tansaku.core.store import read_manifest
from tansaku.trainer.recipes import load_recipe
from tansaku.trainer.sft import resume_checkpoint, write_recipe_copy

# ---------------------------------------------------------------- (b) a kill at every point, (c) a second build

# Where e-Gov's build differs from the corpus build's (swept whole): its nested article build, each rename of its
# index (the swap's gap between two renames too), the question build's global and record-local segments.
EGOV_PLACES = (r"/\.work/recipe\.json$|articles/(data|manifest\.json)$|index|/\.work/segment-0[02]-[a-z]+$"
               r"|segment-01-leak_filter/chunk-000000\.stats\.json$|/(data|manifest\.json)$")
SWEEPS = {"corpus": (), "egov": ("--renames-before", "--only", EGOV_PLACES)}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """``swept(build)``: (the uninterrupted build's state, its points, the kill lines, the pause lines) of one
    ``fault_points.py both`` run (corpus: every point; e-Gov: before each rename of ``EGOV_PLACES``)."""
    done = {}

    def get(build: str) -> tuple[dict, list[dict], list[dict], list[dict]]:
        if build not in done:
            root = tmp_path_factory.mktemp(f"sweep-{build}")
            ref, *lines = sweep("both", root, build, *SWEEPS[build])
            done[build] = (dataset_state(root / "ref"), ref["points"], [x for x in lines if x["mode"] == "kill"],
                           [x for x in lines if x["mode"] == "pause"])
        return done[build]

    return get


def check_kills(lines: list[dict], ref: dict) -> list[str]:
    failures = []
    for line in lines:
        where = f"point {line['point']} ({line['when']} {line['op']} {line['path']})"
        if line["killed"] != -9:
            failures.append(f"{where}: not reached (exit {line['killed']}): {line['killed_stderr'][-300:]}")
        elif line["resumed"] != 0:
            failures.append(f"{where}: the resume failed (exit {line['resumed']}): {line['stderr'][-600:]}")
        elif (got := dataset_state(Path(line["out"]))) != ref:
            diff = sorted(k for k in ref if got.get(k) != ref[k])
            failures.append(f"{where}: the resumed dataset differs in {diff}: "
                            f"{[(got.get(k), ref[k]) for k in diff if k in ('files', 'splits', 'funnel')]}")
        elif not line["finished"] and read_manifest(line["out"])["resumed_chunks"] < line["committed"]:
            failures.append(f"{where}: {line['committed']} chunks were committed, the resume read back "
                            f"{read_manifest(line['out'])['resumed_chunks']}")
    return failures


@pytest.mark.parametrize("build, least", [("corpus", 37), ("egov", 13)])
def test_a_build_killed_at_any_point_resumes_to_the_same_dataset(build, least, swept):
    """corpus: before and after each of its 13 renames, before each of its 11 removals; e-Gov: ``EGOV_PLACES``."""
    ref, points, kills, _ = swept(build)
    assert len(kills) >= least, (len(kills), [p["path"] for p in points])
    failures = check_kills(kills, ref)
    assert not failures, f"{len(failures)} of {len(kills)} kill points:\n" + "\n".join(failures)


@pytest.mark.slow
def test_egov_killed_at_every_point_resumes_to_the_same_dataset(tmp_path):
    """Every point of the e-Gov build: before and after each of its 47 renames, before each of its 46 removals."""
    ref, *kills = sweep("kill", tmp_path, "egov")
    assert len(kills) >= 140, len(kills)
    failures = check_kills(kills, dataset_state(tmp_path / "ref"))
    assert not failures, f"{len(failures)} of {len(kills)} kill points:\n" + "\n".join(failures)


@pytest.mark.parametrize("build, least", [("corpus", 13), ("egov", 13)])
def test_a_second_build_into_the_same_out_is_refused_and_the_first_finishes(build, least, swept):
    """The first build paused before each rename (corpus: all 13; e-Gov: ``EGOV_PLACES``) while a second one runs."""
    ref, points, _, pauses = swept(build)
    assert len(pauses) >= least, [p["path"] for p in points]
    failures = []
    for line in pauses:
        where = f"paused before {line['op']} {line['path']} (point {line['point']})"
        second = one_line(line["second_stderr"])
        if line["second"] != 2 or second is None or "another process" not in second:
            failures.append(f"{where}: the second build was not refused in one line (exit {line['second']}): "
                            f"{line['second_stderr'][-600:]}")
        if line["first"] != 0:
            failures.append(f"{where}: the first build failed (exit {line['first']}): {line['first_stderr'][-600:]}")
        elif dataset_state(Path(line["out"])) != ref:
            failures.append(f"{where}: the first build's dataset differs from an uninterrupted build's")
    assert not failures, f"{len(failures)} of {len(pauses)} points:\n" + "\n".join(failures)


# ---------------------------------------------------------------- (a) a full disk at any write

def synth(args: list[str], out: Path):
    return CliRunner().invoke(synth_app, [a.replace("{out}", str(out)) for a in args])


def check_full(result, out: Path, args: list[str], ref: dict, finished: dict[str, dict]) -> None:
    """One line naming ``out``, exit 2, no temp file left, what was finished intact; then the next run finishes."""
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    line = one_line(result.stderr)  # named by the option the path lies in (cli_common.naming_the_option), or not
    assert line is not None and line.startswith((f"error: {out}", f"error: --out {out}")), result.stderr
    assert FULL in result.stderr and temps_left(out) == []
    for sub, state in finished.items():
        assert dataset_state(out / sub) == state, f"the finished {sub} changed"
    again = synth(args, out)
    assert again.exit_code == 0, again.stderr
    assert dataset_state(out) == ref


def test_a_full_disk_at_any_write_of_a_build_is_one_line_and_the_next_run_finishes(tmp_path, monkeypatch):
    args = build_args("corpus", tmp_path)
    assert synth(args, tmp_path / "ref").exit_code == 0
    ref, hits = dataset_state(tmp_path / "ref"), []
    for nth in range(1, 40):
        out = tmp_path / f"full-{nth}"
        with monkeypatch.context() as m:
            seen = full_at(m, nth)
            result = synth(args, out)
        if seen["hit"] is None:  # past the build's last write
            assert result.exit_code == 0 and dataset_state(out) == ref
            break
        hits.append(seen["hit"])
        check_full(result, out, args, ref, {})
    # the recipe, the chunks, their rejected records and counts, the global stage's, the rows, card, manifest, LICENSE
    assert {"recipe.json", "done.json", "train-00000-of-00001.parquet", "README.md", "manifest.json",
            "LICENSE"} <= set(hits), hits


@pytest.fixture(scope="module")
def egov_ref(tmp_path_factory) -> tuple[list[str], dict]:
    root = tmp_path_factory.mktemp("egov-ref")
    args = build_args("egov", root)
    assert synth(args, root / "ref").exit_code == 0
    return args, dataset_state(root / "ref")


@pytest.mark.parametrize("target, nth", [
    ("recipe.json", 1), ("train-00000-of-00001.parquet", 1), ("manifest.json", 1),  # the article dataset
    (".tansaku_partial.json", 1), ("tansaku_index.json", 1),  # the index, swapped in whole
    ("recipe.json", 2), ("rejected.jsonl", 1), ("test-00000-of-00001.parquet", 1), ("README.md", 2),
    ("manifest.json", 2),  # the question dataset
])
def test_a_full_disk_anywhere_in_the_egov_build_keeps_what_was_finished(target, nth, egov_ref, tmp_path, monkeypatch):
    args, ref = egov_ref
    out = tmp_path / "egov"
    with monkeypatch.context() as m:
        seen = full_at(m, nth, (target,))
        result = synth(args, out)
    assert seen["hit"] == target, "the write was never reached"
    finished = {"articles": ref["articles"]} if (out / "articles" / "manifest.json").exists() else {}
    check_full(result, out, args, ref, finished)


def test_a_full_disk_while_tantivy_writes_the_index_is_one_line(egov_ref, tmp_path, monkeypatch):
    """tantivy (Rust) reports a full disk only in its text (``… (os error 28)``)."""
    import tantivy

    args, ref = egov_ref
    out = tmp_path / "egov"

    class FullIndex:
        def __init__(self, *_a, **kwargs):
            raise ValueError(f"An IO error occurred: '{FULL} (os error 28) at path \"{kwargs.get('path')}/meta.json\"'")

    with monkeypatch.context() as m:
        m.setattr(tantivy, "Index", FullIndex)
        result = synth(args, out)
    check_full(result, out, args, ref, {"articles": ref["articles"]})


def test_a_finished_dataset_is_left_as_it_is_by_a_rerun_even_on_a_full_disk(tmp_path, monkeypatch):
    args = build_args("corpus", tmp_path)
    out = tmp_path / "corpus"
    assert synth(args, out).exit_code == 0
    before = snapshot(out)
    with monkeypatch.context() as m:
        seen = full_at(m, 1)
        result = synth(args, out)
    assert result.exit_code == 0 and seen["hit"] is None and snapshot(out) == before  # nothing written
    other = [a.replace("miniwiki.jsonl", "miniwiki_unseen.jsonl") for a in args]  # another recipe: refused
    result = synth(other, out)
    assert result.exit_code == 2 and "different recipe" in (one_line(result.stderr) or ""), result.stderr
    assert snapshot(out) == before


# ---------------------------------------------------------------- training runs: a second run, a cut-short save

SFT_TINY = ROOT / "trainer" / "recipes" / "sft-tiny.yaml"
RL_TINY = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"


class Reached(AssertionError):
    """Raised where a run would load its model: it got past every check (and past the output_dir's lock)."""


@pytest.fixture
def model_dir(tmp_path) -> Path:
    folder = tmp_path / "model"  # passes for a model until something loads it
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    return folder


def train(kind: str, model: Path, out: Path, *args: str):
    config = SFT_TINY if kind == "sft" else RL_TINY
    return CliRunner().invoke(train_app, [kind, "--config", str(config), "--quiet", "--model_name_or_path", str(model),
                                          "--output_dir", str(out), *args])


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_a_second_training_run_into_the_same_output_dir_is_refused(kind, model_dir, tmp_path, monkeypatch):
    """Two runs into one output_dir would write their checkpoints among each other's: the second is refused in one
    line while the first holds the folder (its lock, taken here as another process would hold it)."""
    from tansaku.trainer import rl as rl_module
    from tansaku.trainer import sft as sft_module

    def reached(*_a, **_k):
        raise Reached("past the checks")

    for owner, name in [(sft_module, "build_sft_trainer"), (rl_module, "build_rl_trainer"),
                        (rl_module, "check_readiness"), (rl_module, "band_prompts")]:
        monkeypatch.setattr(owner, name, reached)
    out = tmp_path / "run"
    assert isinstance(train(kind, model_dir, out).exception, Reached)  # the first run, up to its model
    before = snapshot(out)
    fd = locked(out)  # that run, still training
    try:
        result = train(kind, model_dir, out)
    finally:
        os.close(fd)
    assert result.exit_code == 2 and "another process" in (one_line(result.stderr) or ""), result.stderr
    assert snapshot(out) == before
    assert isinstance(train(kind, model_dir, out).exception, Reached)  # once it ended, the folder is free again


def test_resume_passes_over_a_checkpoint_whose_save_was_cut_short(model_dir, tmp_path):
    out = tmp_path / "run"
    state = json.dumps({"global_step": 2, "log_history": []})
    for step, files in ((2, {"model.safetensors": "w", "trainer_state.json": state}),
                        (4, {"model.safetensors": "w"}),  # killed or out of disk before trainer_state.json
                        (6, {"model.safetensors": "w", "trainer_state.json": state[:10]})):  # cut mid-write
        (out / f"checkpoint-{step}").mkdir(parents=True)
        for name, text in files.items():
            (out / f"checkpoint-{step}" / name).write_text(text, encoding="utf-8")
    recipe = load_recipe(SFT_TINY, ["--output_dir", str(out), "--resume_from_checkpoint", "latest"], kind="sft")
    write_recipe_copy(recipe)  # the run's own folder (its marker)
    assert resume_checkpoint(recipe) == str(out / "checkpoint-2")
    for step in (4, 6):
        result = train("sft", model_dir, out, "--resume_from_checkpoint", str(out / f"checkpoint-{step}"))
        assert result.exit_code == 2 and "unfinished checkpoint" in (one_line(result.stderr) or ""), result.stderr


@pytest.mark.parametrize("writer", ["torch", "safetensors", "trainer_state"])
def test_a_full_disk_while_a_checkpoint_is_saved_is_one_line_and_the_run_resumes(writer, model_dir, tmp_path,
                                                                                 monkeypatch):
    from safetensors.torch import load_file

    from tansaku.trainer import sft as sft_module

    monkeypatch.setattr(sft_module, "build_sft_trainer", tiny_trainer)
    steps = ["--max_steps", "6", "--save_steps", "2", "--per_device_train_batch_size", "2", "--logging_steps", "1"]
    ref = tmp_path / "ref"
    assert train("sft", model_dir, ref, *steps).exit_code == 0
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        cut_save(writer, m)
        result = train("sft", model_dir, out, *steps)
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    # (transformers' "Writing model shards" bar shows even with --quiet: only the error line is checked here)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and FULL in errors[0] and "Traceback" not in result.stderr, result.stderr
    if writer == "torch":  # torch's message has no errno: read from the disk that has no space left
        assert errors[0].startswith(f"error: {out}: {FULL}"), errors
    assert not (out / "checkpoint-6").exists() and (out / "checkpoint-2" / "trainer_state.json").is_file()
    again = train("sft", model_dir, out, *steps, "--resume_from_checkpoint", "latest")
    assert again.exit_code == 0, (again.stderr, again.exception)
    assert json.loads((out / "trainer_state.json").read_text(encoding="utf-8"))["global_step"] == 6
    weights, expected = load_file(out / "model.safetensors"), load_file(ref / "model.safetensors")
    assert weights.keys() == expected.keys()
    assert all(bool((weights[k] - expected[k]).abs().max() < 1e-5) for k in weights), "resumed to other weights"
