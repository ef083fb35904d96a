"""The option types every command uses (issue 48): paths of a declared kind, bounded numbers, LLM specs, Hub repo
ids (``tansaku.core.cli_types``, ``tansaku.core.value_checks``, ``tansaku.core.llm.spec``), per type and value
class, then the four reported siblings on the command line: a quoted ``~`` in ``--out``, a FIFO named like a
JSONL input (given, or inside an input folder), an absurd ``--limit`` and a Hub repo id the Hub rejects. Last,
every option of every command is checked to be declared with its type.

    pytest tests/test_cli_types.py -q
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import socket
import typing
from pathlib import Path

import pytest
import typer
from fixtures.cli_checks import refused
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core import cli_types
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.input_files import regular_files
from tansaku.core.jsonl import iter_jsonl, open_compressed
from tansaku.core.llm import from_spec
from tansaku.core.llm.spec import check_spec, parse_spec
from tansaku.core.options import check_count, check_fraction, check_limit
from tansaku.core.value_checks import (
    DATASET,
    INDEX,
    INPUT,
    INPUT_FILE,
    INPUT_FOLDER,
    OUTPUT_FILE,
    OUTPUT_FOLDER,
    check_number,
    check_path,
    check_repo_id,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = '{"id": "d1", "title": "港", "text": "港の話です。"}\n'
AS_ROOT = os.geteuid() == 0
NO_USER = "~tansaku-no-such-user-48"


@contextlib.contextmanager
def no_hang(seconds: int = 60):
    """Fail (instead of hanging the suite) when the block blocks: a FIFO opened for reading waits forever."""
    def expired(*_):
        raise TimeoutError(f"blocked for {seconds} s: a FIFO was opened")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run(app, *args):
    return CliRunner().invoke(app, [str(a) for a in args])


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize("text, kwargs, says", [
    (str(2**70), {"integer": True, "low": 1}, "fits in 64 bits"),
    (str(-(2**70)), {"integer": True}, "at least -9223372036854775808"),
    ("1e30", {"integer": True, "low": 1}, "whole number >= 1, got 1e30"),
    ("nan", {"integer": True, "low": 1}, "got nan"),
    ("2.5", {"integer": True}, "whole number"),
    ("2**70", {"integer": True, "low": 1}, "got 2**70"),
    ("nan", {}, "finite number"),
    ("inf", {"low": 0}, "finite number >= 0, got inf"),
    ("-inf", {}, "finite number"),
    ("1" + "0" * 400, {}, "finite number"),  # past float's range: no finite float
    ("1e400", {}, "finite number"),
    ("1.5", {"low": 0, "high": 1}, "within [0, 1], got 1.5"),
    ("1", {"low": 0, "high": 1, "high_open": True}, "within [0, 1), got 1"),
    ("0", {"low": 0, "high": 1, "low_open": True, "high_open": True}, "within (0, 1)"),
    ("20", {"integer": True, "high": 10}, "<= 10"),
    ("", {"integer": True}, "whole number"),
    ("abc", {}, "finite number"),
])
def test_a_number_out_of_class_is_refused_in_one_line_naming_the_option(text, kwargs, says):
    with pytest.raises(InputError) as caught:
        check_number("--x", text, text=True, **kwargs)
    line = str(caught.value)
    assert line.startswith("--x must be ") and says in line and "\n" not in line


def test_numbers_within_their_bounds_are_kept_as_their_type():
    assert check_number("--k", " 7 ", integer=True, low=1, text=True) == 7
    assert check_number("--k", str(2**63 - 1), integer=True, text=True) == 2**63 - 1
    assert check_number("--t", "1e-3", low=0, text=True) == 0.001
    assert check_number("--t", "3", text=True) == 3.0 and isinstance(check_number("--t", "3", text=True), float)
    assert check_number("--t", 0.5, low=0, high=1) == 0.5


def test_a_python_caller_gets_the_same_bounds_but_no_text_parsing():
    with pytest.raises(InputError, match="must be a whole number >= 1"):
        check_limit(2**70)
    with pytest.raises(InputError, match="fits in 64 bits"):
        check_count("--k", 2**64)
    with pytest.raises(InputError, match=r"--k must be a whole number >= 1, got 3"):
        check_count("--k", "3")  # a string from Python is no number
    with pytest.raises(InputError, match="whole number"):
        check_count("--k", True)
    with pytest.raises(InputError, match=r"within \[0, 1\], got inf"):
        check_fraction("--share", float("inf"), 0, 1)
    assert check_limit(None) is None and check_limit(5) == 5


# ---------------------------------------------------------------- paths


def test_a_leading_tilde_is_expanded_and_an_unknown_user_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert check_path("~/x", OUTPUT_FOLDER, "--out") == tmp_path / "x"
    assert check_path("a/~b", OUTPUT_FOLDER, "--out") == Path("a/~b")  # only a leading ~ is the shell's
    with pytest.raises(InputError, match="no user named"):
        check_path(f"{NO_USER}/x", OUTPUT_FOLDER, "--out")


@pytest.mark.parametrize("name, says", [
    ("", "the path is empty"),
    ("a\0b", "NUL byte"),
    ("x" * 300, "longer than the file system allows"),
    ("a/" * 2100, "longer than the system allows"),
    ("caf\udce9.jsonl", "not valid UTF-8"),  # a Latin-1 byte in argv: a lone surrogate in Python
])
@pytest.mark.parametrize("kind", [INPUT_FILE, OUTPUT_FOLDER])
def test_a_name_that_names_no_file_is_refused(name, says, kind):
    with pytest.raises(InputError, match=says):
        check_path(name, kind, "--opt")


@pytest.fixture
def specials(tmp_path):
    os.mkfifo(tmp_path / "fifo.jsonl")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.sock"))
    (tmp_path / "file.jsonl").write_text(DOC, encoding="utf-8")
    (tmp_path / "folder").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "to_fifo").symlink_to(tmp_path / "fifo.jsonl")
    yield tmp_path
    sock.close()


@pytest.mark.parametrize("name, says", [
    ("fifo.jsonl", "is a FIFO"), ("to_fifo", "is a FIFO"), ("s.sock", "is a socket"),
    ("/dev/null", "is a character device"), ("dangling", "symbolic link to"), ("loop", "symbolic link loop"),
])
@pytest.mark.parametrize("kind", [INPUT_FILE, INPUT_FOLDER, INPUT, DATASET, INDEX])
def test_an_input_that_a_reader_would_block_on_or_cannot_open_is_refused_unopened(specials, name, says, kind):
    with no_hang(20), pytest.raises((InputError, MissingInputError), match=says):
        check_path(specials / name, kind, "--input")


def test_an_input_of_the_wrong_kind_is_refused_and_a_missing_one_left_to_the_command(specials):
    with pytest.raises(InputError, match="is a folder, not a file"):
        check_path(specials / "folder", INPUT_FILE, "--triples")
    with pytest.raises(InputError, match="is a file, not a dataset folder"):
        check_path(specials / "file.jsonl", DATASET, "--corpus")
    with pytest.raises(InputError, match="lies under a file"):
        check_path(specials / "file.jsonl" / "x", INPUT_FILE, "--triples")
    assert check_path(specials / "missing.jsonl", INPUT_FILE, "--x") == specials / "missing.jsonl"
    assert check_path(specials / "folder", INPUT, "--x") == specials / "folder"
    assert check_path("opensearch:idx", INDEX, "--index") == "opensearch:idx"  # a service, not a path


@pytest.mark.skipif(AS_ROOT, reason="root reads every file")
def test_an_unreadable_input_is_refused(tmp_path):
    secret = tmp_path / "secret.jsonl"
    secret.write_text(DOC, encoding="utf-8")
    secret.chmod(0)
    with pytest.raises(InputError, match="cannot be read"):
        check_path(secret, INPUT_FILE, "--input")


def test_an_output_that_is_special_of_the_wrong_kind_or_under_a_file_is_refused(specials):
    for name, kind, says in (("fifo.jsonl", OUTPUT_FOLDER, "is a FIFO"), ("/dev/null", OUTPUT_FILE, "character device"),
                             ("file.jsonl", OUTPUT_FOLDER, "is a file, not a folder"),
                             ("folder", OUTPUT_FILE, "is a folder, not a file"),
                             ("file.jsonl/sub/x", OUTPUT_FOLDER, "cannot create it"),
                             ("loop", OUTPUT_FOLDER, "symbolic link loop")):
        with pytest.raises(InputError, match=says):
            check_path(specials / name, kind, "--out")
    assert check_path(specials / "new" / "deeper", OUTPUT_FOLDER, "--out") == specials / "new" / "deeper"


def test_readers_never_open_a_fifo(specials):
    with no_hang(20):
        assert list(regular_files(sorted(specials.iterdir()))) == [specials / "file.jsonl"]
        with pytest.raises(InputError, match="FIFO"):
            open_compressed(specials / "fifo.jsonl")
        with pytest.raises(InputError, match="FIFO"):
            list(iter_jsonl(specials / "to_fifo"))


# ---------------------------------------------------------------- LLM specs and repo ids


@pytest.mark.parametrize("spec, says", [
    ("http:", "names no model"), ("http:m@", "names no server after '@'"), ("http:@http://h", "names no model"),
    ("http:m@ftp://h", "not an http:// or https:// URL"), ("http:m@http://", "names no host"),
    ("http:m@h:99999", "valid host and port"), ("vllm:", "names no model"), ("transformers:", "names no model"),
    ("scripted:", "scripted spec"), ("scripted:x.txt", "scripted spec"), ("gpt:x", "unknown LLM backend 'gpt'"),
    ("vllm:m\0", "NUL byte"), ("vllm:m\nx", "line break"), ("", "empty"),
])
def test_a_spec_of_no_known_form_is_refused_by_the_one_parser(spec, says):
    with pytest.raises(InputError, match=says):
        parse_spec(spec)
    with pytest.raises(InputError, match=says):  # from_spec reads specs through it
        from_spec(spec, cache=False)
    with pytest.raises(InputError, match=f"^--llm: .*{says}"):
        check_spec(spec, "--llm")


def test_specs_parse_into_their_parts(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert parse_spec("http:m@http://u:p@h:1,http://g:2") == ("http", ("m", ("http://u:p@h:1", "http://g:2")))
    assert parse_spec("scripted:a.py:fn") == ("scripted", (Path("a.py"), "fn"))
    assert parse_spec("transformers:tiny") == ("transformers", ("tiny",))
    assert check_spec(str(tmp_path), "--model") == str(tmp_path)  # a bare folder
    assert check_spec("Qwen/Qwen3-8B", "--model") == "Qwen/Qwen3-8B"  # a bare Hub id
    assert check_spec("scripted:deepresearch", "--llm", builtins=("scripted:deepresearch",))
    for bad, says in (("nonsense", "must look like"), ("http:m", "OPENAI_BASE_URL")):
        with pytest.raises(InputError, match=says):
            check_spec(bad, "--llm")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://h:1")
    assert check_spec("http:m", "--llm") == "http:m"


def test_repo_ids_go_through_the_hubs_own_validator():
    assert check_repo_id("me/egov-mcq", "--repo-id", namespaced=True) == "me/egov-mcq"
    assert check_repo_id("egov", "--base") == "egov"
    for bad in ("a/b/c", "a--b/c", "-a/b", "me/x.git", "a b/c", "", "x" * 97):
        with pytest.raises(InputError, match="not a Hugging Face repo id"):
            check_repo_id(bad, "--repo-id")
    with pytest.raises(InputError, match="namespace/name"):
        check_repo_id("egov", "--repo-id", namespaced=True)


def test_a_model_is_a_local_folder_or_a_hub_id(tmp_path):
    model = cli_types.ModelRefType("--base")
    assert model.check("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert model.check(str(tmp_path)) == str(tmp_path)
    with pytest.raises(InputError, match="not a Hugging Face repo id"):
        model.check("a b/c")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file, not a folder"):
        model.check(str(tmp_path / "f"))


# ---------------------------------------------------------------- the reported siblings, on the command line


@pytest.fixture
def docs(tmp_path) -> Path:
    (tmp_path / "docs.jsonl").write_text(DOC, encoding="utf-8")
    return tmp_path / "docs.jsonl"


def test_a_quoted_tilde_in_out_is_the_home_folder_as_a_shell_would_have_made_it(docs, tmp_path, monkeypatch):
    """Decision (docs/guarantees.md): a leading ``~`` is expanded — pyarrow expanded it anyway while Python did
    not, so one build wrote to two places and ended in a traceback."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    result = run(synth_app, "build", "corpus", "--input", docs, "--out", "~/x", "-q")
    assert result.exit_code == 0, result.output
    assert (home / "x" / "manifest.json").is_file() and not (tmp_path / "~").exists()
    refused(run(synth_app, "build", "corpus", "--input", docs, "--out", f"{NO_USER}/x", "-q"), "--out", "no user")
    assert not (tmp_path / NO_USER).exists()


