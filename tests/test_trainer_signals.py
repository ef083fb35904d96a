"""The training signals of run_report.json (trainer/signals.py) and the 3×3 learning curves (trainer/curves.py),
from hand-made trainer_state.json log histories.

Run: pytest tests/test_trainer_signals.py
"""

from __future__ import annotations

import json
import struct

import pytest

from tansaku.trainer.curves import PANELS, learning_curves_figure, plot_learning_curves
from tansaku.trainer.report import run_report

GAP = {"sampling/sampling_logp_difference/mean": 0.01, "sampling/sampling_logp_difference/max": 0.2,
       "sampling/importance_sampling_ratio/min": 0.9, "sampling/importance_sampling_ratio/mean": 1.0,
       "sampling/importance_sampling_ratio/max": 1.1}


def _entry(step: int, full: bool) -> dict:
    entry = {"step": step, "loss": 0.01 * step, "grad_norm": 0.5, "learning_rate": 1e-5, "reward": 0.5,
             "rewards/answer_reward/mean": 0.5, "frac_reward_zero_std": 0.25, "entropy": 0.3 - 0.01 * step}
    if full:
        entry.update({"kl": 0.001 * step, "clip_ratio/region_mean": 0.02, "clip_ratio/low_mean": 0.01,
                      "clip_ratio/high_mean": 0.01, "completions/mean_length": 100.0 + step,
                      "completions/max_length": 200.0, "completions/clipped_ratio": 0.0, **GAP,
                      "rubric/judge_failures": 1.0 if step == 1 else 0.0, "rubric/judge_seconds": 2.0 * step,
                      "rubric/judged": 8.0})
    return entry


def write_history(out, steps: int = 3, full: bool = True, extra: dict | None = None):
    history = [{**_entry(step, full), **(extra or {})} for step in range(1, steps + 1)]
    history.append({"step": steps, "train_loss": 0.02, "train_runtime": 10.0})  # TRL's closing entry
    (out / "trainer_state.json").write_text(json.dumps({"log_history": history}), encoding="utf-8")


def test_report_summarises_each_logged_signal_and_keeps_per_step_values(tmp_path):
    write_history(tmp_path)
    report = run_report(tmp_path)
    signals = report["signals"]
    for name in ("loss", "kl", "entropy", "clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean",
                 "completions/mean_length", "completions/max_length", "completions/clipped_ratio",
                 "frac_reward_zero_std", *GAP, "rubric/judged"):
        assert signals[name]["n"] == 3, name
    assert signals["kl"] == pytest.approx({"first": 0.001, "last": 0.003, "min": 0.001, "max": 0.003,
                                           "mean": 0.002, "n": 3})
    assert signals["completions/mean_length"]["mean"] == 102.0
    assert "learning_rate" not in signals and "train_loss" not in signals  # not a watched signal
    assert report["per_step"][1]["signals"]["kl"] == pytest.approx(0.002)
    assert report["per_step"][0]["signals"]["sampling/importance_sampling_ratio/max"] == 1.1
    assert report["judge"] == {"steps": 3, "judged": 24.0, "failures": 1.0, "failure_share": 1 / 24,
                               "seconds_mean": 4.0, "seconds_total": 12.0}


def test_signals_not_logged_are_absent_never_zero(tmp_path):
    # beta = 0 (no kl), no vLLM (no sampling/*), no judge; TRL writes None for an all-NaN metric
    write_history(tmp_path, full=False, extra={"clip_ratio/region_mean": None, "kl": float("nan")})
    report = run_report(tmp_path)
    assert set(report["signals"]) == {"loss", "grad_norm", "entropy", "reward", "frac_reward_zero_std"}
    assert report["judge"] is None
    assert "kl" not in report["per_step"][0]["signals"]
    assert not any(k.startswith(("sampling/", "clip_ratio/", "rubric/")) for s in report["per_step"]
                   for k in s["signals"])


def _titles(figure) -> list[str]:
    return [ax.get_title(loc="left") for ax in figure.axes if ax.get_title(loc="left")]


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_learning_curves_have_twelve_panels_with_right_axes_for_logged_signals(tmp_path):
    write_history(tmp_path)
    figure = learning_curves_figure(run_report(tmp_path))
    assert _titles(figure) == list(PANELS)
    # three right axes: kl beside the loss, clipped_ratio beside the lengths, IS ratios beside the logp gap
    assert len(figure.axes) == 15  # 12 panels (search health: 4th row) + 3 right axes
    labels = {text for ax in figure.axes for text in ax.get_legend_handles_labels()[1]}
    assert {"kl (right axis)", "clip_ratio/region_mean", "entropy", "mean", "max", "logp difference mean",
            "IS ratio mean (right axis)", "judge failures / judged"} <= labels
    png = plot_learning_curves(tmp_path, tmp_path / "curves.png")
    assert _png_size(png) == (1680, 1360)  # 3 × 5.6 in by 4 × 3.4 in at 100 dpi


def test_learning_curves_note_missing_signals_instead_of_drawing_them(tmp_path):
    write_history(tmp_path, full=False)
    figure = learning_curves_figure(run_report(tmp_path))
    assert _titles(figure) == list(PANELS) and len(figure.axes) == 12  # no right axis without its signal
    notes = [t.get_text() for ax in figure.axes for t in ax.texts]
    assert any("vllm_importance_sampling_correction" in n for n in notes)
    assert any("no clip ratio logged" in n for n in notes)
    assert figure.axes[3].get_title(loc="right") == "kl not logged (beta = 0)"
    labels = {text for ax in figure.axes for text in ax.get_legend_handles_labels()[1]}
    assert not any("kl" in label or "IS ratio" in label or "judge" in label for label in labels)
