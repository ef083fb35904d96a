"""tansaku.core.memory: a step run in a child process returns its result, raises its errors, reports its
peak RSS; the meter samples this process (and its children)."""

from __future__ import annotations

import os

import pytest

from tansaku.core.memory import IsolatedStepDied, RSSMeter, maxrss_mb, rss_mb, run_isolated, tree_rss_mb


def test_run_isolated_runs_in_another_process_and_reports_its_peak():
    pid, child_peak = run_isolated(os.getpid)
    assert pid != os.getpid() and child_peak > 0
    assert maxrss_mb()["children"] >= child_peak  # the waited-for child counts in RUSAGE_CHILDREN
    by_name, _ = run_isolated("os.path:join", "a", "b")  # imported in the child only
    assert by_name == os.path.join("a", "b")


def test_child_gets_two_malloc_arenas_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert run_isolated(os.getenv, "MALLOC_ARENA_MAX")[0] == "2"
    assert "MALLOC_ARENA_MAX" not in os.environ  # the parent's own environment is left as it was
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert run_isolated(os.getenv, "MALLOC_ARENA_MAX")[0] == "8"


def test_run_isolated_raises_the_step_error_and_names_a_dead_child():
    with pytest.raises(ValueError):
        run_isolated(int, "not a number")
    with pytest.raises(IsolatedStepDied, match="died in its child process"):
        run_isolated(os._exit, 3)


def test_meter_laps_are_step_peaks():
    meter = RSSMeter(interval=0.01).start()
    try:
        assert rss_mb() > 0 and tree_rss_mb() >= rss_mb()
        ballast = bytearray(64 * 1024 * 1024)  # touched: resident
        first = meter.lap()
        del ballast
        assert first >= 64 and meter.peak >= first
    finally:
        meter.stop()
