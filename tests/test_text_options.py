"""Text and index-target options (issue 48): a value that can never be used is refused while the command line is
parsed, in one ``error:`` line naming the option, before any work — text through ``TextType``
(``tansaku.core.text_values``), index targets through ``IndexType`` (``tansaku.core.index_target``); then the
tracebacks and late refusals the matrix found (a catalog that is no mapping, a query holding a lone surrogate, an
unbounded ``--quality-threshold``, egov checking ``--index`` and ``--laws`` after writing its articles).

    pytest tests/test_text_options.py -q
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.cli_checks import refused
from fixtures.cli_matrix_kinds import _bare, surface
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.cli_types import IndexType, OptionType, TextType
from tansaku.core.errors import InputError
from tansaku.core.index_target import parse_service
from tansaku.core.text_values import LINE_MAX_CHARS, check_text
from tansaku.envs.search import build_index
from tansaku.envs.search.dsl import Fields, QueryError, parse_request
from tansaku.envs.search.opensearch_backend import parse_spec
from tansaku.pipelines.trajectories.rewrite import CatalogError, load_catalog

ROOT = Path(__file__).resolve().parents[1]
SEARCH_FIXTURE = ROOT / "tests" / "fixtures" / "search"
DOCS = '{"id": "d1", "title": "港", "text": "港の話です。"}\n'


def search_fixture():
    """``tests/fixtures/search/dataset.py``: writes its small document dataset."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_fixture", SEARCH_FIXTURE / "dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(app, args, cwd: Path, monkeypatch):
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)
    return CliRunner().invoke(app, [str(a) for a in args])


# ------------------------------------------------------------------------------------------ the text check


@pytest.mark.parametrize("value, says", [
    ("", "the value is empty"), ("  ", "the value is empty"), ("a\x00b", "NUL byte"),
    ("a\nb", "line break"), ("a\tb", "control character"), ("\ud800", "lone surrogate"),
    ("x" * (LINE_MAX_CHARS + 1), "characters, more than"),
])
def test_one_line_text_refuses_what_no_key_or_name_holds(value, says):
    with pytest.raises(InputError, match=f"^--title-field.*{says}"):
        check_text(value, "--title-field")
    assert "\n" not in check_text("title", "--title-field")


def test_free_text_keeps_line_breaks_but_not_a_nul_or_a_lone_surrogate():
    assert check_text("日本語で\n考えて\tください", "--system-prompt", multiline=True)
    for bad, says in (("a\x00b", "NUL"), ("x\ud800", "lone surrogate"), ("a\x1bb", "control character")):
        with pytest.raises(InputError, match=says):
            check_text(bad, "--system-prompt", multiline=True)


def test_choices_and_lists_of_choices():
    assert check_text("ask, about", "--heldout-phrasing", choices=("ask", "about"), split=",")
    with pytest.raises(InputError, match="'nope': choose one of ask, about"):
        check_text("ask,nope", "--heldout-phrasing", choices=("ask", "about"), split=",")
    with pytest.raises(InputError, match="empty; choose one of ask, about"):
        check_text(",", "--heldout-phrasing", choices=("ask", "about"), split=",")
    assert check_text("", "--x", required=False) == ""


def test_every_text_option_of_every_command_is_typed():
    """A str option with no type would take '', NUL or a lone surrogate as it is: each has one (TextType, or a
    type of its own grammar: a path, a spec, a repo id …); every --index is an IndexType."""
    untyped, index = [], []
    for p in surface():
        if p.flag or _bare(p.annotation) is bool:
            continue
        if _bare(p.annotation) is str and not isinstance(p.parser, OptionType):
            untyped.append(f"{p.command} {p.opts[0]}")
        if "--index" in p.opts and not isinstance(p.parser, IndexType):
            index.append(f"{p.command} --index ({p.parser!r})")
    assert not untyped and not index, (untyped, index)
    choice = {(p.command, p.opts[0]) for p in surface() if isinstance(p.parser, TextType) and p.parser.choices}
    assert {("synth build trajectories", "--task"), ("synth serve-env", "--task"), ("train eval", "--task"),
            ("synth index build", "--analyzer"), ("synth index build", "--backend"), ("synth build corpus", "--format"),
            ("synth build multihop", "--heldout-phrasing"), ("synth build multihop", "--until")} <= choice


