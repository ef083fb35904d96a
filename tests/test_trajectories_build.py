"""build_trajectories end to end on the example mini-wiki with the scripted demo teacher (real searches on
an embedded index) and the scripted rewriter; failed trajectories in the engine's rejected split with their
stage and reason; a rewriter that alters a tool call; reasoning gets loss under the tiny model's chat
template and tool results do not.

Run: pytest tests/test_trajectories_build.py
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from tansaku.core.context import BuildContext
from tansaku.core.llm import ScriptedLLM
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "teacher_script.py"
GENERAL = ROOT / "tests" / "fixtures" / "sft" / "general.jsonl"


def script():
    spec = importlib.util.spec_from_file_location("demo_teacher_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    base = tmp_path_factory.mktemp("traj")
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), base / "corpus", BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    build_multihop(MultihopConfig(corpus=base / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0), base / "multihop", BuildContext(quiet=True))
    return base


@pytest.fixture(scope="module")
def built(inputs):
    out = inputs / "sft"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=f"scripted:{SCRIPT}:rewrite", general=GENERAL, ratio=0.5, n=2, limit=30, seed=1), out,
        BuildContext(quiet=True))
    return manifest, read_rows(out, "train"), read_rows(out, "rejected")


def test_funnel_splits_and_card(built, inputs):
    from datasets import load_dataset

    manifest, train, rejected = built
    stages = {s["name"]: s for s in manifest["stages"]}
    assert stages["teacher"]["received"] == 30 and stages["correct_only"]["received"] == 60
    assert stages["teacher"]["params"]["n"] == 2 and stages["teacher"]["llm"]["model"].endswith("teacher_script.py:respond")
    agentic = [r for r in train if r["kind"] == "agentic"]
    assert agentic and rejected, manifest["stages"]  # the rule-based teacher solves some, not all
    assert stages["verify"]["kept"] == len(agentic)
    # every drop of every stage is one rejected row naming that stage and reason
    assert Counter((r["stage"], r["reason"]) for r in rejected) == Counter(
        {(s["name"], reason): n for s in manifest["stages"] for reason, n in s["dropped"].items()})
    assert all(r["reward"] == 1.0 for r in agentic) and "failure_reason" not in train[0]
    wrong = next(r for r in rejected if r["reason"] == "wrong_answer")
    record = json.loads(wrong["record"])  # the whole trajectory: gold row, messages, reward
    assert wrong["stage"] == "correct_only" and record["reward"] < 1.0 and record["row"]["answer"]
    assert record["messages"][-1]["content"].startswith(wrong["detail"][:20])
    ds = load_dataset(str(inputs / "sft"), cache_dir=str(inputs / "hf-cache"))
    assert set(ds) == {"train"} and len(ds["train"]) == len(train)  # rejected rows are not mixed into train
    assert len(load_dataset(str(inputs / "sft"), "rejected", cache_dir=str(inputs / "hf-cache"))["rejected"]) == \
        len(rejected)
    t = manifest["trajectories"]
    assert sum(t["scenario_distribution"].values()) == len(agentic)
    assert t["mix"]["general_rows"] == min(6, round(0.5 * len(agentic)))
    assert t["teacher"]["model"].endswith("teacher_script.py:respond")
    card = (inputs / "sft" / "README.md").read_text(encoding="utf-8")
    assert "Scenario distribution" in card and "correct_only/wrong_answer" in card and "rewriter" in card
    assert "config_name: rejected" in card
    assert read_manifest(inputs / "sft")["trajectories"] == t


def test_rows_keep_real_tool_loops_and_japanese_reasoning(built, inputs):
    from tansaku.envs.environments import SearchEnvironment, make_environment_factory, tool_schemas
    from tansaku.envs.tasks import TASKS
    from tansaku.pipelines.trajectories.verify import replay_violation

    _, train, _ = built
    factory = make_environment_factory(TASKS["multihop_qa"], inputs / "index")
    variants = set()
    for row in (r for r in train if r["kind"] == "agentic"):
        roles = [m["role"] for m in row["messages"]]
        assert roles[:2] == ["system", "user"] and roles.count("tool") >= 2, roles
        steps = [m for m in row["messages"] if m["role"] == "assistant"]
        assert all(m["reasoning_content"] and not m["reasoning_content"].isascii() for m in steps)
        assert row["scenario"]
        # The SFT row's tools: exactly what the RL environment shows, in the variant the teacher episode drew.
        shown = SearchEnvironment(factory.backend, factory.config, variant=row["tool_variant"])
        assert json.loads(row["tools"]) == tool_schemas(shown)
        variants.add(row["tool_variant"])
        assert replay_violation(row["messages"], factory) is None
    assert len(variants) > 1  # the description augmentation happened across questions


def test_same_seed_same_version_and_rerun_returns_it(built, inputs):
    manifest, _, _ = built
    again = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=f"scripted:{SCRIPT}:rewrite", general=GENERAL, ratio=0.5, n=2, limit=30, seed=1), inputs / "sft",
        BuildContext(quiet=True))
    assert again["version"] == manifest["version"]


def test_rewriter_that_alters_tool_calls_or_talks_nonsense_is_caught(inputs):
    module = script()

    def sloppy(request):
        payload = json.loads(module.rewrite(request))
        if "北" in request.messages[-1]["content"]:  # some trajectories: the "rewrite" edits a query
            for step in payload["steps"]:
                for c in step["tool_calls"]:
                    if c["name"] == "search":
                        c["arguments"]["query"] += " 小説"
        if "風見鶏" in request.messages[-1]["content"]:
            return "Sure! Here is the rewritten trajectory."
        return json.dumps(payload, ensure_ascii=False)

    out = inputs / "sloppy"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=ScriptedLLM(sloppy, model="sloppy"), n=1, seed=1), out, BuildContext(quiet=True))
    reasons = Counter((r["stage"], r["reason"]) for r in read_rows(out, "rejected"))
    assert reasons[("translate", "tool_call_altered")] >= 1 and reasons[("translate", "llm_bad_json")] >= 1
    for row in read_rows(out, "train"):
        assert "北" not in row["messages"][1]["content"] or "小説" not in json.dumps(row["messages"], ensure_ascii=False)
    assert manifest["trajectories"]["mix"]["general_rows"] == 0


def _tokenizer():
    """The tiny model's tokenizer + chat template, without loading weights when the model is not cached."""
    from transformers import AutoTokenizer

    from tansaku.core import tiny_model

    model_dir = tiny_model.default_cache_dir() / "models" / tiny_model.TINY_MODEL_NAME
    if tiny_model.is_prepared(model_dir):
        return AutoTokenizer.from_pretrained(tiny_model.tiny_model_dir())
    gguf = tiny_model.find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.chat_template = tiny_model.chat_template()
    return tokenizer


