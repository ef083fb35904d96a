"""A task's environment on another machine: TRL's ``environment_factory`` class whose tools and rewards run on
a ``synth serve-env`` server (the NeMo Gym resources-server routes, ``tansaku.envs.gym_service``).

The rollout stays in TRL (generation, the tool loop, the loss); each episode seeds a session on the server
(``reset`` → POST ``/seed_session`` with the row), each tool call is POST ``/<tool>`` with that episode's
``X-Episode-Id``, and ``remote_reward`` sends the finished completion to POST ``/verify`` (as a Responses API
``output``, ``responses_output``), which scores it with the task's own ``Task.score`` and closes the episode.
The model sees the same tools as a local episode: ``RemoteEnvironment`` is a ``SearchEnvironment`` (the same
description variants, TRL's tool listing) whose tool bodies are HTTP calls.

Failures: a tool's own error (a hostile query, the budget used up; 422 for arguments of the wrong shape) is
the model's failed call, as locally. Anything else — a timeout, a refused connection, a server that died, any
other 4xx / 5xx, an episode the server no longer knows — fails the *episode*: ``failure`` holds the reason,
later calls fail at once with it, and ``remote_reward`` gives that episode ``None`` (TRL leaves it out of the
reward) and logs ``remote/failed_episodes``; training goes on.

In a ``train rl`` recipe a task names its server instead of an index
(``tansaku.trainer.recipe_arguments.RLTask``)::

    tasks: [{name: multihop_qa, data: out/multihop, environment_url: "http://envhost:8010"}]

    env = RemoteEnvironmentFactory("http://127.0.0.1:8010", ToolsConfig())(); env.reset(**row)
    env.search("白砂市"); remote_reward([completion], environments=[env])
"""

from __future__ import annotations

import ast
import http.client
import json
import logging
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from tansaku.core.errors import InputError
from tansaku.envs.environments import SearchEnvironment, task_interfaces, task_variants
from tansaku.envs.tools import ToolError, ToolsConfig

log = logging.getLogger(__name__)

# the bearer token serve-env asks for off loopback (gym_limits.resolve_tokens)
TOKEN_ENV = "TANSAKU_ENV_TOKEN"
# Row fields the server has no use for: the rendered prompt (the server renders its own) and TRL's routing.
_NOT_SENT = ("prompt", "environment")


class RemoteFailure(Exception):
    """The server could not serve the episode (timeout, connection, a status other than a tool's 422)."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read().decode("utf-8", "replace")[:300]
        except Exception:  # noqa: BLE001 (a body cut off by a dying server: the status says enough)
            body = ""
        return f"HTTP {exc.code}: {body}".rstrip(": ")
    if isinstance(exc, (TimeoutError, socket.timeout)) or "timed out" in str(exc):
        return f"timed out: {exc}"
    return f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"


@dataclass
class RemoteClient:
    """JSON over HTTP to one serve-env server (stdlib only: ``urllib``), every request bounded by
    ``timeout``."""

    url: str
    timeout: float = 30.0
    token: str | None = None

    def post(self, route: str, body: dict, episode_id: str | None = None) -> dict:
        """The JSON answer of POST ``route``; ``urllib.error.HTTPError`` for a status ≥ 400, ``OSError`` /
        ``http.client.HTTPException`` for a transport failure."""
        headers = {"Content-Type": "application/json"}
        if episode_id:
            headers["X-Episode-Id"] = episode_id
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(f"{self.url.rstrip('/')}/{route}", method="POST", headers=headers,
                                         data=json.dumps(body, ensure_ascii=False, default=str).encode())
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read().decode("utf-8"))


def _tool_message(output: str) -> str:
    """The message of a failed call's ``output`` (``str({"error": message})``, as TRL writes it)."""
    try:
        value = ast.literal_eval(output)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return output
    return str(value.get("error", output)) if isinstance(value, dict) else output