# ------------------------------------------------------------------------------------------ on the command line


@pytest.mark.parametrize("args, says", [
    (["build", "corpus", "--shard", ""], "--shard"),
    (["build", "corpus", "--title-field", "\ud800"], "--title-field"),
    (["build", "corpus", "--text-field", "a\x00b"], "--text-field"),
    (["build", "corpus", "--title-field", "a\nb"], "--title-field"),
    (["build", "corpus", "--text-field", "x" * 1_000_000], "--text-field"),
    (["build", "corpus", "--name", "\ud800"], "--name"),
    (["build", "corpus", "--format", "nope"], "--format 'nope': choose one of auto, jsonl"),
    (["build", "corpus", "--license", "a\nb"], "--license"),
])
def test_corpus_text_options_are_refused_before_any_work(tmp_path, monkeypatch, args, says):
    (tmp_path / "d.jsonl").write_text(DOCS, encoding="utf-8")
    result = run(synth_app, [*args[:2], "--input", tmp_path / "d.jsonl", "--out", tmp_path / "out", *args[2:]],
                 tmp_path, monkeypatch)
    refused(result, says)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("app, args, says", [
    (synth_app, ["build", "multihop", "--corpus", "{c}", "--out", "{o}", "--heldout-phrasing", ""], "--heldout-phrasing"),
    (synth_app, ["build", "multihop", "--corpus", "{c}", "--out", "{o}", "--until", "nope"], "--until 'nope'"),
    (synth_app, ["build", "trajectories", "--dataset", "{c}", "--teacher", "vllm:m", "--index", "{c}", "--out", "{o}",
                 "--task", ""], "--task"),
    (synth_app, ["build", "trajectories", "--dataset", "{c}", "--teacher", "vllm:m", "--index", "{c}", "--out", "{o}",
                 "--name", "\ud800"], "--name"),
    (synth_app, ["build", "trajectories", "--dataset", "{c}", "--teacher", "vllm:m", "--index", "{c}", "--out", "{o}",
                 "--system-prompt", "a\x00b"], "--system-prompt"),
    (synth_app, ["index", "build", "--dataset", "{c}", "--index", "{o}", "--analyzer", ""], "--analyzer"),
    (synth_app, ["index", "build", "--dataset", "{c}", "--index", "{o}", "--backend", "nope"], "--backend 'nope'"),
    (synth_app, ["serve-env", "--task", "nope", "--index", "{c}"], "--task 'nope'"),
    (train_app, ["eval", "--model", "vllm:m", "--task", "\ud800", "--dataset", "{c}", "--index", "{c}"], "--task"),
    (train_app, ["merge", "nope", "{c}", "--out", "{o}"], "METHOD 'nope'"),
])
def test_text_and_choice_options_of_every_command_are_refused_while_parsing(tmp_path, monkeypatch, app, args, says):
    (tmp_path / "c").mkdir()
    filled = [a.replace("{c}", str(tmp_path / "c")).replace("{o}", str(tmp_path / "out")) for a in args]
    refused(run(app, filled, tmp_path, monkeypatch), says)
    assert not (tmp_path / "out").exists()


def test_an_analyzer_of_the_other_backend_is_refused_before_the_index_folder(tmp_path, monkeypatch):
    args = ["index", "build", "--dataset", SEARCH_FIXTURE, "--index", tmp_path / "ix", "--analyzer", "kuromoji"]
    refused(run(synth_app, args, tmp_path, monkeypatch), "--analyzer 'kuromoji': the embedded backend takes char or")
    assert not (tmp_path / "ix").exists()


# ------------------------------------------------------------------------------------------ index targets


