"""Nothing runs, installs or leaks that the user did not name (issue 47).

- ``scripted:`` specs have one strict grammar (``FILE.jsonl``, ``FILE.py``, ``FILE.py:FUNCTION``): a spec never
  runs a Python file it does not end in (``answers.py.jsonl`` is JSONL, never the ``answers.py`` beside it);
- the tiny model's wheel is never installed at run time: a missing one is a ``MissingInputError`` naming the
  pinned command, and setup.sh / the requirements file / the code pin the same version;
- ``OPENAI_API_KEY`` goes only to ``OPENAI_BASE_URL``'s endpoint (the ``openai`` client's pairing); any other
  endpoint gets ``EMPTY`` unless a key is given for it (``--api-key``, ``URL=env:NAME`` …);
- the canned test server's ``/stats/last`` never echoes a credential header.

    pytest tests/test_trust_boundaries.py -q
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tansaku.core import tiny_model
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.llm import ChatRequest, from_spec
from tansaku.core.llm.cli_options import llm_options
from tansaku.core.llm.scripted import ScriptedLLM, parse_scripted_spec
from tansaku.core.llm.settings import key_for, parse_api_keys
from tansaku.testing.canned_server import ServerThread, secret_fingerprint
from tansaku.trainer.recipe_sections import JudgeSpec

ROOT = Path(__file__).resolve().parents[1]


def ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}])


# ----------------------------------------------------------------------- scripted: specs


def write_trap(folder: Path) -> Path:
    """``answers.py`` whose import would create ``ran.marker``, and ``answers.py.jsonl`` beside it."""
    marker = folder / "ran.marker"
    (folder / "answers.py").write_text(f"open({str(marker)!r}, 'w').close()\n\ndef respond(request):\n"
                                       "    return 'from python'\n", encoding="utf-8")
    (folder / "answers.py.jsonl").write_text('{"content": "from jsonl"}\n', encoding="utf-8")
    return marker


def test_a_jsonl_spec_never_runs_the_python_file_beside_it(tmp_path):
    marker = write_trap(tmp_path)
    client = from_spec(f"scripted:{tmp_path / 'answers.py.jsonl'}")
    assert client.chat([ask("q")])[0].content == "from jsonl"
    assert not marker.exists()
    for spec in (f"scripted:{tmp_path / 'answers.py'}.txt", f"scripted:{tmp_path / 'answers.py'}x",
                 f"scripted:{tmp_path / 'answers.py'}:respond:extra", f"scripted:{tmp_path / 'answers.py'}:1st"):
        with pytest.raises(InputError):
            from_spec(spec)
    assert not marker.exists()  # refused on the text alone, before any file is read
    assert from_spec(f"scripted:{tmp_path / 'answers.py'}").chat([ask("q")])[0].content == "from python"
    assert marker.exists()  # the .py form does run the file: that is what it is for


@pytest.mark.parametrize("spec, problem", [
    ("scripted:", "use scripted:FILE.jsonl"),
    ("scripted:answers", "use scripted:FILE.jsonl"),
    ("scripted:answers.json", "use scripted:FILE.jsonl"),
    ("scripted:answers.py.bak", "use scripted:FILE.jsonl"),
    ("scripted:.py", "use scripted:FILE.jsonl"),
    ("scripted:.jsonl", "use scripted:FILE.jsonl"),
    ("scripted:.py:respond", "use scripted:FILE.jsonl"),
    ("scripted:t.py:", "FUNCTION must be a Python identifier, got ''"),
    ("scripted:t.py:re-write", "FUNCTION must be a Python identifier"),
    ("scripted:t.py:class", "FUNCTION must be a Python identifier"),
    ("scripted:t.py:a.b", "FUNCTION must be a Python identifier"),
])
def test_malformed_scripted_specs_are_refused_in_one_line(spec, problem):
    with pytest.raises(InputError, match=re.escape(problem)) as caught:
        parse_scripted_spec(spec)
    assert "\n" not in str(caught.value) and repr(spec) in str(caught.value)
    with pytest.raises(InputError):
        from_spec(spec)


def test_the_three_forms():
    assert parse_scripted_spec("scripted:dir/a.jsonl").function is None
    assert parse_scripted_spec("scripted:dir/a.py").function == "respond"
    assert parse_scripted_spec("scripted:dir/a.py:rewrite_compact") == parse_scripted_spec(
        "scripted:dir/a.py:rewrite_compact")
    assert parse_scripted_spec("scripted:dir/a.py:rewrite_compact").path == Path("dir/a.py")
    assert isinstance(from_spec(f"scripted:{ROOT / 'examples' / 'teacher_script.py'}:rewrite"), ScriptedLLM)


def test_a_recipe_judge_goes_through_the_same_grammar():
    assert JudgeSpec(model="scripted:judge.jsonl").problems() == []
    assert JudgeSpec(model="scripted:judge.py:score").problems() == []
    (problem,) = JudgeSpec(model="scripted:judge.py.bak").problems()
    assert problem.startswith("judge.model: scripted spec 'scripted:judge.py.bak'")


# ----------------------------------------------------------------------- no installs at run time


def test_a_missing_tiny_model_wheel_is_named_never_installed(monkeypatch):
    monkeypatch.setattr(tiny_model.importlib.util, "find_spec", lambda name, *a, **k: None)

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"run-time subprocess: {args}")

    import subprocess

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    with pytest.raises(MissingInputError, match=re.escape(tiny_model.INSTALL_COMMAND)):
        tiny_model.find_gguf()


def test_the_tiny_model_wheel_is_pinned_alike_everywhere():
    requirement = tiny_model.GGUF_REQUIREMENT
    pinned = (ROOT / "requirements-tiny-model.txt").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(requirement)} --hash=sha256:[0-9a-f]{{64}}$", pinned, re.MULTILINE)
    setup = (ROOT / "setup.sh").read_text(encoding="utf-8")
    assert "--require-hashes -r requirements-tiny-model.txt" in setup
    assert requirement in (ROOT / "README.md").read_text(encoding="utf-8")
    folders = ("core", "envs", "pipelines", "trainer", "testing", "examples", "data_cards")  # what the wheel holds
    package = [*ROOT.glob("*.py"), *(p for folder in folders for p in (ROOT / folder).rglob("*.py"))]
    installs = [p for p in package if re.search(r"\"pip\",\s*\"install\"", p.read_text(encoding="utf-8"))]
    assert installs == []


# ----------------------------------------------------------------------- which key goes where


@pytest.fixture
def clean_openai_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TANSAKU_NO_CACHE", "VLLM_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def server():
    with ServerThread("k") as url:
        yield url


def last_request(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/stats/last", timeout=5) as resp:
        return json.loads(resp.read())


def sent_key(url: str, **options) -> str:
    """The Authorization a request from ``http:canned@url`` carried (as its fingerprint)."""
    from_spec(f"http:canned@{url}", cache=False, **options).chat([ask("hi")])
    return last_request(url)["headers"]["authorization"]


def test_the_environment_key_goes_only_to_its_own_endpoint(server, clean_openai_env):
    clean_openai_env.setenv("OPENAI_API_KEY", "sk-env-secret")
    assert sent_key(server) == secret_fingerprint("Bearer EMPTY")  # OPENAI_BASE_URL unset: api.openai.com's key
    clean_openai_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    assert sent_key(server) == secret_fingerprint("Bearer EMPTY")  # another endpoint's key
    clean_openai_env.setenv("OPENAI_BASE_URL", server + "/")  # the same endpoint, written otherwise
    assert sent_key(server) == secret_fingerprint("Bearer sk-env-secret")
    assert key_for("https://API.openai.com:443/v1/", None) == "EMPTY"  # OPENAI_BASE_URL names another
    clean_openai_env.delenv("OPENAI_BASE_URL")
    assert key_for("https://API.openai.com:443/v1/", None) == "sk-env-secret"
    assert key_for("http://api.openai.com/v1", None) == "EMPTY"  # not the scheme the key is for


def test_an_environment_key_reaches_another_endpoint_only_by_opt_in(server, clean_openai_env):
    clean_openai_env.setenv("OPENAI_API_KEY", "sk-env-secret")
    clean_openai_env.setenv("VLLM_KEY", "sk-vllm-secret")
    opted = llm_options(api_key=["env:OPENAI_API_KEY"])
    assert sent_key(server, llm_options=opted) == secret_fingerprint("Bearer sk-env-secret")
    one = llm_options(api_key=[f"{server}=env:VLLM_KEY"])
    assert sent_key(server, llm_options=one) == secret_fingerprint("Bearer sk-vllm-secret")
    assert parse_api_keys(["http://other:8000=env:VLLM_KEY"]) == {"http://other:8000/v1": "sk-vllm-secret"}
    assert sent_key(server, api_key="sk-given") == secret_fingerprint("Bearer sk-given")  # explicit: as given
    with pytest.raises(InputError, match="NOT_SET_ANYWHERE is not set"):
        parse_api_keys(["env:NOT_SET_ANYWHERE"])


def test_a_recipe_judge_key_may_name_the_environment(clean_openai_env):
    clean_openai_env.setenv("VLLM_KEY", "sk-vllm-secret")
    options = JudgeSpec(model="http:j@http://127.0.0.1:9", api_key="env:VLLM_KEY").client_options()
    assert options["api_key"] == {"*": "sk-vllm-secret"}


# ----------------------------------------------------------------------- the canned server


def test_the_canned_server_never_echoes_a_credential(server, clean_openai_env):
    request = urllib.request.Request(f"{server}/v1/chat/completions", method="POST",
                                     data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
                                     .encode(),
                                     headers={"Authorization": "Bearer sk-live-secret", "Cookie": "session=s3cret",
                                              "X-Api-Key": "sk-other-secret", "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=5).read()
    with urllib.request.urlopen(f"{server}/stats/last", timeout=5) as resp:
        text = resp.read().decode()
    assert not any(secret in text for secret in ("sk-live-secret", "s3cret", "sk-other-secret"))
    headers = json.loads(text)["headers"]
    assert headers["authorization"] == secret_fingerprint("Bearer sk-live-secret")
    assert headers["content-type"] == "application/json"
