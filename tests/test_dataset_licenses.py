"""``--license`` on every build: a Hub license id or ``other:NAME`` with its text (``--license-file``, written
into the dataset as ``LICENSE``), inherited by derived datasets, part of the recipe, and a ``synth push`` that
refuses an unnamed ``other`` license by naming the flag that fixes it. Fictional inputs only
(``examples/miniwiki.jsonl``, the scripted demo teacher).

Run: pytest tests/test_dataset_licenses.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import DatasetCard
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.licenses import choose_license
from tansaku.data_cards import card_problems

ROOT = Path(__file__).resolve().parents[1]
MINIWIKI = ROOT / "examples" / "miniwiki.jsonl"
SCRIPT = ROOT / "examples" / "teacher_script.py"
LICENSE_TEXT = "My License 1.0\n\nYou may use these fictional documents for anything.\n"


def synth(*args) -> object:
    return CliRunner().invoke(synth_app, [str(a) for a in args])


def corpus(out: Path, *license_args) -> object:
    return synth("build", "corpus", "--input", MINIWIKI, "--format", "jsonl", "--out", out, "--quiet", *license_args)


def card(folder: Path) -> dict:
    return DatasetCard.load(folder / "README.md").data.to_dict()


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def dry_run(folder: Path) -> object:
    return synth("push", folder, "--repo-id", "me/ds", "--dry-run")


@pytest.fixture
def license_file(tmp_path) -> Path:
    path = tmp_path / "my-license.txt"
    path.write_text(LICENSE_TEXT, encoding="utf-8")
    return path


def test_a_hub_license_id_goes_on_the_card_into_the_recipe_and_pushes(tmp_path):
    out = tmp_path / "c"
    result = corpus(out, "--license", "cc-by-4.0")
    assert result.exit_code == 0, result.output
    assert card(out)["license"] == "cc-by-4.0" and "license_name" not in card(out)
    assert manifest(out)["config"]["license"] == "cc-by-4.0" and not (out / "LICENSE").exists()
    pushed = dry_run(out)
    assert pushed.exit_code == 0, pushed.output
    again = corpus(out, "--license", "cc-by-sa-4.0")  # another license is another recipe: refused, not mixed
    assert again.exit_code == 2 and "different recipe" in again.output and card(out)["license"] == "cc-by-4.0"


def test_a_custom_license_writes_its_text_pushes_and_reruns_as_a_no_op(tmp_path, license_file):
    out = tmp_path / "c"
    args = ("--license", "other:my-license", "--license-file", license_file)
    result = corpus(out, *args)
    assert result.exit_code == 0, result.output
    meta = card(out)
    assert (meta["license"], meta["license_name"], meta["license_link"]) == ("other", "my-license", "LICENSE")
    assert (out / "LICENSE").read_text(encoding="utf-8") == LICENSE_TEXT
    assert card_problems(meta, out) == []
    pushed = dry_run(out)
    assert pushed.exit_code == 0, pushed.output
    assert "LICENSE" in pushed.stdout.split()
    version = manifest(out)["version"]
    again = corpus(out, *args)  # the folder's own LICENSE does not make it foreign
    assert again.exit_code == 0, again.output
    assert manifest(out)["version"] == version and (out / "LICENSE").read_text(encoding="utf-8") == LICENSE_TEXT
    license_file.write_text("another text\n", encoding="utf-8")  # another license text: another recipe
    changed = corpus(out, *args)
    assert changed.exit_code == 2 and "different recipe" in changed.output, changed.output
    assert (out / "LICENSE").read_text(encoding="utf-8") == LICENSE_TEXT


def test_an_unlicensed_corpus_is_refused_by_push_naming_the_flag(tmp_path):
    out = tmp_path / "c"
    assert corpus(out).exit_code == 0
    assert card(out)["license"] == "other" and "license_name" not in card(out)
    assert manifest(out)["config"]["license"] is None  # no --license: recorded as not given (every field is)
    for result in (dry_run(out), synth("push", out, "--repo-id", "me/ds", "--private")):
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert result.output.startswith("error: ") and "license_name" in result.output
        assert "--license ID" in result.output and "--license other:NAME --license-file FILE" in result.output


@pytest.mark.parametrize("args, message", [
    (["--license", "other:Bad Name", "--license-file", "{file}"], "other:NAME"),
    (["--license", "other:", "--license-file", "{file}"], "other:NAME"),
    (["--license", "other:my-license"], "--license-file"),
    (["--license", "other:my-license", "--license-file", "{missing}"], "no such file"),
    (["--license", "other"], "other:NAME"),
    (["--license", "not-a-license"], "Hub license id"),
    (["--license-file", "{missing}"], "no such file"),
])
def test_a_bad_license_is_refused_in_one_line_before_any_write(tmp_path, license_file, args, message):
    out = tmp_path / "c"
    args = [a.format(file=license_file, missing=tmp_path / "missing.txt") for a in args]
    result = corpus(out, *args)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output
    assert not out.exists()


def test_a_push_refuses_a_card_whose_license_link_names_no_file(tmp_path, license_file):
    out = tmp_path / "c"
    assert corpus(out, "--license", "other:my-license", "--license-file", license_file).exit_code == 0
    (out / "LICENSE").unlink()
    assert any("license_link 'LICENSE'" in p for p in card_problems(card(out), out))
    result = dry_run(out)
    assert result.exit_code == 2 and "LICENSE" in result.output and result.output.count("\n") == 1


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A custom-licensed corpus, its index and the multihop questions built from it (they inherit it)."""
    base = tmp_path_factory.mktemp("licensed")
    text = base / "terms.txt"
    text.write_text(LICENSE_TEXT, encoding="utf-8")
    assert corpus(base / "corpus", "--license", "other:my-license", "--license-file", text).exit_code == 0
    assert synth("index", "build", "--dataset", base / "corpus", "--index", base / "index").exit_code == 0
    result = synth("build", "multihop", "--corpus", base / "corpus", "--out", base / "multihop", "--quiet",
                   "--max-per-subject", "0", "--max-per-bridge", "0")
    assert result.exit_code == 0, result.output
    return base


