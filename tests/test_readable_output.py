"""Output a person can read: the funnel table says when a stage makes several rows per input (``produced``),
floats are rounded in every printed summary, no ``received 0, kept 0`` lines off a terminal, stdout carries
JSON only with ``--json``, every ``synth`` command of ``tansaku.cli`` has an example in its ``--help`` and
``-q/--quiet``, and so has every ``train`` command of ``tansaku.trainer.cli``, with ``--json`` too.

    pytest tests/test_readable_output.py
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.cli_common import (
    cell,
    funnel_table,
    print_json,
    print_manifest,
    round_sig,
    rounded,
    top_reasons,
)
from tansaku.core.engine import Drop, StageStats, global_stage, map_stage
from tansaku.core.llm import ResponseCache
from tansaku.core.progress import BuildProgress, progress_bar, quiet_loops
from tansaku.core.runner import run_pipeline

# A trajectories-like funnel: the teacher samples 4 answers per question (20 → 80), verify drops the wrong ones.
MANIFEST = {
    "name": "trajectories", "version": "20261130-0001", "pipeline": "trajectories", "seconds": 12.345678,
    "splits": {"train": 70}, "parents": [],
    "stages": [
        {"name": "questions", "received": 20, "kept": 20, "dropped": {}, "seconds": 0.30000000000000004},
        {"name": "teacher", "received": 20, "kept": 80, "dropped": {}, "seconds": 41.987654},
        {"name": "verify", "received": 80, "kept": 70, "seconds": 0.0123456,
         "dropped": {"wrong_answer": 6, "no_answer": 2, "bad_call": 1, "too_long": 1}},
    ],
}


def _rendered(table) -> str:
    console = Console(file=io.StringIO(), width=200)
    console.print(table)
    return console.file.getvalue()


def _rows(text: str) -> dict[str, list[str]]:
    """The table's body rows by stage name, as their cells."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and cells[0]:
            rows[cells[0]] = cells
    return rows


def test_funnel_table_has_a_produced_column_for_a_fan_out_stage():
    text = _rendered(funnel_table(MANIFEST, "out/trajectories"))
    rows = _rows(text)
    assert rows["stage"] == ["stage", "in", "out", "produced", "dropped", "seconds"]
    assert rows["teacher"][:4] == ["teacher", "20", "80", "×4 per input"]
    assert rows["questions"][3] == "" and rows["verify"][3] == ""  # 1:1 stages: nothing to explain
    assert rows["verify"][4] == "10 (wrong_answer 6, no_answer 2, bad_call 1, +1 more)"
    assert "splits: train 70" in text and "12.3 s" in text


def test_no_produced_column_when_no_stage_fans_out():
    stages = [s for s in MANIFEST["stages"] if s["name"] != "teacher"]
    rows = _rows(_rendered(funnel_table({**MANIFEST, "stages": stages}, "o")))
    assert rows["stage"] == ["stage", "in", "out", "dropped", "seconds"]


def test_a_fan_out_stage_that_also_drops_still_says_it_fans_out():
    stage = {"name": "teacher", "received": 10, "kept": 8, "dropped": {"failed": 32}}  # 4 tries each, most fail
    assert top_reasons(stage["dropped"]) == "32 (failed 32)"
    assert _rows(_rendered(funnel_table({**MANIFEST, "stages": [stage]}, "o")))["teacher"][3] == "×0.8 per input"


def test_floats_are_rounded_in_the_table_and_cleaned_in_json(capsys):
    rows = _rows(_rendered(funnel_table(MANIFEST, "o")))
    assert [rows[s][-1] for s in ("questions", "teacher", "verify")] == ["0.3", "42", "0.0123"]
    assert round_sig(0.1 + 0.2) == 0.3 and round_sig(2 / 3, 2) == 0.67 and round_sig(98765.4) == 98765
    assert [cell(x) for x in (0.1 + 0.2, 1 / 3, 80.0, 1234567, float("nan"))] == ["0.3", "0.333", "80", "1,234,567",
                                                                                  "nan"]
    assert rounded({"a": [0.1 + 0.2, {"b": 0.7255}], "n": 3}) == {"a": [0.3, {"b": 0.7255}], "n": 3}
    print_json({"share": 0.1 + 0.2, "threshold": 0.7255})
    assert capsys.readouterr().out == '{"share": 0.3, "threshold": 0.7255}\n'


def test_print_manifest_table_on_stderr_and_json_on_stdout_only_when_asked(capsys, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)
    print_manifest(MANIFEST, Path("out/t"))  # the old call form: the table, nothing on stdout
    first = capsys.readouterr()
    assert first.out == "" and "teacher" in first.err and "×4 per input" in first.err
    print_manifest(MANIFEST, Path("out/t"), as_json=True, quiet=True)
    quiet = capsys.readouterr()
    assert quiet.err == "" and json.loads(quiet.out)["stages"][0]["seconds"] == 0.3
    monkeypatch.setenv("TANSAKU_QUIET", "1")
    print_manifest(MANIFEST, Path("out/t"))
    assert capsys.readouterr() == ("", "")


