"""Progress off a terminal (issue 16): per-stage ``tansaku`` log lines with received/kept/dropped, rate, ETA
and a final line; one bar per stage on a terminal; ``quiet`` silences both; the runner reports each stage
with its own total, and a global stage while it reads."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tansaku.core import progress as progress_mod
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, StageStats, global_stage, map_stage
from tansaku.core.errors import InputError
from tansaku.core.progress import BuildProgress, ensure_log_handler, log_every, progress_bar, stage_line
from tansaku.core.runner import run_pipeline
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.egov.build import build_egov
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTED_AGENT = f"scripted:{EXAMPLES / 'teacher_script.py'}:respond_compact"
LINE = re.compile(r"^(?P<label>\w+) · (?P<stage>\w+)(?P<done> done)?: received (?P<received>\d+)(?:/(?P<total>\d+))?, "
                  r"kept (?P<kept>\d+), dropped (?P<dropped>\d+)")


def _lines(caplog) -> list[re.Match]:
    """The progress lines the ``tansaku`` logger emitted at INFO, parsed."""
    lines = [r.getMessage() for r in caplog.records if r.name == "tansaku" and r.levelno == logging.INFO]
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    return parsed


def _check_against_manifest(caplog, manifest: dict) -> dict[str, list[re.Match]]:
    by_stage: dict[str, list[re.Match]] = {}
    for m in _lines(caplog):
        assert m["label"] == manifest["pipeline"]
        by_stage.setdefault(m["stage"], []).append(m)
    assert list(by_stage) == [s["name"] for s in manifest["stages"]]  # every stage, in pipeline order
    for s in manifest["stages"]:
        *running, final = by_stage[s["name"]]
        assert running, f"no line before {s['name']} finished"
        assert final["done"] and all(not m["done"] for m in running)  # exactly one final line, last
        assert (int(final["received"]), int(final["kept"]), int(final["dropped"])) == (
            s["received"], s["kept"], sum(s["dropped"].values()))
    return by_stage


@pytest.fixture
def every_update(monkeypatch, caplog):
    monkeypatch.setenv("TANSAKU_LOG_EVERY", "0")
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)
    caplog.set_level(logging.INFO, logger="tansaku")


def test_corpus_build_logs_per_stage_lines_off_a_terminal(tmp_path, caplog, every_update):
    assert not sys.stderr.isatty()  # pytest's capture: what nohup/Slurm/CI look like
    manifest = build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki.jsonl"), tmp_path / "corpus")
    _check_against_manifest(caplog, manifest)


def test_default_frequency_still_gives_a_start_and_a_final_line(tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("TANSAKU_LOG_EVERY", raising=False)
    monkeypatch.delenv("TANSAKU_QUIET", raising=False)  # CI sets it for its own output
    caplog.set_level(logging.INFO, logger="tansaku")
    manifest = build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki.jsonl"), tmp_path / "corpus")
    by_stage = _check_against_manifest(caplog, manifest)
    assert all(len(lines) == 2 for lines in by_stage.values())  # a small build ends well within 10 s


def test_multihop_build_one_line_series_per_stage_with_its_own_total(tmp_path, caplog, every_update):
    build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki.jsonl"), tmp_path / "corpus", BuildContext(quiet=True))
    caplog.clear()
    manifest = build_multihop(MultihopConfig(corpus=tmp_path / "corpus", policy=SCRIPTED_AGENT, k=1, m=1, limit=10), tmp_path / "multihop")
    by_stage = _check_against_manifest(caplog, manifest)
    stages = manifest["stages"]
    # A stage that starts a segment (after a global stage) knows its total: what the stage before kept.
    for before, stage in zip(stages, stages[1:]):
        if stage["name"] in ("cardinality", "chains", "questions"):
            totals = {m["total"] for m in by_stage[stage["name"]] if not m["done"]}
            assert totals == {str(before["kept"])}, (stage["name"], totals)


@pytest.mark.parametrize("build", ["corpus", "egov"])  # egov: its index is built between its two builds
def test_quiet_logs_nothing_at_info(tmp_path, caplog, every_update, build):
    if build == "corpus":
        build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki.jsonl"), tmp_path / "corpus", BuildContext(quiet=True))
    else:
        config = EgovConfig(laws=EXAMPLES / "laws", llm=f"scripted:{EXAMPLES / 'stand_in_llm.py'}", limit=2)
        build_egov(config, tmp_path / "egov", BuildContext(quiet=True))
    assert not [r for r in caplog.records if r.name == "tansaku" and r.levelno <= logging.INFO]


class _FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_per_stage_and_no_log_lines(tmp_path, caplog, every_update, monkeypatch):
    fake = _FakeTerminal()
    monkeypatch.setattr(sys, "stderr", fake)
    manifest = build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki.jsonl"), tmp_path / "corpus")
    assert not [r for r in caplog.records if r.name == "tansaku" and r.levelno <= logging.INFO]
    drawn = fake.getvalue()
    for s in manifest["stages"]:
        assert f"corpus · {s['name']}" in drawn  # one bar per stage
        assert f"kept {s['kept']}" in drawn


def test_progress_bar_loops_log_off_a_terminal(caplog, every_update):
    with progress_bar("index wiki", total=3) as advance:
        for _ in range(3):
            advance(1)
    lines = [r.getMessage() for r in caplog.records if r.name == "tansaku"]
    assert lines[0].startswith("index wiki: 1/3") and "ETA" in lines[0]
    assert lines[-1].startswith("index wiki done: 3,") and len(lines) == 4


def test_runner_reports_totals_finals_and_a_global_stage_while_it_reads(tmp_path):
    seen: list[tuple[str, int, int | None, bool]] = []

    def progress(stats, total, final):
        seen.append((stats.name, stats.received, total, final))

    def count_then_emit(records):  # reads everything before yielding: must still be reported meanwhile
        rows = list(records)
        yield from rows

    stages = [map_stage("odd", lambda r: r if r["i"] % 2 else Drop("even")), global_stage("all", count_then_emit)]
    result = run_pipeline([{"i": i} for i in range(10)], stages, tmp_path / "w", chunk_size=3, progress=progress)
    assert [s["kept"] for s in result.stages] == [5, 5]
    assert {t for name, _, t, final in seen if name == "odd" and not final} == {10}
    assert {t for name, _, t, final in seen if name == "all"} == {5}
    reading = [n for name, n, _, final in seen if name == "all" and not final]
    assert reading[:7] == [0, 1, 2, 3, 4, 5, 5]  # one report per record read, then per written chunk
    assert [(name, n) for name, n, _, final in seen if final] == [("odd", 10), ("all", 5)]


@pytest.mark.parametrize("raw", ["abc", "-1", "nan", "inf"])
def test_invalid_log_every_is_bad_input(raw, monkeypatch):
    monkeypatch.setenv("TANSAKU_LOG_EVERY", raw)
    with pytest.raises(InputError, match="TANSAKU_LOG_EVERY"):
        log_every()


def test_handler_added_once_and_only_when_logging_is_unconfigured(monkeypatch):
    log, root = logging.getLogger("tansaku"), logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "level", logging.NOTSET)
    ensure_log_handler()
    ensure_log_handler()
    assert len(log.handlers) == 1 and log.level == logging.INFO
    user = logging.NullHandler()
    monkeypatch.setattr(root, "handlers", [user])
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "level", logging.WARNING)
    ensure_log_handler()
    assert log.handlers == [] and root.handlers == [user] and log.level == logging.WARNING  # the user's config


def test_cli_off_a_terminal_prints_progress_lines_to_stderr(tmp_path):
    env = {**os.environ, "TANSAKU_LOG_EVERY": "0"}
    env.pop("TANSAKU_QUIET", None)
    cmd = [sys.executable, "-c", "from tansaku.cli import synth_app; synth_app()", "build", "corpus",
           "--input", str(EXAMPLES / "miniwiki.jsonl"), "--out", str(tmp_path / "c")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"tansaku corpus · \w+ done: received \d+, kept \d+, dropped \d+", done.stderr), done.stderr
    quiet = subprocess.run([*cmd[:-1], str(tmp_path / "q"), "--quiet"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert quiet.returncode == 0 and "tansaku corpus ·" not in quiet.stderr, quiet.stderr


_counts = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6),
                    st.dictionaries(st.sampled_from(["empty", "duplicate", "too_short", "cap_subject", "x"]),
                                    st.integers(1, 10**5), max_size=5))


@settings(max_examples=200, deadline=None)
@given(counts=_counts, total=st.none() | st.integers(0, 10**7), seconds=st.floats(0, 1e5), final=st.booleans())
def test_stage_line_says_every_count(counts, total, seconds, final):
    received, kept, dropped = counts
    stats = StageStats("stage_x", received=received, kept=kept, dropped=Counter(dropped))
    m = LINE.match(stage_line("multihop", stats, total, seconds, final))
    assert m and m["stage"] == "stage_x" and bool(m["done"]) == final
    assert (int(m["received"]), int(m["kept"]), int(m["dropped"])) == (received, kept, sum(dropped.values()))
    assert m["total"] == (None if final or total is None else str(total))


@settings(max_examples=100, deadline=None)
@given(updates=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 50)), max_size=60))
def test_lines_are_bounded_one_per_stage_per_interval_plus_finals(updates):
    handler = _Collect()
    log = logging.getLogger("tansaku")
    log.addHandler(handler)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        with mock.patch.dict(os.environ, {"TANSAKU_QUIET": "0"}), BuildProgress("p", every=1e9) as progress:  # nothing is due again within the test
            for name, n in updates:
                progress(StageStats(name, received=n), 100)
            for name in sorted({name for name, _ in updates}):
                progress(StageStats(name, received=1), 100, final=True)
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    stages = {name for name, _ in updates}
    # One running line once a stage has received something (none before: "received 0" says nothing), one final.
    received = {name for name, n in updates if n}
    assert Counter(LINE.match(m)["stage"] for m in handler.messages) == Counter(
        {s: 2 if s in received else 1 for s in stages})


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_on_terminal_follows_stderr(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _FakeTerminal())
    assert progress_mod.on_terminal()


def test_multihop_on_a_terminal_nests_loop_bars_in_the_build_display(tmp_path, caplog, every_update, monkeypatch):
    build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki.jsonl"), tmp_path / "corpus", BuildContext(quiet=True))
    fake = _FakeTerminal()
    monkeypatch.setattr(sys, "stderr", fake)
    manifest = build_multihop(MultihopConfig(corpus=tmp_path / "corpus", policy=SCRIPTED_AGENT, k=1, m=1, limit=10), tmp_path / "multihop")  # rollouts and the index bar open inside the build's display
    assert not [r for r in caplog.records if r.name == "tansaku" and r.levelno <= logging.INFO]
    assert all(f"multihop · {s['name']}" in fake.getvalue() for s in manifest["stages"])


def test_cli_bad_log_every_is_one_line_exit_2_before_any_write(tmp_path):
    env = {**os.environ, "TANSAKU_LOG_EVERY": "soon"}
    cmd = [sys.executable, "-c", "from tansaku.cli import synth_app; synth_app()", "build", "corpus",
           "--input", str(EXAMPLES / "miniwiki.jsonl"), "--out", str(tmp_path / "c")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "TANSAKU_LOG_EVERY='soon'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "c").exists()
