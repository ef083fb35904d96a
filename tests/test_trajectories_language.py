"""The language check on rewritten reasoning (``pipelines/trajectories/language.py``): a table of steps that
are and are not Japanese, and builds whose stand-in rewriter writes Chinese, plain English or Japanese with a
Chinese clause (each dropped by the stage that wrote it, kept in the ``rejected`` split) or Japanese quoting
文語体 law text and naming English products and ASCII queries (kept). The demo's two rewriters pass.

Run: pytest tests/test_trajectories_language.py
"""

from __future__ import annotations

import importlib.util
import json
import zlib
from collections import Counter
from pathlib import Path

import pytest

from tansaku.core.context import BuildContext
from tansaku.core.llm import ScriptedLLM
from tansaku.core.store import read_rows
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.pipelines.trajectories.language import (
    MIN_CHINESE_CHARS,
    MIN_JAPANESE_SHARE,
    japanese_share,
    language_problem,
    language_violation,
)
from tansaku.pipelines.trajectories.rewrite import rewrite_stage

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "teacher_script.py"
REWRITES = ("translate", "refine", "scenario")
LANGUAGE_REASONS = {"reasoning_has_chinese", "reasoning_not_japanese"}

JAPANESE = [
    "まず民法第九十条を検索して、公序良俗に反する法律行為の効力を確かめる。",
    "第百二十三条には「公正証書ナルトキハ其日付ヲ以テ確定日付トス」とある。確定日付は公正証書の日付だ。",
    "民法施行法第五条は公正証書ナルトキハ其日付ヲ以テ確定日付トスと定めている。",  # 文語体, unquoted
    "公正証書ナルトキハ其日付ヲ以テ確定日付トス",
    "前項ノ規定ハ第三者ニ対シテ其効力ヲ生セス",
    "質問は iPhone 15 Pro の発売年を尋ねている。まず「iPhone 15 Pro」を検索する。",
    '似た名前と紛れないよう、「{"bool": {"must": [{"match_phrase": {"title": "白砂市"}}]}}」で検索する。',
    "文書 miniwiki-0042 を開いて本文を読む。",
    "Visual Studio Code の拡張機能について調べる必要がある。",
    "Python の設計者は Guido van Rossum なので、次に彼の出身地を調べる。",
    "OpenSearch の match_phrase クエリで title フィールドを絞る。",
    "search ツールで「白砂市」を検索する。",
    "白砂県の県庁所在地は白砂市。「白砂市」を検索する。",  # the compact style
    "Tokyo Metroの本社所在地はTaito。「Taito」を検索する。",
    "「Tokyo Tower」を検索する。",
    "根拠が揃ったので {{白砂市}} と答える。",
    "中国語で「你好」は挨拶である。",
    "東京都、大阪府、京都府を比べる。",
    "ソフトウェアのバージョンを確認する。",
]
NOT_JAPANESE = [
    "Let me search for the city.",
    "Search.",
    "The question asks for the 市長 of the 県庁所在地 of 白砂県. First I look up 白砂県.",
    "The 県庁所在地 of 白砂県 is 白砂市. Now I need the 市長 of 白砂市.",
    "The article says 公序良俗に反する is void.",
    "結果を見る。The result shows the mayor is 楠沼栞, so I answer with that name.",
    "답을 찾기 위해 검색합니다.",
]
CHINESE = [
    "我们需要先搜索这个城市的市长，然后再确认他的出生地。",
    "檢索結果顯示這個條件沒有問題，所以我們可以回答。",
    "検索結果を確認します。我们需要进一步确认这个条件。",
    "条文を開く。然后我们再看第九十条的内容。",
]


@pytest.mark.parametrize("text", JAPANESE)
def test_japanese_steps_pass(text):
    assert language_problem(text) is None, (japanese_share(text), text)


@pytest.mark.parametrize("text", NOT_JAPANESE)
def test_english_or_other_steps_are_not_japanese(text):
    problem = language_problem(text)
    assert problem and problem[0] == "reasoning_not_japanese", (japanese_share(text), text)
    assert f"< {MIN_JAPANESE_SHARE}" in problem[1] and text[:20] in problem[1]


@pytest.mark.parametrize("text", CHINESE)
def test_chinese_steps_have_chinese(text):
    problem = language_problem(text)
    assert problem and problem[0] == "reasoning_has_chinese", text


def test_thresholds_are_parameters_and_violation_names_the_step():
    assert language_problem("search ツールで「白砂市」を検索する。", min_japanese_share=0.9)[0] == "reasoning_not_japanese"
    assert language_problem(CHINESE[2], min_chinese_chars=50) is None  # a short Chinese clause, tolerated
    assert MIN_CHINESE_CHARS == 4
    messages = [{"role": "user", "content": "質問"},
                {"role": "assistant", "reasoning_content": JAPANESE[0], "tool_calls": []},
                {"role": "tool", "content": "我们需要先搜索这个城市的市长。"},  # tool results are not checked
                {"role": "assistant", "reasoning_content": CHINESE[0], "content": "{{x}}"}]
    reason, detail = language_violation(messages, "scenario")
    assert reason == "reasoning_has_chinese" and detail.startswith("scenario step 2: ") and "我们" in detail
    assert language_violation(messages[:3], "scenario") is None