# ---------------------------------------------------------------- progress lines off a terminal


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def lines(monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)
    monkeypatch.setenv("TANSAKU_LOG_EVERY", "0")
    handler, log = _Collect(), logging.getLogger("tansaku")
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield handler.messages
    log.removeHandler(handler)
    log.setLevel(old)


def test_no_zero_count_line_at_a_stage_start_off_a_terminal(lines):
    with BuildProgress("p") as progress:
        assert progress.bars is None  # pytest's capture is not a terminal
        progress(StageStats("a"), 10)
        progress(StageStats("b"), None)
        assert lines == []  # neither stage has received anything yet
        progress(StageStats("a", received=3, kept=3), 10)
        progress(StageStats("a", received=10, kept=9, dropped=Counter(x=1)), 10, final=True)
        progress(StageStats("b"), None, final=True)  # a stage that never received a record: its end only
    assert lines[0].startswith("p · a: received 3/10, kept 3")
    assert lines[1].startswith("p · a done: received 10, kept 9, dropped 1 (x=1)")
    assert lines[2].startswith("p · b done: received 0, kept 0") and len(lines) == 3


def test_a_pipeline_run_logs_no_zero_count_running_line(tmp_path, lines):
    stages = [map_stage("odd", lambda r: r if r["i"] % 2 else Drop("even")),
              global_stage("all", lambda rows: iter(list(rows))),
              map_stage("none", lambda r: Drop("gone")), global_stage("after", lambda rows: iter(list(rows)))]
    with BuildProgress("p") as progress:
        run_pipeline([{"i": i} for i in range(10)], stages, tmp_path / "w", chunk_size=3, progress=progress)
    running = [line for line in lines if " done:" not in line]
    assert running and not [line for line in running if "received 0" in line], lines
    assert [line.split(":")[0] for line in lines if " done:" in line] == [f"p · {s.name} done" for s in stages]


def test_quiet_loops_silences_a_loop_that_takes_no_quiet(lines):
    with quiet_loops(True), progress_bar("index x", total=2) as advance:
        advance(2)
    assert lines == []
    with quiet_loops(False), progress_bar("index x", total=2) as advance:
        advance(2)
    assert lines[-1].startswith("index x done: 2")


# ---------------------------------------------------------------- stdout: JSON only with --json


def test_cache_info_prints_a_table_and_json_only_with_json(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)
    path = tmp_path / "llm-cache.sqlite"
    ResponseCache(path).put_many([(f"k{i}", "{}") for i in range(3)])
    plain = CliRunner().invoke(synth_app, ["cache", "info", "--path", str(path)])
    assert plain.exit_code == 0 and plain.stdout == "", plain.stdout
    assert re.search(r"entries\s*│\s*3\b", plain.stderr), plain.stderr
    asked = CliRunner().invoke(synth_app, ["cache", "info", "--path", str(path), "--json"])
    assert asked.exit_code == 0 and json.loads(asked.stdout)["entries"] == 3
    quiet = CliRunner().invoke(synth_app, ["cache", "info", "--path", str(path), "--json", "-q"])
    assert quiet.stderr == "" and json.loads(quiet.stdout)["path"] == str(path)


def test_index_build_summary_on_stderr_and_json_only_with_json(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)
    (tmp_path / "docs" / "data").mkdir(parents=True)
    docs = [{"id": f"d{i}", "title": f"題{i}", "text": "東京タワーは高い。" * 3, "url": "", "source": "t", "meta": ""}
            for i in range(3)]
    pq.write_table(pa.Table.from_pylist(docs), tmp_path / "docs" / "data" / "train-00000.parquet")
    build = ["index", "build", "--dataset", str(tmp_path / "docs"), "--index"]
    plain = CliRunner().invoke(synth_app, [*build, str(tmp_path / "ix")])
    assert plain.exit_code == 0 and plain.stdout == "", (plain.stdout, plain.exception)
    assert re.search(r"documents\s*│\s*3\b", plain.stderr), plain.stderr
    asked = CliRunner().invoke(synth_app, [*build, str(tmp_path / "ix2"), "--json", "-q"])
    assert asked.exit_code == 0 and asked.stderr == "" and json.loads(asked.stdout)["documents"] == 3


def test_info_funnel_on_stderr_json_on_stdout_only_with_json(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST), encoding="utf-8")
    plain = CliRunner().invoke(synth_app, ["info", str(tmp_path)])
    assert plain.exit_code == 0 and plain.stdout == "", (plain.stdout, plain.exception)
    assert "produced" in plain.stderr and "×4 per input" in plain.stderr
    asked = CliRunner().invoke(synth_app, ["info", str(tmp_path), "--json", "--quiet"])
    data = json.loads(asked.stdout)
    assert asked.stderr == "" and data["splits"] == {"train": 70} and data["stages"][1]["kept"] == 80


