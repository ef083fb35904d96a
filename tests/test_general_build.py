"""``synth build general``: general prompts answered by the base model (a scripted stand-in here) become SFT
chat rows with no system prompt, ``train`` + held-out ``test`` by prompt id; ``--reasoning`` keeps the model's
reasoning; every bad answer or row is dropped with its reason; bad input is one line and exit 2; the rows feed
``build_trajectories(general=DIR)``, ``train sft`` sources and the retention eval; a rerun asks nothing again.

Run: pytest tests/test_general_build.py   (the tiny-model build: -m slow)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.llm import ScriptedLLM
from tansaku.core.provenance import sha256_path
from tansaku.core.store import read_manifest, read_rows
from tansaku.envs.evaluate import load_rows
from tansaku.envs.retention import split_row
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.general.build import build_general
from tansaku.pipelines.general.config import GeneralConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.trainer.data import load_sources
from tansaku.trainer.recipe_arguments import DataSource

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "teacher_script.py"
PROMPTS = [{"id": f"g{i}", "prompt": f"質問{i}：日本の山について一文で教えてください。"} for i in range(10)] + [
    {"messages": [{"role": "user", "content": "こんにちは"}, {"role": "assistant", "content": "こんにちは。"},
                  {"role": "user", "content": "今日の天気の話をして"}, {"role": "assistant", "content": "参照の答え"}]}]
RESPONDER = '''
def respond(request):
    text = request.messages[-1]["content"]
    if "空" in text:
        return ""
    if "長" in text:
        return {"content": "途中まで", "finish_reason": "length"}
    if "壊" in text:
        raise RuntimeError("backend down")
    if "サーバー" in text:  # an OpenAI-compatible server whose reasoning parser split the thinking off
        return {"content": "サーバーの答え", "reasoning_content": "サーバーの考え"}
    return f"<think>考え：{text}</think>答え：{text}"
'''


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    (tmp_path / "resp.py").write_text(RESPONDER, encoding="utf-8")
    return {"prompts": write_jsonl(tmp_path / "prompts.jsonl", PROMPTS), "llm": f"scripted:{tmp_path / 'resp.py'}"}


def invoke(*args: str):
    return CliRunner().invoke(synth_app, ["build", "general", *args, "-q"])


def all_rows(out: Path) -> list[dict]:
    return read_rows(out, "train") + read_rows(out, "test")


def test_rows_are_conversational_without_system_prompt_and_held_out_by_prompt(files, tmp_path):
    out = tmp_path / "general"
    result = invoke("--prompts", str(files["prompts"]), "--llm", files["llm"], "--out", str(out),
                    "--heldout-share", "0.3", "--max-tokens", "64")
    assert result.exit_code == 0, (result.stderr, result.exception)
    manifest = read_manifest(out)
    train, test = read_rows(out, "train"), read_rows(out, "test")
    assert train and test and len(train) + len(test) == len(PROMPTS)
    assert not {r["prompt_id"] for r in train} & {r["prompt_id"] for r in test}
    assert manifest["heldout"]["key"] == "prompt_id" and manifest["heldout"]["share"] == 0.3
    for row in train + test:
        roles = [m["role"] for m in row["messages"]]
        assert "system" not in roles and roles[-1] == "assistant" and row["kind"] == "general"
        assert row["id"] == f"general-{row['prompt_id']}" and row["finish_reason"] == "stop"
        answer = row["messages"][-1]
        assert answer["content"].startswith("答え：") and "<think>" not in answer["content"]
        assert all(m["reasoning_content"] is None for m in row["messages"])  # no --reasoning: the answer only
    by_id = {r["prompt_id"]: r for r in train + test}
    assert by_id["g3"]["messages"][0] == {"role": "user", "content": PROMPTS[3]["prompt"], "reasoning_content": None}
    # a conversation keeps its earlier turns; its trailing reference answer is replaced by the model's own
    multi = next(r for r in by_id.values() if not r["prompt_id"].startswith("g"))
    assert [m["content"] for m in multi["messages"][:3]] == ["こんにちは", "こんにちは。", "今日の天気の話をして"]
    assert multi["messages"][3]["content"] == "答え：今日の天気の話をして"
    # the recipe: the model, the generation params, the prompt file's sha256
    assert manifest["llm"]["model"] == "scripted:resp.py:respond"
    assert manifest["inputs"][0]["sha256"] == sha256_path(files["prompts"])
    assert manifest["config"]["max_tokens"] == 64 and manifest["config"]["temperature"] == 0.0
    generate = next(s for s in manifest["stages"] if s["name"] == "generate")
    assert generate["params"]["max_tokens"] == 64 and generate["llm"]["model"] == "scripted:resp.py:respond"
    assert "general" in (out / "README.md").read_text(encoding="utf-8")


def test_reasoning_is_kept_as_the_model_wrote_it(files, tmp_path):
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "prompt": "考えて"}, {"id": "b", "prompt": "サーバーで"}])
    out = tmp_path / "general"
    result = invoke("--prompts", str(prompts), "--llm", files["llm"], "--out", str(out), "--reasoning",
                    "--heldout-share", "0")
    assert result.exit_code == 0, (result.stderr, result.exception)
    answers = {r["prompt_id"]: r["messages"][-1] for r in read_rows(out)}
    assert answers["a"] == {"role": "assistant", "content": "答え：考えて", "reasoning_content": "考え：考えて"}
    assert answers["b"] == {"role": "assistant", "content": "サーバーの答え", "reasoning_content": "サーバーの考え"}
    assert read_manifest(out)["config"]["reasoning"] is True


def test_bad_answers_and_rows_are_dropped_with_their_reason(files, tmp_path):
    prompts = write_jsonl(tmp_path / "p.jsonl", [
        {"id": "ok", "prompt": "普通の質問"}, {"id": "e", "prompt": "空の答え"}, {"id": "t", "prompt": "長い答え"},
        {"id": "x", "prompt": "壊れる"}, {"id": "q", "question": "promptが無い"}, "{not json",
        {"id": "s", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]},
        {"id": "ok", "prompt": "同じid"}, 5])
    out = tmp_path / "general"
    build_general(GeneralConfig(prompts=prompts, llm=files["llm"], heldout_share=0), out, BuildContext(quiet=True))
    stages = {s["name"]: s["dropped"] for s in read_manifest(out)["stages"]}
    assert stages == {"prompts": {"bad_prompt": 3, "unmappable": 1}, "dedup": {"duplicate_id": 1},
                      "generate": {"empty_answer": 1, "truncated": 1, "llm_error": 1}}
    assert [r["prompt_id"] for r in read_rows(out)] == ["ok"]
    details = {r["detail"] for r in read_rows(out, "rejected")}
    assert any(d.endswith("p.jsonl:5: none of 'messages', 'conversations' (ShareGPT from/value), 'prompt' [+ "
                          "'response'/'completion'] or 'instruction' [+ 'input'] [+ 'output'] (keys: id, question)")
               for d in details)
    assert any("p.jsonl:6: not valid JSON" in d for d in details)
    assert any("system message" in d for d in details) and "RuntimeError: backend down" in details


def test_license_and_limit_are_part_of_the_recipe(files, tmp_path):
    out = tmp_path / "general"
    args = ["--prompts", str(files["prompts"]), "--llm", files["llm"], "--out", str(out), "--limit", "3"]
    result = invoke(*args, "--license", "apache-2.0")
    assert result.exit_code == 0, (result.stderr, result.exception)
    manifest = read_manifest(out)
    assert manifest["stages"][0]["received"] == 3 and manifest["config"]["limit"] == 3
    assert manifest["config"]["license"] == "apache-2.0" and "license: apache-2.0" in (out / "README.md").read_text()
    again = invoke(*args, "--license", "mit")  # another recipe: refused, not mixed
    assert again.exit_code == 2 and "different recipe" in again.stderr, again.stderr


def test_rerun_is_a_no_op_and_asks_nothing(files, tmp_path):
    out = tmp_path / "general"
    first_llm = ScriptedLLM(lambda request: "答え", model="scripted:same")
    first = build_general(GeneralConfig(prompts=files["prompts"], llm=first_llm), out, BuildContext(quiet=True))
    again_llm = ScriptedLLM(lambda request: "答え", model="scripted:same")
    again = build_general(GeneralConfig(prompts=files["prompts"], llm=again_llm), out, BuildContext(quiet=True))
    assert first_llm.calls == len(PROMPTS) and again_llm.calls == 0
    assert again == first and read_manifest(out) == first


@pytest.mark.parametrize("name, content, says", [
    ("prompts.csv", "prompt\nhello\n", "unsupported file type '.csv'"),
    ("missing.jsonl", None, "no such file or dataset folder"),
    ("empty.jsonl", "", "holds no prompts"),
    ("rows.jsonl", '{"id": "a", "question": "no prompt"}\n', "no usable prompt"),
    ("folder", "dir", "has no 'train' split"),
])
def test_bad_input_is_one_line_exit_2_before_any_work(files, tmp_path, name, content, says):
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    result = invoke("--prompts", str(path), "--llm", files["llm"], "--out", str(tmp_path / "out"))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], \
        result.stderr
    assert not (tmp_path / "out").exists()


def test_all_answers_empty_exits_2_naming_llm_and_max_tokens(files, tmp_path):
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "空1"}, {"prompt": "空2"}])
    result = invoke("--prompts", str(prompts), "--llm", files["llm"], "--out", str(tmp_path / "out"))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.stderr
    assert "top reason empty_answer: 2 of 2" in lines[0] and "--llm" in lines[0] and "--max-tokens" in lines[0]


def test_rows_feed_trajectories_sft_sources_and_retention(files, tmp_path):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    general = tmp_path / "general"
    build_general(GeneralConfig(prompts=files["prompts"], llm=files["llm"], heldout_share=0.3), general, BuildContext(quiet=True))
    ours = {tuple(m["content"] for m in r["messages"]) for r in read_rows(general)}
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), tmp_path / "corpus", BuildContext(quiet=True))
    build_index(tmp_path / "corpus", tmp_path / "index")
    build_multihop(MultihopConfig(corpus=tmp_path / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0, heldout_share=0.0), tmp_path / "multihop", BuildContext(quiet=True))
    build_trajectories(TrajectoriesConfig(
        dataset=tmp_path / "multihop", teacher=f"scripted:{SCRIPT}", index=tmp_path / "index",
        translator=f"scripted:{SCRIPT}:rewrite", general=general, ratio=1.0, n=1, limit=4), tmp_path / "sft",
        BuildContext(quiet=True))
    mixed = [r for r in read_rows(tmp_path / "sft") if r["kind"] == "general"]
    assert mixed and all(m["role"] != "system" for r in mixed for m in r["messages"])
    assert {tuple(m["content"] for m in r["messages"]) for r in mixed} <= ours  # the train split, unchanged
    [(source, rows)] = load_sources([DataSource(path=str(general))])
    assert len(rows) == len(read_rows(general)) and all(r["messages"][-1]["role"] == "assistant" for r in rows)
    held_out = load_rows(general, "test")  # what `train eval --task general --dataset DIR` scores
    prompt, answer = split_row(held_out[0])
    assert held_out and prompt[-1]["role"] == "user" and answer.startswith("答え：")


@pytest.mark.slow
def test_tiny_model_answers_its_own_prompts(tmp_path, tiny_model_path):
    prompts = write_jsonl(tmp_path / "p.jsonl", [
        {"id": "capital", "prompt": "What is the capital of France?"}, {"id": "spider", "prompt": "How many legs "
                                                                                                 "does a spider have?"},
        {"id": "mammal", "prompt": "Name a mammal that can fly."}, {"id": "rain", "prompt": "雨について一文で説明してください。"}])
    out = tmp_path / "general"
    manifest = build_general(GeneralConfig(prompts=prompts, llm=f"transformers:{tiny_model_path}", max_tokens=96, heldout_share=0), out, BuildContext(quiet=True))
    rows = read_rows(out)
    assert rows and all(r["messages"][-1]["content"].strip() for r in rows), rows
    generate = next(s for s in manifest["stages"] if s["name"] == "generate")
    assert set(generate["dropped"]) <= {"truncated"} and manifest["llm"]["backend"] == "transformers"