def test_rewrite_stages_record_the_thresholds():
    client = ScriptedLLM(lambda request: "{}", model="x")
    for kind in REWRITES:
        params = rewrite_stage(kind, client).params
        assert params["min_japanese_share"] == MIN_JAPANESE_SHARE
        assert params["min_chinese_chars"] == MIN_CHINESE_CHARS
    params = rewrite_stage("refine", client, min_japanese_share=0.8, min_chinese_chars=10).params
    assert params["min_japanese_share"] == 0.8 and params["min_chinese_chars"] == 10


# ---------------------------------------------------------------- builds with stand-in rewriters


def script():
    spec = importlib.util.spec_from_file_location("demo_teacher_script_language", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    base = tmp_path_factory.mktemp("traj-language")
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), base / "corpus", BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    build_multihop(MultihopConfig(corpus=base / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0), base / "multihop", BuildContext(quiet=True))
    return base


def group(question: str) -> int:
    """Which stand-in behaviour a question gets: 0 Chinese, 1 English, 2 a Chinese clause, 3 good Japanese."""
    return zlib.crc32(question.encode("utf-8")) % 4


# (stage that misbehaves, the reason it must drop with) per group; group 3 is never dropped.
EXPECTED = {0: ("translate", "reasoning_has_chinese"), 1: ("refine", "reasoning_not_japanese"),
            2: ("scenario", "reasoning_has_chinese")}
LAW = ("民法施行法第五条の「公正証書ナルトキハ其日付ヲ以テ確定日付トス」は関係がない。"
       "GitHub や Visual Studio Code の話でもないので、ASCII の検索語 Shirasuna City も使わない。")


def stand_in(module):
    def rewrite(request):
        payload = module._payload(request)
        data = json.loads(module.rewrite(request))
        kind, behaviour = payload["task"], group(payload["question"])
        for step in data["steps"]:
            query = next((c["arguments"].get("query") for c in step["tool_calls"] if c["name"] == "search"), "答え")
            if behaviour == 0 and kind == "translate":
                step["reasoning"] = f"我们需要搜索“{query}”，然后确认这个条件。"
            elif behaviour == 1 and kind == "refine":
                step["reasoning"] = f"Next I search for {query} and read what the page says about it."
            elif behaviour == 3:
                step["reasoning"] = step["reasoning"] + LAW
        if behaviour == 2 and kind == "scenario":
            data["steps"][-1]["reasoning"] += "然后我们再看这个条件的内容。"
        return json.dumps(data, ensure_ascii=False)

    return ScriptedLLM(rewrite, model="stand-in-languages")


@pytest.fixture(scope="module")
def mixed_build(inputs):
    out = inputs / "languages"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=stand_in(script()), n=1, limit=40, seed=1), out, BuildContext(quiet=True))
    return manifest, read_rows(out, "train"), read_rows(out, "rejected")


def test_chinese_english_and_mixed_rewrites_are_dropped_by_their_stage(mixed_build, inputs):
    manifest, train, rejected = mixed_build
    questions = {r["qid"]: r["question"] for r in read_rows(inputs / "multihop", "train")}
    dropped = Counter()
    for r in rejected:
        record = json.loads(r["record"])
        if r["stage"] in REWRITES or r["stage"] == "verify":
            dropped[group(questions[record["question_id"]])] += 1
            stage, reason = EXPECTED.get(group(questions[record["question_id"]]), (None, None))
            assert (r["stage"], r["reason"]) == (stage, reason), (r["stage"], r["reason"], r["detail"])
            assert r["detail"].startswith(f"{stage} step ") and record["messages"]
    kept = [r for r in train if r["kind"] == "agentic"]
    assert kept and all(group(questions[r["question_id"]]) == 3 for r in kept)
    assert all(dropped[g] >= 1 for g in EXPECTED), dropped  # every failure happened at least once
    stages = {s["name"]: s for s in manifest["stages"]}
    for stage, reason in EXPECTED.values():
        assert stages[stage]["dropped"].get(reason) == sum(
            1 for r in rejected if (r["stage"], r["reason"]) == (stage, reason))
        assert stages[stage]["params"]["min_japanese_share"] == MIN_JAPANESE_SHARE
    assert f"{EXPECTED[0][0]}/{EXPECTED[0][1]}" in manifest["trajectories"]["failure_reasons"]


def test_japanese_quoting_law_text_and_naming_products_is_kept(mixed_build):
    _, train, _ = mixed_build
    for row in (r for r in train if r["kind"] == "agentic"):
        steps = [m for m in row["messages"] if m["role"] == "assistant"]
        assert steps and all(m["reasoning_content"].endswith(LAW) for m in steps)


@pytest.mark.parametrize("teacher, rewriter", [("respond", "rewrite"), ("respond_compact", "rewrite_compact")])
def test_the_demo_rewriters_pass_the_check(inputs, teacher, rewriter):
    out = inputs / f"demo-{rewriter}"
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}:{teacher}", index=inputs / "index",
        translator=f"scripted:{SCRIPT}:{rewriter}", n=1, limit=20, seed=1), out, BuildContext(quiet=True))
    reasons = Counter(r["reason"] for r in read_rows(out, "rejected")) if manifest["splits"].get("rejected") else {}
    assert not LANGUAGE_REASONS & set(reasons), reasons
    assert manifest["splits"]["train"] > 0