def test_a_fifo_named_like_a_jsonl_input_never_hangs(tmp_path):
    os.mkfifo(tmp_path / "x.jsonl")
    with no_hang():
        refused(run(synth_app, "build", "corpus", "--input", tmp_path / "x.jsonl", "--out", tmp_path / "o"),
                "--input", "FIFO")
        refused(run(synth_app, "build", "multihop", "--triples", tmp_path / "x.jsonl", "--out", tmp_path / "o",
                    "--until", "chains"), "--triples", "FIFO")
        refused(run(synth_app, "build", "general", "--prompts", tmp_path / "x.jsonl", "--llm", "scripted:a.jsonl",
                    "--out", tmp_path / "o"), "--prompts", "FIFO")
        refused(run(train_app, "sft", "--config", tmp_path / "x.jsonl"), "--config", "FIFO")
    assert not (tmp_path / "o").exists()


def test_a_fifo_inside_an_input_folder_is_skipped_never_opened(tmp_path):
    jaquad = tmp_path / "jaquad"
    jaquad.mkdir()
    doc = {"data": [{"title": "港", "paragraphs": [{"context": "港は船が泊まる所です。"}]}]}
    (jaquad / "a.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    os.mkfifo(jaquad / "x.json")
    wac = tmp_path / "wac"
    (wac / "org").mkdir(parents=True)
    (wac / "org" / "d1.org").write_text("# S-ID:1-1\n港は船が泊まる所です。\n", encoding="utf-8")
    os.mkfifo(wac / "org" / "x.org")
    with no_hang():
        for folder in (jaquad, wac):
            result = run(synth_app, "build", "corpus", "--input", folder, "--out", tmp_path / f"{folder.name}-out", "-q")
            assert result.exit_code == 0, result.output
            assert json.loads((tmp_path / f"{folder.name}-out" / "manifest.json").read_text())["splits"]["train"] == 1


@pytest.mark.parametrize("limit", [str(2**70), "1e30", "nan", "inf", "-1", "2.5"])
def test_an_absurd_limit_is_one_line_for_builds_and_train(limit, docs, tmp_path):
    answers = tmp_path / "a.jsonl"  # a scripted: file must exist (SpecType), or --llm would be refused first
    answers.write_text('{"content": "x"}\n', encoding="utf-8")
    refused(run(synth_app, "build", "multihop", "--triples", docs, "--out", tmp_path / "o", "--until", "chains",
                "--limit", limit), "--limit")
    refused(run(synth_app, "build", "general", "--prompts", docs, "--llm", f"scripted:{answers}", "--out",
                tmp_path / "o", "--limit", limit), "--limit")
    refused(run(train_app, "eval", "--task", "multihop_qa", "--dataset", docs, "--model", f"scripted:{answers}",
                "--limit", limit), "--limit")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, says", [
    (["build", "multihop", "--triples", "{docs}", "--out", "{out}", "--seed", "nan"], "--seed"),
    (["build", "multihop", "--triples", "{docs}", "--out", "{out}", "--heldout-share", "inf"], "--heldout-share"),
    (["build", "deepresearch", "--corpus", "{tmp}", "--index", "x", "--llm", "scripted:deepresearch", "--out", "{out}",
      "--keyword-max-groups", str(2**64)], "--keyword-max-groups"),
    (["search", "--index", "{tmp}", "--size", "1e30", "港"], "--size"),
    (["serve-env", "--task", "multihop_qa", "--index", "{tmp}", "--port", "70000"], "--port"),
    (["serve-env", "--task", "multihop_qa", "--index", "{tmp}", "--idle-seconds", "nan"], "--idle-seconds"),
])
def test_every_number_option_is_bounded(argv, says, docs, tmp_path):
    values = {"{docs}": str(docs), "{out}": str(tmp_path / "o"), "{tmp}": str(tmp_path)}
    refused(run(synth_app, *[values.get(a, a) for a in argv]), says)


