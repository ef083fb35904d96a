"""The reasoning rewrite as the seed does it: separate passes (translate → refine → scenario), each its own LLM
call, versioned prompt and language check, each fed what the pass before it wrote; and deepresearch rows whose
clarifying exchange opens the trajectory (the assistant's question a trained-on assistant turn, the user's
answer a user turn), never rewritten.

Scripted LLMs only (the demo teacher and rewriter, ``examples/stand_in_llm.py`` for deepresearch's teacher and
rubric judge), on the example mini-wiki and the deepresearch fixture wiki.

Run: pytest tests/test_trajectories_passes.py
"""

from __future__ import annotations

import copy
import importlib.util
import json
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.llm import ScriptedLLM
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.pipelines.trajectories.rewrite import PROMPTS, REWRITE_PASSES, apply_rewrite, steps_payload
from tansaku.pipelines.trajectories.verify import identity_violation

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "teacher_script.py"
STAND_IN = f"scripted:{ROOT / 'examples' / 'stand_in_llm.py'}"
MARK = {"translate": "（訳）", "refine": "（推敲）", "scenario": "（型）"}


def script():
    spec = importlib.util.spec_from_file_location("demo_teacher_script_passes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    base = tmp_path_factory.mktemp("traj-passes")
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), base / "corpus",
                 BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    build_multihop(MultihopConfig(corpus=base / "corpus", max_per_subject=0, max_per_bridge=0,
                                  max_per_relation_pair=0), base / "multihop", BuildContext(quiet=True))
    return base


def chaining_rewriter(module, log: list):
    """The demo rewriter, except that each pass appends its mark to the reasoning it was *given* (translate: to
    the demo's Japanese, the teacher's being English), so a row's reasoning tells which passes ran on it, in what
    order, each on the output of the one before. Every request is logged as ``(pass, payload)``."""

    def rewrite(request):
        payload = module._payload(request)
        log.append((payload["task"], payload))
        data = json.loads(module.rewrite(request))
        for given, step in zip(payload["steps"], data["steps"]):
            base = step["reasoning"] if payload["task"] == "translate" else given["reasoning"]
            step["reasoning"] = base + MARK[payload["task"]]
        return json.dumps(data, ensure_ascii=False)

    return ScriptedLLM(rewrite, model="chaining-rewriter")


@pytest.fixture(scope="module")
def chained(inputs):
    log: list = []
    out = inputs / "chained"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=chaining_rewriter(script(), log), n=1, limit=20, seed=1), out, BuildContext(quiet=True))
    return manifest, read_rows(out, "train"), log


def test_three_passes_run_in_order_each_on_the_last_ones_output(chained):
    manifest, train, log = chained
    names = [s["name"] for s in manifest["stages"]]
    assert names[names.index("correct_only") + 1:names.index("verify")] == list(REWRITE_PASSES)
    by_question = defaultdict(list)
    for kind, payload in log:
        by_question[payload["question"]].append((kind, payload))
    assert by_question
    for calls in by_question.values():
        kinds = [kind for kind, _ in calls]
        assert kinds == list(REWRITE_PASSES)[:len(kinds)]  # one call per pass, in order (a drop ends the list)
        for n, (kind, payload) in enumerate(calls):
            reasoning = [step["reasoning"] for step in payload["steps"]]
            if kind == "translate":  # the teacher's own (English) reasoning
                assert all(r and "（" not in r for r in reasoning)
            else:  # exactly what the pass before wrote: the refine pass the translation, scenario the refinement
                done = "".join(MARK[k] for k in REWRITE_PASSES[:n])
                assert all(r.endswith(done) for r in reasoning), (kind, reasoning)
            assert ("scenario" in payload) == (kind == "scenario")
    agentic = [r for r in train if r["kind"] == "agentic"]
    assert agentic
    for row in agentic:
        steps = [m["reasoning_content"] for m in row["messages"] if m["role"] == "assistant"]
        assert steps and all(s.endswith("（訳）（推敲）（型）") for s in steps)


def test_each_pass_is_its_own_stage_prompt_and_check_in_the_manifest(chained):
    manifest, _, _ = chained
    stages = {s["name"]: s for s in manifest["stages"]}
    for kind in REWRITE_PASSES:
        params = stages[kind]["params"]
        assert params["prompt"] == PROMPTS[kind] == f"{kind}.v2.md"
        assert {"min_japanese_share", "min_chinese_chars"} <= set(params)
        assert stages[kind]["llm"]["model"] == "chaining-rewriter"
        assert (ROOT / "pipelines" / "trajectories" / "prompts" / PROMPTS[kind]).is_file()
    assert manifest["config"]["prompts"] == PROMPTS and manifest["trajectories"]["prompts"] == PROMPTS
    assert stages["refine"]["received"] == stages["translate"]["kept"]
    assert stages["scenario"]["received"] == stages["refine"]["kept"]


def group(question: str) -> int:
    """Which pass writes Chinese for a question: 0 translate, 1 refine, 2 scenario, 3 none."""
    return zlib.crc32(question.encode("utf-8")) % 4