# ---------------------------------------------------------------- every command: an example and --quiet

# Commands without -q/--quiet, and why. Everything else must have it.
NO_QUIET = {
    "search": "its output is the hits (stdout); it prints no progress and no summary",
    "model prepare-tiny": "its output is the model folder (stdout); it prints no progress and no summary",
    "serve-env": "its one line comes from tansaku.envs.gym_service.serve, which takes no quiet yet",
}
WITH_JSON = {"index build", "search", "demo", "info", "cache info", "cache clear"}  # commands with a summary


def commands(app: typer.Typer, modules: tuple[str, ...]) -> dict[str, object]:
    """Every leaf command of ``app`` whose function is defined in one of ``modules``, by its path
    ("index build"); each a click command (``.params``, ``.help``)."""
    found: dict[str, object] = {}

    def walk(cmd, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            for name, sub in subs.items():
                walk(sub, (*path, name))
        elif getattr(cmd.callback, "__module__", None) in modules:
            found[" ".join(path)] = cmd

    walk(typer.main.get_command(app), ())
    return found


CLI_COMMANDS = commands(synth_app, ("tansaku.cli",))
# synth build … / synth import …: generated from the pipelines' configs (tansaku.core.build_config)
BUILD_COMMANDS = commands(synth_app, ("tansaku.core.build_config",))


def test_the_command_list_is_what_cli_py_defines():
    assert set(CLI_COMMANDS) == {"model prepare-tiny", "index build", "search", "serve-env", "demo", "push",
                                 "info", "cache info", "cache clear"}
    assert set(NO_QUIET) | WITH_JSON <= set(CLI_COMMANDS)


def test_every_build_is_a_generated_command():
    assert set(BUILD_COMMANDS) == {"build corpus", "build multihop", "build egov", "build deepresearch",
                                   "build trajectories", "build general", "import jemhopqa"}


@pytest.mark.parametrize("path", sorted(CLI_COMMANDS | BUILD_COMMANDS))
def test_every_command_has_an_example_and_quiet(path):
    cmd = {**CLI_COMMANDS, **BUILD_COMMANDS}[path]
    shown = CliRunner().invoke(synth_app, [*path.split(), "--help"])
    assert shown.exit_code == 0
    assert f"Example: synth {path}" in " ".join(shown.stdout.split()), shown.stdout  # it renders in --help
    options = {opt for p in cmd.params for opt in p.opts}
    if path not in NO_QUIET:
        assert {"--quiet", "-q"} <= options, path
    if path in WITH_JSON or path in BUILD_COMMANDS:
        assert "--json" in options, path


# ---------------------------------------------------------------- every train command: an example, -q and --json

TRAIN_COMMANDS = commands(train_app, ("tansaku.trainer.cli", "tansaku.trainer.eval_command"))


def test_the_train_command_list_is_what_trainer_cli_defines():
    assert set(TRAIN_COMMANDS) == {"sft", "rl", "eval", "select", "rescore", "compare", "report", "merge"}


@pytest.mark.parametrize("path", sorted(TRAIN_COMMANDS))
def test_every_train_command_has_an_example_quiet_and_json(path):
    shown = CliRunner().invoke(train_app, [*path.split(), "--help"])
    assert shown.exit_code == 0
    assert f"Example: train {path}" in " ".join(shown.stdout.split()), shown.stdout  # it renders in --help
    assert {"--quiet", "-q", "--json"} <= {opt for p in TRAIN_COMMANDS[path].params for opt in p.opts}, path


def test_train_compare_table_on_stderr_and_json_only_with_json(tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)
    report = {"task": "multihop_qa", "split": "test", "k": 1, "questions": 4, "pass@1": 0.25, "mean_tool_calls": 1.5}
    (tmp_path / "a.json").write_text(json.dumps(report), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps({**report, "pass@1": 0.1 + 0.2}), encoding="utf-8")
    compare = ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    plain = CliRunner().invoke(train_app, compare)
    assert plain.exit_code == 0 and plain.stdout == "", (plain.stdout, plain.exception)
    assert "pass@1" in plain.stderr and "+0.0500" in plain.stderr, plain.stderr
    asked = CliRunner().invoke(train_app, [*compare, "--json"])
    assert asked.exit_code == 0 and "pass@1" in asked.stderr
    assert json.loads(asked.stdout)["metrics"]["pass@1"] == {"a": 0.25, "b": 0.3, "delta": 0.05}  # floats cleaned
    quiet = CliRunner().invoke(train_app, [*compare, "--json", "-q"])
    assert quiet.exit_code == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["warnings"] == []
    silent = CliRunner().invoke(train_app, [*compare, "--quiet"])
    assert silent.exit_code == 0 and (silent.stdout, silent.stderr) == ("", "")
