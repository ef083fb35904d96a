"""LLM clients fit the ecosystem (issue 16): a cache keyed on what determines the answer, the ``openai``
client's conventions (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, per-endpoint keys, ``extra_body``,
``Retry-After``, ``user:pass@`` URLs), Hub ids as model names (offline, from the HF cache), and
``synth cache info|clear`` / ``--no-cache``.

Nothing here loads a model: local-model tests replace generation with a stub that answers from the weights'
bytes, HTTP tests talk to the canned OpenAI-compatible server over real sockets.

    pytest tests/test_llm_conventions.py -q
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import urllib.request
from pathlib import Path

import pytest
import typer
from fixtures.fake_vllm import install_fake_vllm
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.llm import ChatRequest, ChatResult, ResponseCache, from_spec
from tansaku.core.llm.cli_options import ApiKey, ExtraBody, NoCache, llm_options
from tansaku.core.llm.http_backend import retry_after_seconds
from tansaku.core.llm.identity import resolve_model
from tansaku.core.llm.settings import LLMOptions
from tansaku.core.llm.transformers_backend import TransformersClient
from tansaku.testing.canned_server import ServerThread, secret_fingerprint


@pytest.fixture(autouse=True)
def clean_defaults(monkeypatch):
    """Each test starts from no OpenAI environment of the machine running it."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TANSAKU_NO_CACHE"):
        monkeypatch.delenv(name, raising=False)


