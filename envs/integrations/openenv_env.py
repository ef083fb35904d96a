"""tansaku's search tasks as an OpenEnv environment (``openenv-core``: ``pip install 'tansaku[openenv]'``).

``build_openenv_app(task, index)`` is OpenEnv's FastAPI app (``openenv.core.create_app``) over one task
and search index; each client session gets its own ``TansakuSearchEnv``. ``reset(row=…)`` starts the episode
of a dataset row: the observation carries the task's prompt and this episode's tool schemas. ``step`` takes
one model turn (``SearchAction``: the text as generated, ``<think>``/``<tool_call>`` blocks included, or a
server's parsed ``reasoning_content`` / ``tool_calls``), runs its tool calls with tansaku's tools and returns
the messages it added. The turn that ends the episode (an answer, a malformed call, the turn budget) is
scored by ``Task.score``: ``reward`` is the weighted total, ``reward_components`` each component. The episode
is the one ``train eval`` runs for the same row and turns (``tansaku.envs.integrations.episode``).

    uvicorn --factory 'tansaku.envs.integrations.openenv_env:app_from_env'   # TANSAKU_TASK, TANSAKU_INDEX
    client = openenv_client("http://envhost:8000").sync()
    with client:
        result = client.reset(row=row)           # result.observation.messages / .tools
        result = client.step(action_class()(content=model_text))   # until result.done; result.reward

The classes are built on first use (``openenv_types``, ``environment_class``, ``client_class``), so this
module imports without the extra.
"""

from __future__ import annotations

import functools
import os
import uuid
from types import SimpleNamespace

from tansaku.core.llm import ChatResult, as_client
from tansaku.envs.environments import make_environment_factory, open_backend
from tansaku.envs.integrations.episode import SearchEpisode
from tansaku.envs.tasks import Task, task_named

MISSING = ("OpenEnv is not installed: pip install 'tansaku[openenv]' (see pyproject.toml for the --no-deps "
           "install that keeps tansaku's pinned packages)")


def _openenv():
    try:
        import openenv.core as core
    except ImportError as exc:
        raise ImportError(MISSING) from exc
    return core


@functools.cache
def openenv_types() -> SimpleNamespace:
    """The wire types: ``SearchAction`` (one model turn), ``SearchObservation``, ``SearchState``."""
    from pydantic import Field

    core = _openenv()

    class SearchAction(core.Action):
        """One model turn: ``content`` as generated, or a server's parsed reasoning and tool calls."""

        content: str = ""
        reasoning_content: str | None = None
        tool_calls: list[dict] = Field(default_factory=list)  # wire form: {"function": {name, arguments}}
        finish_reason: str | None = None  # "length": a cut generation ends the episode, as in train eval

    class SearchObservation(core.Observation):
        """reset: the prompt and tool schemas; step: the messages the turn added (its parse, tool results)."""

        messages: list[dict] = Field(default_factory=list)
        tools: list[dict] = Field(default_factory=list)
        stop_reason: str = "running"
        reward_components: dict[str, float | None] = Field(default_factory=dict)

    class SearchState(core.State):
        task: str = ""
        stop_reason: str = "running"
        turns: int = 0
        tool_calls: int = 0
        tool_variant: int | None = None
        tool_interface: int | None = None

    return SimpleNamespace(SearchAction=SearchAction, SearchObservation=SearchObservation,
                           SearchState=SearchState)


def action_class():
    return openenv_types().SearchAction


@functools.cache
def environment_class():
    """``TansakuSearchEnv``: an ``openenv.core.Environment`` over one ``SearchEpisode`` per session."""
    core, types = _openenv(), openenv_types()

    class TansakuSearchEnv(core.Environment):
        # Each session has its own episode and environment; the search backend is shared and only read.
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self, task: Task, factory, functions: dict | None = None, judge=None):
            super().__init__()
            self.episode = SearchEpisode(task, factory, functions, judge)
            self._state = types.SearchState(task=task.name)

        def reset(self, seed=None, episode_id=None, row: dict | None = None, **kwargs):
            """Start the episode of dataset ``row``. ``seed`` is not used: a row's tool variant is drawn from
            the row and the app's seed, as ``train rl`` draws it."""
            trajectory = self.episode.reset(row)
            self._state = types.SearchState(episode_id=episode_id or uuid.uuid4().hex,
                                            task=self.episode.task.name, tool_variant=trajectory.tool_variant,
                                            tool_interface=trajectory.tool_interface)
            return types.SearchObservation(messages=trajectory.prompt, tools=trajectory.tools)

        def step(self, action, timeout_s=None, **kwargs):
            turn = ChatResult(content=action.content, server_reasoning=action.reasoning_content,
                              server_tool_calls=list(action.tool_calls), finish_reason=action.finish_reason)
            added = self.episode.step(turn)
            trajectory, score = self.episode.trajectory, self.episode.score
            self._state.step_count += 1
            self._state.stop_reason, self._state.turns = trajectory.stop_reason, trajectory.turns
            self._state.tool_calls = trajectory.tool_calls
            return types.SearchObservation(messages=added, done=self.episode.done,
                                           reward=score.total if score else None,
                                           stop_reason=trajectory.stop_reason,
                                           reward_components=score.components if score else {})

        @property
        def state(self):
            return self._state

    return TansakuSearchEnv


@functools.cache
def client_class():
    """``TansakuSearchClient``: OpenEnv's ``EnvClient`` for these types (async; ``.sync()`` for blocking)."""
    core, types = _openenv(), openenv_types()
    from openenv.core.client_types import StepResult

    class TansakuSearchClient(core.EnvClient):
        def _step_payload(self, action) -> dict:
            return action.model_dump(exclude={"metadata"})

        def _parse_result(self, payload: dict):
            done, reward = payload.get("done", False), payload.get("reward")
            observation = types.SearchObservation(**payload.get("observation", {}), done=done, reward=reward)
            return StepResult(observation=observation, reward=reward, done=done)

        def _parse_state(self, payload: dict):
            return types.SearchState(**payload)

    return TansakuSearchClient


def openenv_client(base_url: str, **options):
    """A client of a served task (``build_openenv_app``) at ``base_url`` (http:// or ws://)."""
    return client_class()(base_url=base_url, **options)


def build_openenv_app(task: Task | str, index, *, judge=None, seed: int = 0, max_concurrent_envs: int = 64):
    """OpenEnv's app for ``task`` (a name or a configured ``Task``) over ``index`` (a folder / OpenSearch
    target or an opened backend). ``judge``: LLM spec or client of rubric tasks; ``seed``: the tool-variant
    draw's."""
    task = task_named(task) if isinstance(task, str) else task
    factory = make_environment_factory(task, open_backend(index), seed=seed)
    functions = task.scoring_functions(as_client(judge))  # made once: every session scores with them
    environment = environment_class()
    types = openenv_types()
    return _openenv().create_app(lambda: environment(task, factory, functions), types.SearchAction,
                                 types.SearchObservation, env_name=f"tansaku-{task.name}",
                                 max_concurrent_envs=max_concurrent_envs)


def app_from_env():
    """``build_openenv_app`` from ``$TANSAKU_TASK``, ``$TANSAKU_INDEX`` (and ``$TANSAKU_JUDGE``): a factory
    for ``uvicorn --factory``."""
    return build_openenv_app(os.environ.get("TANSAKU_TASK", "multihop_qa"), os.environ["TANSAKU_INDEX"],
                             judge=os.environ.get("TANSAKU_JUDGE"))