def test_each_pass_drops_its_own_chinese_output_by_name(inputs):
    module, log = script(), []

    def rewrite(request):
        payload = module._payload(request)
        log.append((payload["task"], payload["question"]))
        data = json.loads(module.rewrite(request))
        if REWRITE_PASSES.index(payload["task"]) == group(payload["question"]):
            data["steps"][-1]["reasoning"] = "我们需要确认这个条件，然后再回答这个问题。"
        return json.dumps(data, ensure_ascii=False)

    out = inputs / "chinese-per-pass"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=ScriptedLLM(rewrite, model="chinese-per-pass"), n=1, limit=40, seed=1), out,
        BuildContext(quiet=True))
    rejected = [r for r in read_rows(out, "rejected") if r["stage"] in REWRITE_PASSES]
    questions = {r["qid"]: r["question"] for r in read_rows(inputs / "multihop", "train")}
    seen = Counter()
    for r in rejected:
        question = questions[json.loads(r["record"])["question_id"]]
        stage = REWRITE_PASSES[group(question)]
        assert (r["stage"], r["reason"]) == (stage, "reasoning_has_chinese"), (r["stage"], r["reason"], r["detail"])
        assert r["detail"].startswith(f"{stage} step ") and "我们" in r["detail"]
        seen[stage] += 1
        # dropped by that pass's own check: no later pass ever saw it
        later = REWRITE_PASSES[REWRITE_PASSES.index(stage) + 1:]
        assert not [k for k, q in log if q == question and k in later]
    assert set(seen) == set(REWRITE_PASSES), seen  # every pass dropped at least one, under its own name
    stages = {s["name"]: s for s in manifest["stages"]}
    for kind in REWRITE_PASSES:
        assert stages[kind]["dropped"] == {"reasoning_has_chinese": seen[kind]}
    kept = [r for r in read_rows(out, "train") if r["kind"] == "agentic"]
    assert kept and all(group(questions[r["question_id"]]) == 3 for r in kept)


# ---------------------------------------------------------------- the clarifying exchange (deepresearch rows)

PROMPT = [{"role": "system", "content": "調査エージェント"}, {"role": "user", "content": "湖を調べて。"},
          {"role": "assistant", "content": "どの観点で調べますか？"}, {"role": "user", "content": "歴史を中心に。"}]
STEPS = [{"role": "assistant", "content": "", "reasoning_content": "Search.",
          "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "search", "arguments": '{"query": "湖"}'}}]},
         {"role": "tool", "name": "search", "tool_call_id": "c0", "content": "[1] doc_id: d1 | title: 湖\n湖の歴史。"},
         {"role": "assistant", "content": "湖の歴史は…", "reasoning_content": "Write."}]


def test_the_prompts_turns_are_no_step_and_stay_as_they_are():
    messages = PROMPT + STEPS
    assert [s["reasoning"] for s in steps_payload(messages, start=len(PROMPT))] == ["Search.", "Write."]
    answer = json.dumps({"steps": [{"reasoning": "湖を検索する。", "tool_calls": [{"name": "search",
                                                                             "arguments": {"query": "湖"}}]},
                                   {"reasoning": "歴史を中心に書く。", "tool_calls": []}]}, ensure_ascii=False)
    rewritten = apply_rewrite(messages, answer, len(PROMPT))
    assert rewritten[:4] == PROMPT and rewritten[4]["reasoning_content"] == "湖を検索する。"
    assert identity_violation(messages, rewritten, len(PROMPT)) is None
    assert identity_violation(messages, rewritten)[0] == "empty_reasoning"  # without the prompt's length
    edited = copy.deepcopy(rewritten)
    edited[2]["content"] = "どの時代を調べますか？"
    assert identity_violation(messages, edited, len(PROMPT)) == ("content_altered", "message 2")
    edited = copy.deepcopy(rewritten)
    edited[2]["reasoning_content"] = "観点が分からないので尋ねる。"
    assert identity_violation(messages, edited, len(PROMPT))[0] == "content_altered"
    # a rewriter that answers a step for the clarifying question too has the step count wrong
    three = json.loads(answer)
    three["steps"].insert(0, {"reasoning": "尋ねる。", "tool_calls": []})
    assert apply_rewrite(messages, json.dumps(three, ensure_ascii=False), len(PROMPT))[0] == "step_count_changed"


@pytest.fixture(scope="module")
def research(tmp_path_factory):
    """A deepresearch dataset (demo LLM, half the rows with a clarifying exchange) and its trajectories (the
    stand-in teacher, rubric judge and rewriter; min reward 0.5, the task's pass threshold)."""
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.deepresearch.build import build_deepresearch

    base = tmp_path_factory.mktemp("traj-research")
    build_corpus(CorpusConfig(input=ROOT / "tests" / "fixtures" / "deepresearch" / "wiki.jsonl"), base / "corpus",
                 BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    build_deepresearch(DeepResearchConfig(corpus=base / "corpus", index=base / "index", llm="scripted:deepresearch",
                                          clarify_share=0.5), base / "dr", BuildContext(quiet=True))
    module, payloads = importlib.import_module("tansaku.examples.stand_in_llm"), []

    def rewriter(request):
        payloads.append(json.loads(request.messages[-1]["content"].rsplit("```json", 1)[1].rsplit("```", 1)[0]))
        return module.respond(request)

    out = base / "sft"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=base / "dr", teacher=STAND_IN, index=base / "index", judge=STAND_IN,
        translator=ScriptedLLM(rewriter, model="stand-in-rewriter"), min_reward=0.5, n=1, seed=1), out,
        BuildContext(quiet=True))
    return base, manifest, read_rows(out, "train"), payloads