def trajectories(chain: Path, out: Path, *license_args) -> object:
    return synth("build", "trajectories", "--dataset", chain / "multihop", "--out", out, "--quiet",
                 "--teacher", f"scripted:{SCRIPT}:respond_compact", "--translator", f"scripted:{SCRIPT}:rewrite",
                 "--index", chain / "index", "--n", "1",
                 "--limit", "4", *license_args)


def test_derived_datasets_inherit_the_license_and_carry_its_text(chain, tmp_path):
    assert (card(chain / "multihop")["license_name"], card(chain / "multihop")["license_link"]) == \
        ("my-license", "LICENSE")
    assert (chain / "multihop" / "LICENSE").read_text(encoding="utf-8") == LICENSE_TEXT
    out = tmp_path / "sft"
    result = trajectories(chain, out)
    assert result.exit_code == 0, result.output
    meta = card(out)
    assert (meta["license"], meta["license_name"], meta["license_link"]) == ("other", "my-license", "LICENSE")
    assert (out / "LICENSE").read_text(encoding="utf-8") == LICENSE_TEXT
    assert dry_run(out).exit_code == 0


def test_trajectories_accept_a_license_override(chain, tmp_path):
    out = tmp_path / "sft"
    result = trajectories(chain, out, "--license", "cc-by-4.0")
    assert result.exit_code == 0, result.output
    assert card(out)["license"] == "cc-by-4.0" and "license_name" not in card(out)
    assert manifest(out)["config"]["license"] == "cc-by-4.0" and not (out / "LICENSE").exists()
    assert dry_run(out).exit_code == 0
    bad = trajectories(chain, tmp_path / "bad", "--license", "other:x y")
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and not (tmp_path / "bad").exists()


def test_choose_license_rules(tmp_path, license_file):
    source = tmp_path / "input"
    source.mkdir()
    default = {"license": "cc-by-sa-4.0"}
    assert choose_license(None, None, source, default).card == default
    assert choose_license("mit", None, source, default).card == {"license": "mit"}
    custom = choose_license("other:my-license-1.0", license_file, source, default)
    assert custom.card == {"license": "other", "license_name": "my-license-1.0", "license_link": "LICENSE"}
    assert custom.file == license_file and custom.recipe()["license"] == "other:my-license-1.0"
    with pytest.raises(MissingInputError, match="--license-file"):
        choose_license("other:my-license", None, source, default)
    with pytest.raises(InputError, match="other:NAME"):
        choose_license("other:Bad Name", license_file, source, default)
    (source / "LICENSE").write_text(LICENSE_TEXT, encoding="utf-8")  # an input that ships its license text
    assert choose_license("other:my-license", None, source, default).file == source / "LICENSE"
    assert choose_license(None, None, None, None).card == {"license": "other"}
