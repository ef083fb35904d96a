"""Writes that a planted symbolic link cannot redirect (``tansaku.core.safe_write``), output folders that other
users could write refused before any work, and ``train merge`` copying no linked side file.

    pytest tests/test_safe_write.py -q

The races are made deterministic: a link is planted right before the write (a monkeypatched step of the
build), or pre-planted at the fixed ``*.tmp`` / ``*.partial`` names that tansaku used to write through. Tests
run as one user, so "another user's folder" is played by replacing ``safe_write.owned_by_me``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core import ownership, safe_write, store
from tansaku.core.context import BuildContext
from tansaku.core.engine import global_stage, map_stage
from tansaku.core.errors import InputError
from tansaku.core.out_folder import precheck_out
from tansaku.core.runner import run_pipeline
from tansaku.core.shards import ShardPlan, write_shard_marker


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file a planted link points to: it must never be written."""
    path = tmp_path / "victim.txt"
    path.write_text("keep", encoding="utf-8")
    return path


def _build(out: Path):
    return store.build_dataset(out=out, name="t", pipeline="test", pipeline_version="1", config={"x": 1}, seed=0,
                               inputs=[], source=[{"id": i, "text": f"t{i}"} for i in range(5)],
                               stages=[map_stage("keep", lambda r: r)], chunk_size=2,
                               context=BuildContext(quiet=True))


# ---------------------------------------------------------------- planted links are replaced, never written through


def test_a_link_planted_at_the_card_path_during_the_build_is_replaced_not_written_through(tmp_path, victim,
                                                                                          monkeypatch):
    out, real = tmp_path / "out", store.render_card

    def planting(*args, **kwargs):  # the race: another user's link appears just before the card is written
        (out / "README.md").symlink_to(victim)
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "render_card", planting)
    _build(out)
    assert victim.read_text(encoding="utf-8") == "keep"
    assert not (out / "README.md").is_symlink() and (out / "README.md").read_text(encoding="utf-8").startswith("---")


def test_links_at_the_old_fixed_temp_names_of_chunks_are_never_written_through(tmp_path, victim):
    work = tmp_path / "work"
    seg = work / "segment-00-keep"
    seg.mkdir(parents=True)
    for name in ("chunk-000000.jsonl.tmp", "chunk-000000.stats.json.tmp", "chunk-000000.rejected.jsonl.tmp",
                 "done.json.tmp"):
        (seg / name).symlink_to(victim)
    result = run_pipeline([{"i": i} for i in range(3)], [map_stage("keep", lambda r: r)], work, chunk_size=10,
                          keep_rejected=True)
    assert [r["i"] for r in result.rows()] == [0, 1, 2]
    assert victim.read_text(encoding="utf-8") == "keep"


def test_a_link_at_the_old_partial_folder_of_a_global_stage_is_left_alone(tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (work / "segment-00-all.partial").symlink_to(elsewhere, target_is_directory=True)
    result = run_pipeline([{"i": i} for i in range(3)], [global_stage("all", lambda rs: iter(list(rs)))], work,
                          chunk_size=2)
    assert [r["i"] for r in result.rows()] == [0, 1, 2]
    assert list(elsewhere.iterdir()) == []


def test_links_at_the_old_temp_names_of_the_shard_marker_manifest_and_data_are_never_followed(tmp_path, victim):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "shard.json.tmp").symlink_to(victim)
    write_shard_marker(tmp_path, ShardPlan(0, 2), "fp", "segment-00-keep", 3)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json.tmp").symlink_to(victim)
    (out / "data.partial").symlink_to(elsewhere, target_is_directory=True)
    store.write_rows(out, {"train": lambda: [{"a": 1}]})
    store.write_manifest(out, {"name": "t"})
    assert victim.read_text(encoding="utf-8") == "keep" and list(elsewhere.iterdir()) == []
    assert json.loads((tmp_path / "shard.json").read_text(encoding="utf-8"))["of"] == 2
    assert [p.name for p in (out / "data").iterdir()] == ["train-00000-of-00001.parquet"]


