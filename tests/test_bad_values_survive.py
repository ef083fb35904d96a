"""One bad value costs its record (or its episode), never the build (issue 28), through the CLI.

A lone surrogate (``"\\ud800"`` in the JSON text) in a corpus JSONL, a JEMHopQA JSON, ``--triples``,
``--relations``, a teacher's answer or a model's answer in ``train eval`` raised ``UnicodeEncodeError`` in
whichever writer met it first (``core/runner.py``'s chunk files); now it is read as U+FFFD everywhere. A model
answer of the wrong type (``{"content": 5}``) or with call arguments 50,000 brackets deep is a counted parse
failure of its episode. Nothing here loads a model.

    pytest tests/test_bad_values_survive.py -q
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.store import read_rows
from tansaku.envs.search import build_index

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("search_fixture", ROOT / "tests" / "fixtures" / "search" / "dataset.py")
search_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_fixture)

# JSON text, as a file holds it: the escapes of lone surrogates (a pair, \ud83d\ude00, is one character).
JEMHOP = ('[{"qid": "q1", "type": "compositional", "question": "本Aの著者の\\ud800出身地は？", "answer": "町C\\udfff",'
          ' "derivations": [["本A", "著者", ["作家B"]], ["作家B", "出身地", ["町C\\udfff"]]], "page_ids": ["11", "22"],'
          ' "time_dependent": false, "note": "\\udc00\\ud83d\\ude00"}]')
TRIPLES = ('{"subject": "本A", "relation": "著者", "object": "作家B", "source": "\\ud800"}\n'
           '{"subject": "作家B", "relation": "出身地", "object": "町C\\udfff"}\n')


def run(app, *args) -> tuple[int, str, object]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stderr, result.exception


def assert_no_surrogate(rows: list[dict]) -> None:
    text = json.dumps(rows, ensure_ascii=False, default=str)
    text.encode("utf-8")  # raises on a lone surrogate
    assert "\ufffd" in text


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad_values")
    search_fixture.write_dataset(d / "docs")
    build_index(d / "docs", d / "ix")
    return d


def test_corpus_jsonl(tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text('{"id": "a", "title": "\\ud800", "text": "港の\\udc00話。"}\n{"id": "b", "title": "川", "text": "川。"}\n',
                   encoding="utf-8")
    code, stderr, exc = run(synth_app, "build", "corpus", "--input", src, "--out", tmp_path / "c", "-q")
    assert code == 0, (stderr, exc)
    rows = read_rows(tmp_path / "c")
    assert [r["id"] for r in rows] == ["a", "b"] and rows[0]["title"] == "\ufffd" and rows[0]["text"] == "港の\ufffd話。"


def test_jemhopqa_json(tmp_path):
    (tmp_path / "j.json").write_text(JEMHOP, encoding="utf-8")
    code, stderr, exc = run(synth_app, "import", "jemhopqa", tmp_path / "j.json", "--out", tmp_path / "o", "-q")
    assert code == 0, (stderr, exc)
    rows = read_rows(tmp_path / "o", "test")  # an evaluation set: every question in 'test'
    assert len(rows) == 1 and "\ufffd出身地" in rows[0]["question"]
    assert_no_surrogate(rows)


@pytest.mark.parametrize("source", ["jsonl", "jemhopqa", "relations"])
def test_multihop_triples_and_relations(tmp_path, source):
    relations = tmp_path / "rel.json"
    relations.write_text('{"所属\\ud800": {"kind": "org", "of": "{S}の所属", "ask": "{S}はどこ\\udc00に所属？",'
                         ' "variants": []}}', encoding="utf-8")
    triples = tmp_path / ("t.json" if source == "jemhopqa" else "t.jsonl")
    triples.write_text(JEMHOP if source == "jemhopqa" else TRIPLES, encoding="utf-8")
    extra = ["--relations", relations] if source == "relations" else []
    code, stderr, exc = run(synth_app, "build", "multihop", "--triples", triples, "--until", "quality",
                            "--out", tmp_path / "m", *extra, "-q")
    assert code == 0, (stderr, exc)
    rows = read_rows(tmp_path / "m", split="train") + read_rows(tmp_path / "m", split="test")
    assert len(rows) == 1
    json.dumps(rows, ensure_ascii=False, default=str).encode("utf-8")


def _question_dataset(folder: Path) -> Path:
    search_fixture.write_dataset(folder, rows=[{"id": "q1", "question": "雪村製菓の創業者は？", "answer": "雪村清一郎",
                                                "bridge": "雪村製菓"}], keyword_fields=())
    (folder / "manifest.json").write_text('{"pipeline": "multihop", "splits": {"train": 1}}', encoding="utf-8")
    return folder


def test_a_teachers_answer(fx, tmp_path):
    teacher = tmp_path / "teacher.jsonl"  # answered in turn: the search call, then the final answer
    teacher.write_text('{"reasoning": "\\ud800雪村製菓を検索する。", "content": "", "tool_calls": [{"name": "search",'
                       ' "arguments": {"query": "雪村製菓\\udc00"}}]}\n'
                       '{"content": "<think>創業者は雪村清一郎\\udfff。</think>{{雪村清一郎}}"}\n', encoding="utf-8")
    code, stderr, exc = run(synth_app, "build", "trajectories", "--dataset", _question_dataset(tmp_path / "q"),
                            "--out", tmp_path / "t", "--teacher", f"scripted:{teacher}", "--translator",
                            f"scripted:{ROOT / 'examples' / 'teacher_script.py'}:rewrite", "--index", fx / "ix",
                            "--n", "1", "-q")
    assert code == 0, (stderr, exc)
    [row] = read_rows(tmp_path / "t")
    assert row["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"query": "雪村製菓\ufffd"}'
    assert_no_surrogate([row])


def test_a_models_answers_in_train_eval(fx, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(
        f'{{"id": "q{i}", "question": "雪村製菓の創業者は\\ud800誰ですか？", "answer": "雪村清一郎"}}\n' for i in range(3)),
        encoding="utf-8")
    model = tmp_path / "model.jsonl"
    deep = "[" * 50_000 + "]" * 50_000
    model.write_text(
        '{"match": "q-none", "content": ""}\n'
        '{"content": "<think>\\ud800</think>{{雪村清一郎\\udc00}}"}\n'
        '{"content": 5}\n'
        + json.dumps({"tool_calls": [{"type": "function", "function": {"name": "search", "arguments": deep}}]}) + "\n",
        encoding="utf-8")
    code, stderr, exc = run(train_app, "eval", "--task", "multihop_qa", "--dataset", rows, "--model",
                            f"scripted:{model}", "--index", fx / "ix", "--k", "1", "--out", tmp_path / "e",
                            "--no-cache")
    assert code == 0, (stderr, exc)
    trajectories = [json.loads(line) for line in (tmp_path / "e" / "trajectories.jsonl").read_text(
        encoding="utf-8").splitlines()]
    assert sorted(t["stop_reason"] for t in trajectories) == ["answer", "parse_error", "parse_error"]
    assert sum(t["parse_failures"] for t in trajectories) == 2
    assert_no_surrogate(trajectories)


def test_a_dataset_column_named_like_trls_reward_arguments_is_one_line_before_any_rollout(fx, tmp_path):
    """``completions=`` would collide with the reward call (TypeError) after every episode had run."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "q1", "question": "雪村製菓の創業者は？", "answer": "雪村清一郎", "completions": 1}\n',
                    encoding="utf-8")
    code, stderr, _ = run(train_app, "eval", "--task", "multihop_qa", "--dataset", rows, "--model",
                          f"scripted:{ROOT / 'examples' / 'teacher_script.py'}", "--index", fx / "ix", "--k", "1")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "completions" in lines[0] and lines[0].startswith("error: "), stderr
