"""``synth serve-env`` safe to expose (issue 47, item 2): body and field limits, server-drawn episode ids owned by
their client, bounded episodes with backpressure instead of eviction, the bearer token off loopback, the judge's
rate. Each test here failed before: a 20 MB seed was kept, a caller's id replaced another's episode, a flood of
seeds evicted everyone else's, ``--host 0.0.0.0`` served without a token, ``/verify`` called the judge unbounded.

    pytest tests/test_gym_exposure.py -q
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.envs.gym_limits import TOKEN_ENV, JudgeRate, Limits
from tansaku.envs.gym_service import build_app
from tansaku.envs.search import build_index
from tansaku.envs.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("search_fixture", ROOT / "tests" / "fixtures" / "search" / "dataset.py")
search_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_fixture)
TASK = TASKS["multihop_qa"]
ROW = {"id": "q-gym-1", "question": "雪村製菓の創業者は誰ですか？", "answer": "雪村清一郎", "aliases": []}
VERIFY = {"responses_create_params": {}, "response": {"output": [
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "{{雪村清一郎}}"}]}]}}
TOKENS = ["a" * 43, "b" * 43]  # two clients' tokens (token_urlsafe() is 43 characters)
MB = 1 << 20


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gym")
    search_fixture.write_dataset(root / "docs")
    build_index(root / "docs", root / "index")
    return root / "index"


def client(app, address: str = "10.0.0.1", token: str | None = None) -> TestClient:
    """A client of ``app`` from ``address`` (the server's name for it without tokens), with its own cookie jar."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(app, client=(address, 50000), headers=headers)


# ---------------------------------------------------------------- bodies: 413 before they are held, fields 422


def test_a_20_mb_seed_is_413_and_nothing_is_kept(index):
    app = build_app(TASK, index)
    answer = client(app).post("/seed_session", content=b'{"question": "' + b"x" * (20 * MB) + b'"}',
                              headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and "--max-body-bytes" in answer.json()["error"]
    assert app.state.episodes.stats()["live"] == 0


def test_a_chunked_body_without_a_length_is_413(index):
    app = build_app(TASK, index)
    chunks = (b"x" * MB for _ in range(20))  # httpx sends a generator chunked, with no Content-Length
    answer = client(app).post("/seed_session", content=chunks, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and "--max-body-bytes" in answer.json()["error"]
    assert app.state.episodes.stats()["live"] == 0


def test_a_streamed_body_is_cut_off_past_the_limit_unread(index):
    """Driven as uvicorn drives it, one ASGI message per chunk: past 4 MB the server answers 413 and asks for no
    more (TestClient reads a whole body before the app sees it, so it cannot show this)."""
    app, asked, sent = build_app(TASK, index), [], []
    chunk = b"x" * MB

    async def receive() -> dict:
        asked.append(1)
        return {"type": "http.request", "body": chunk, "more_body": len(asked) < 20}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/seed_session", "raw_path": b"/seed_session", "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
             "client": ("10.0.0.1", 50000), "server": ("127.0.0.1", 8010)}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413 and len(asked) == 5  # 5 MB read of 20: over 4 MB, and no further


@pytest.mark.parametrize("route, body, says", [
    ("/search", {"query": "x" * 2000}, "at most 1000 characters"),
    ("/search", {"query": {"match": {"text": "x" * 2000}}}, "over 1000 characters as JSON"),
    ("/open_doc", {"doc_id": "d" * 2000}, "at most 1000 characters"),
    ("/seed_session", {**ROW, "question": "x" * 2000}, "the row's question has 2000 characters"),
    ("/seed_session", {**ROW, "aliases": ["x" * 900] * 10}, "over 4096 (--max-row-bytes)"),
    ("/verify", {**VERIFY, **ROW, "answer": "x" * 2000}, "the /verify body's row's answer"),
    ("/verify", {**VERIFY, **ROW, "response": {"output": [], "pad": ["x" * 900] * 20}}, "--max-response-bytes"),
], ids=["query", "query_json", "doc_id", "row_field", "row_bytes", "verify_row", "verify_response"])
def test_fields_over_their_caps_are_422(index, route, body, says):
    app = build_app(TASK, index, limits=Limits(max_text_chars=1000, max_row_bytes=4096, max_response_bytes=16_384))
    caller = client(app)
    assert caller.post("/seed_session", json=ROW).status_code == 200
    answer = caller.post(route, json=body)
    assert answer.status_code == 422 and says in answer.text, answer.text


# ---------------------------------------------------------------- ids: drawn by the server, owned by the seeder


def test_a_callers_id_can_neither_replace_nor_close_another_clients_episode(index):
    app = build_app(TASK, index)
    owner, other = client(app, "10.0.0.1"), client(app, "10.0.0.2")
    first, second = owner.post("/seed_session", json=ROW).json(), owner.post("/seed_session", json=ROW).json()
    victim = second["episode_id"]
    assert len(victim) >= 32 and victim != first["episode_id"]  # token_urlsafe(24): unguessable, never reused
    assert owner.cookies["tansaku_episode"] == victim
    assert other.post("/seed_session", json={**ROW, "episode_id": victim}).status_code == 422
    named = {"X-Episode-Id": victim}
    assert other.post("/close_session", json={"episode_id": victim}).json() == {"closed": False}
    assert other.post("/close_session", headers=named).json() == {"closed": False}
    assert other.post("/search", json={"query": "雪村製菓"}, headers=named).status_code == 404
    scored = other.post("/verify", json={**VERIFY, **ROW, "episode_id": victim})  # scores the body's row only
    assert scored.status_code == 200
    assert owner.post("/search", json={"query": "雪村製菓"}).status_code == 200  # still the owner's, still live
    assert owner.post("/close_session").json() == {"closed": True}


# ---------------------------------------------------------------- a flood of seeds: 429/503, nobody evicted


def test_a_flood_of_seeds_is_refused_and_evicts_no_one(index):
    app = build_app(TASK, index, max_episodes=6, limits=Limits(max_client_episodes=3))
    victim, flooder, late = client(app, "10.0.0.1"), client(app, "10.0.0.2"), client(app, "10.0.0.3")
    kept = [victim.post("/seed_session", json=ROW).json()["episode_id"] for _ in range(2)]
    answers = [flooder.post("/seed_session", json=ROW) for _ in range(50)]
    assert [a.status_code for a in answers] == [200] * 3 + [429] * 47
    assert answers[-1].headers["Retry-After"] == "1" and "--max-client-episodes" in answers[-1].json()["error"]
    assert late.post("/seed_session", json=ROW).status_code == 200  # the sixth live episode
    refused = late.post("/seed_session", json=ROW)  # the store is full now, for everyone
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    assert app.state.episodes.stats()["live"] == 6  # the bound, never more
    for episode_id in kept:  # the victim's episodes survived the flood
        assert victim.post("/search", json={"query": "雪村製菓"}, headers={"X-Episode-Id": episode_id}).status_code == 200
    assert victim.post("/close_session", headers={"X-Episode-Id": kept[0]}).json() == {"closed": True}
    assert late.post("/seed_session", json=ROW).status_code == 200  # room again once an episode ends


def test_an_episode_keeps_its_row_as_bounded_bytes(index):
    app = build_app(TASK, index, limits=Limits(max_row_bytes=4096))
    client(app).post("/seed_session", json=ROW)
    (episode,) = app.state.episodes._live.values()
    assert isinstance(episode["row"], bytes) and len(episode["row"]) <= 4096
    assert app.state.episodes.row(episode) == ROW


# ---------------------------------------------------------------- the bearer token


def test_with_tokens_every_route_but_health_needs_one(index):
    app = build_app(TASK, index, token=TOKENS)
    anonymous, wrong = client(app), client(app, token="c" * 43)
    assert anonymous.get("/health").status_code == 200
    for caller in (anonymous, wrong):
        for method, route in [("post", "/seed_session"), ("post", "/search"), ("post", "/verify"),
                              ("post", "/close_session"), ("get", "/docs"), ("get", "/openapi.json")]:
            answer = getattr(caller, method)(route, json=ROW) if method == "post" else caller.get(route)
            assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer", route
    # A 20 MB body without the token is 401, before it is read.
    assert anonymous.post("/seed_session", content=b"x" * (20 * MB)).status_code == 401
    first, second = client(app, token=TOKENS[0]), client(app, "10.0.0.1", token=TOKENS[1])
    episode_id = first.post("/seed_session", json=ROW).json()["episode_id"]
    assert first.post("/search", json={"query": "雪村製菓"}).status_code == 200
    # The token is the client: the same address with the other token does not own the episode.
    assert second.post("/close_session", json={"episode_id": episode_id}).json() == {"closed": False}
    assert client(app, "10.9.9.9", token=TOKENS[0]).post(
        "/search", json={"query": "雪村製菓"}, headers={"X-Episode-Id": episode_id}).status_code == 200


@pytest.fixture
def served(monkeypatch):
    """What ``uvicorn.run`` was given (nothing is served)."""
    seen: dict = {}
    monkeypatch.setattr("tansaku.envs.gym_service.uvicorn.run", lambda app, **kw: seen.update(app=app, **kw))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    return seen


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.org"])
def test_a_non_loopback_host_without_a_token_is_refused(index, served, host):
    result = CliRunner().invoke(synth_app, ["serve-env", "--task", "multihop_qa", "--index", str(index),
                                            "--host", host])
    assert result.exit_code == 2 and not served, result.output
    assert result.stderr.count("\n") == 1 and TOKEN_ENV in result.stderr and f"--host {host}" in result.stderr


def test_a_token_from_the_environment_serves_any_host_and_is_never_echoed(index, served, monkeypatch):
    secret = "s3cret-" + "x" * 36
    monkeypatch.setenv(TOKEN_ENV, secret)
    result = CliRunner().invoke(synth_app, ["serve-env", "--task", "multihop_qa", "--index", str(index),
                                            "--host", "0.0.0.0", "--max-body-bytes", "1024"])
    assert result.exit_code == 0 and served["host"] == "0.0.0.0", result.output
    assert secret not in result.output + result.stderr and "bearer token" in result.stderr
    app = served["app"]
    assert app.state.limits.max_body_bytes == 1024
    assert client(app).post("/seed_session", json=ROW).status_code == 401
    assert client(app, token=secret).post("/seed_session", json=ROW).status_code == 200
    monkeypatch.setenv(TOKEN_ENV, "short")
    refused = CliRunner().invoke(synth_app, ["serve-env", "--task", "multihop_qa", "--index", str(index)])
    assert refused.exit_code == 2 and "at least 16 characters" in refused.stderr and "short" not in refused.stderr


def test_the_cli_defaults_are_the_limits_defaults():
    import typer

    command = typer.main.get_command(synth_app).commands["serve-env"]
    defaults = {p.name: p.default for p in command.params}
    assert {name: defaults[name] for name in Limits.__dataclass_fields__ if name != "judge_burst_s"} == {
        name: getattr(Limits(), name) for name in Limits.__dataclass_fields__ if name != "judge_burst_s"}


# ---------------------------------------------------------------- the judge's rate


def test_judge_verifies_over_the_rate_are_429(index):
    limits = Limits(judge_rate=100.0, judge_client_rate=0.5, judge_burst_s=4.0)  # a client's bucket holds 2
    app = build_app(TASK, index, judge=object(), limits=limits)  # multihop's rewards never call it
    caller, other = client(app, "10.0.0.1"), client(app, "10.0.0.2")
    assert [caller.post("/verify", json={**VERIFY, **ROW}).status_code for _ in range(3)] == [200, 200, 429]
    limited = caller.post("/verify", json={**VERIFY, **ROW})
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert other.post("/verify", json={**VERIFY, **ROW}).status_code == 200  # the bucket is the client's
    free = build_app(TASK, index, limits=limits)  # no judge: nothing to spend, no limit
    assert {client(free).post("/verify", json={**VERIFY, **ROW}).status_code for _ in range(5)} == {200}


def test_the_servers_bucket_bounds_all_clients_together():
    now = [0.0]
    rate = JudgeRate(Limits(judge_rate=1.0, judge_client_rate=100.0, judge_burst_s=3.0), clock=lambda: now[0])
    assert [rate.take(f"c{i}") for i in range(4)][:3] == [0.0] * 3 and rate.take("c9") > 0
    now[0] += 1.0  # one token back
    assert rate.take("c10") == 0.0 and rate.take("c11") > 0