def test_a_link_at_the_old_merge_shard_temp_name_is_never_written_through(tmp_path, victim):
    torch = pytest.importorskip("torch")
    from tansaku.trainer.merge import _ShardWriter

    (tmp_path / "shard-00000.tmp").symlink_to(victim)
    writer = _ShardWriter(tmp_path, 1 << 20)
    writer.add("w", torch.zeros(2))
    writer.close()
    assert victim.read_text(encoding="utf-8") == "keep"
    assert (tmp_path / "model.safetensors").is_file() and not (tmp_path / "model.safetensors").is_symlink()


def test_what_a_killed_write_leaves_in_a_dataset_folder_is_the_builds_own(tmp_path):
    (tmp_path / ".README.md.ab12cd_3.tmp").write_text("half", encoding="utf-8")
    (tmp_path / "data.ab12cd_3.partial").mkdir()
    (tmp_path / ".notes.txt.ab12cd_3.tmp").write_text("a user's", encoding="utf-8")
    assert ownership.foreign_entries(tmp_path, "dataset") == [".notes.txt.ab12cd_3.tmp"]


# ---------------------------------------------------------------- the helpers


def test_a_failed_write_leaves_neither_a_temp_file_nor_a_changed_target(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError), safe_write.open_atomic(target) as f:
        f.write("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text(encoding="utf-8") == "old" and os.listdir(tmp_path) == ["report.json"]


def test_written_files_get_the_mode_a_plain_open_gives(tmp_path):
    path = safe_write.write_text_atomic(tmp_path / "a.txt", "x")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~safe_write._umask()
    folder = safe_write.fresh_dir(tmp_path / "data")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~safe_write._umask()
    assert safe_write.partial_of(folder.name) == "data"


def test_in_place_opens_and_copies_refuse_a_link(tmp_path, victim):
    link = tmp_path / "log"
    link.symlink_to(victim)
    with pytest.raises(OSError):
        safe_write.open_for_append(link)
    with pytest.raises(safe_write.LinkRefusedError, match="symbolic link"):
        safe_write.copy_file_atomic(link, tmp_path / "copy")
    (tmp_path / "work").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        safe_write.ensure_dir(tmp_path / "work")
    assert victim.read_text(encoding="utf-8") == "keep" and not (tmp_path / "copy").exists()
    with safe_write.open_for_append(tmp_path / "real.log") as f:
        f.write("a\n")
    assert (tmp_path / "real.log").read_text(encoding="utf-8") == "a\n"


# ---------------------------------------------------------------- output folders other users could write


def _foreign(monkeypatch, *paths: Path) -> None:
    """Play another user's ownership of ``paths`` (a link itself: its lstat)."""
    ids = {(s.st_dev, s.st_ino) for s in (os.lstat(p) for p in paths)}
    monkeypatch.setattr(safe_write, "owned_by_me", lambda st: (st.st_dev, st.st_ino) not in ids)


def _shared(path: Path, mode: int = 0o777) -> Path:
    path.mkdir(exist_ok=True)
    path.chmod(mode)
    return path


def test_a_world_writable_out_of_another_user_is_refused_by_the_cli_in_one_line(tmp_path, monkeypatch):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "title": "t", "text": "x"}\n', encoding="utf-8")
    out = _shared(tmp_path / "shared")
    _foreign(monkeypatch, out)
    result = CliRunner().invoke(synth_app, ["build", "corpus", "--input", str(src), "--out", str(out), "-q"])
    assert result.exit_code == 2, (result.stderr, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "writable by other users" in lines[0], result.stderr
    assert list(out.iterdir()) == []


def test_train_merge_refuses_a_group_writable_out_of_another_user(tmp_path, monkeypatch):
    out = _shared(tmp_path / "shared", 0o770)
    _foreign(monkeypatch, out)
    (tmp_path / "a").mkdir()  # a model folder that exists: the --out check is what refuses
    (tmp_path / "a" / "config.json").write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(train_app, ["merge", "soup", str(tmp_path / "a"), "--out", str(out)])
    assert result.exit_code == 2 and "writable by other users" in result.stderr, (result.stderr, result.exception)


@pytest.mark.parametrize("claim", ["dataset", "eval", "index"])
def test_every_output_folder_claim_refuses_a_shared_folder_of_another_user(tmp_path, monkeypatch, claim):
    out = _shared(tmp_path / "shared")
    _foreign(monkeypatch, out)
    with pytest.raises(InputError, match="writable by other users"):
        if claim == "dataset":
            precheck_out(out, pipeline="corpus")
        elif claim == "eval":
            ownership.refuse_unmarked(out, "--out", ownership.EVAL_MARKER, "eval", "eval folder")
        else:
            from tansaku.envs.search import build_index
            build_index(tmp_path / "no-dataset", out)
    assert list(out.iterdir()) == []


def test_the_folder_an_out_is_created_in_counts_unless_it_has_the_sticky_bit(tmp_path, monkeypatch):
    parent = _shared(tmp_path / "shared")
    _foreign(monkeypatch, parent)
    with pytest.raises(InputError, match="the folder it lies in"):
        ownership.require_named(parent / "new" / "out", "--out")
    parent.chmod(0o1777)  # /tmp: others can neither rename nor remove what tansaku creates there
    assert ownership.require_named(parent / "out", "--out") == parent / "out"


def test_an_out_linked_to_another_users_folder_or_by_another_user_is_refused(tmp_path, monkeypatch):
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    theirs.mkdir()
    mine.mkdir()
    to_theirs, planted = tmp_path / "to-theirs", tmp_path / "planted"
    to_theirs.symlink_to(theirs, target_is_directory=True)
    planted.symlink_to(mine, target_is_directory=True)
    _foreign(monkeypatch, theirs, planted)
    for link in (to_theirs, planted):
        with pytest.raises(InputError, match="symbolic link"):
            ownership.require_named(link, "--out")
    (tmp_path / "to-mine").symlink_to(mine, target_is_directory=True)
    assert ownership.require_named(tmp_path / "to-mine", "--out") == tmp_path / "to-mine"


def test_a_link_planted_between_the_check_and_the_folders_creation_is_refused(tmp_path, monkeypatch):
    out, theirs = tmp_path / "out", _shared(tmp_path / "theirs")
    ownership.require_named(out, "--out")  # checked while missing
    out.symlink_to(theirs, target_is_directory=True)  # then planted
    _foreign(monkeypatch, out, theirs)
    with pytest.raises(InputError, match="symbolic link"), ownership.claimed(out, "--out", lambda: None):
        pass
    assert list(theirs.iterdir()) == []


# ---------------------------------------------------------------- train merge: side files


def test_merge_refuses_a_linked_side_file_and_copies_none_of_its_contents(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from tansaku.trainer.merge import MergeError, soup

    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=hunter2", encoding="utf-8")
    models = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text("{}", encoding="utf-8")
        models.append(folder)
    (models[0] / "special_tokens_map.json").symlink_to(secret)
    with pytest.raises(MergeError, match="special_tokens_map.json is a symbolic link"):
        soup(models, tmp_path / "out")
    merged = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != secret]
    assert not any("hunter2" in p.read_bytes().decode("utf-8", "replace") for p in merged)
    assert not (tmp_path / "out").exists()


def test_merge_refuses_an_index_naming_weights_outside_the_checkpoint(tmp_path):
    from tansaku.trainer.merge import WEIGHT_INDEX, MergeError, weight_files

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / WEIGHT_INDEX).write_text(json.dumps({"weight_map": {"w": "../other.safetensors"}}),
                                               encoding="utf-8")
    with pytest.raises(MergeError, match="outside"):
        weight_files(tmp_path / "m")
