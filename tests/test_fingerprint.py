"""A rerun into the same ``--out`` must have the same recipe: another ``--llm`` or another stage parameter is
refused in one line naming the change (CLI: exit 2) and leaves the folder untouched; the same recipe returns
the finished dataset or resumes the unfinished one. Built on e-Gov with a scripted LLM (the cheapest LLM
build), the corpus pipeline (cheapest CLI parameter) and the store itself (a resume after committed chunks).

Run: pytest tests/test_fingerprint.py -q
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, map_stage
from tansaku.core.llm import ScriptedLLM
from tansaku.core.store import StoreError, build_dataset, read_manifest, read_rows
from tansaku.pipelines.egov.build import build_egov
from tansaku.pipelines.egov.config import EgovConfig

ROOT = Path(__file__).resolve().parents[1]
LAWS = ROOT / "examples" / "laws"
JUDGE = {"single_correct": 1, "grounded": 1, "plausible_distractors": 1, "no_leak": 1, "comment": "ok"}
QUESTION = {"question": "この規定で定められている期間はどれか。", "choices": ["十日", "二十日", "三十日", "六十日"],
            "answer_index": 2, "explanation": "条文による。"}


def scripted_file(path: Path) -> Path:
    """A scripted LLM (JSONL): judge prompts get full marks, every generator prompt the same question."""
    lines = [{"match": "ルーブリック", "content": json.dumps(JUDGE)},
             {"content": json.dumps(QUESTION, ensure_ascii=False)}]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def respond(request) -> str:
    return json.dumps(JUDGE if "ルーブリック" in request.messages[-1]["content"] else QUESTION, ensure_ascii=False)


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder`` (work folder included) with its mtime and content hash."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_exit_2(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.stderr
    return lines[0]


def test_cli_refuses_another_llm_and_returns_the_same_build(tmp_path):
    a, b = scripted_file(tmp_path / "a.jsonl"), scripted_file(tmp_path / "b.jsonl")
    out = tmp_path / "egov"
    args = ["build", "egov", "--laws", str(LAWS), "--out", str(out), "--quiet", "--llm"]
    first = CliRunner().invoke(synth_app, [*args, f"scripted:{a}"])
    assert first.exit_code == 0, first.output
    manifest = read_manifest(out)
    assert manifest["splits"]["train"] >= 1 and {s["llm"]["model"] for s in manifest["stages"] if s["llm"]} == \
        {"scripted:a.jsonl"}
    before = snapshot(out)

    line = one_line_exit_2(CliRunner().invoke(synth_app, [*args, f"scripted:{b}"]))
    assert "was built with a different recipe" in line and "llm scripted:a.jsonl → scripted:b.jsonl" in line
    assert "remove the folder or choose another --out" in line
    assert snapshot(out) == before  # nothing written, nothing removed

    again = CliRunner().invoke(synth_app, [*args, f"scripted:{a}"])
    assert again.exit_code == 0, again.output
    assert snapshot(out) == before and read_manifest(out)["version"] == manifest["version"]


class Killed(BaseException):
    """Stands in for a kill in the middle of the LLM stages."""


def test_interrupted_build_refuses_another_llm_and_resumes_with_the_same(tmp_path):
    calls = []

    def dies_in_the_judge(request):
        calls.append(1)
        if "ルーブリック" in request.messages[-1]["content"]:
            raise Killed
        return respond(request)

    out = tmp_path / "egov"
    with pytest.raises(Killed):
        build_egov(EgovConfig(laws=[LAWS], llm=ScriptedLLM(dies_in_the_judge, model="scripted:a")), out, context=BuildContext(quiet=True))
    assert (out / ".work" / "recipe.json").exists() and not (out / "manifest.json").exists()
    before = snapshot(out)

    with pytest.raises(StoreError) as refused:
        build_egov(EgovConfig(laws=[LAWS], llm=ScriptedLLM(respond, model="scripted:b")), out, context=BuildContext(quiet=True))
    message = str(refused.value)
    assert "\n" not in message and "unfinished build with a different recipe" in message
    assert "llm scripted:a → scripted:b" in message and "rerun with the original options" in message
    assert snapshot(out) == before

    resumed = build_egov(EgovConfig(laws=[LAWS], llm=ScriptedLLM(respond, model="scripted:a")), out, context=BuildContext(quiet=True))
    fresh = build_egov(EgovConfig(laws=[LAWS], llm=ScriptedLLM(respond, model="scripted:a")), tmp_path / "fresh", context=BuildContext(quiet=True))
    assert resumed["version"] == fresh["version"] and read_rows(out) == read_rows(tmp_path / "fresh")
    assert resumed["llm"]["model"] == "scripted:a" and not (out / ".work").exists()


def test_changed_stage_param_is_refused_naming_stage_and_param(tmp_path):
    out = tmp_path / "egov"
    build_egov(EgovConfig(laws=[LAWS], llm=ScriptedLLM(respond, model="scripted:a")), out, context=BuildContext(quiet=True))
    judge = next(s for s in read_manifest(out)["stages"] if s["name"] == "judge")
    assert judge["params"] == {"judge_threshold": 0.75, "prompt": "mcq_judge_v1", "batch_size": 32}
    before = snapshot(out)
    with pytest.raises(StoreError, match=r"stage 'judge' param judge_threshold 0\.75 → 0\.9") as refused:
        build_egov(EgovConfig(laws=[LAWS], llm=ScriptedLLM(respond, model="scripted:a"), judge_threshold=0.9), out, BuildContext(quiet=True))
    assert "llm" not in str(refused.value).split(": ", 1)[1].split(";")[0]  # the model did not change
    assert snapshot(out) == before


def test_cli_param_change_is_one_line_exit_2(tmp_path):
    out = tmp_path / "corpus"
    args = ["build", "corpus", "--input", str(ROOT / "examples" / "miniwiki.jsonl"), "--out", str(out), "--quiet"]
    assert CliRunner().invoke(synth_app, args).exit_code == 0
    before = snapshot(out)
    line = one_line_exit_2(CliRunner().invoke(synth_app, [*args, "--min-chars", "5"]))
    assert "stage 'min_length' param min_chars 1 → 5" in line and "config min_chars 1 → 5" in line
    line = one_line_exit_2(CliRunner().invoke(synth_app, [*args, "--keep-rejected"]))
    assert "keep_rejected false → true" in line
    assert snapshot(out) == before


def _stages(threshold, log):
    def keep(r):
        log.append(r["id"])
        if r["id"] == 130 and not log.count("ok"):
            raise Killed  # dies in the 3rd chunk, after two chunks were committed
        return r if r["id"] % threshold else Drop("multiple")

    return [map_stage("keep", keep, params={"threshold": threshold})]


def test_store_resumes_committed_chunks_only_with_the_same_params(tmp_path):
    log: list = []
    src = [{"id": i} for i in range(200)]
    kwargs = dict(out=tmp_path / "d", name="d", pipeline="p", pipeline_version="1", config={}, seed=0, inputs=[],
                  source=src, chunk_size=50, context=BuildContext(quiet=True), keep_rejected=True)
    with pytest.raises(Killed):
        build_dataset(stages=_stages(7, log), **kwargs)
    before = snapshot(tmp_path / "d")
    assert sum(name.endswith(".stats.json") for name in before) == 2
    with pytest.raises(StoreError, match="stage 'keep' param threshold 7 → 5"):
        build_dataset(stages=_stages(5, log), **kwargs)
    assert snapshot(tmp_path / "d") == before
    log.append("ok")
    n_calls = len(log)
    manifest = build_dataset(stages=_stages(7, log), **kwargs)
    assert len(log) - n_calls == 100 and manifest["resumed_chunks"] == 2  # the committed chunks were not redone
    assert manifest["stages"][0]["dropped"] == {"multiple": 29} and manifest["splits"] == {"rejected": 29, "train": 171}
    rejected = read_rows(tmp_path / "d", "rejected")
    assert [json.loads(r["record"])["id"] for r in rejected] == [i for i in range(200) if i % 7 == 0]


def test_files_no_build_recorded_are_never_overwritten(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("my notes", encoding="utf-8")
    with pytest.raises(StoreError, match=r"not empty and no tansaku build made it \(it holds README.md\)"):
        build_dataset(out=out, name="d", pipeline="p", pipeline_version="1", config={}, seed=0, inputs=[],
                      source=[{"id": 1}], stages=[map_stage("x", lambda r: r)], context=BuildContext(quiet=True))
    assert (out / "README.md").read_text(encoding="utf-8") == "my notes" and sorted(out.iterdir()) == [out / "README.md"]