def test_reasoning_gets_loss_and_tool_results_do_not(built):
    _, train, _ = built
    tokenizer = _tokenizer()
    for row in [r for r in train if r["kind"] == "agentic"][:5]:
        messages = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]
        enc = tokenizer.apply_chat_template(messages, tools=json.loads(row["tools"]), tokenize=True,
                                            return_assistant_tokens_mask=True, return_dict=True)
        ids, mask = enc["input_ids"], enc["assistant_masks"]
        trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        masked = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        for m in messages:
            if m["role"] == "assistant":
                assert m["reasoning_content"] in trained
                for c in m.get("tool_calls") or []:
                    assert c["function"]["arguments"] in trained
            elif m["role"] == "tool":
                assert m["content"] in masked and m["content"] not in trained
            else:
                assert m["content"] not in trained


def test_held_out_questions_never_become_sft_rows(built, inputs):
    """The source's `test` split (tansaku.core.heldout) is evaluation only: the teacher sees `train` questions."""
    manifest, train, rejected = built
    held_out = {r["qid"] for r in read_rows(inputs / "multihop", "test")}
    sources = {r["qid"] for r in read_rows(inputs / "multihop", "train")}
    assert held_out and not held_out & sources
    seen = {r["question_id"] for r in train if r["kind"] == "agentic"}
    seen |= {json.loads(r["record"])["question_id"] for r in rejected if r["record"]}
    assert seen and seen <= sources and not seen & held_out


def _answer_feature(folder: Path, cache: Path):
    from datasets import load_dataset

    return load_dataset(str(folder), cache_dir=str(cache))["train"]


def test_answer_is_a_struct_column_and_general_rows_have_none(built, inputs):
    """The gold answer is a typed struct (not JSON text), the same declared type whatever task the rows are of."""
    from tansaku.pipelines.trajectories.format import GOLD

    _, train, _ = built
    ds = _answer_feature(inputs / "sft", inputs / "hf-cache-answer")
    assert isinstance(ds.features["answer"], dict) and set(ds.features["answer"]) == set(GOLD.names)
    by_kind = {kind: [r["answer"] for r in ds if r["kind"] == kind] for kind in ("agentic", "general")}
    assert by_kind["general"] and all(a is None for a in by_kind["general"])
    gold = {r["qid"]: r for r in read_rows(inputs / "multihop", "train")}
    for row, answer in zip((r for r in train if r["kind"] == "agentic"), by_kind["agentic"], strict=True):
        assert isinstance(answer, dict) and answer["answer"] == gold[row["question_id"]]["answer"]
        assert answer["aliases"] == list(gold[row["question_id"]]["aliases"])
        assert answer["answer_index"] is None and answer["choices"] is None


