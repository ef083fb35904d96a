"""bench/efficacy_report.py: the efficacy report is computed from the result files alone (stability numbers,
the per-set table, the target verdict, one plot per arm)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "efficacy_report.py"
spec = importlib.util.spec_from_file_location("efficacy_report", BENCH)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def _result(arm: str, seed: int, test: float, phrasing: float, clip: float = 0.0) -> dict:
    history = [{"step": 1, "reward": 0.2, "clip_ratio/region_mean": 0.0, "entropy": 0.3, "kl_to_start": 0.0},
               {"step": 2, "clip_ratio/region_mean": clip, "entropy": 0.25},
               {"step": 3, "reward": 0.5, "clip_ratio/region_mean": 0.0, "kl_to_start": 0.01}]
    return {"method": arm, "seed": seed, "heldout": {"test": {"pass@1": test}, "phrasing": {"pass@1": phrasing}},
            "stability": report.stability(history, {"overall": {"collapse_warnings": ["x"] * seed}}),
            "curves": {"reward": [[1, 0.2], [3, 0.5]], "clip_ratio/region_mean": [[1, 0.0], [2, clip]]},
            "steps": 3}


def test_the_report_is_made_from_the_result_files(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    rows = [_result("sft", s, 0.20 + 0.01 * s, 0.10) for s in range(3)]
    rows += [_result("gspo", s, 0.40 + 0.01 * s, 0.09 + 0.02 * s, clip=0.5) for s in range(3)]
    for r in rows:
        (results / f"{r['method']}-seed{r['seed']}.json").write_text(json.dumps(r), encoding="utf-8")
    text = report.write_report(results, "protocol words")
    readme = (results / "README.md").read_text(encoding="utf-8")
    assert "protocol words" in readme and text in readme and "![gspo](plots/gspo.png)" in readme
    assert (results / "plots" / "gspo.png").read_bytes()[:4] == b"\x89PNG" and not (results / "plots" / "grpo.png").exists()
    assert "| **gspo** | mean ± sd (n=3) | 0.410 ± 0.010 |" in text
    lines = report.target_lines(rows)
    assert "beats SFT by more than the sum of SDs" in lines[0]  # +0.20 against 0.02 of noise
    assert "within noise of SFT" in lines[1]  # +0.01 against 0.00 + 0.02
    assert "not enough seeds" in lines[2]  # no result has the unseen-wiki set
    paired = report.paired_lines(rows)
    assert paired[2].startswith("| gspo (seeds 0, 1, 2) | +0.200 +0.200 +0.200 (mean +0.200) | -0.010 +0.010 +0.030")
    assert "## Paired by seed" in text
    gspo = next(r for r in rows if r["method"] == "gspo" and r["seed"] == 2)["stability"]
    assert gspo["clip_fraction_later_minibatches"] == 0.5 and gspo["kl_to_start_last"] == 0.01
    assert len(gspo["watch_events"]) == 2