def test_the_index_grammar():
    assert parse_service("out/index") is None and parse_service("./opensearch") is None
    assert parse_service("http://h:9200/wiki/") == ("http://h:9200", "wiki")
    assert parse_spec("wiki") == (None, "wiki")  # --backend opensearch: a bare name
    for bad, says in (("ftp://h/x", "unknown scheme 'ftp'"), ("http://[::1", "valid host and port"),
                      ("http://h:99999/x", "valid host and port"), ("https://", "URL path"),
                      ("https://h/a?b=1", "URL path"), ("opensearch:", "OpenSearch index"),
                      ("opensearch:a\ud800", "not valid UTF-8"), ("http://h/a b", "OpenSearch index")):
        with pytest.raises(InputError, match=says) as info:
            parse_service(bad)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("value, says", [
    ("ftp://h/x", "unknown scheme"), ("http://[::1", "valid host and port"), ("https://", "URL path"),
    ("opensearch:", "OpenSearch index"), ("opensearch:wiki", "OPENSEARCH_URL is not set"),
])
def test_every_index_option_refuses_a_target_of_no_form_before_any_work(tmp_path, monkeypatch, value, says):
    (tmp_path / "c").mkdir()
    for app, args in [
        (synth_app, ["index", "build", "--dataset", SEARCH_FIXTURE, "--index", value]),
        (synth_app, ["search", "港", "--index", value]),
        (synth_app, ["build", "egov", "--laws", tmp_path / "c", "--out", tmp_path / "out", "--index", value]),
        (synth_app, ["build", "multihop", "--corpus", tmp_path / "c", "--out", tmp_path / "out", "--index", value]),
        (synth_app, ["build", "deepresearch", "--corpus", tmp_path / "c", "--index", value, "--out",
                     tmp_path / "out", "--llm", "scripted:deepresearch"]),
        (train_app, ["eval", "--model", "vllm:m", "--task", "multihop_qa", "--dataset", tmp_path / "c",
                     "--index", value]),
    ]:
        refused(run(app, args, tmp_path, monkeypatch), "--index", says)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no ./ftp:/h/x, no out/


# ------------------------------------------------------------------------------------------ tracebacks


@pytest.mark.parametrize("text, says", [
    ("just a string\n", "a mapping with a 'scenarios' list, got str"), ("", "got an empty file"),
    ("- a\n- b\n", "got list"), ("scenarios: [{id: a, guide: g, weight: heavy}]\n", "number as its weight"),
    ("scenarios: [{id: [a], guide: g}]\n", "an id and a guide"),
    ("scenarios: [{id: a, guide: g, requires: {min_searches: many}}]\n", "takes a whole number"),
])
def test_a_catalog_of_another_shape_is_one_line(tmp_path, text, says):
    (tmp_path / "c.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError, match=says):
        load_catalog(tmp_path / "c.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "bin.yaml")


def test_a_query_holding_a_lone_surrogate_is_one_line(tmp_path, monkeypatch):
    ix = tmp_path / "ix"
    build_index(search_fixture().write_dataset(tmp_path / "docs"), ix)
    for query in ("\ud800", '{"match": {"text": "\\ud800"}}', '{"term": {"doc_id": "\\udfff"}}', "a\x00b"):
        refused(run(synth_app, ["search", query, "--index", ix], tmp_path, monkeypatch))
    with pytest.raises(QueryError, match="lone surrogate"):  # what a model's tool call meets too
        parse_request('{"match": {"text": "\\ud800"}}', 5, Fields())


def test_quality_threshold_is_bounded_by_the_judges_scale(tmp_path, monkeypatch):
    args = ["build", "deepresearch", "--corpus", tmp_path, "--index", tmp_path, "--out", tmp_path / "out",
            "--llm", "scripted:deepresearch"]
    refused(run(synth_app, [*args, "--quality-threshold", "1e300"], tmp_path, monkeypatch), "--quality-threshold",
            "[0, 5]")
    refused(run(synth_app, [*args, "--quality-floor", "6"], tmp_path, monkeypatch), "--quality-floor")


# ------------------------------------------------------------------------------------------ check order


@pytest.mark.parametrize("extra, says", [
    (["--index", "{tmp}/no-index"], "--index"),
    (["--laws", "{tmp}/notes.txt"], "a law XML (*.xml) or a zip"),
])
def test_egov_refuses_before_writing_its_articles(tmp_path, monkeypatch, extra, says):
    laws = tmp_path / "laws"
    laws.mkdir()
    shutil.copy(next((ROOT / "tests" / "fixtures" / "egov").glob("506AC*.xml")), laws)
    (tmp_path / "notes.txt").write_text("not a law\n", encoding="utf-8")
    args = ["build", "egov", "--laws", laws, "--out", tmp_path / "out", "--limit", "1",
            *[a.replace("{tmp}", str(tmp_path)) for a in extra]]
    refused(run(synth_app, args, tmp_path, monkeypatch), says)
    assert not (tmp_path / "out").exists()
