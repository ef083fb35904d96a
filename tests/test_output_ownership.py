"""Every command writes only into a folder it can prove it made, and never over what it reads (issue 28).

``train eval --out``, ``train merge --out`` and the ``output_dir`` of ``train sft`` / ``train rl`` carry a marker
like datasets and indexes do (``tansaku.core.ownership``): a folder the same kind of command made may be
rewritten; a missing or empty one is free; a user's folder, a dataset or an index is refused in one line (exit 2)
before any model loads, every byte left as it was. An ``--out`` equal to, inside or holding an input is refused
by every pipeline before any work (``ownership.refuse_overlap``). Nothing here loads a model.

    pytest tests/test_output_ownership.py -q
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from fixtures.cli_checks import refused, snapshot
from fixtures.envs.helpers import HERE as ENV_FIXTURES
from fixtures.envs.helpers import build_fixture_index
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
MINIWIKI = ROOT / "examples" / "miniwiki.jsonl"
SFT_TINY = ROOT / "trainer" / "recipes" / "sft-tiny.yaml"
RL_TINY = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"
LAW = ROOT / "tests" / "fixtures" / "egov" / "506AC0000000901_20250401_000000000000000.xml"
RESPONDER = """
from pathlib import Path
Path({sentinel!r}).write_text("loaded")  # the model was loaded: the check came too late
def respond(request):
    return "<think>答える</think>{{{{白砂市}}}}"