def test_push_refuses_a_repo_id_the_hub_rejects_even_dry(tmp_path):
    for bad in ("a/b/c", "org/na me", "egov"):
        refused(run(synth_app, "push", tmp_path, "--repo-id", bad, "--dry-run"), "--repo-id")


@pytest.mark.parametrize("app, argv", [
    (synth_app, ["build", "general", "--prompts", "{docs}", "--out", "{out}", "--llm", "{spec}"]),
    (synth_app, ["build", "trajectories", "--dataset", "{tmp}", "--index", "x", "--out", "{out}", "--teacher", "{spec}"]),
    (synth_app, ["build", "multihop", "--triples", "{docs}", "--out", "{out}", "--policy", "{spec}"]),
    (synth_app, ["serve-env", "--task", "deepresearch", "--index", "{tmp}", "--judge", "{spec}"]),
    (train_app, ["eval", "--task", "multihop_qa", "--dataset", "{docs}", "--model", "{spec}"]),
    (train_app, ["rl", "--config", "{docs}", "--judge", "{spec}"]),
])
@pytest.mark.parametrize("spec", ["http:m@ftp://h", "http:", "vllm:", "scripted:", "gpt:x"])
def test_every_spec_option_is_checked_while_it_is_parsed(app, argv, spec, docs, tmp_path):
    values = {"{docs}": str(docs), "{out}": str(tmp_path / "o"), "{tmp}": str(tmp_path), "{spec}": spec}
    option = argv[argv.index("{spec}") - 1]
    refused(run(app, *[values.get(a, a) for a in argv]), f"{option}:")
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- every option of every command has its type


