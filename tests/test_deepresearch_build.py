"""End-to-end ``build_deepresearch`` over the fictional mini-wiki with the demo scripted LLM.

One clean run, and one run whose script misbehaves on purpose per keyword group (single-page
instruction, hallucinated and unseen doc ids, low quality, malformed / generic / badly weighted rubrics); the
clarifying exchange: two calls in order (the answer call sees the question), each filtered by rules and a judge.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tansaku.core.context import BuildContext
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.deepresearch.demo_llm import demo_llm, respond

WIKI = Path(__file__).parent / "fixtures" / "deepresearch" / "wiki.jsonl"


@pytest.fixture(scope="module")
def corpus_and_index(tmp_path_factory):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus

    root = tmp_path_factory.mktemp("deepresearch")
    build_corpus(CorpusConfig(input=WIKI), root / "corpus", BuildContext(quiet=True))
    build_index(root / "corpus", root / "index")
    return root / "corpus", root / "index"


@pytest.fixture(scope="module")
def clean(corpus_and_index, tmp_path_factory):
    from tansaku.pipelines.deepresearch.build import build_deepresearch

    corpus, index = corpus_and_index
    out = tmp_path_factory.mktemp("clean") / "out"
    manifest = build_deepresearch(DeepResearchConfig(corpus=corpus, index=index, llm="scripted:deepresearch"), out,
                                  BuildContext(quiet=True))
    return manifest, read_rows(out)


def _first(user: str, label: str) -> str:
    return user.split(f"【{label}】", 1)[1].split("、", 1)[0].split("\n", 1)[0] if f"【{label}】" in user else ""


def misbehaving(stage: str):
    """The demo script, broken differently per keyword group (named by its first keyword) in ``stage``:
    ``instructions`` (writer, single-page and quality faults) or ``rubric``."""

    def respond_badly(request):
        system = request.messages[0]["content"]
        users = [m["content"] for m in request.messages if m["role"] == "user"]
        answer = respond(request)
        if stage == "instructions" and system.startswith("# deepresearch/instruction"):
            seed = _first(users[0], "キーワード")
            if not isinstance(answer, dict) or answer.get("tool_calls"):
                return answer
            data = json.loads(answer["content"])
            if seed == "潮見町":  # entities all named in one article (dr0001 潮見町) → single page
                data["entities"] = ["潮見町", "月見湖", "白鷺駅"]
            elif seed == "翠嶺鉄道":  # one hallucinated id among confirmed ones → removed, listed
                data["supporting_doc_ids"].append("dr9999")
            elif seed == "蒼井川":  # real ids it never saw in a tool result → unconfirmed
                data["supporting_doc_ids"] = ["dr0019", "dr0020"]
            return {"content": json.dumps(data, ensure_ascii=False)}
        seed = _first(users[-1], "対象")
        if stage == "instructions" and system.startswith("# deepresearch/quality") and seed == "白鷺駅":
            return json.dumps({"scores": {"specificity": 1, "multi_source": 2, "verifiability": 3, "clarity": 2,
                                          "safety": 5}})
        if stage == "rubric" and system.startswith("# deepresearch/rubric"):
            if seed == "潮見町":
                return "ルーブリック: 潮見町の人口を書く（重み2）、蒼井町の窯元の数を書く"  # prose, no JSON object
            if seed == "蒼井町":
                return json.dumps({"criteria": [
                    {"criterion": c, "weight": 1, "scale": "binary", "kind": "other", "entities": [],
                     "source_doc_ids": []}
                    for c in ("出典を3件以上挙げている", "分かりやすく書かれている", "結論が明確である")]},
                    ensure_ascii=False)
            if seed == "白鷺駅":
                data = json.loads(answer)
                data["criteria"][0]["weight"] = -1
                return json.dumps(data, ensure_ascii=False)
        return answer

    return respond_badly


def _faulty_run(stage, corpus_and_index, tmp_path_factory):
    from tansaku.pipelines.deepresearch.build import build_deepresearch

    corpus, index = corpus_and_index
    out = tmp_path_factory.mktemp(stage) / "out"
    config = DeepResearchConfig(corpus=corpus, index=index, llm=demo_llm(misbehaving(stage)), clarify_share=1.0)
    manifest = build_deepresearch(config, out, BuildContext(quiet=True))
    return {s["name"]: s["dropped"] for s in manifest["stages"]}, read_rows(out)


def test_clean_run_writes_dataset(clean):
    manifest, rows = clean
    assert len(rows) >= 5 and manifest["splits"]["train"] == len(rows)
    assert manifest["llm"]["model"] == "scripted:deepresearch"
    assert all(not s["dropped"] for s in manifest["stages"])
    assert len({r["id"] for r in rows}) == len(rows)


def test_search_confirmation_recorded(clean, corpus_and_index):
    from tansaku.envs.search import open_index

    backend = open_index(corpus_and_index[1])
    _, rows = clean
    for r in rows:
        assert len(r["supporting_doc_ids"]) >= 2
        assert set(r["supporting_doc_ids"]) <= set(r["searched_doc_ids"])  # seen in a tool result
        assert all(backend.get(d) is not None for d in r["supporting_doc_ids"])  # and in the index
        assert r["search_queries"] and r["agent_turns"] >= 2


def test_clarifying_share_respected(clean):
    _, rows = clean
    marked = [r for r in rows if r["needs_clarification"]]
    assert 0 < len(marked) < len(rows)  # share 0.5, a seeded draw per record (tested on its own in the units)
    for r in rows:
        if r["needs_clarification"]:
            assert r["clarify_status"] == "ok" and r["clarify_question"].endswith(("？", "?", "。"))
            assert [m["role"] for m in r["dialogue"]] == ["user", "assistant", "user"]
        else:
            assert r["clarify_question"] is None and r["clarify_request"] is None and len(r["dialogue"]) == 1
            assert r["dialogue"][0]["content"] == r["instruction"] and r["clarify_status"] == "not_selected"


def recording(responder=respond):
    """The demo script, logging every call as ``(prompt kind, user message, answer)`` in call order."""
    calls = []

    def answer(request):
        system = request.messages[0]["content"]
        kind = system.split("/", 1)[1].split(" ", 1)[0] if system.startswith("# deepresearch/") else ""
        reply = responder(request)
        calls.append((kind, request.messages[-1]["content"], reply))
        return reply

    return answer, calls


CLARIFY_CALLS = ["clarify_question", "clarify_question_judge", "clarify_answer", "clarify_answer_judge"]


def _clarify_run(responder, corpus_and_index, tmp_path_factory, name):
    from tansaku.pipelines.deepresearch.build import build_deepresearch

    corpus, index = corpus_and_index
    out = tmp_path_factory.mktemp(name) / "out"
    manifest = build_deepresearch(DeepResearchConfig(corpus=corpus, index=index, llm=demo_llm(responder),
                                                     clarify_share=1.0), out, BuildContext(quiet=True))
    return manifest, read_rows(out)


def test_clarifying_exchange_is_two_calls_in_order(corpus_and_index, tmp_path_factory):
    """Question (given the instruction), then the user's answer (given the instruction it holds, its own initial
    request and the question the first call wrote); dialogue = [initial request, question, answer] and the report
    instruction kept whole in ``instruction``."""
    responder, calls = recording()
    manifest, rows = _clarify_run(responder, corpus_and_index, tmp_path_factory, "exchange")
    stages = [s["name"] for s in manifest["stages"]]
    assert stages.index("quality") < stages.index("clarify_question") == stages.index("clarify_answer") - 1
    params = {s["name"]: s["params"] for s in manifest["stages"]}
    assert params["clarify_question"]["prompts"] == ["clarify_question.v1.md", "clarify_question_judge.v1.md"]
    assert params["clarify_answer"]["prompts"] == ["clarify_answer.v1.md", "clarify_answer_judge.v1.md"]
    assert manifest["config"]["prompts"]["clarify_answer"] == "clarify_answer.v1.md"
    assert rows
    for r in rows:
        assert r["clarify_status"] == "ok" and r["clarify_detail"] is None
        mine = [(i, kind, user, reply) for i, (kind, user, reply) in enumerate(calls)
                if f"【指示】\n{r['instruction']}\n" in user and kind.startswith("clarify")]
        assert [kind for _, kind, _, _ in mine] == CLARIFY_CALLS  # one of each, in this order
        (_, _, asked, wrote), _, (_, _, answer_call, answered), _ = mine
        written = json.loads(wrote)
        assert "【確認の質問】" not in asked  # the first call has no question yet
        assert (written["request"], written["question"]) == (r["clarify_request"], r["clarify_question"])
        # the answer call sees the question the first call wrote, and the instruction the user holds
        assert f"【確認の質問】\n{r['clarify_question']}" in answer_call
        assert f"【最初の依頼】\n{r['clarify_request']}" in answer_call
        assert json.loads(answered)["answer"] == r["clarify_answer"]
        assert r["dialogue"] == [{"role": "user", "content": r["clarify_request"]},
                                 {"role": "assistant", "content": r["clarify_question"]},
                                 {"role": "user", "content": r["clarify_answer"]}]
        # vaguer than the report instruction, which the row keeps (the rubric and its judge read it)
        assert len(r["clarify_request"]) < len(r["instruction"]) and r["instruction"].startswith(
            "、".join(r["entities"]))
        assert r["prompt"][0]["role"] == "system" and r["prompt"][1:] == r["dialogue"]


def _seed_of(user: str) -> str:
    """The first entity of the instruction a clarify call is about (the demo's instructions open with them)."""
    return user.split("【指示】\n", 1)[1].split("、", 1)[0]


# (call, first entity) → how that call misbehaves; (status, detail prefix) each row must end with.
FAULTS = {("clarify_question", "翠嶺鉄道"): json.dumps({"request": "翠嶺鉄道について調べて。",
                                                      "question": "翠嶺鉄道について調べます。"}, ensure_ascii=False),
          ("clarify_question_judge", "蒼井町"): json.dumps({"request_ok": True, "question_ok": False,
                                                          "reason": "答えを先取りしている"}, ensure_ascii=False),
          ("clarify_answer", "白鷺駅"): json.dumps({"answer": "どの観点がよいと思いますか？"}, ensure_ascii=False),
          ("clarify_answer_judge", "潮見町"): json.dumps({"answer_ok": False, "reason": "指示と矛盾"},
                                                        ensure_ascii=False),
          ("clarify_answer", "蒼井川"): "歴史を中心にお願いします。"}  # prose, no JSON object
EXPECTED_STATUS = {"翠嶺鉄道": ("question_rejected", "rules: question is not a short question"),
                   "蒼井町": ("question_rejected", "judge: question_ok (答えを先取りしている)"),
                   "白鷺駅": ("answer_rejected", "rules: answer is empty, too long, or another question"),
                   "潮見町": ("answer_rejected", "judge: answer_ok (指示と矛盾)"),
                   "蒼井川": ("answer_llm_bad_json", "")}


def test_each_clarify_call_is_filtered_by_rules_then_judge(corpus_and_index, tmp_path_factory):
    def faulty(request):
        system = request.messages[0]["content"]
        kind = system.split("/", 1)[1].split(" ", 1)[0]
        if kind.startswith("clarify"):
            fault = FAULTS.get((kind, _seed_of(request.messages[-1]["content"])))
            if fault is not None:
                return fault
        return respond(request)

    responder, calls = recording(faulty)
    manifest, rows = _clarify_run(responder, corpus_and_index, tmp_path_factory, "clarify-faults")
    assert all(not s["dropped"] for s in manifest["stages"])  # a failed exchange never drops the instruction
    by_seed = {r["keywords"][0]: r for r in rows}
    assert set(EXPECTED_STATUS) <= set(by_seed)
    for seed, r in by_seed.items():
        status, detail = EXPECTED_STATUS.get(seed, ("ok", None))
        assert r["clarify_status"] == status, (seed, r["clarify_status"], r["clarify_detail"])
        assert (r["clarify_detail"] or "").startswith(detail or "") and (detail is None) == (r["clarify_detail"] is None)
        if status != "ok":  # the instruction alone, and no text a later stage could take for an exchange
            assert r["dialogue"] == [{"role": "user", "content": r["instruction"]}]
            assert r["clarify_request"] is r["clarify_question"] is r["clarify_answer"] is None
            assert not any("確認の回答" in c["criterion"] for c in r["rubric"])
    # a question the rules or the judge refused is never answered: the answer call is not paid for
    answered = {_seed_of(user) for kind, user, _ in calls if kind == "clarify_answer"}
    assert not {"翠嶺鉄道", "蒼井町"} & answered and {"白鷺駅", "潮見町", "蒼井川"} <= answered
    judged = {_seed_of(user) for kind, user, _ in calls if kind == "clarify_question_judge"}
    assert "翠嶺鉄道" not in judged and "蒼井町" in judged  # rules first, the judge only on what they passed


def test_rubrics_valid_and_usable_by_reward(clean):
    from tansaku.core.llm import ScriptedLLM
    from tansaku.envs.rubric_reward import make_rubric_reward
    from tansaku.envs.tasks import TASKS

    _, rows = clean
    assert TASKS["deepresearch"].gold_failures(rows) == []
    for r in rows:
        assert abs(sum(c["weight"] for c in r["rubric"]) - 1) < 1e-3
        assert {c["kind"] for c in r["rubric"]} >= {"coverage", "fact"}
        assert all(set(c["source_doc_ids"]) <= set(r["supporting_doc_ids"]) for c in r["rubric"])
    # A judge that gives the first criterion its full marks and the rest 0: the reward is that criterion's weight.
    from tansaku.envs.rubric_reward import SCALE_POINTS

    top = SCALE_POINTS[rows[0]["rubric"][0]["scale"]]
    judge = ScriptedLLM(lambda req: json.dumps({"scores": [top] + [0] * (len(rows[0]["rubric"]) - 1)}))
    report = [{"role": "assistant", "content": "潮見町と蒼井町の比較。" * 30}]
    score = make_rubric_reward(judge)([report], rubric=[rows[0]["rubric"]], instruction=[rows[0]["instruction"]])
    assert score == [pytest.approx(rows[0]["rubric"][0]["weight"], abs=1e-3)]


def _seeds(rows) -> set[str]:
    return {r["keywords"][0] for r in rows}


def test_single_page_unconfirmed_and_low_quality_dropped(clean, corpus_and_index, tmp_path_factory):
    dropped, rows = _faulty_run("instructions", corpus_and_index, tmp_path_factory)
    assert dropped["instructions"] == {"unconfirmed_sources": 1}
    assert dropped["single_page"] == {"single_page": 1}
    assert dropped["quality"] == {"low_quality": 1}
    assert _seeds(rows) == _seeds(clean[1]) - {"潮見町", "蒼井川", "白鷺駅"}
    row = next(r for r in rows if r["keywords"][0] == "翠嶺鉄道")
    assert row["unconfirmed_doc_ids"] == ["dr9999"] and "dr9999" not in row["supporting_doc_ids"]
    assert all(r["needs_clarification"] and r["clarify_status"] == "ok" for r in rows)  # share 1.0


def test_bad_rubrics_dropped(clean, corpus_and_index, tmp_path_factory):
    dropped, rows = _faulty_run("rubric", corpus_and_index, tmp_path_factory)
    assert dropped["rubric"] == {"llm_bad_json": 1, "rubric_generic": 1, "rubric_schema": 1}
    assert _seeds(rows) == _seeds(clean[1]) - {"潮見町", "蒼井町", "白鷺駅"}
    for r in rows:
        assert any(r["keywords"][0] in c["criterion"] for c in r["rubric"])


def test_rerun_same_out_returns_same_dataset(clean, corpus_and_index, tmp_path):
    from tansaku.pipelines.deepresearch.build import build_deepresearch

    manifest, _ = clean
    out = tmp_path / "again"
    corpus, index = corpus_and_index
    config = DeepResearchConfig(corpus=corpus, index=index, llm="scripted:deepresearch")
    again = build_deepresearch(config, out, BuildContext(quiet=True))
    assert again["version"] == manifest["version"]
    assert build_deepresearch(config, out, BuildContext(quiet=True))["version"] == again["version"]
    assert read_manifest(out)["config"]["clarify_share"] == 0.5


def test_bad_arguments(corpus_and_index, tmp_path):
    from tansaku.core.store import StoreError
    from tansaku.pipelines.deepresearch.build import build_deepresearch

    corpus, index = corpus_and_index
    with pytest.raises(ValueError, match="clarify-share"):
        build_deepresearch(DeepResearchConfig(corpus=corpus, index=index, llm="scripted:deepresearch", clarify_share=2),
                           tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="synth index build"):
        build_deepresearch(DeepResearchConfig(corpus=corpus, index=tmp_path / "no-index", llm="scripted:deepresearch"),
                           tmp_path / "b")
    (tmp_path / "plain").mkdir()  # a folder that is no dataset (and does not hold --out: that is refused too)
    with pytest.raises(StoreError):
        build_deepresearch(DeepResearchConfig(corpus=tmp_path / "plain", index=index, llm="scripted:deepresearch"),
                           tmp_path / "c")
