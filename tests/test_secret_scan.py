"""No secret in anything tansaku records (issue 47): distinct secrets are planted through every channel a user hands
one in — a URL's user name, its password, its query string (``?api-key=``), the environment (``OPENAI_API_KEY``,
``HF_TOKEN``), a recipe field (the judge's ``api_key``), a command-line option (``--api-key``, ``--hub_token``) —
then the installed CLI builds a dataset (with rejected rows whose errors name the endpoint), lists a push
(``--dry-run``, and the bytes it would upload), evaluates, and starts a training run; every file written under
the output folders, and everything the commands printed, must hold none of them.

Files are read whole: text, JSON, JSONL, YAML, Markdown and pickles (``training_args.bin``) as bytes, parquet
through pyarrow (values and schema metadata; its pages may be compressed). ``*.safetensors`` (weights only) are
skipped. The tiny SFT run is ``slow``, as the other training tests are.

    pytest tests/test_secret_scan.py -q            # the build, push, eval and the run's recipe copy
    pytest tests/test_secret_scan.py -q -m slow    # a real tiny SFT run
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from fixtures.cli_checks import Reached, trap_rl_model
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.core.hub import upload_plan
from tansaku.testing.canned_server import ServerThread

ROOT = Path(__file__).resolve().parents[1]
LAW = ROOT / "tests" / "fixtures" / "egov" / "506AC0000000901_20250401_000000000000000.xml"
ENVS = ROOT / "tests" / "fixtures" / "envs"
SFT_TINY = ROOT / "trainer" / "recipes" / "sft-tiny.yaml"
AGENTIC = ROOT / "tests" / "fixtures" / "sft" / "agentic.jsonl"

# One secret per channel, none in a well-known token shape: each must be caught by its channel's rule.
SECRETS = {
    "URL user name": "alice7SECRETuser",
    "URL user name as token": "tok7SECRETuser",
    "URL password": "pw7SECRETpass",
    "URL query ?api-key=": "q7SECRETquery",
    "env OPENAI_API_KEY": "env7SECRETopenai",
    "env HF_TOKEN": "env7SECREThftoken",
    "recipe judge api_key": "rcp7SECRETjudge",
    "--api-key": "cli7SECRETapikey",
    "--hub_token": "cli7SECREThubtoken",
}
ENV = {"OPENAI_API_KEY": SECRETS["env OPENAI_API_KEY"], "HF_TOKEN": SECRETS["env HF_TOKEN"]}


def secret_url(port: int | str) -> str:
    """An endpoint URL carrying a user name, a password and an ``?api-key=`` (the canned server answers 404 to
    it: the query lands in the path, so every request to it is an error naming the URL)."""
    return (f"http://{SECRETS['URL user name']}:{SECRETS['URL password']}@127.0.0.1:{port}/v1"
            f"?api-key={SECRETS['URL query ?api-key=']}")


def token_url(port: int | str) -> str:
    """An endpoint URL whose user name is a token (the canned server answers it)."""
    return f"http://{SECRETS['URL user name as token']}@127.0.0.1:{port}"


def file_texts(folder: Path) -> tuple[dict[str, bytes], list[str]]:
    """Every file under ``folder`` as bytes to search (parquet: its rows and schema metadata as JSON too), and
    the files skipped (weights)."""
    found, skipped = {}, []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = str(path.relative_to(folder))
        if path.suffix == ".safetensors":
            skipped.append(rel)
            continue
        data = path.read_bytes()
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            data += json.dumps([table.to_pylist(), str(table.schema.metadata)], ensure_ascii=False,
                               default=str).encode()
        found[rel] = data
    return found, skipped


def leaks(texts: dict[str, bytes | str]) -> list[str]:
    """``where: channel`` for each planted secret found."""
    out = []
    for where, data in texts.items():
        blob = data if isinstance(data, bytes) else data.encode("utf-8", "replace")
        out += [f"{where}: {channel}" for channel, secret in SECRETS.items() if secret.encode() in blob]
    return out


def cli(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """The installed CLI in a child process (``python -m tansaku.cli`` as accelerate runs it), with the
    secret environment, offline."""
    env = {**os.environ, **ENV, "HF_HUB_OFFLINE": "1", "TANSAKU_LOG_EVERY": "0"}
    env.pop("TANSAKU_DEBUG", None)
    env.pop("TANSAKU_QUIET", None)  # the progress lines and logs are part of what is checked
    return subprocess.run([sys.executable, "-c", "from tansaku.cli import main; main()", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_build_its_push_and_an_eval_record_no_secret(tmp_path, envs_index):
    from tansaku.examples.stand_in_llm import respond

    out = tmp_path / "out"
    printed: dict[str, str] = {}
    with ServerThread("a", responder=respond) as url:
        port = url.rsplit(":", 1)[1]
        spec = f"http:canned@{secret_url(port)},{token_url(port)}"
        build = cli("synth", "build", "egov", "--laws", str(LAW), "--out", str(out / "egov"), "--llm", spec,
                    "--no-retrieval", "--no-cache", "--api-key", SECRETS["--api-key"], cwd=tmp_path)
        assert build.returncode == 0, build.stderr[-3000:]
        printed["synth build (stdout+stderr)"] = build.stdout + build.stderr
        # the channel was used: rejected rows whose error names the endpoint
        details = [r["detail"] for f in (out / "egov" / "data").glob("rejected-*.parquet")
                   for r in pq.read_table(f).to_pylist()]
        named = [d for d in details if f"@127.0.0.1:{port}/v1" in d and "?api-key=" in d]
        assert named, details

        evaluation = cli("train", "eval", "--task", "multihop_qa", "--dataset", str(ENVS / "multihop.jsonl"),
                         "--split", "train", "--index", str(envs_index), "--model", f"http:m@{secret_url(port)}",
                         "--k", "1", "--limit", "2", "--out", str(out / "eval"), "--no-cache", "--json",
                         cwd=tmp_path)
        assert evaluation.returncode == 0, evaluation.stderr[-3000:]
        printed["train eval (stdout+stderr)"] = evaluation.stdout + evaluation.stderr
        assert "llm_error" in (out / "eval" / "trajectories.jsonl").read_text(encoding="utf-8")

    push = cli("synth", "push", str(out / "egov"), "--repo-id", "me/egov", "--private", "--dry-run", cwd=tmp_path)
    assert push.returncode == 0, push.stderr[-3000:]
    printed["synth push --dry-run (stdout+stderr)"] = push.stdout + push.stderr
    assert "data/rejected-00000-of-00001.parquet" in push.stdout.splitlines()
    uploads = {f"upload {rel}": src.read_bytes() if isinstance(src, Path) else src
               for rel, src in upload_plan(out / "egov").items()}

    files, skipped = file_texts(out)
    assert not skipped and {"egov/manifest.json", "egov/README.md", "eval/report.json"} <= files.keys()
    found = leaks({**files, **uploads, **printed})
    assert not found, "\n".join(found)
    assert all("http://***@127.0.0.1" in d and "?api-key=***" in d for d in named), named


def test_a_training_runs_recipe_copy_records_no_secret(tmp_path, envs_index, monkeypatch):
    """The judge's api_key and URL (recipe), --hub_token and --api-key (command line), the environment: none
    reaches ``tansaku_recipe.json``, written before the model loads (the trainer is a trap here)."""
    trap_rl_model(monkeypatch)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    recipe = {"model_name_or_path": "tiny", "output_dir": str(tmp_path / "run"), "use_cpu": True,
              "tasks": [{"name": "deepresearch", "data": str(ENVS / "deepresearch.jsonl"), "index": str(envs_index)}],
              "num_generations": 2, "max_steps": 1, "report_to": "none",
              "judge": {"model": f"http:judge@{secret_url(1)},{token_url(1)}",
                        "api_key": SECRETS["recipe judge api_key"]}}
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    result = CliRunner().invoke(train_app, ["rl", "--config", str(config), "--hub_token", SECRETS["--hub_token"],
                                            "--api-key", SECRETS["--api-key"]])
    assert isinstance(result.exception, Reached), (result.exit_code, result.output)
    copy = json.loads((tmp_path / "run" / "tansaku_recipe.json").read_text(encoding="utf-8"))
    files, _ = file_texts(tmp_path / "run")
    found = leaks({**files, "train rl (output)": result.output})
    assert not found, "\n".join(found)
    # masked, not dropped: the copy still says a key and a token were given
    assert copy["script_args"]["judge"]["api_key"] == "***"
    assert copy["args"][copy["args"].index("--hub_token") + 1] == "***"


@pytest.mark.slow
def test_a_tiny_sft_run_records_no_secret(tmp_path, tiny_model_path):
    """A real ``train sft`` step: the recipe copy, TRL's checkpoint files (``training_args.bin`` pickles its
    config), the model card, the run's logs."""
    run = tmp_path / "run"
    data = json.dumps([{"path": str(AGENTIC), "max_rows": 2}])
    done = cli("train", "sft", "--config", str(SFT_TINY), "--output_dir", str(run), "--max_steps", "1",
               "--per_device_train_batch_size", "1", "--mix_size", "2", "--save_steps", "1", "--data", data,
               "--hub_token", SECRETS["--hub_token"], "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    files, skipped = file_texts(run)
    assert "tansaku_recipe.json" in files and any(name.endswith("training_args.bin") for name in files)
    found = leaks({**files, "train sft (stdout+stderr)": done.stdout + done.stderr})
    assert not found, "\n".join(found)
