"""The README's main job, reduced: `synth demo --small` runs every step on the tiny model and resumes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app


@pytest.mark.slow
def test_demo_small_end_to_end_and_resume(tmp_path, tiny_model_path):
    out = tmp_path / "demo"
    result = CliRunner().invoke(synth_app, ["demo", "--out", str(out), "--small", "--quiet"])
    assert result.exit_code == 0, result.output
    for dataset in ("corpus", "egov", "egov/articles", "multihop", "trajectories"):
        manifest = json.loads((out / dataset / "manifest.json").read_text())
        assert sum(manifest["splits"].values()) > 0 and (out / dataset / "README.md").exists()
    assert (out / "sft" / "model.safetensors").exists() and (out / "rl" / "model.safetensors").exists()
    assert list((out / "rl" / "completions").glob("*.parquet"))
    for when in ("before", "after"):
        for task in ("multihop_qa", "egov_mcq"):
            report = json.loads((out / "eval" / when / task / "report.json").read_text())
            assert report["episodes"] > 0 and "pass@1" in report and report["rewards"]
    # Rerunning resumes: nothing is rebuilt or retrained, the datasets keep their versions.
    versions = {d: json.loads((out / d / "manifest.json").read_text())["version"] for d in ("multihop", "trajectories")}
    mtime = (out / "rl" / "model.safetensors").stat().st_mtime
    again = CliRunner().invoke(synth_app, ["demo", "--out", str(out), "--small", "--quiet"])
    assert again.exit_code == 0, again.output
    assert (out / "rl" / "model.safetensors").stat().st_mtime == mtime
    assert versions == {d: json.loads((out / d / "manifest.json").read_text())["version"] for d in versions}