def test_egov_trajectories_keep_the_choice_gold_in_the_same_struct(built, inputs):
    from tansaku.envs.tasks import TASKS
    from tansaku.pipelines.egov.build import build_egov

    build_egov(EgovConfig(laws=[ROOT / "examples" / "laws"]), inputs / "egov", BuildContext(quiet=True))
    task = TASKS["egov_mcq"]
    gold = {task.user_message(r): r for r in read_rows(inputs / "egov", "train")}

    def teacher(request):  # one search, then the gold choice's number
        if not any(m.get("role") == "tool" for m in request.messages):
            return {"reasoning": "条文を検索する。", "content": "",
                    "tool_calls": [{"name": "search", "arguments": {"query": "図書館"}}]}
        user = next(m["content"] for m in request.messages if m.get("role") == "user")
        return {"reasoning": "選択肢を選ぶ。", "content": "{{" + task.gold_answer(gold[user]) + "}}"}

    out = inputs / "sft-egov"
    build_trajectories(TrajectoriesConfig(
        dataset=inputs / "egov", teacher=ScriptedLLM(teacher, model="egov-teacher"), index=inputs / "index",
        translator=f"scripted:{SCRIPT}:rewrite", general=GENERAL, ratio=1.0, n=1, limit=4, seed=1), out,
        BuildContext(quiet=True))
    ds = _answer_feature(out, inputs / "hf-cache-egov")
    assert ds.features["answer"] == _answer_feature(inputs / "sft", inputs / "hf-cache-answer").features["answer"]
    agentic = [r for r in ds if r["kind"] == "agentic"]
    assert agentic and all(r["answer"] is None for r in ds if r["kind"] == "general")
    for row in agentic:
        source = gold[row["messages"][1]["content"]]
        assert row["answer"] == {"answer": source["answer"], "aliases": None,
                                 "answer_index": source["answer_index"], "choices": list(source["choices"])}


def test_interface_variants_keep_the_scripted_teachers_find_read_episodes(inputs):
    """With two tool interfaces drawn (``--interface-variants 2``), the demo teacher reads the schemas it is shown
    and calls find/read on the find/read episodes: they become rows, and the option is in the build's recipe.
    (A teacher that speaks one interface only is dropped as `wrong_interface`: tests/test_tool_interfaces.py.)"""
    out = inputs / "sft-interfaces"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=f"scripted:{SCRIPT}:rewrite", n=1, limit=20, seed=1, task="multihop_qa", interface_variants=2),
        out, BuildContext(quiet=True))
    train, rejected = read_rows(out, "train"), read_rows(out, "rejected")
    assert not [r for r in rejected if r["reason"] == "wrong_interface"]
    agentic = [r for r in train if r["kind"] == "agentic"]
    assert {r["tool_interface"] for r in agentic} == {0, 1}
    for row in agentic:
        calls = [c["function"] for m in row["messages"] for c in m.get("tool_calls") or []]
        names = {"find", "read"} if row["tool_interface"] else {"search", "open_doc"}
        assert calls and {c["name"] for c in calls} <= names
        assert {s["function"]["name"] for s in json.loads(row["tools"])} == names
        if row["tool_interface"]:  # plain keywords, never a JSON query
            assert all(isinstance(json.loads(c["arguments"]).get("keywords", []), list) for c in calls)
            assert "search" not in row["messages"][0]["content"]
    assert manifest["config"]["tools_config"]["interface_variants"] == 2
    default = read_manifest(inputs / "sft")["config"]  # no option: the task's own tools config
    assert default["interface_variants"] is None and default["tools_config"]["interface_variants"] == 1


def test_a_bad_interface_variants_is_one_line(inputs, tmp_path):
    from typer.testing import CliRunner

    from tansaku.cli import synth_app

    for bad in ("0", "3"):
        result = CliRunner().invoke(synth_app, [
            "build", "trajectories", "--dataset", str(inputs / "multihop"), "--out", str(tmp_path / bad),
            "--teacher", f"scripted:{SCRIPT}", "--index", str(inputs / "index"), "--interface-variants", bad])
        lines = result.stderr.strip().splitlines()
        # refused while the options are parsed (tansaku.core.cli_types), naming the option as given
        assert result.exit_code == 2 and len(lines) == 1 and "--interface-variants" in lines[0], result.stderr