def _commands(app: typer.Typer, prefix: str = ""):
    for info in app.registered_commands:
        yield f"{prefix}{info.name}", inspect.unwrap(info.callback)
    for group in app.registered_groups:
        yield from _commands(group.typer_instance, f"{prefix}{group.name} ")


def _value_type(hint):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, list, tuple) or type(hint).__name__ == "UnionType":
        return _value_type(args[0]) if args else hint
    return hint


SPEC_OPTIONS = {"llm", "teacher", "translator", "policy", "judge", "model"}


def test_every_option_of_every_command_is_declared_with_its_type():
    counts: dict[str, int] = {}
    for app in (synth_app, train_app):
        for name, callback in _commands(app):
            for param, hint in typing.get_type_hints(callback, include_extras=True).items():
                info = next((m for m in getattr(hint, "__metadata__", ()) if hasattr(m, "parser")), None)
                if info is None:
                    continue
                value, parser = _value_type(typing.get_args(hint)[0]), info.parser
                where = f"{name} {param}"
                if value in (int, float):
                    assert isinstance(parser, cli_types.NumberType), where
                    assert parser.integer == (value is int), where
                elif value is Path:
                    assert isinstance(parser, cli_types.PathType), where
                elif param in SPEC_OPTIONS:
                    assert isinstance(parser, cli_types.SpecType), where
                elif param == "repo_id":
                    assert isinstance(parser, cli_types.RepoIdType), where
                if isinstance(parser, cli_types.OptionType):
                    counts[type(parser).__name__] = counts.get(type(parser).__name__, 0) + 1
    assert counts["NumberType"] > 100 and counts["PathType"] > 40 and counts["SpecType"] >= 10, counts
    assert counts["RepoIdType"] == 1 and counts["ModelRefType"] == 1, counts


def test_an_output_inside_an_input_is_refused_for_commands_whose_builder_does_not_look(tmp_path):
    (tmp_path / "rows").mkdir()
    refused(run(synth_app, "serve-env", "--task", "multihop_qa", "--dataset", tmp_path / "rows",
                "--export", tmp_path / "rows" / "x.jsonl"), "--export", "inside the input --dataset")
    refused(run(train_app, "report", tmp_path / "rows", "--out", tmp_path / "rows" / "c.png"), "--out", "RUN")
    assert sorted(os.listdir(tmp_path / "rows")) == []