class RemoteEnvironment(SearchEnvironment):
    """One episode on a serve-env server; interface 0's tools (``search`` / ``open_doc``) with the description
    variant of its factory. ``failure``: why the episode failed (None while it is served)."""

    def __init__(self, client: RemoteClient, tools_config: dict | ToolsConfig | None = None,
                 variant: int | None = None):
        super().__init__(None, tools_config, variant=variant, interface=0)
        self.client, self.episode_id, self.failure = client, None, None

    def reset(self, /, **row) -> str | None:
        """Seed the episode on the server; a failure is recorded (the episode fails), never raised: TRL would
        stop the whole run."""
        super().reset(**row)
        self.episode_id, self.failure = None, None
        try:
            seeded = self.client.post("seed_session", {k: v for k, v in row.items() if k not in _NOT_SENT})
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return self._fail(f"seed_session: {_reason(exc)}")
        self.episode_id = seeded.get("episode_id")
        if seeded.get("tool_interface", 0) != self.interface:  # its tools would not be the ones TRL lists
            self._fail(f"the server drew tool interface {seeded.get('tool_interface')}; remote episodes use "
                       "interface 0 (set the served task's tools interface_variant: 0)")
        return None

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            log.warning("remote episode failed (%s): %s", self.client.url, reason)

    def _call(self, name: str, arguments: dict) -> str:
        if self.failure is not None:
            raise ToolError(f"the environment server failed this episode: {self.failure}")
        try:
            answer = self.client.post(name, arguments, self.episode_id)
        except urllib.error.HTTPError as exc:
            if exc.code == 422:  # arguments the tool's schema refuses: the model's mistake, as locally
                raise ToolError(_reason(exc)) from None
            self._fail(f"{name}: {_reason(exc)}")
            raise ToolError(f"the environment server failed this episode: {self.failure}") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self._fail(f"{name}: {_reason(exc)}")
            raise ToolError(f"the environment server failed this episode: {self.failure}") from None
        output = str(answer.get("output", ""))
        if answer.get("failed"):
            raise ToolError(_tool_message(output))
        return output

    # The tools (and their descriptions) are SearchEnvironment's; a call goes to the server instead.
    def _search(self, query: str, size: int | None) -> str:
        return self._call("search", {"query": query} if size is None else {"query": query, "size": size})

    def _open_doc(self, doc_id: str, offset: int) -> str:
        return self._call("open_doc", {"doc_id": doc_id, "offset": offset})

    def _verify(self, completion: list[dict]) -> dict | None:  # private: TRL lists public methods as tools
        """``/verify``'s ``{"reward", "reward_components", …}`` for the finished ``completion``; None (and
        ``failure`` set) when the episode failed or the server cannot score it."""
        if self.failure is not None:
            return None
        body = {"episode_id": self.episode_id, "responses_create_params": {"input": []},
                "response": {"output": responses_output(completion)}}
        try:
            return self.client.post("verify", body, self.episode_id)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self._fail(f"verify: {_reason(exc)}")
            return None


@dataclass
class RemoteEnvironmentFactory:
    """Zero-argument callable for TRL's ``environment_factory``: a fresh ``RemoteEnvironment`` per call, all
    served by ``url``. ``token``: else ``$TANSAKU_ENV_TOKEN``."""

    url: str
    config: ToolsConfig = field(default_factory=ToolsConfig)
    variant: int | None = None
    timeout: float = 30.0
    token: str | None = None

    def __call__(self) -> RemoteEnvironment:
        client = RemoteClient(self.url, self.timeout, self.token or os.environ.get(TOKEN_ENV))
        return RemoteEnvironment(client, self.config, self.variant)


def _arguments_text(arguments) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)


def responses_output(completion) -> list[dict]:
    """TRL's completion messages as a Responses API ``output`` list: the inverse of
    ``tansaku.envs.gym_service.completion_from_response`` (reasoning, text, calls, call outputs).

    >>> responses_output([{"role": "assistant", "content": "{{港}}"}])
    [{'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': '{{港}}'}]}]
    """
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    output, count = [], 0
    for message in completion or []:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            output.append({"type": "function_call_output", "call_id": f"call_{count}",
                           "output": str(message.get("content") or "")})
            continue
        if message.get("reasoning_content"):
            output.append({"type": "reasoning", "summary": [{"type": "summary_text",
                                                             "text": str(message["reasoning_content"])}]})
        content = message.get("content")
        text = content if isinstance(content, str) else "".join(
            str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
        if text:
            output.append({"type": "message", "role": "assistant",
                           "content": [{"type": "output_text", "text": text}]})
        for call in message.get("tool_calls") or []:
            function = call.get("function", call) if isinstance(call, dict) else {}
            count += 1
            output.append({"type": "function_call", "call_id": f"call_{count}", "name": function.get("name"),
                           "arguments": _arguments_text(function.get("arguments", {}))})
    return output


def remote_reward(completions, environments=None, log_metric=None, **_columns) -> list[float | None]:
    """Each episode's reward from its server's ``/verify`` (the served task's weighted total); None for an
    episode that failed (TRL leaves it out). Logs ``remote/failed_episodes`` and each component's mean as
    ``remote/<component>``."""
    scores: list[float | None] = []
    components: dict[str, list[float]] = {}
    for completion, environment in zip(completions, environments or [None] * len(completions)):
        verdict = environment._verify(completion) if isinstance(environment, RemoteEnvironment) else None
        scores.append(float(verdict["reward"]) if verdict and verdict.get("reward") is not None else None)
        for name, value in ((verdict or {}).get("reward_components") or {}).items():
            if isinstance(value, (int, float)):
                components.setdefault(name, []).append(float(value))
    if log_metric is not None:
        log_metric("remote/failed_episodes", float(sum(s is None for s in scores)))
        for name, values in components.items():
            log_metric(f"remote/{name}", sum(values) / len(values))
    return scores


def remote_factories(task, url: str,
                     timeout: float = 30.0) -> dict[tuple[int, int], RemoteEnvironmentFactory]:
    """``{(variant, 0): factory}`` of ``task``'s remote episodes at ``url``, as ``variant_factories`` keys its
    local ones (TRL renders each prompt with its factory's tools). Interface 0 only: a task drawing other
    interfaces is ``InputError``."""
    if task_interfaces(task) != [0]:
        raise InputError(f"task {task.name}: a remote environment serves tool interface 0 (search/open_doc); "
                         "drop tools.interface_variants / interface_variant for it")
    config = ToolsConfig(**task.tools_config)
    return {(v, 0): RemoteEnvironmentFactory(url, config, v, timeout) for v in task_variants(task)}
