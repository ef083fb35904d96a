"""End-to-end ``build_deepresearch`` over the fictional mini-wiki with the demo scripted LLM.

One clean run, and one run whose script misbehaves on purpose per keyword group (single-page
instruction, hallucinated and unseen doc ids, low quality, malformed / generic / badly weighted rubrics).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tansaku.core.context import BuildContext
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus_config import CorpusConfig
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.deepresearch.demo_llm import demo_llm, respond

WIKI = Path(__file__).parent / "fixtures" / "deepresearch" / "wiki.jsonl"


@pytest.fixture(scope="module")
def corpus_and_index(tmp_path_factory):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus import build_corpus

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
            assert r["clarify_question"] is None and len(r["dialogue"]) == 1


def test_rubrics_valid_and_usable_by_reward(clean):
    from tansaku.core.llm import ScriptedLLM
    from tansaku.envs.rubric_reward import make_rubric_reward
    from tansaku.envs.tasks import check_gold

    _, rows = clean
    check_gold("deepresearch", rows)
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