def test_a_clarifying_exchange_opens_the_trajectory(research):
    base, manifest, train, payloads = research
    source = {r["id"]: r for r in read_rows(base / "dr", "train")}
    assert {s["name"]: s["dropped"] for s in manifest["stages"]}["correct_only"] == {}
    assert manifest["trajectories"]["judge"]["model"].endswith("stand_in_llm.py:respond")
    assert {s["name"]: s for s in manifest["stages"]}["correct_only"]["llm"]["model"].endswith("stand_in_llm.py:respond")
    rows = [r for r in train if r["kind"] == "agentic"]
    with_exchange = [r for r in rows if source[r["question_id"]]["clarify_status"] == "ok"]
    without = [r for r in rows if source[r["question_id"]]["clarify_status"] == "not_selected"]
    assert with_exchange and without and len(with_exchange) + len(without) == len(rows)
    for row in with_exchange:
        gold = source[row["question_id"]]
        head = row["messages"][1:4]
        assert head == [{**m, **{k: None for k in ("reasoning_content", "tool_calls", "name", "tool_call_id")}}
                        for m in gold["dialogue"]]
        assert [m["content"] for m in head] == [gold["clarify_request"], gold["clarify_question"],
                                                 gold["clarify_answer"]]
        assert head[0]["content"] != gold["instruction"]  # the vaguer request, then the research
        research_turns = row["messages"][4:]
        assert research_turns[0]["role"] == "assistant" and research_turns[0]["tool_calls"]
        assert all(m["reasoning_content"] for m in research_turns if m["role"] == "assistant")
        assert row["reward"] >= 0.5 and row["answer"]["answer"] is None
        # the rewriter was told the exchange (not the full instruction), and the question was no step of it
        mine = [p for p in payloads if p.get("dialogue") == [{"role": m["role"], "content": m["content"]}
                                                              for m in gold["dialogue"]]]
        assert [p["task"] for p in mine] == list(REWRITE_PASSES)
        assert all(p["question"] == gold["clarify_request"] for p in mine)
        assert all(len(p["steps"]) == sum(m["role"] == "assistant" for m in research_turns) for p in mine)
    for row in without:
        gold = source[row["question_id"]]
        assert row["messages"][1]["content"] == gold["instruction"]
        assert row["messages"][2]["role"] == "assistant" and row["messages"][2]["tool_calls"]
    # what the policy is trained on: the question and every later assistant turn; the answer is read, not trained
    tokenizer = _tokenizer()
    for row in with_exchange:
        messages = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]

        def render(upto, messages=messages, tools=json.loads(row["tools"])):  # prefix-preserving template:
            return tokenizer.apply_chat_template(messages[:upto], tools=tools, tokenize=True,  # a turn's tokens
                                                 return_assistant_tokens_mask=True, return_dict=True)  # = its span

        whole = render(len(messages))
        ids, mask = whole["input_ids"], whole["assistant_masks"]
        start, question_end, answer_end = (len(render(k)["input_ids"]) for k in (2, 3, 4))
        assert ids[:answer_end] == render(4)["input_ids"]
        question = tokenizer.decode([t for t, m in zip(ids[start:question_end], mask[start:question_end]) if m])
        assert question.startswith(messages[2]["content"])  # the assistant's question: trained on
        assert not any(mask[question_end:answer_end])  # the user's answer: read, never trained on
        assert messages[3]["content"] in tokenizer.decode(ids[question_end:answer_end])
        assert any(mask[answer_end:])  # and the research after it is trained on again


def _tokenizer():
    """The tiny model's tokenizer and chat template (as tests/test_trajectories_build.py loads them)."""
    spec = importlib.util.spec_from_file_location("trajectories_build_tests", Path(__file__).with_name(
        "test_trajectories_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._tokenizer()


def test_a_deepresearch_dataset_without_a_judge_is_refused_before_any_work(research, tmp_path):
    base = research[0]
    with pytest.raises(InputError, match="--judge"):
        build_trajectories(TrajectoriesConfig(dataset=base / "dr", teacher=STAND_IN, index=base / "index", n=1),
                           tmp_path / "sft", BuildContext(quiet=True))
    assert not (tmp_path / "sft").exists() or not any((tmp_path / "sft").iterdir())
    assert read_manifest(base / "sft")["config"]["judge"] == STAND_IN