"""


def synth(*args: str):
    return CliRunner().invoke(synth_app, [str(a) for a in args])


def train(*args: str):
    return CliRunner().invoke(train_app, [str(a) for a in args])


@pytest.fixture(scope="module")
def envs(tmp_path_factory) -> dict:
    """The fictional search corpus (a dataset), its index and a scripted model that leaves a sentinel when loaded."""
    d = tmp_path_factory.mktemp("envs")
    index = build_fixture_index(d)  # d/corpus: the documents it indexes
    assert synth("build", "corpus", "--input", MINIWIKI, "--out", d / "dataset", "-q").exit_code == 0
    return {"index": index, "corpus": d / "corpus", "dataset": d / "dataset", "root": d}


@pytest.fixture
def model(tmp_path) -> tuple[str, Path]:
    sentinel = tmp_path / "model_loaded"
    (tmp_path / "responder.py").write_text(RESPONDER.format(sentinel=str(sentinel)), encoding="utf-8")
    return f"scripted:{tmp_path / 'responder.py'}", sentinel


def evaluate(envs, model_spec: str, out: Path, dataset: Path = ENV_FIXTURES / "multihop.jsonl"):
    return train("eval", "--task", "multihop_qa", "--dataset", dataset, "--model", model_spec,
                 "--index", envs["index"], "--k", "1", "--out", out)


# ---------------------------------------------------------------- 1. train eval --out


def test_eval_refuses_a_users_folder_a_dataset_and_an_index_before_the_model_loads(envs, model, tmp_path):
    spec, sentinel = model
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.json").write_text("mine\n", encoding="utf-8")
    (mine / "trajectories.jsonl").write_text("mine\n", encoding="utf-8")
    for out, words in ((mine, ("report.json",)), (envs["dataset"], ("dataset",)), (envs["index"], ("index",))):
        before = snapshot(out)
        refused(evaluate(envs, spec, out), str(out), *words)
        assert snapshot(out) == before
    assert not sentinel.exists()


def test_eval_rewrites_the_folder_it_made_and_one_an_older_tansaku_made(envs, model, tmp_path):
    spec, _ = model
    out = tmp_path / "eval"
    assert evaluate(envs, spec, out).exit_code == 0
    assert evaluate(envs, spec, out).exit_code == 0  # its own folder: rewritten
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["questions"] == 4 and (out / "tansaku_eval.json").is_file()
    legacy = tmp_path / "legacy"  # report.json + trajectories.jsonl of a tansaku from before the marker
    legacy.mkdir()
    (legacy / "report.json").write_text(json.dumps(report), encoding="utf-8")
    (legacy / "trajectories.jsonl").write_text((out / "trajectories.jsonl").read_text(encoding="utf-8"))
    assert evaluate(envs, spec, legacy).exit_code == 0


def test_eval_out_inside_its_dataset_is_refused(envs, model, tmp_path):
    spec, sentinel = model
    before = snapshot(envs["root"])
    refused(evaluate(envs, spec, envs["corpus"] / "eval", dataset=envs["corpus"]), "inside", "--dataset")
    assert snapshot(envs["root"]) == before and not sentinel.exists()


# ---------------------------------------------------------------- 2. train merge --out


@pytest.fixture
def checkpoints(tmp_path) -> list[Path]:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    made = []
    for i, name in enumerate(("a", "b", "c")):
        d = tmp_path / name
        d.mkdir()
        g = torch.Generator().manual_seed(i)
        save_file({"w": torch.randn(4, 4, generator=g), "v": torch.randn(4, generator=g)}, str(d / "model.safetensors"))
        (d / "config.json").write_text(json.dumps({"model_type": "toy", "from": name}), encoding="utf-8")
        made.append(d)
    return made


def test_merge_refuses_a_users_folder_and_its_own_inputs(checkpoints, tmp_path):
    import shutil

    a, b, c = checkpoints
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("README.md", "config.json", "model.safetensors"):
        (mine / name).write_text("mine", encoding="utf-8")
    merged = tmp_path / "merged"  # a merge tansaku made, then used as an input
    assert train("merge", "soup", a, b, "--out", merged).exit_code == 0
    before = snapshot(tmp_path)
    refused(train("merge", "soup", a, b, "--out", mine), str(mine), "README.md")
    refused(train("merge", "chat-vector", a, b, c, "--out", a), str(a), "is the input")  # a user's model, an input
    refused(train("merge", "chat-vector", merged, b, c, "--out", merged), "is the input")  # its own input
    refused(train("merge", "soup", merged, b, "--out", merged / "again"), "inside")  # --out inside an input
    assert snapshot(tmp_path) == before
    shutil.copytree(c, merged / "inner")  # a merge's folder with files put there since: replacing it loses them
    before = snapshot(tmp_path)
    refused(train("merge", "soup", a, b, "--out", merged), "added", "inner")  # (as an input: "holds the input")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("weight", ["nan", "inf"])
def test_merge_refuses_non_finite_weights_and_scales(checkpoints, tmp_path, weight):
    a, b, c = checkpoints
    refused(train("merge", "soup", a, b, "--weight", "1", "--weight", weight, "--out", tmp_path / "o"), "finite")
    refused(train("merge", "chat-vector", a, b, c, "--scale", weight, "--out", tmp_path / "o"), "finite")
    assert not (tmp_path / "o").exists()


def test_merge_replaces_the_merge_it_made_whole(checkpoints, tmp_path):
    from tansaku.trainer.merge import soup, weight_files

    a, b, _ = checkpoints
    out = tmp_path / "merged"
    soup([a, b], out, max_shard_bytes=32)  # sharded: an index and several files
    assert (out / "model.safetensors.index.json").is_file()
    result = train("merge", "soup", a, b, "--out", out)  # one file now: no stale shard or index may stay
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".safetensors") == ["model.safetensors"]
    assert not (out / "model.safetensors.index.json").exists() and set(weight_files(out)) == {"w", "v"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial/old sibling left


# ---------------------------------------------------------------- 3. train sft / rl output_dir


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_training_refuses_a_dataset_an_index_or_a_users_folder_as_output_dir(envs, tmp_path, kind):
    recipe = SFT_TINY if kind == "sft" else RL_TINY
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my notes", encoding="utf-8")
    for out in (envs["dataset"], envs["index"], mine):
        before = snapshot(envs["root"]), snapshot(mine)
        # A model that does not exist: a check after loading it would fail on the model, not the output_dir.
        refused(train(kind, "--config", recipe, "--output_dir", out, "--model_name_or_path", "/no/such/model"),
                f"output_dir {out}")
        assert (snapshot(envs["root"]), snapshot(mine)) == before


def test_a_run_folder_of_its_own_kind_is_its_own_and_one_of_the_other_kind_is_refused(tmp_path):
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.run_folder import check_output_dir
    from tansaku.trainer.sft import write_recipe_copy

    run = tmp_path / "run"
    sft = load_recipe(SFT_TINY, ["--output_dir", str(run)], kind="sft")
    check_output_dir(sft)  # missing: free
    write_recipe_copy(sft)
    (run / "checkpoint-5").mkdir()
    check_output_dir(sft)  # its own: resumed or continued
    with pytest.raises(InputError, match="holds a tansaku sft"):
        check_output_dir(load_recipe(RL_TINY, ["--output_dir", str(run)], kind="rl"))
    copied = tmp_path / "copied"  # a checkpoint copied into a fresh folder: resumed only when asked to
    (copied / "checkpoint-2").mkdir(parents=True)
    (copied / "checkpoint-2" / "trainer_state.json").write_text("{}", encoding="utf-8")
    check_output_dir(load_recipe(RL_TINY, ["--output_dir", str(copied), "--resume_from_checkpoint", "latest"],
                                 kind="rl"))
    with pytest.raises(InputError, match="checkpoint-2"):
        check_output_dir(load_recipe(RL_TINY, ["--output_dir", str(copied)], kind="rl"))


def test_a_current_output_of_another_kind_is_named_by_its_kind(envs, model, tmp_path):
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.sft import write_recipe_copy

    spec, sentinel = model
    run = tmp_path / "sft"  # a current sft run (its marker names its kind), given as an eval --out
    write_recipe_copy(load_recipe(SFT_TINY, ["--output_dir", str(run)], kind="sft"))
    before = snapshot(run)
    refused(evaluate(envs, spec, run), str(run), "holds a tansaku sft output")
    assert snapshot(run) == before and not sentinel.exists()


@pytest.mark.parametrize("where", ["under_a_file", "read_only"])
def test_an_unwritable_output_dir_is_one_line_not_a_traceback(tmp_path, where):
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.sft import write_recipe_copy

    if where == "read_only" and os.geteuid() == 0:
        pytest.skip("root ignores chmod (under_a_file stands in)")
    place = tmp_path / where
    if where == "under_a_file":
        place.write_text("x", encoding="utf-8")
    else:
        place.mkdir(mode=0o555)
    run = place / "run"
    try:
        with pytest.raises(InputError, match=f"^output_dir {re.escape(str(run))}: cannot create the folder"):
            write_recipe_copy(load_recipe(SFT_TINY, ["--output_dir", str(run)], kind="sft"))
    finally:
        place.chmod(0o755)
    assert not run.exists()


def test_training_output_dir_equal_to_inside_or_holding_its_model_is_refused(tmp_path):
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.run_folder import check_output_dir
    from tansaku.trainer.sft import write_recipe_copy

    run = tmp_path / "sft"  # an SFT run: the start of the next run
    write_recipe_copy(load_recipe(SFT_TINY, ["--output_dir", str(run)], kind="sft"))
    (run / "checkpoint-4").mkdir()
    with pytest.raises(InputError, match="is the input model"):
        check_output_dir(load_recipe(SFT_TINY, ["--output_dir", str(run), "--model_name_or_path", str(run)],
                                     kind="sft"))
    with pytest.raises(InputError, match="holds the input model"):
        check_output_dir(load_recipe(SFT_TINY, ["--output_dir", str(run),
                                                "--model_name_or_path", str(run / "checkpoint-4")], kind="sft"))
    with pytest.raises(InputError, match="is inside the input model"):
        check_output_dir(load_recipe(RL_TINY, ["--output_dir", str(run / "rl"), "--model_name_or_path", str(run)],
                                     kind="rl"))


# ---------------------------------------------------------------- 4. --out inside an input


def test_corpus_out_inside_its_input_folder_is_refused_before_any_work(tmp_path):
    jq = tmp_path / "jq"
    jq.mkdir()
    doc = {"data": [{"title": "架空島", "paragraphs": [{"context": "架空島は海にある。", "qas": []}]}]}
    (jq / "a.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    built = tmp_path / "built"  # a corpus tansaku built, its source then copied into it
    assert synth("build", "corpus", "--input", MINIWIKI, "--out", built, "-q").exit_code == 0
    (built / "src.jsonl").write_bytes(MINIWIKI.read_bytes())
    before = snapshot(tmp_path)
    refused(synth("build", "corpus", "--input", jq, "--out", jq / "out", "-q"), "inside", "--input")
    refused(synth("build", "corpus", "--input", jq, "--out", jq, "-q"), str(jq), "is the input")
    refused(synth("build", "corpus", "--input", built / "src.jsonl", "--out", built, "-q"), "holds", "--input")
    assert snapshot(tmp_path) == before


def test_multihop_and_egov_out_inside_an_input_are_refused(tmp_path):
    corpus = tmp_path / "corpus"
    assert synth("build", "corpus", "--input", MINIWIKI, "--out", corpus, "-q").exit_code == 0
    laws = tmp_path / "laws"
    laws.mkdir()
    (laws / LAW.name).write_bytes(LAW.read_bytes())
    before = snapshot(tmp_path)
    refused(synth("build", "multihop", "--corpus", corpus, "--out", corpus / "mh", "--until", "chains", "-q"),
            "inside", "--corpus")
    refused(synth("build", "egov", "--laws", laws, "--out", laws / "out", "-q"), "inside", "--laws")
    refused(synth("build", "egov", "--laws", LAW, "--out", laws, "-q"), str(laws), LAW.name)
    assert snapshot(tmp_path) == before


def test_index_inside_its_dataset_is_refused(tmp_path):
    corpus = tmp_path / "corpus"
    assert synth("build", "corpus", "--input", MINIWIKI, "--out", corpus, "-q").exit_code == 0
    before = snapshot(tmp_path)
    refused(synth("index", "build", "--dataset", corpus, "--index", corpus / "index"), "inside", "--dataset")
    assert snapshot(tmp_path) == before
