"""The phrasing-held-out split of ``synth build multihop --heldout-phrasing FAMILY``: frames of a held-out family
phrase no train / rl / test question, every test chain is asked again in one of them (split ``test_phrasing``,
the same chains as ``test``), pairs without a training or a held-out frame are counted, training refuses the
split, bad options are one line and exit 2, and the option off changes nothing (no split, the frames used)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop
from tansaku.core.heldout import HELDOUT_SPLITS, TEST_PHRASING, HeldOut
from tansaku.core.store import read_manifest, read_rows
from tansaku.envs.tasks import TASKS
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.multihop.phrasing import keep_pairs, pair_frames, template_questions
from tansaku.pipelines.multihop.questions import FINALS, FRAMES, PHRASING_FAMILIES
from tansaku.pipelines.multihop.relations import DEFAULT

ROOT = Path(__file__).resolve().parents[1]
MINIWIKI_LARGE = ROOT / "examples" / "miniwiki_large.jsonl"  # a build is ~2 s: big enough for >= 96 test chains
ANSWER_ENDING = "を答えてください。"  # how the held-out `answer` final ends, whatever the bridge


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tansaku.pipelines.corpus.build import build_corpus

    out = tmp_path_factory.mktemp("phrasing") / "corpus"
    build_corpus(CorpusConfig(input=MINIWIKI_LARGE, format="jsonl"), out, BuildContext(quiet=True))
    return out


def _build(corpus: Path, out: Path, **options) -> tuple[dict, dict[str, list[dict]], Path]:
    manifest = build_multihop(MultihopConfig(corpus=corpus, rl_share=0.35, **options), out, BuildContext(quiet=True))
    return manifest, {s: read_rows(out, s) for s, n in manifest["splits"].items() if n}, out


@pytest.fixture(scope="module")
def held(corpus, tmp_path_factory):
    return _build(corpus, tmp_path_factory.mktemp("held") / "multihop", heldout_phrasing=["answer"])


@pytest.fixture(scope="module")
def plain(corpus, tmp_path_factory):
    return _build(corpus, tmp_path_factory.mktemp("plain") / "multihop")


def test_families_partition_the_frames():
    assert set(PHRASING_FAMILIES) == set(FINALS)
    assert sorted(f for frames in PHRASING_FAMILIES.values() for f in frames) == sorted(FRAMES)


def test_no_training_split_uses_a_held_out_frame_and_every_test_phrasing_row_does(held):
    manifest, splits, _ = held
    for split in ("train", "rl", "test"):
        rows = splits[split]
        assert rows and all(r["frame"] and not r["frame"].endswith("/answer") for r in rows), split
        assert not [r["question"] for r in rows if r["question"].endswith(ANSWER_ENDING)], split
        assert all(r["phrasing_family"] is None for r in rows)
    phrased = splits[TEST_PHRASING]
    assert len(phrased) >= 96 and manifest["splits"][TEST_PHRASING] == len(phrased)
    assert {r["phrasing_family"] for r in phrased} == {"answer"}
    assert all(r["frame"].endswith("/answer") and r["question"].endswith(ANSWER_ENDING) for r in phrased)
    assert TASKS["multihop_qa"].gold_failures(phrased) == []  # the same checks as any question


def test_test_phrasing_asks_the_test_chains_again(held):
    manifest, splits, _ = held
    test = {r["chain_id"]: r for r in splits["test"]}
    phrased = splits[TEST_PHRASING]
    assert {r["chain_id"] for r in phrased} <= set(test)
    assert len({r["chain_id"] for r in phrased}) == len(phrased)
    for row in phrased:  # same chain and answer, another phrasing, its own qid
        twin = test[row["chain_id"]]
        assert (row["answer"], row["bridge"]) == (twin["answer"], twin["bridge"])
        assert row["question"] != twin["question"] and row["qid"] != twin["qid"]
    trained = {r["bridge"] for s in ("train", "rl") for r in splits[s]}
    assert not trained & {r["bridge"] for r in phrased}  # unseen bridges, as test's


def test_the_manifest_records_the_families_and_counts(held):
    manifest, splits, _ = held
    assert manifest["config"]["heldout_phrasing"] == ["answer"]
    assert manifest["heldout"]["phrasing_split"] == TEST_PHRASING
    phrasing = manifest["phrasing"]
    assert phrasing["families"] == ["answer"] and phrasing["rows"] == len(splits[TEST_PHRASING])
    assert phrasing["frames"] == ["clause/answer", "noun/answer", "known/answer"]
    assert phrasing["relation_pairs"] > 0 and phrasing["pairs_without_holdout"] == 0
    questions = next(s for s in manifest["stages"] if s["name"] == "questions")
    assert questions["params"]["heldout_phrasing"] == ["answer"]
    assert [s["name"] for s in manifest["stages"]][-1] == "phrasing_pairs"
    card = (held[2] / "README.md").read_text(encoding="utf-8")
    assert f"{TEST_PHRASING}: {len(splits[TEST_PHRASING])}" in card and "phrasing_family" in card


def test_off_by_default_writes_no_phrasing_split(plain, held):
    manifest, splits, _ = plain
    assert TEST_PHRASING not in manifest["splits"] and "phrasing" not in manifest
    assert manifest["config"]["heldout_phrasing"] == []
    assert "phrasing_pairs" not in [s["name"] for s in manifest["stages"]]
    # the option is what keeps `answer` out: without it every split uses it
    for split in ("train", "rl", "test"):
        assert any(r["question"].endswith(ANSWER_ENDING) for r in splits[split]), split
    # test keeps its chains; only their frames move
    assert {r["chain_id"] for r in splits["test"]} == {r["chain_id"] for r in held[1]["test"]}
    assert all(r["frame"] in {f"{b}/{f}" for b, f in FRAMES} for r in splits["train"])


def test_pairs_without_a_training_or_held_out_frame_are_counted(corpus, tmp_path):
    assert pair_frames("血液型", "色", ("answer", "ask", "wh"), DEFAULT) == (
        (("noun", "ask"), ("noun", "wh"), ("noun", "answer")), (), "phrasing_pair_without_holdout")
    assert pair_frames("血液型", "色", ("about",), DEFAULT).reason == "phrasing_no_heldout_frame"
    manifest, splits, _ = _build(corpus, tmp_path / "most", heldout_phrasing=["ask,wh", "answer"])
    assert manifest["config"]["heldout_phrasing"] == ["answer", "ask", "wh"]
    phrasing = manifest["phrasing"]
    assert phrasing["pairs_without_holdout"] > 0 and phrasing["pairs_without_holdout_examples"]
    dropped = next(s for s in manifest["stages"] if s["name"] == "questions")["dropped"]

    def without(split):
        # derivations keep the source's spelling; the manifest names pairs by their canonical relations
        def pair(row):
            return "→".join(DEFAULT.canonical(row["derivations"][hop]["relation"]) for hop in (0, 1))
        return [r for r in splits[split] if pair(r) in phrasing["pairs_without_holdout_examples"]]

    assert without("test") and dropped["phrasing_pair_without_holdout"] >= len(without("test"))
    assert not {r["chain_id"] for r in without("test")} & {r["chain_id"] for r in splits[TEST_PHRASING]}
    # such a pair keeps its frames for training, held-out families or not; every other pair trains on `about` only
    assert without("train") and not any(r["frame"].endswith("/about") for r in without("train"))
    assert all(r["frame"].endswith("/about") for r in splits["train"] if r not in without("train"))


def test_a_test_phrasing_row_goes_only_beside_its_test_row():
    rows = [{"chain_id": "a", "phrasing_family": None}, {"chain_id": "a", "phrasing_family": "answer"},
            {"chain_id": "b", "phrasing_family": "answer"}, {"chain_id": "c", "phrasing_family": None}]
    out = list(keep_pairs(iter(rows)))
    assert out[:3] == [rows[0], rows[3], rows[1]] and out[3] == Drop("phrasing_test_question_dropped")
    rule = HeldOut(0.2, "bridge", seed=0, phrasing_column="phrasing_family")
    train_bridge = next(f"b{i}" for i in range(100) if rule.split_of({"bridge": f"b{i}"}) == "train")
    with pytest.raises(ValueError, match="not 'test'"):  # a held-out phrasing of a trained chain is a bug
        rule.split_of({"bridge": train_bridge, "phrasing_family": "answer"})
    chain = {"chain_id": "c1", "subject": "ノルウェイの森", "bridge": train_bridge, "answer": "京都府",
             "relations": ["著者", "出生地"]}
    assert isinstance(template_questions(chain, 0, DEFAULT, ("answer",), rule), dict)  # train: one question


def test_training_refuses_every_held_out_split(tmp_path):
    from tansaku.trainer.recipes import RecipeError, load_recipe

    assert HELDOUT_SPLITS == ("test", TEST_PHRASING)
    sft = ROOT / "trainer" / "recipes" / "sft-tiny.yaml"
    with pytest.raises(RecipeError, match="data.0.split: 'test_phrasing' is the held-out split"):
        load_recipe(sft, ["--data", '[{"path": "a.jsonl", "split": "test_phrasing"}]'], kind="sft")
    rl = tmp_path / "rl.yaml"
    rl.write_text("model_name_or_path: tiny\noutput_dir: out\nuse_cpu: true\ntasks:\n  - {name: multihop_qa, "
                  "data: tests/fixtures/envs/multihop.jsonl, index: idx, split: test_phrasing}\n", encoding="utf-8")
    with pytest.raises(RecipeError, match="tasks.0.split: 'test_phrasing' is the held-out split"):
        load_recipe(rl, kind="rl")


def test_train_eval_reads_the_phrasing_split(held):
    from tansaku.envs.evaluate import load_rows

    _, splits, folder = held
    assert [r["qid"] for r in load_rows(folder, TEST_PHRASING)] == [r["qid"] for r in splits[TEST_PHRASING]]


@pytest.mark.parametrize("bad, message", [
    (["--heldout-phrasing", "question"], "--heldout-phrasing 'question': choose one of ask, wh, answer, about"),
    (["--heldout-phrasing", "answer", "--llm", "scripted:{tmp}/x.jsonl"], "--llm writes the questions itself"),
    (["--heldout-phrasing", "answer", "--heldout-share", "0"], "give --heldout-share > 0"),
])
def test_bad_options_are_one_line_and_exit_2(corpus, tmp_path, bad, message):
    (tmp_path / "x.jsonl").write_text('{"content": "x"}\n', encoding="utf-8")  # a scripted: file must exist
    bad = [a.replace("{tmp}", str(tmp_path)) for a in bad]
    done = CliRunner().invoke(synth_app, ["build", "multihop", "--corpus", str(corpus), "-q",
                                          "--out", str(tmp_path / "bad"), *bad])
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "bad").exists()


def test_the_cli_takes_repeated_and_comma_separated_families(corpus, tmp_path):
    done = CliRunner().invoke(synth_app, ["build", "multihop", "--corpus", str(corpus), "-q", "--rl-share", "0.35",
                                          "--out", str(tmp_path / "cli"), "--heldout-phrasing", "answer,about",
                                          "--heldout-phrasing", "answer"])
    assert done.exit_code == 0, (done.stderr, done.exception)
    manifest = read_manifest(tmp_path / "cli")
    assert manifest["config"]["heldout_phrasing"] == ["about", "answer"]
    families = Counter(r["phrasing_family"] for r in read_rows(tmp_path / "cli", TEST_PHRASING))
    assert set(families) == {"about", "answer"}
