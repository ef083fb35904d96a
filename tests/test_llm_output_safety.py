"""Issue 15: a bad LLM answer drops one row, never the build.

Hostile JSON (deep nesting, 1e999 / NaN / Infinity, huge integers, lone surrogates, huge strings, wrong
types) goes through the one validated path (``tansaku.core.llm.checked_json`` / ``ask_json``) and comes out
as a usable object or a named Drop, never an exception; a generated question that looks like JSON is
searched as plain text; one bad reply in an egov or multihop build drops that row (``llm_bad_output``) and
keeps the others; a build whose LLM answers are all unusable exits 2 with one line.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from test_egov_build import EXAMPLES, scripted_mcq
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop
from tansaku.core.llm import ChatRequest, ScriptedLLM, ask_json, checked_json
from tansaku.core.llm.validate import MAX_STRING_CHARS, output_problem
from tansaku.core.store import read_rows
from tansaku.envs.search.dsl import Fields, parse_request
from tansaku.pipelines.egov import generate
from tansaku.pipelines.egov.build import build_egov
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.multihop import solvability
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.multihop.quality import JUDGE_SCHEMA
from tansaku.pipelines.multihop.triples import llm_extract

DECLARED = {"llm_bad_json", "llm_bad_output"}
HOSTILE_NUMBERS = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "9" * 5000, "1" + "0" * 400, "2.5", "-0"]
HOSTILE_STRINGS = ['"\\ud83d"', '"a\\udc00b"', '"' + "x" * (MAX_STRING_CHARS + 1) + '"', '"[{\\"a\\": 1}]"']


def _rows(manifest: dict, out: Path) -> list[dict]:
    """Every kept row, train and held-out test alike."""
    return [r for split in manifest["splits"] if split != "rejected" for r in read_rows(out, split)]


def _stored_safely(value: dict) -> None:
    """What a stage may keep: finite JSON that encodes to UTF-8."""
    json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")


# ------------------------------------------------------------------------------ hostile texts
scalar_text = st.one_of(st.sampled_from(HOSTILE_NUMBERS + HOSTILE_STRINGS),
                        st.sampled_from(["true", "null", "[]", "{}", '"ok"', "3"]),
                        st.text(max_size=20).map(json.dumps))


@st.composite
def hostile_json_text(draw) -> str:
    """A JSON-ish answer: an object of hostile values, optionally nested deep, cut or wrapped in chatter."""
    keys = draw(st.lists(st.sampled_from(["question", "choices", "answer_index", "explanation", "natural", "x"]),
                         min_size=1, max_size=4, unique=True))
    body = "{" + ", ".join(f'"{k}": {draw(scalar_text)}' for k in keys) + "}"
    depth = draw(st.sampled_from([0, 0, 5, 40, 3000]))
    if depth:
        opener = draw(st.sampled_from(["[", '{"a": ']))
        closer = "]" if opener == "[" else "}"
        body = '{"deep": ' + opener * depth + body + closer * draw(st.sampled_from([0, depth])) + "}"
    if draw(st.booleans()):
        body = body[: draw(st.integers(1, len(body)))]  # a cut-off answer: json-repair's job
    return draw(st.sampled_from(["", "答え: ", "<think>{考える}</think>"])) + body


@settings(max_examples=150, deadline=None)
@given(hostile_json_text())
def test_hostile_text_is_an_object_or_a_declared_drop(text):
    out = checked_json(text, generate.MCQ_SCHEMA)
    if isinstance(out, Drop):
        assert out.reason in DECLARED and out.detail
        return
    assert output_problem(out, generate.MCQ_SCHEMA) is None
    _stored_safely(out)
    if "answer_index" in out:
        assert out["answer_index"] in (0, 1, 2, 3)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=10), st.sampled_from(["\ud83d", "x" * (MAX_STRING_CHARS + 1), 10**30])),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.sampled_from(["ambiguous", "natural", "reasons", "z"]), children,
                                               max_size=4)),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["ambiguous", "natural", "single_answer", "reasons", "z"]), json_values))
def test_values_that_pass_the_judge_schema_are_typed_finite_and_storable(value):
    problem = output_problem(value, JUDGE_SCHEMA)
    if problem is not None:
        assert problem.startswith("$")
        return
    _stored_safely(value)
    if "natural" in value:
        assert 1 <= value["natural"] <= 5 and math.isfinite(value["natural"])
    if "ambiguous" in value:
        assert isinstance(value["ambiguous"], bool)
    assert all(isinstance(r, str) for r in value.get("reasons", []))


def test_concrete_hostile_answers_name_what_was_wrong():
    cases = {
        '{"question": "q", "choices": ["a", "b", "c", "d"], "answer_index": 1e999, "explanation": ""}':
            "$.answer_index: inf is not a finite number",
        '{"question": "q", "choices": ["a", "b", "c", "d"], "answer_index": NaN, "explanation": ""}':
            "$.answer_index: nan is not a finite number",
        '{"question": "\\ud83d", "choices": ["a", "b", "c", "d"], "answer_index": 1, "explanation": ""}':
            "$.question: string is not valid Unicode",
        '{"question": "q", "choices": ["a", "b", "c", 4], "answer_index": 1, "explanation": ""}':
            "$.choices[3]: expected string, got int",
        '{"question": "q", "choices": ["a", "b", "c", "d"], "answer_index": 4, "explanation": ""}':
            "$.answer_index: 4 is outside 0..3",
        '{"question": "q", "choices": ["a", "b", "c", "d"], "answer_index": ' + "9" * 5000 + ', "explanation": ""}':
            "unreadable JSON number",
        '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}": "nested deeper than",
    }
    for text, expected in cases.items():
        out = checked_json(text, generate.MCQ_SCHEMA)
        assert isinstance(out, Drop) and out.reason == "llm_bad_output", (text[:80], out)
        assert expected in out.detail


def test_deep_nesting_is_rejected_in_linear_time():
    # Generous bound: a recursive parser would blow the stack; a quadratic scan would take minutes.
    text = '{"a": "' + "x" * 200_000 + '", "b": ' + "[" * 400_000 + "]" * 400_000 + "}"
    start = time.perf_counter()
    out = checked_json(text)
    assert time.perf_counter() - start < 10
    assert isinstance(out, Drop) and out.reason == "llm_bad_output"


def test_ask_json_checks_each_answer_against_its_request_schema():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}}}
    llm = ScriptedLLM(lambda req: req.messages[-1]["content"])
    texts = ['{"n": 3}', '{"n": 1e999}', '{"n": "3"}', "no json", '{"n": 9}']
    out = ask_json(llm, [ChatRequest(messages=[{"role": "user", "content": t}], json_schema=schema) for t in texts])
    assert out[0] == {"n": 3}
    assert [o.reason for o in out[1:]] == ["llm_bad_output", "llm_bad_output", "llm_bad_json", "llm_bad_output"]


def test_extraction_evidence_of_the_wrong_type_drops_the_document():
    doc = {"id": "d1", "title": "雪村製菓", "text": "雪村製菓は、鳴沢市に本社を置く菓子メーカー。"}
    answer = {"triples": [{"subject": "雪村製菓", "relation": "本社所在地", "object": "鳴沢市", "evidence": 5}]}
    [out] = llm_extract([doc], ScriptedLLM(lambda req: json.dumps(answer, ensure_ascii=False)))
    assert [d.reason for d in out] == ["llm_bad_output"]


# ------------------------------------------------------------------------------ questions are plain text
class RecordingBackend:
    """Validates every query with the real DSL parser, as the embedded and OpenSearch backends do."""

    def __init__(self):
        self.queries = []

    def search(self, query, size=10):
        self.queries.append(parse_request(query, size, Fields())[0])
        return type("Result", (), {"hits": []})()


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["[", "{", '{"match_all": {}}', '[{"regexp": ', "{{", " ["]),
       st.text(min_size=1, max_size=300))
def test_a_question_that_looks_like_json_is_searched_as_plain_text(prefix, rest):
    question = prefix + rest
    backend = RecordingBackend()
    assert generate.retrieval_rank(backend, question, "a1") is None  # never a QueryError
    for query in backend.queries:
        assert set(query) == {"multi_match"} and query["multi_match"]["query"].strip()
    assert solvability.prefilter([{"question": question, "bridge": "水城遥", "page_ids": ["p1", "p2"]}],
                                 backend) == [Drop("hop1_not_retrievable")]
    assert backend.queries and all(set(q) == {"multi_match"} for q in backend.queries)


# ------------------------------------------------------------------------------ builds
def egov_with_bad_replies(request) -> str:
    """``scripted_mcq`` with four of its six usable generator answers broken in different ways."""
    answer = scripted_mcq(request)
    prompt = request.messages[0]["content"]
    if "ルーブリック" in prompt or not answer.startswith("{"):
        return answer
    data = json.loads(answer)
    if "「利用期間」" in data["question"]:
        return answer.replace('"answer_index": 2', '"answer_index": 1e999')
    if "「報告」" in data["question"]:
        return answer.replace('"explanation": "', '"explanation": "\\ud83d')
    if "「撤去」" in data["question"]:
        return '{"question": ' + "[" * 100_000 + "]" * 100_000 + "}"
    if "「利用料金」" in data["question"]:  # plain text that looks like the query DSL: kept and ranked
        data["question"] = '[{"match_all": {}}] ' + data["question"]
    return json.dumps(data, ensure_ascii=False)


def test_egov_build_drops_only_the_bad_replies(tmp_path):
    manifest = build_egov(EgovConfig(laws=[EXAMPLES], llm=ScriptedLLM(egov_with_bad_replies)), tmp_path / "llm", BuildContext(quiet=True))
    stages = {s["name"]: s for s in manifest["stages"]}
    assert stages["generate"]["dropped"] == {"llm_bad_json": 9, "llm_bad_output": 3}
    rows = _rows(manifest, tmp_path / "llm")
    assert len(rows) == 3
    looks_like_dsl = [r for r in rows if r["question"].startswith("[")]
    assert len(looks_like_dsl) == 1 and stages["retrieval"]["dropped"] == {}
    rejected = read_rows(tmp_path / "llm", "rejected")
    details = [r["detail"] for r in rejected if r["reason"] == "llm_bad_output"]
    assert len(details) == 3 and any("not a finite number" in d for d in details)
    assert any("lone surrogate" in d for d in details) and any("nested deeper" in d for d in details)


def _triples(path: Path) -> Path:
    facts = [("灯台の本", "水城遥", "朝霧市"), ("海辺の本", "森田一郎", "夕凪町"), ("高原の本", "川上花子", "星見村")]
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for s, b, a in facts
                            for t in ({"subject": s, "relation": "著者", "object": b},
                                      {"subject": b, "relation": "出生地", "object": a})), encoding="utf-8")
    return path


def multihop_with_bad_replies(request) -> str:
    text = request.messages[-1]["content"]
    if "single_valued" in text:
        return '{"single_valued": true}'
    subject = re.search(r"事実1: 「([^」]+)」", text).group(1)
    if "クイズ作家" in text:  # question generator: the 高原 chain gets a number for its question
        if subject == "高原の本":
            return '{"question": 12345}'
        return json.dumps({"question": f"「{subject}」を書いた人が生まれた場所はどこですか？"}, ensure_ascii=False)
    natural = "1e999" if subject == "海辺の本" else "4"  # the judge overflows on the 海辺 chain
    return ('{"ambiguous": false, "natural": ' + natural + ', "single_answer": true, "time_dependent": false, '
            '"reasons": []}')


def test_multihop_build_drops_only_the_bad_replies(tmp_path):
    manifest = build_multihop(MultihopConfig(triples=_triples(tmp_path / "t.jsonl"), until="quality", llm=ScriptedLLM(multihop_with_bad_replies), keep_rejected=True), tmp_path / "mh", BuildContext(quiet=True))
    stages = {s["name"]: s for s in manifest["stages"]}
    assert stages["questions"]["dropped"] == {"llm_bad_output": 1}
    assert stages["quality"]["dropped"] == {"llm_bad_output": 1} and stages["quality"]["kept"] == 1
    rows = _rows(manifest, tmp_path / "mh")
    assert [r["subject"] for r in rows] == ["灯台の本"]


def _one_line_exit_2(args: list[str]) -> str:
    result = CliRunner().invoke(synth_app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_all_unusable_answers_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"match": "single_valued", "content": '{"single_valued": true}'}) + "\n"
                   + json.dumps({"content": '{"question": "\\ud83d", "choices": ["a", "b", "c", "d"], '
                                            '"answer_index": 1e999, "explanation": ""}'}) + "\n", encoding="utf-8")
    line = _one_line_exit_2(["build", "egov", "--laws", str(EXAMPLES), "--out", str(tmp_path / "eg"),
                             "--llm", f"scripted:{bad}", "--limit", "4", "--quiet"])
    assert re.search(r"all \d+ LLM answers were unusable", line) and "llm_bad_output" in line
    line = _one_line_exit_2(["build", "multihop", "--triples", str(_triples(tmp_path / "t.jsonl")),
                             "--out", str(tmp_path / "mh"), "--llm", f"scripted:{bad}", "--until", "questions",
                             "--quiet"])
    assert "all 3 LLM answers were unusable" in line and "llm_bad_output 3" in line
