"""``synth serve-env``: the NeMo Gym resources-server protocol, driven over real HTTP by a minimal client written
from the protocol (seed_session → tools → verify), against the same environments and rewards TRL trains with.

    pytest tests/test_gym_service.py -q
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.cookiejar import CookieJar
from pathlib import Path

import pytest

from tansaku.envs.environments import episode_variant, make_environment_factory
from tansaku.envs.gym_service import build_app, completion_from_response, verify_scores
from tansaku.envs.search import build_index
from tansaku.envs.tasks import TASKS
from tansaku.testing.canned_server import free_port

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("search_fixture", ROOT / "tests" / "fixtures" / "search" / "dataset.py")
search_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_fixture)
TASK = TASKS["multihop_qa"]


class Served:
    """The app under uvicorn in a thread, on a free port."""

    def __init__(self, app):
        import uvicorn

        self.url = f"http://127.0.0.1:{free_port()}"
        port = int(self.url.rsplit(":", 1)[1])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class Client:
    """What a NeMo Gym agent does: one cookie jar per rollout, JSON bodies, POST routes."""

    def __init__(self, url: str, headers: dict | None = None):
        self.url, self.headers = url, headers or {}
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def post(self, route: str, body) -> tuple[int, dict]:
        data = body.encode() if isinstance(body, str) else json.dumps(body, ensure_ascii=False).encode()
        request = urllib.request.Request(f"{self.url}{route}", data=data, method="POST",
                                         headers={"Content-Type": "application/json", **self.headers})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gym")
    search_fixture.write_dataset(root / "docs")
    build_index(root / "docs", root / "index")
    return root / "index"


ROW = {"id": "q-gym-1", "question": "雪村製菓の創業者は誰ですか？", "answer": "雪村清一郎", "aliases": []}


def _response(query: str, tool_output: str, answer: str) -> dict:
    """A Responses API response of a rollout: reasoning, one search, its result, the final message."""
    return {"id": "resp_1", "object": "response", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "雪村製菓を検索する。"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "search",
         "arguments": json.dumps({"query": query}, ensure_ascii=False)},
        {"type": "function_call_output", "call_id": "call_1", "output": tool_output},
        {"type": "message", "id": "msg_1", "role": "assistant",
         "content": [{"type": "output_text", "text": f"<think>結果を読んだ。</think>{{{{{answer}}}}}"}]}]}


def test_a_full_episode_matches_the_trl_environment_and_rewards(index):
    with Served(build_app(TASK, index)) as url:
        client = Client(url)
        status, seeded = client.post("/seed_session", ROW)
        assert status == 200 and seeded["tool_variant"] == episode_variant(TASK, ROW)
        assert {t["function"]["name"] for t in seeded["tools"]} == {"search", "open_doc"}

        status, searched = client.post("/search", {"query": "雪村製菓"})
        local = make_environment_factory(TASK, index, require_prompt=False)()
        local.reset(**ROW)
        assert status == 200 and searched == {"output": local.search("雪村製菓"), "failed": False}

        response = _response("雪村製菓", searched["output"], ROW["answer"])
        status, verified = client.post("/verify", {"responses_create_params": {"input": []}, "response": response,
                                                   **ROW})
        expected = verify_scores(TASK, completion_from_response(response), ROW)
        assert status == 200 and verified["reward"] == expected["reward"] > 0
        assert verified["reward_components"] == expected["reward_components"]
        assert set(verified["reward_components"]) == set(TASK.reward_weights)
        assert verified["answer_reward"] == 1.0 and verified["response"] == response  # the body, answered back

        wrong = _response("雪村製菓", searched["output"], "見当違い")
        client.post("/seed_session", ROW)
        _, verified_wrong = client.post("/verify", {"responses_create_params": {}, "response": wrong})
        assert verified_wrong["answer_reward"] == 0.0 and verified_wrong["reward"] < verified["reward"]


def test_the_call_budget_and_tool_errors_are_the_environments(index):
    with Served(build_app(TASK, index)) as url:
        client = Client(url)
        client.post("/seed_session", ROW)
        outputs = [client.post("/search", {"query": f"雪村製菓 {i}"})[1] for i in range(TASK.max_tool_calls + 1)]
        assert not any(o["failed"] for o in outputs[:-1])
        assert outputs[-1]["failed"] and "budget" in outputs[-1]["output"]
        client.post("/seed_session", ROW)
        _, hostile = client.post("/search", {"query": {"bool": {"must": [{"nope": {}}]}}})
        assert hostile["failed"] and hostile["output"].startswith("{'error'")


def test_malformed_requests_get_a_json_error(index):
    with Served(build_app(TASK, index)) as url:
        client = Client(url)
        assert client.post("/search", {"query": "雪村製菓"})[0] == 404  # no episode yet
        client.post("/seed_session", ROW)
        for route, body in [("/search", {"q": 1}), ("/search", {"query": "x", "size": "many"}),
                            ("/open_doc", {}), ("/verify", {"response": {}}), ("/search", "{not json")]:
            status, error = client.post(route, body)
            assert status == 422 and isinstance(error, dict) and error, (route, body, status)


def test_concurrent_episodes_keep_their_own_state(index):
    with Served(build_app(TASK, index)) as url:
        def episode(i: int) -> tuple[int, list[bool]]:
            client = Client(url)
            client.post("/seed_session", {**ROW, "id": f"q{i}"})
            calls = [client.post("/search", {"query": "雪村製菓"})[1]["failed"] for _ in range(i % 5 + 1)]
            return i, calls

        with ThreadPoolExecutor(max_workers=64) as pool:
            results = list(pool.map(episode, range(128)))
        assert all(calls == [False] * (i % 5 + 1) for i, calls in results)
        health = json.loads(urllib.request.urlopen(f"{url}/health", timeout=10).read())
        assert health["live"] == 128 and health["started"] == 128


def test_idle_episodes_expire_and_a_full_store_pushes_back(index):
    """A full store refuses the next seed (503, Retry-After) instead of evicting a live episode; a client without
    cookies names its episode by the id /seed_session answered, in the X-Episode-Id header."""
    app = build_app(TASK, index, max_episodes=2, idle_seconds=1.0)
    with Served(app) as url:
        a, b = Client(url), Client(url)
        a.post("/seed_session", ROW)
        _, seeded = b.post("/seed_session", ROW)
        assert a.post("/seed_session", ROW)[0] == 503  # a third live episode: refused, none evicted
        assert a.post("/search", {"query": "雪村製菓"})[0] == 200
        headed = Client(url, headers={"X-Episode-Id": seeded["episode_id"]})
        headed.opener = urllib.request.build_opener()  # no cookie jar: the header alone names the episode
        assert headed.post("/search", {"query": "雪村製菓"})[0] == 200
        time.sleep(1.2)
        assert b.post("/search", {"query": "雪村製菓"})[0] == 404  # idle too long
        stats = app.state.episodes.stats()
        assert (stats["live"], stats["started"], stats["expired"], stats["refused"]) == (0, 2, 2, 1)


def test_export_writes_nemo_gym_rows_that_seed_episodes(index, tmp_path):
    from typer.testing import CliRunner

    from tansaku.cli import synth_app

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({**ROW, "id": f"q{i}"}, ensure_ascii=False) + "\n" for i in range(3)),
                    encoding="utf-8")
    out = tmp_path / "gym.jsonl"
    args = ["serve-env", "--task", "multihop_qa", "--index", str(index), "--dataset", str(rows), "--export", str(out)]
    result = CliRunner().invoke(synth_app, args)
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 3 and lines[0]["answer"] == ROW["answer"]
    params = lines[0]["responses_create_params"]
    assert [m["role"] for m in params["input"]] == ["system", "user"] and ROW["question"] in params["input"][1]["content"]
    assert {t["name"] for t in params["tools"]} == {"search", "open_doc"} and params["tools"][0]["type"] == "function"
    again = CliRunner().invoke(synth_app, args)  # an existing file is never overwritten
    assert again.exit_code == 2 and again.stderr.startswith("error: ")
    with Served(build_app(TASK, index)) as url:  # an exported line seeds an episode as it is
        status, seeded = Client(url).post("/seed_session", lines[1])
        assert status == 200 and seeded["tool_variant"] == episode_variant(TASK, {**ROW, "id": "q1"})


# ---------------------------------------------------------------- issue 28: hostile values are 422, never 500

DEEP = "[" * 100_000 + "]" * 100_000
VERIFY = {"responses_create_params": {}, "response": {"output": []}}


def test_a_lone_surrogate_or_a_field_named_self_seeds_a_usable_episode(index):
    """Both were 500s: ``"\\ud800"`` reached a UTF-8 encoder, ``self`` collided with ``reset(self, **row)``."""
    with Served(build_app(TASK, index)) as url:
        for row in ('{"id": "\\ud800", "question": "\\udc00雪村製菓", "answer": "雪村清一郎"}', {**ROW, "self": 1}):
            client = Client(url)
            status, seeded = client.post("/seed_session", row)
            assert status == 200 and seeded["tools"], seeded
            assert client.post("/search", '{"query": "雪村製菓\\ud800"}')[0] == 200  # JSON's escape of one
            status, verified = client.post("/verify", {**VERIFY, "answer": "雪村清一郎"})
            assert status == 200 and set(verified["reward_components"]) == set(TASK.reward_weights)


@pytest.mark.parametrize("route, body, says", [
    ("/verify", {**VERIFY, **ROW, "completions": [1]}, "completions"),
    ("/verify", {**VERIFY, **ROW, "prompts": 1}, "prompts"),
    ("/verify", VERIFY, "answer"),  # no live episode and no answer: nothing to score against
    ("/verify", {**VERIFY, **ROW, "response": {"output": 5}}, "response.output must be a list"),
    ("/verify", {**VERIFY, **ROW, "response": {"output": [
        {"type": "function_call", "name": "search", "arguments": DEEP}]}}, "nests deeper than"),
    ("/seed_session", {**ROW, "episode_id": "mine"}, "episode_id is drawn by the server"),
    ("/close_session", {"episode_id": ["x"]}, "episode_id must be a string"),
    ("/seed_session", '{"id": ' + DEEP + "}", "nested too deeply"),
    ("/search", '{"query": ' + DEEP + "}", "nested too deeply"),
], ids=["completions", "prompts", "no_answer", "output_int", "deep_arguments", "seed_id_given", "close_id_list",
        "deep_body", "deep_tool_body"])
def test_hostile_values_get_422_with_a_json_error(index, route, body, says):
    with Served(build_app(TASK, index)) as url:
        client = Client(url)  # a fresh cookie jar: no live episode unless the case seeds one
        if route == "/search":
            client.post("/seed_session", ROW)
        status, error = client.post(route, body)
        assert status == 422 and isinstance(error, dict), (status, error)
        assert says in json.dumps(error, ensure_ascii=False), error


def test_tool_interfaces_are_served_as_drawn(index):
    """With two tool interfaces, an episode's seeded tools are its interface's; /find and /read serve interface 1,
    and a call in the other interface's shape is the tool's error, as TRL shows it."""
    from dataclasses import replace

    from tansaku.envs.environments import episode_interface

    task = replace(TASK, tools_config={**TASK.tools_config, "interface_variants": 2})
    rows, drawn = [{**ROW, "id": f"q-gym-{i}"} for i in range(12)], set()
    with Served(build_app(task, index)) as url:
        for row in rows:
            client, interface = Client(url), episode_interface(task, row)
            status, seeded = client.post("/seed_session", row)
            assert status == 200 and seeded["tool_interface"] == interface
            names = {t["function"]["name"] for t in seeded["tools"]}
            assert names == ({"find", "read"} if interface else {"search", "open_doc"})
            status, found = client.post("/find", {"keywords": ["雪村製菓"]})
            assert status == 200 and found["failed"] == (interface == 0)
            status, searched = client.post("/search", {"query": "雪村製菓"})
            assert status == 200 and searched["failed"] == (interface == 1)
            drawn.add(interface)
            if interface:
                assert "doc_id:" in found["output"] and searched["output"] == "{'error': 'Tool search not found.'}"
    assert drawn == {0, 1}