def ask(text: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def last_request(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/stats/last", timeout=5) as resp:
        return json.loads(resp.read())


def auth(value: str) -> str:
    """The Authorization header as /stats/last shows it: a fingerprint, never the key itself."""
    return secret_fingerprint(value)


# ----------------------------------------------------------------------- local models: identity


def fake_model(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (folder / "model.safetensors").write_bytes(weights)
    return folder


class StubGeneration(TransformersClient):
    """Answers with a hash of the weights it would load: different weights, different text."""

    calls = 0

    def _generate(self, requests):
        StubGeneration.calls += len(requests)
        digest = hashlib.sha256((self.path / "model.safetensors").read_bytes()).hexdigest()[:8]
        return [ChatResult(content=f"{digest}:{r.messages[-1]['content']}") for r in requests]


def test_same_folder_name_different_models_never_share_answers(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    a = fake_model(tmp_path / "A" / "model", os.urandom(300_000))
    b = fake_model(tmp_path / "B" / "model", os.urandom(300_000))
    questions = [ask(f"q{i}") for i in range(5)]
    first = StubGeneration(str(a), cache=cache).chat(questions)
    second = StubGeneration(str(b), cache=cache).chat(questions)
    assert not any(r.cached for r in second), "B was answered from A's cache"
    assert all(x.content != y.content for x, y in zip(first, second))
    again = StubGeneration(str(a), cache=cache).chat(questions)
    assert all(r.cached for r in again) and [r.content for r in again] == [r.content for r in first]


def test_retrained_in_place_with_same_size_and_mtime_is_a_miss(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    folder = fake_model(tmp_path / "runs" / "rl", os.urandom(200_000))
    stat = (folder / "model.safetensors").stat()
    before = StubGeneration(str(folder), cache=cache).chat([ask("q")])[0]
    (folder / "model.safetensors").write_bytes(os.urandom(200_000))  # a new checkpoint, same size
    os.utime(folder / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns))  # `cp -p` kept the mtime
    after = StubGeneration(str(folder), cache=cache).chat([ask("q")])[0]
    assert not after.cached and after.content != before.content


def test_dtype_and_chat_template_are_part_of_the_identity(tmp_path):
    folder = fake_model(tmp_path / "m", b"weights")
    base = StubGeneration(str(folder), cache=False).cache_identity()
    assert StubGeneration(str(folder), cache=False, dtype="bfloat16").cache_identity() != base
    (folder / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    assert StubGeneration(str(folder), cache=False).cache_identity() != base


@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(["max_tokens", "temperature", "top_p", "seed", "sample_index"]),
       value=st.integers(min_value=1, max_value=10_000))
def test_every_sampling_parameter_changes_the_key(field, value):
    plain = ask("q", seed=0, sample_index=0)
    changed = ask("q", **{"seed": 0, "sample_index": 0, field: value + (0.5 if field == "top_p" else 0)})
    assert plain.cache_key("m") != changed.cache_key("m")


# ----------------------------------------------------------------------- HTTP: identity and conventions


def test_new_checkpoint_under_the_same_served_name_is_never_answered_from_the_old(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    questions = [ask(f"q{i}") for i in range(4)]
    with ServerThread("old", root="/ckpt/step-100") as old, ServerThread("new", root="/ckpt/step-200") as new:
        first = from_spec(f"http:canned@{old}", cache=cache).chat(questions)
        assert all(r.content.startswith("old:") and not r.cached for r in first)
        fresh = from_spec(f"http:canned@{new}", cache=cache).chat(questions)
        assert not any(r.cached for r in fresh) and all(r.content.startswith("new:") for r in fresh)
        assert all(r.cached for r in from_spec(f"http:canned@{old}", cache=cache).chat(questions))
        # same weights, another sampling parameter or extra_body: a different answer, a miss
        assert not from_spec(f"http:canned@{old}", cache=cache).chat([ask("q0", max_tokens=9)])[0].cached
        other_body = from_spec(f"http:canned@{old}", cache=cache, extra_body={"top_k": 5})
        assert not other_body.chat([ask("q0")])[0].cached


def test_servers_that_report_no_weights_are_keyed_by_their_endpoints(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with ServerThread("a") as a, ServerThread("b") as b:
        from_spec(f"http:canned@{a}", cache=cache).chat([ask("q")])
        other = from_spec(f"http:canned@{b}", cache=cache).chat([ask("q")])[0]
        assert not other.cached and other.content == "b: q"


def test_unreachable_servers_neither_read_nor_write_the_cache(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put_many([(ask("q").cache_key("canned"), ChatResult(content="stale").to_json())])  # keyed on the name only
    client = from_spec("http:canned@http://127.0.0.1:9", cache=cache, max_retries=0, timeout=2)
    result = client.chat([ask("q")])[0]
    assert not result.ok and not result.cached  # nobody says what is served: no answer from the cache
    assert len(cache) == 1 and client.cache_stats()["hits"] == 0


@pytest.fixture(scope="module")
def servers():
    with ServerThread("a") as a, ServerThread("b") as b:
        yield a, b


def test_openai_api_key_and_base_url_are_honoured(servers, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", servers[0])
    result = from_spec("http:canned", cache=False).chat([ask("hello")])[0]
    assert result.content == "a: hello"
    assert last_request(servers[0])["headers"]["authorization"] == auth("Bearer sk-from-env")


def test_per_endpoint_keys(servers, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    a, b = servers
    client = from_spec(f"http:canned@{a},{b}", cache=False, api_key={f"{b}/v1": "sk-b"})
    client.chat([ask("x"), ask("y")])  # round-robin: one request to each
    # a is not OPENAI_BASE_URL's endpoint (unset: api.openai.com), so the environment's key never goes there
    assert last_request(a)["headers"]["authorization"] == auth("Bearer EMPTY")
    assert last_request(b)["headers"]["authorization"] == auth("Bearer sk-b")


def test_cli_options_reach_the_request(servers, tmp_path):
    """--api-key / --extra-body (JSON or @FILE.yaml) / --no-cache as every LLM command declares them."""
    app = typer.Typer()

    @app.command()
    def run(llm: str, no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None):
        client = from_spec(llm, llm_options=llm_options(no_cache, api_key, extra_body))
        typer.echo(json.dumps({"content": client.chat([ask("hi")])[0].content, "cache": client.cache is None}))

    spec = f"http:canned@{servers[1]}"
    body = '{"chat_template_kwargs": {"enable_thinking": false}, "guided_json": {"type": "object"}}'
    out = CliRunner().invoke(app, [spec, "--no-cache", "--api-key", "sk-cli", "--extra-body", body])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"content": "b: hi", "cache": True}
    seen = last_request(servers[1])
    assert seen["headers"]["authorization"] == auth("Bearer sk-cli")
    assert seen["body"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert seen["body"]["guided_json"] == {"type": "object"}
    (tmp_path / "body.yaml").write_text("top_k: 20\nchat_template_kwargs:\n  enable_thinking: true\n", encoding="utf-8")
    (tmp_path / "key.txt").write_text("sk-file\n", encoding="utf-8")
    out = CliRunner().invoke(app, [spec, "--no-cache", "--api-key", f"@{tmp_path / 'key.txt'}",
                                   "--extra-body", f"@{tmp_path / 'body.yaml'}"])
    assert out.exit_code == 0, out.output
    seen = last_request(servers[1])
    assert seen["body"]["top_k"] == 20 and seen["headers"]["authorization"] == auth("Bearer sk-file")
    bad = CliRunner().invoke(app, [spec, "--extra-body", "{not json"])
    assert bad.exit_code == 2 and "extra-body" in bad.output and "Traceback" not in bad.output


def test_user_and_password_in_the_url(servers):
    host = servers[0].removeprefix("http://")
    client = from_spec(f"http:org/model@http://user:p@ss,w@{host},{servers[1]}", cache=False)
    assert client.model == "org/model" and len(client.base_urls) == 2
    assert "p@ss" not in json.dumps(client.describe())  # the password never reaches a manifest
    assert client.chat([ask("x")])[0].content == "a: x"
    # the URL's credentials go as HTTP basic auth (what a proxy in front of the server checks)
    assert last_request(servers[0])["headers"]["authorization"] == auth("Basic " + base64.b64encode(b"user:p@ss,w").decode())


def test_retry_after_moves_requests_to_the_other_server(servers):
    client = from_spec(f"http:canned@{servers[0]},{servers[1]}", cache=False, backoff_base=0.01)
    result = client.chat([ask("fail=1 status=429 retry_after=30 only=a")])[0]
    assert result.ok and result.content.startswith("b: ")
    assert client._not_before[0] > time.monotonic() + 20  # a stays off limits for its Retry-After
    assert client.chat([ask("next")])[0].content == "b: next"  # new requests go to b meanwhile
    client.close()


def test_retry_after_header_forms():
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert 0 <= retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0
    assert retry_after_seconds({}) is None


url_part = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+;=:@,", min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(model=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,10}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,10})?", fullmatch=True),
       user=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8),
       # ports 10–9999: a port past 65535 is refused by the spec grammar (tansaku.core.llm.spec)
       password=url_part, hosts=st.lists(st.from_regex(r"[a-z][a-z0-9]{0,8}:[1-9][0-9]{1,3}", fullmatch=True),
                                           min_size=1, max_size=3))
def test_http_spec_splits_model_and_urls_with_credentials(model, user, password, hosts):
    urls = [f"https://{user}:{password}@{host}" for host in hosts]
    client = from_spec(f"http:{model}@{','.join(urls)}", cache=False)
    assert client.model == model
    assert client.base_urls == [f"{u}/v1" for u in urls]


def test_http_spec_without_server_is_one_clear_error():
    with pytest.raises(InputError, match="OPENAI_BASE_URL"):
        from_spec("http:model", cache=False)


# ----------------------------------------------------------------------- Hub ids, offline


def fake_hub(home: Path, repo: str, sha: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    root = home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "qwen3"}', encoding="utf-8")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(sha, encoding="utf-8")
    return snapshot


def test_hub_id_resolves_offline_from_the_hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = fake_hub(tmp_path / "hf", "Qwen/Qwen3-1.7B")
    assert resolve_model("Qwen/Qwen3-1.7B") == snapshot
    client = from_spec("transformers:Qwen/Qwen3-1.7B", cache=False)  # builds; loads nothing yet
    assert client.path == snapshot and client.cache_identity()["path"] == str(snapshot.resolve())
    assert from_spec("Qwen/Qwen3-1.7B", cache=False).path == snapshot  # `--model ORG/NAME` without a backend
    install_fake_vllm(monkeypatch)  # a vllm: client is refused where vLLM is missing
    vllm = from_spec("vllm:Qwen/Qwen3-1.7B", cache=False, dtype="bfloat16")  # no engine started: identity only
    assert vllm.cache_identity()["path"] == str(snapshot.resolve()) and vllm.cache_identity()["engine"] == {
        "dtype": "bfloat16"}
    with pytest.raises(MissingInputError, match="HF_HUB_OFFLINE"):
        from_spec("transformers:Qwen/Not-Cached", cache=False)
    with pytest.raises(MissingInputError, match="neither a local folder nor a Hub id"):
        from_spec(f"transformers:{tmp_path}/no/such/folder", cache=False)


# ----------------------------------------------------------------------- --no-cache, synth cache info|clear


def test_no_cache_default_turns_the_cache_off(tmp_path, monkeypatch):
    folder = fake_model(tmp_path / "m", b"w")
    monkeypatch.setenv("TANSAKU_CACHE", str(tmp_path / "cache"))
    assert from_spec(f"transformers:{folder}").cache is not None
    assert from_spec(f"transformers:{folder}", llm_options=LLMOptions(no_cache=True)).cache is None
    monkeypatch.setenv("TANSAKU_NO_CACHE", "1")
    assert from_spec(f"transformers:{folder}").cache is None
    assert from_spec(f"transformers:{folder}", cache=tmp_path / "explicit.sqlite").cache is not None


def test_cache_info_and_clear(tmp_path):
    path = tmp_path / "llm-cache.sqlite"
    ResponseCache(path).put_many([(f"k{i}", "{}") for i in range(3)])
    run = CliRunner().invoke
    info = json.loads(run(synth_app, ["cache", "info", "--path", str(path), "--json"]).stdout)
    assert info["entries"] == 3 and info["bytes"] > 0 and info["path"] == str(path)
    refused = run(synth_app, ["cache", "clear", "--path", str(path)])
    assert refused.exit_code == 2 and "--yes" in refused.output and len(ResponseCache(path)) == 3
    cleared = run(synth_app, ["cache", "clear", "--path", str(path), "--yes", "--json"])
    assert cleared.exit_code == 0 and json.loads(cleared.stdout)["removed"] == 3 and len(ResponseCache(path)) == 0
    missing = json.loads(run(synth_app, ["cache", "info", "--path", str(tmp_path / "none.sqlite"), "--json"]).stdout)
    assert missing["entries"] == 0 and not (tmp_path / "none.sqlite").exists()


def test_cache_clear_refuses_a_file_it_did_not_make(tmp_path):
    import sqlite3

    other = tmp_path / "llm-cache.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    result = CliRunner().invoke(synth_app, ["cache", "clear", "--path", str(other), "--yes"])
    assert result.exit_code == 2 and "not a tansaku LLM cache" in result.output
    assert other.read_bytes() == before
    (tmp_path / "text").write_text("hello", encoding="utf-8")
    assert CliRunner().invoke(synth_app, ["cache", "clear", "--path", str(tmp_path / "text"), "--yes"]).exit_code == 2
    assert (tmp_path / "text").read_text(encoding="utf-8") == "hello"
