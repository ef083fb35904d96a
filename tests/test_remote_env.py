"""TRL against a remote environment: ``RemoteEnvironment`` (``tansaku.envs.remote_env``) against a real
``serve-env`` app and the canned fault server (timeouts, 4xx, 5xx, a server dying mid-episode), a recipe task
with ``environment_url``, and (slow) a tiny ``train rl`` whose server fails some episodes and goes on.

Run: pytest tests/test_remote_env.py -m "not slow"; the train rl run: -m slow -k remote
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.recipe_args import section_arg
from test_gym_service import Served

from tansaku.envs.gym_service import build_app, verify_scores
from tansaku.envs.remote_env import (
    RemoteEnvironment,
    RemoteEnvironmentFactory,
    remote_reward,
    responses_output,
)
from tansaku.envs.tasks import TASKS
from tansaku.envs.tools import ToolError
from tansaku.testing.canned_env_server import CannedEnvServer

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"
ROWS = ROOT / "tests" / "fixtures" / "envs" / "multihop.jsonl"
TASK = TASKS["multihop_qa"]
ROW = json.loads(ROWS.read_text(encoding="utf-8").splitlines()[0])  # 月見坂 … 白砂市


def _trl_row() -> dict:
    return TASK.to_trl_rows([ROW])[0]


def _completion(query: str, output: str, answer: str) -> list[dict]:
    """A TRL conversational completion: one structured search call, its result, the final answer."""
    return [{"role": "assistant", "content": "", "reasoning_content": "月見坂を探す。",
             "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": query}}}]},
            {"role": "tool", "name": "search", "content": output},
            {"role": "assistant", "content": f"<think>読んだ。</think>{{{{{answer}}}}}"}]


def test_an_episode_on_serve_env_calls_tools_there_and_scores_as_task_score(envs_index):
    from tansaku.envs.environments import make_environment_factory

    with Served(build_app(TASK, envs_index)) as url:
        env = RemoteEnvironmentFactory(url)()
        assert env.reset(**_trl_row()) is None and env.failure is None and env.episode_id
        local = make_environment_factory(TASK, envs_index)()
        local.reset(**_trl_row())
        assert env.search("月見坂") == local.search("月見坂")  # the same tool, run on the server
        # a tool's own error is the model's failed call; the episode is still served
        with pytest.raises(ToolError, match="doc_id"):
            env.open_doc("no-such-doc")
        assert env.failure is None
        completion = _completion("月見坂", env.search("月見坂"), ROW["answer"])
        logged = {}
        [reward] = remote_reward([completion], environments=[env], log_metric=logged.__setitem__)
        assert reward == pytest.approx(verify_scores(TASK, completion, ROW)["reward"])  # Task.score, served
        assert logged["remote/failed_episodes"] == 0.0 and logged["remote/answer_reward"] == 1.0
        with pytest.raises(ToolError, match="HTTP 404"):  # /verify ended the episode on the server
            env.search("月見坂")


def test_responses_output_round_trips_through_the_servers_reader():
    from tansaku.envs.gym_service import completion_from_response

    completion = _completion("月見坂", "1. [d1] 月見坂", "白砂市")
    back = completion_from_response({"output": responses_output(completion)})
    assert [m["role"] for m in back] == ["assistant", "tool", "assistant"]
    assert back[0]["tool_calls"][0]["function"] == {"name": "search", "arguments": {"query": "月見坂"}}
    assert back[0]["reasoning_content"] == "月見坂を探す。" and back[2]["content"].endswith("{{白砂市}}")


@pytest.mark.parametrize("query, reason", [("sleep=2", "timed out"), ("status=500", "HTTP 500"),
                                           ("status=404", "HTTP 404"), ("status=503", "HTTP 503"),
                                           ("die", "")])
def test_server_faults_fail_the_episode_with_a_reason(query, reason):
    with CannedEnvServer() as url:
        env = RemoteEnvironmentFactory(url, timeout=0.5)()
        env.reset(**_trl_row())
        assert env.search("ok") == "canned: ok"
        with pytest.raises(ToolError, match="the environment server failed this episode"):
            env.search(query)
        assert env.failure and env.failure.startswith("search: ") and reason in env.failure
        with pytest.raises(ToolError, match=reason or "failed"):  # later calls fail at once, with the reason
            env.open_doc("d1")
        logged = {}
        assert remote_reward([_completion("x", "y", "z")], environments=[env], log_metric=logged.__setitem__) \
            == [None]
        assert logged["remote/failed_episodes"] == 1.0


def test_a_tools_own_errors_and_refused_arguments_do_not_fail_the_episode():
    with CannedEnvServer() as server_url:
        env = RemoteEnvironmentFactory(server_url)()
        env.reset(**_trl_row())
        with pytest.raises(ToolError, match="^canned tool error$"):  # TRL then writes {'error': …} once
            env.search("toolerror")
        with pytest.raises(ToolError, match="HTTP 422"):
            env.search("status=422")
        assert env.failure is None and remote_reward([_completion("a", "b", "c")], environments=[env]) == [0.5]


def test_a_server_that_died_between_episodes_or_mid_episode(envs_index):
    with Served(build_app(TASK, envs_index)) as url:
        env = RemoteEnvironmentFactory(url, timeout=2)()
        env.reset(**_trl_row())
        env.search("月見坂")
    # the server is gone: this episode's next call, and a new episode's seed, fail with a reason; nothing raises
    with pytest.raises(ToolError, match="failed this episode"):
        env.search("白砂市")
    assert "search:" in env.failure and remote_reward([[]], environments=[env]) == [None]
    fresh = RemoteEnvironmentFactory(url, timeout=2)()
    assert fresh.reset(**_trl_row()) is None and fresh.failure.startswith("seed_session:")


def test_a_recipe_task_names_its_environment_by_url(tmp_path):
    from tansaku.envs.environments import tool_methods
    from tansaku.trainer.recipes import RecipeError, load_recipe
    from tansaku.trainer.rl import build_environments
    from tansaku.trainer.rl_rewards import build_rewards

    remote = section_arg(RECIPE, "tasks", data=str(ROWS), index=None, corpus=None,
                         environment_url="http://127.0.0.1:9")
    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path), *remote], kind="rl")
    factories = build_environments(recipe)
    assert factories and all(isinstance(f, RemoteEnvironmentFactory) for f in factories.values())
    assert all(isinstance(f(), RemoteEnvironment) for f in factories.values())
    assert all(set(tool_methods(f())) == {"search", "open_doc"} for f in factories.values())  # TRL's tool list
    funcs, weights, groups = build_rewards(recipe)
    assert [f.__name__ for f in funcs] == ["remote_reward"] and weights == [1.0]
    both = section_arg(RECIPE, "tasks", data=str(ROWS), index="idx", corpus=None, environment_url="http://h:1")
    with pytest.raises(RecipeError, match="not both"):
        load_recipe(RECIPE, ["--output_dir", str(tmp_path), *both], kind="rl")
    two = section_arg(RECIPE, "tasks", data=str(ROWS), index=None, corpus=None, environment_url="http://h:1",
                      tools={"interface_variants": 2})
    with pytest.raises(RecipeError, match="interface 0"):
        build_environments(load_recipe(RECIPE, ["--output_dir", str(tmp_path), *two], kind="rl"))


class _FailingAfter:
    """ASGI middleware: tool calls after the first ``n`` answer 500 (the server breaking down mid-run)."""

    def __init__(self, app, n: int):
        self.app, self.left = app, n

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] in ("/search", "/open_doc"):
            self.left -= 1
            if self.left < 0:
                await send({"type": "http.response.start", "status": 500, "headers": []})
                return await send({"type": "http.response.body", "body": b"{}"})
        return await self.app(scope, receive, send)


@pytest.mark.slow
def test_train_rl_on_a_remote_environment_goes_on_when_episodes_fail(tmp_path, envs_index, tiny_model_path):
    from tansaku.trainer.rl import run_rl

    with Served(_FailingAfter(build_app(TASK, envs_index), 3)) as url:
        tasks = section_arg(RECIPE, "tasks", data=str(ROWS), index=None, corpus=None, environment_url=url)
        result = run_rl(RECIPE, ["--output_dir", str(tmp_path / "run"), *tasks, "--max_steps", "1",
                                 "--max_completion_length", "48"], skip_readiness=True)
    assert result["global_step"] == 1
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text(encoding="utf-8"))
    [entry] = [e for e in state["log_history"] if "rewards/remote_reward/mean" in e or "remote/failed_episodes" in e]
    assert "remote/failed_episodes" in entry and "search_health/searches_mean" in entry
