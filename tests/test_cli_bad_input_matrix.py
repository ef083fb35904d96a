"""Every refusal is one line and exit 2; every bug a traceback and exit 1 (issue 15).

A matrix over the ``synth`` and ``train`` commands × missing, empty, wrong-type, unwritable and hostile input.
Each refusal must exit 2 with exactly one ``error: …`` line on stderr (or Typer's own usage box for an
option Typer validates), print no traceback, create nothing outside ``--out`` and leave no partial output
(``.work``, ``data.partial``). Bad *rows* are not refusals: they are dropped with a reason and file:line.
Nothing here loads a model; ``train`` commands stop at their recipe or option checks.

    pytest tests/test_cli_bad_input_matrix.py -q
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.store import read_manifest, read_rows
from tansaku.envs.search import build_index

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("search_fixture", ROOT / "tests" / "fixtures" / "search" / "dataset.py")
search_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_fixture)

DEEP = "[" * 100_000 + "]" * 100_000  # overflows any recursive JSON parser
AS_ROOT = os.geteuid() == 0  # root ignores chmod: then an --out under a *file* is the unwritable path
TRIPLE = '{"subject": "足利尊氏", "relation": "出身地", "object": "丹波国"}\n'
JEMHOP = [{"qid": "q1", "type": "compositional", "question": "Aの出身地は？", "answer": "B",
           "derivations": [["A", "出身地", ["B"]]], "page_ids": [], "time_dependent": False}]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    """Shared inputs; every command reads them, none may write here."""
    d = tmp_path_factory.mktemp("fx")
    search_fixture.write_dataset(d / "docs")
    build_index(d / "docs", d / "ix")
    search_fixture.write_dataset(d / "qds", rows=[{"id": "q1", "question": "Aの出身地は？", "answer": "B",
                                                   "bridge": "A"}], keyword_fields=())
    (d / "qds" / "manifest.json").write_text('{"pipeline": "multihop", "splits": {"train": 1}}', encoding="utf-8")
    for name, text in {"list_manifest": "[]", "empty_manifest": "{}"}.items():
        (d / name).mkdir()
        (d / name / "manifest.json").write_text(text, encoding="utf-8")
    (d / "empty_dir").mkdir()
    (d / "notxml").mkdir()
    (d / "notxml" / "law.txt").write_text("not a law", encoding="utf-8")
    (d / "laws").mkdir()
    (d / "laws" / "law.xml").write_bytes(next((ROOT / "tests" / "fixtures" / "egov").glob("506AC*.xml")).read_bytes())
    (d / "empty.jsonl").write_text("", encoding="utf-8")
    (d / "empty.yaml").write_text("", encoding="utf-8")
    (d / "empty.json").write_text("", encoding="utf-8")
    (d / "triples.jsonl").write_text(TRIPLE, encoding="utf-8")
    (d / "deep.jsonl").write_text(DEEP + "\n", encoding="utf-8")
    (d / "badutf8.jsonl").write_bytes(TRIPLE.encode() + b'{"subject": "\xff"}\n')
    (d / "jemhop.json").write_text(json.dumps(JEMHOP, ensure_ascii=False), encoding="utf-8")
    (d / "docs.jsonl").write_text('{"id": "d1", "title": "港", "text": "港の話。"}\n', encoding="utf-8")
    (d / "bad.py").write_text("def respond(:\n", encoding="utf-8")
    (d / "a_file").write_text("x", encoding="utf-8")
    (d / "prompts.jsonl").write_text('{"id": "g1", "prompt": "港とは何ですか？"}\n', encoding="utf-8")
    (d / "answers.jsonl").write_text('{"content": "船が泊まる所です。"}\n', encoding="utf-8")
    (d / "list.json").write_text("[]", encoding="utf-8")
    (d / "relation_int.json").write_text('{"x": 5}', encoding="utf-8")
    (d / "relation_variants.json").write_text('{"x": {"kind": "person", "of": "{S}", "ask": "{S}", "variants": [1]}}',
                                              encoding="utf-8")
    (d / "ro").mkdir()
    if not AS_ROOT:
        (d / "ro").chmod(0o555)
    return d


def _unwritable(fx: Path) -> str:
    return str(fx / "a_file" / "sub") if AS_ROOT else str(fx / "ro" / "out")


MISSING = [
    (synth_app, "build corpus --input {tmp}/missing.jsonl --out {out}"),
    (synth_app, "build egov --laws {tmp}/missing --out {out}"),
    (synth_app, "build multihop --triples {tmp}/missing.jsonl --out {out} --until chains"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --relations {tmp}/missing.json"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --from-shards {tmp}/missing"),
    (synth_app, "build multihop --corpus {tmp}/missing --out {out} --until chains"),
    (synth_app, "build trajectories --dataset {tmp}/missing --out {out} --teacher scripted:{fx}/t.jsonl --index {fx}/ix"),
    (synth_app, "build deepresearch --corpus {tmp}/missing --index {fx}/ix --out {out} --llm scripted:deepresearch"),
    (synth_app, "import jemhopqa {tmp}/missing.json --out {out}"),
    (synth_app, "build general --prompts {tmp}/missing.jsonl --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "build general --prompts {fx}/prompts.jsonl --llm scripted:{tmp}/missing.jsonl --out {out}"),
    (synth_app, "index build --dataset {tmp}/missing --index {out}"),
    (synth_app, "search --index {tmp}/missing 港"),
    (synth_app, "info {tmp}/missing"),
    (synth_app, "push {tmp}/missing --repo-id org/name"),
    (train_app, "sft --config {tmp}/missing.yaml"),
    (train_app, "rl --config {tmp}/missing.yaml"),
    (train_app, "eval --task multihop_qa --dataset {tmp}/missing.jsonl --model scripted:x.jsonl --index {fx}/ix"),
    (train_app, "compare {tmp}/a.json {tmp}/b.json"),
    (train_app, "merge soup {tmp}/a {tmp}/b --out {out}"),
]
EMPTY = [
    (synth_app, "build corpus --input {fx}/empty_dir --out {out}"),
    (synth_app, "build egov --laws {fx}/empty_dir --out {out}"),
    (synth_app, "build egov --laws {fx}/notxml --out {out}"),
    (synth_app, "import jemhopqa {fx}/empty.json --out {out}"),
    (synth_app, "build general --prompts {fx}/empty.jsonl --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "build general --prompts {fx}/list.json --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "build general --prompts {fx}/empty_dir --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "info {fx}/list_manifest"),
    (synth_app, "info {fx}/empty_manifest"),
    (synth_app, "build multihop --corpus {fx}/list_manifest --out {out} --until chains"),
    (synth_app, "build deepresearch --corpus {fx}/empty_manifest --index {fx}/ix --out {out} --llm scripted:deepresearch"),
    (synth_app, "build trajectories --dataset {fx}/list_manifest --out {out} --teacher scripted:{fx}/t.jsonl --index {fx}/ix"),
    (train_app, "sft --config {fx}/empty.yaml"),
    (train_app, "rl --config {fx}/empty.yaml"),
    (train_app, "compare {fx}/empty.json {fx}/empty.json"),
]
WRONG_TYPE = [
    (synth_app, "build corpus --input {fx}/empty_dir --format jsonl --out {out}"),   # a folder for a file
    (synth_app, "build corpus --input {fx}/triples.jsonl --format wac --out {out}"),  # a file for a folder
    (synth_app, "build multihop --corpus {fx}/qds --out {out} --until chains"),       # questions, not documents
    (synth_app, "build deepresearch --corpus {fx}/qds --index {fx}/ix --out {out} --llm scripted:deepresearch"),
    (synth_app, "build multihop --triples {fx}/empty_dir --out {out} --until chains"),
    (synth_app, "import jemhopqa {fx}/empty_dir --out {out}"),
    (synth_app, "build general --prompts {fx}/docs --llm scripted:{fx}/answers.jsonl --out {out}"),  # no prompts
    (synth_app, "build general --prompts {fx}/empty.yaml --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "build general --prompts {fx}/triples.jsonl --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "search --index {fx}/triples.jsonl 港"),
    (train_app, "sft --config {fx}/empty_dir"),
    (synth_app, "build corpus --input {fx}/docs --out {out}"),  # a built dataset, not a document collection
]
UNWRITABLE = [
    (synth_app, "build corpus --input {fx}/docs.jsonl --out {unw}"),
    (synth_app, "build egov --laws {fx}/laws --out {unw}"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {unw} --until chains"),
    (synth_app, "build deepresearch --corpus {fx}/docs --index {fx}/ix --out {unw} --llm scripted:deepresearch"),
    (synth_app, "import jemhopqa {fx}/jemhop.json --out {unw}"),
    (synth_app, "build general --prompts {fx}/prompts.jsonl --llm scripted:{fx}/answers.jsonl --out {unw}"),
    (synth_app, "index build --dataset {fx}/docs --index {unw}"),
    (synth_app, "build corpus --input {fx}/docs.jsonl --out {workfile}"),  # DIR/.work is a file
]
HOSTILE = [
    (synth_app, "build multihop --triples {fx}/deep.jsonl --out {out} --until chains"),
    (synth_app, "build multihop --triples {fx}/badutf8.jsonl --out {out} --until chains"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --k -2"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --k 0"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --m 5 --k 1"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --min-pass-rate 0.9 --max-pass-rate 0.5"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --max-pass-rate 1.5"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --min-pass-rate nan"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --m 1 --min-pass-rate 0.5"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --limit -1"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --heldout-share nan"),
    (synth_app, "build egov --laws {fx}/laws --out {out} --limit -1"),
    (synth_app, "build egov --laws {fx}/laws --out {out} --heldout-share nan"),
    (synth_app, "build trajectories --dataset {fx}/qds --out {out} --teacher scripted:{fx}/t.jsonl --index {fx}/ix --limit -1"),
    (synth_app, "build trajectories --dataset {fx}/qds --out {out} --teacher scripted:{fx}/t.jsonl --index {fx}/ix --ratio nan"),
    (synth_app, "build trajectories --dataset {fx}/qds --out {out} --teacher scripted:{fx}/t.jsonl --index {fx}/ix --n 0"),
    (synth_app, "build deepresearch --corpus {fx}/docs --index {fx}/ix --out {out} --llm scripted:deepresearch --clarify-share nan"),
    (synth_app, "build deepresearch --corpus {fx}/docs --index {fx}/ix --out {out} --llm scripted:deepresearch --limit -1"),
    (synth_app, "build corpus --input {fx}/docs.jsonl --out {out} --min-chars -1"),
    (synth_app, "import jemhopqa {fx}/jemhop.json --out {out} --heldout-share nan"),
    (synth_app, "build general --prompts {fx}/deep.jsonl --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "build general --prompts {fx}/badutf8.jsonl --llm scripted:{fx}/answers.jsonl --out {out}"),
    (synth_app, "build general --prompts {fx}/prompts.jsonl --llm scripted:{fx}/bad.py --out {out}"),
    (synth_app, "build general --prompts {fx}/prompts.jsonl --llm scripted:{fx}/answers.jsonl --out {out} --max-tokens 0"),
    (synth_app, "build general --prompts {fx}/prompts.jsonl --llm scripted:{fx}/answers.jsonl --out {out} --temperature nan"),
    (synth_app, "build general --prompts {fx}/prompts.jsonl --llm scripted:{fx}/answers.jsonl --out {out} --limit -1"),
    (synth_app, "build general --prompts {fx}/prompts.jsonl --llm scripted:{fx}/answers.jsonl --out {out} --heldout-share nan"),
    (synth_app, "index build --dataset {fx}/docs --index http://127.0.0.1:9/ix --backend opensearch"),
    (synth_app, "search --index http://127.0.0.1:9/ix 港"),
    (synth_app, "build trajectories --dataset {fx}/qds --out {out} --teacher scripted:{fx}/bad.py --index {fx}/ix"),
    (synth_app, "model prepare-tiny --dir {unw}"),
    (synth_app, "search --index {fx}/ix --size -1 港"),
    (train_app, "eval --task multihop_qa --dataset {fx}/qds --model scripted:x.jsonl --index {fx}/ix --k 0"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --relations {fx}/list.json"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --relations {fx}/relation_int.json"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --relations {fx}/relation_variants.json"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --relations {fx}/deep.jsonl"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --relations {fx}/badutf8.jsonl"),
    (synth_app, "build multihop --triples {fx}/triples.jsonl --out {out} --until chains --shard 2/2"),
    (synth_app, "build egov --laws {fx}/laws --out {out} --shard 1/0"),
    (synth_app, "build corpus --input {fx}/docs.jsonl --out {out} --from-shards {fx}/docs"),  # not a shard
    (synth_app, "build egov --laws {fx}/laws --out {out} --shard 0/2 --from-shards {fx}/docs"),
]
CASES = [pytest.param(app, args, id=f"{kind}:{args.split(' --')[0]}:{i}")
         for kind, cases in (("missing", MISSING), ("empty", EMPTY), ("wrong_type", WRONG_TYPE),
                             ("unwritable", UNWRITABLE), ("hostile", HOSTILE))
         for i, (app, args) in enumerate(cases)]


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _invoke(app, args: str, tmp: Path, fx: Path):
    out, workfile = tmp / "out", tmp / "wf"
    values = {"{tmp}": str(tmp), "{fx}": str(fx), "{out}": str(out), "{unw}": _unwritable(fx),
              "{workfile}": str(workfile)}
    argv = []
    for a in args.split(" "):
        for key, value in values.items():
            a = a.replace(key, value)
        argv.append(a)
    return CliRunner().invoke(app, argv)


@pytest.mark.parametrize("app, args", CASES)
def test_refusal_is_one_line_exit_2_and_leaves_nothing(app, args, fx, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a stray relative write would land here and be caught below
    monkeypatch.delenv("TANSAKU_DEBUG", raising=False)
    if "{workfile}" in args:  # an --out whose .work is the user's file, not a folder tansaku made
        (tmp_path / "wf").mkdir()
        (tmp_path / "wf" / ".work").write_text("mine, not tansaku's", encoding="utf-8")
    before_fx, before_tmp = _tree(fx), _tree(tmp_path)
    result = _invoke(app, args, tmp_path, fx)
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.output + result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Usage:"):  # Typer's own option validation (min=/max=)
        assert "Invalid value for" in result.stderr
    else:
        assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > len("error: "), result.stderr
    assert _tree(fx) == before_fx, "wrote into the shared inputs"
    new = {p for p in _tree(tmp_path) - before_tmp}
    assert not new, f"created {sorted(map(str, new))}"
    leftovers = [p for p in new | _tree(fx) if p.name in (".work", "data.partial")]
    assert not leftovers
    if "{workfile}" in args:
        assert (tmp_path / "wf" / ".work").read_text(encoding="utf-8") == "mine, not tansaku's"


# ---------------------------------------------------------------- bad rows: dropped with a reason, not a refusal


def _build_corpus(tmp_path: Path, content: bytes, name: str = "in.jsonl", fmt: str = "auto"):
    src = tmp_path / name
    src.write_bytes(content)
    out = tmp_path / "out"
    result = CliRunner().invoke(synth_app, ["build", "corpus", "--input", str(src), "--out", str(out), "--format", fmt,
                                            "--keep-rejected", "-q"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    has_rejected = "rejected" in read_manifest(out)["splits"]
    return out, read_rows(out), read_rows(out, split="rejected") if has_rejected else []


def test_corpus_row_of_wrong_type_is_dropped_and_schema_holds(tmp_path):
    good = '{"id": "a", "title": "港", "text": "港の話。", "url": "https://x/a"}\n'
    bad = '{"id": "b", "title": "川", "text": "川の話。", "url": 123}\n{"id": {"x": 1}, "title": "山", "text": "山。"}\n'
    out, rows, rejected = _build_corpus(tmp_path, (good + bad).encode())
    assert [r["id"] for r in rows] == ["a"] and rows[0]["url"] == "https://x/a"
    assert sorted(r["reason"] for r in rejected) == ["bad_id_type", "bad_url_type"]
    assert any("in.jsonl:2" in r["detail"] for r in rejected)
    assert not (out / ".work").exists() and not list(out.rglob("data.partial"))


def test_corpus_invalid_utf8_and_deep_line_are_dropped_with_file_and_line(tmp_path):
    content = b'{"id": "a", "title": "t", "text": "x"}\n\xff\xfe\n' + DEEP.encode() + b'\n{"id": "b", "title": "u", "text": "y"}\n'
    _, rows, rejected = _build_corpus(tmp_path, content)
    assert [r["id"] for r in rows] == ["a", "b"]
    details = {r["reason"]: r["detail"] for r in rejected}
    assert details["bad_encoding"].endswith("in.jsonl:2: not valid UTF-8 (byte 0)")
    assert "in.jsonl:3: not valid JSON (nested too deeply, over 64 levels)" in details["bad_json_line"]


def test_corpus_bom_keeps_the_first_record(tmp_path):
    content = '\ufeff{"id": "a", "title": "t", "text": "x"}\n{"id": "b", "title": "u", "text": "y"}\n'.encode()
    out, rows, _ = _build_corpus(tmp_path, content)
    assert [r["id"] for r in rows] == ["a", "b"]
    assert read_manifest(out)["stages"][0]["dropped"] == {}


def test_jaquad_of_another_shape_is_dropped_not_a_traceback(tmp_path):
    """The one file is dropped with its reason; a corpus left with no document is refused in one line (exit 2)
    that names the stage and reason, and what was written stays for a look."""
    src = tmp_path / "jaquad.json"
    src.write_bytes(b'{"data": 5}')
    out = tmp_path / "out"
    result = CliRunner().invoke(synth_app, ["build", "corpus", "--input", str(src), "--out", str(out),
                                            "--format", "jaquad", "--keep-rejected", "-q"])
    assert result.exit_code == 2, (result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    line = lines[0]
    assert "0 rows: stage 'normalize' dropped all 1 records" in line and "not_squad_json: 1 of 1" in line
    assert read_rows(out) == [] and [r["reason"] for r in read_rows(out, split="rejected")] == ["not_squad_json"]
    assert read_manifest(out)["stages"][0]["dropped"] == {"not_squad_json": 1}


def test_jemhopqa_int_item_is_dropped(tmp_path):
    (tmp_path / "j.json").write_text(json.dumps([5, *JEMHOP]), encoding="utf-8")
    result = CliRunner().invoke(synth_app, ["import", "jemhopqa", str(tmp_path / "j.json"), "--out",
                                            str(tmp_path / "out"), "--heldout-share", "0"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert read_manifest(tmp_path / "out")["stages"][0]["dropped"] == {"not_an_object": 1}


def test_a_bug_in_an_os_call_outside_user_paths_keeps_its_traceback(tmp_path, monkeypatch):
    """Only OS errors on the user's own paths are refusals; one elsewhere is a bug (exit 1)."""
    import tansaku.pipelines.corpus.build as corpus

    def boom(*_a, **_k):
        raise PermissionError(13, "Permission denied", "/somewhere/else")

    monkeypatch.setattr(corpus, "build_dataset", boom)
    (tmp_path / "d.jsonl").write_text('{"id": "a", "title": "t", "text": "x"}\n', encoding="utf-8")
    result = CliRunner().invoke(synth_app, ["build", "corpus", "--input", str(tmp_path / "d.jsonl"), "--out",
                                            str(tmp_path / "out")])
    assert result.exit_code == 1 and isinstance(result.exception, PermissionError)


@pytest.mark.parametrize("error", [PermissionError(13, "Permission denied"), OSError(30, "Read-only file system")])
def test_os_error_on_the_users_out_is_one_line(tmp_path, monkeypatch, error):
    """What a read-only --out raises for a non-root user (root ignores chmod, so it is stood in here)."""
    import tansaku.pipelines.corpus.build as corpus

    def refuse(*_a, out, **_k):
        error.filename = str(Path(out) / ".work")
        raise error

    monkeypatch.setattr(corpus, "build_dataset", refuse)
    (tmp_path / "d.jsonl").write_text('{"id": "a", "title": "t", "text": "x"}\n', encoding="utf-8")
    result = CliRunner().invoke(synth_app, ["build", "corpus", "--input", str(tmp_path / "d.jsonl"), "--out",
                                            str(tmp_path / "out")])
    assert result.exit_code == 2, (result.stderr, result.exception)
    # named by the option it lies in (tansaku.core.cli_common.naming_the_option)
    assert result.stderr.strip() == f"error: --out {tmp_path / 'out' / '.work'}: {error.strerror}"
