"""tansaku's search tasks as an HTTP environment service, following NeMo Gym's resources-server contract, so
NeMo-RL (through NeMo Gym) or any other trainer can roll out episodes against tansaku's tools and rewards.

The contract followed is NeMo Gym's ``SimpleResourcesServer`` (``nemo_gym/base_resources_server.py`` in
NVIDIA-NeMo/Gym, as of 2026-11): POST ``/seed_session`` starts an episode, each tool is POST ``/<tool name>``
with the call's arguments as the JSON body, POST ``/verify`` takes ``{"responses_create_params", "response"}``
(an OpenAI Responses API request and response, plus the dataset row's own fields) and answers the same body
with ``reward`` and ``reward_components`` (``BaseMultiRewardVerifyResponse``: one field per component, also at
the top level for NeMo Gym's metrics), POST ``/close_session`` ends it. The episode is the NeMo Gym agent's
session: its cookie (``tansaku_episode``, set by ``/seed_session``; the agent keeps one cookie jar per
rollout), or, for clients without cookies, the ``episode_id`` ``/seed_session`` answers, sent back as an
``X-Episode-Id`` header (or, for ``/verify`` and ``/close_session``, an ``episode_id`` field). The server
draws every id (``secrets.token_urlsafe``); a caller's ``episode_id`` in ``/seed_session`` is refused (422).

No second implementation: every episode is a ``SearchEnvironment`` from ``make_environment_factory`` (the one
    TRL
trains with: the same description variants, call budget, caps and error texts) and ``/verify`` scores with the
task's own reward functions and weights (``synth serve-env --config RECIPE``: the recipe's task as
``train rl`` trains it). A malformed request gets a JSON error (422 from the schema, 404 for an unknown
episode); a tool's own error (a hostile query, the budget used up) is the tool's answer,
``{"output": "{'error': …}"}``, as TRL shows it. Bodies are read by ``tansaku.core.jsontext.loads`` (nested
too deeply: 422; a lone surrogate reads as U+FFFD); a field the service cannot use — an ``episode_id`` that is
not text, a name TRL gives reward functions itself (``completions`` …), a ``/verify`` with neither an episode
nor the task's columns, a ``response.output`` that is not a list, call arguments nested deeper than a model's
JSON may — is 422 ``{"error": …}`` too.

Safe to expose (``docs/nemo_gym.md``, "Exposing serve-env"): bodies over ``--max-body-bytes`` are 413 and
fields over their caps 422 (``tansaku.envs.gym_limits``, ``tansaku.envs.gym_bodies``); episodes are bounded
per client and in total with 429/503 and ``Retry-After``, never by evicting another client's, and usable only
by the client that seeded them (``tansaku.envs.gym_episodes``); a non-loopback ``--host`` needs a bearer token
(``$TANSAKU_ENV_TOKEN``), then every route but ``/health`` does (401); with a judge, ``/verify`` is
rate-limited (429).

    synth serve-env --task multihop_qa --index out/index --port 8010
    curl -c jar -X POST localhost:8010/seed_session -d '{"id": "q1", "question": "…", "answer": "…"}'
    curl -b jar -X POST localhost:8010/search -d '{"query": "雪村製菓"}'
"""

# No ``from __future__ import annotations``: FastAPI reads the route functions' annotations as objects.
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from tansaku.core import jsontext, output_files
from tansaku.core.errors import InputError
from tansaku.core.llm import LLMOptions, as_client
from tansaku.core.parsing import MAX_JSON_DEPTH
from tansaku.envs.environments import (
    call_tool,
    episode_prompt,
    make_environment_factory,
    task_interfaces,
    task_variants,
    tool_methods,
    tool_schemas,
)
from tansaku.envs.evaluate import load_rows
from tansaku.envs.gym_bodies import check_row, tool_models, verify_model
from tansaku.envs.gym_episodes import Episodes
from tansaku.envs.gym_limits import (
    BearerAuth,
    BoundedJSONRoute,
    JudgeRate,
    Limits,
    Refused,
    check_exposure,
    client_of,
    refused_response,
    resolve_tokens,
)
from tansaku.envs.rewards import reward_columns
from tansaku.envs.tasks import Task, task_named
from tansaku.envs.tool_interfaces import INTERFACES

COOKIE = "tansaku_episode"
HEADER = "x-episode-id"


# ---------------------------------------------------------------- Responses API → TRL completion


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def completion_from_response(response: dict) -> list[dict]:
    """A Responses API ``response.output`` as the chat messages TRL hands reward functions: reasoning items
    become the next assistant turn's ``reasoning_content``, ``function_call`` items its ``tool_calls``,
    ``function_call_output`` items ``tool`` messages, ``message`` items assistant text.

    >>> completion_from_response({"output": [
    ...     {"type": "reasoning", "summary": [{"type": "summary_text", "text": "探す"}]},
    ...     {"type": "function_call", "name": "search", "arguments": "{\\"query\\": \\"港\\"}",
    ...      "call_id": "c1"},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "1. 港"},
    ...     {"type": "message", "role": "assistant",
    ...      "content": [{"type": "output_text", "text": "{{港}}"}]}]})[0]
    {'role': 'assistant', 'content': '', 'reasoning_content': '探す', 'tool_calls': [{'type': 'function', \
'function': {'name': 'search', 'arguments': {'query': '港'}}}]}
    """
    messages: list[dict] = []
    turn: dict | None = None
    reasoning: list[str] = []

    def open_turn() -> dict:
        nonlocal turn, reasoning
        if turn is None:
            turn = {"role": "assistant", "content": "", "reasoning_content": "\n".join(reasoning) or None,
                    "tool_calls": []}
            messages.append(turn)
            reasoning = []
        return turn

    for item in response.get("output") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            reasoning.append(_text(item.get("summary")) or _text(item.get("content")))
        elif kind == "function_call":
            # bounded as every model's JSON; unreadable arguments stay text, scored as the model's mistake
            try:
                arguments = jsontext.loads(item.get("arguments") or "{}", max_depth=MAX_JSON_DEPTH)
            except (TypeError, ValueError):
                arguments = item.get("arguments")
            open_turn()["tool_calls"].append({"type": "function", "function": {"name": item.get("name"),
                                                                                "arguments": arguments}})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": _text(item.get("output"))})
            turn = None
        elif kind == "message" and item.get("role", "assistant") == "assistant":
            open_turn()["content"] += _text(item.get("content"))
    if reasoning:  # reasoning after the last call, with no message: a turn of its own
        open_turn()
    return messages


def verify_scores(task: Task, completion: list[dict], row: dict, functions: dict | None = None) -> dict:
    """``{"reward": weighted total, "reward_components": {name: score}}`` of one finished episode:
    ``task.score`` (``functions``: its ``scoring_functions(judge)``, made once per app). A row field named
    like one of TRL's own reward arguments is ``InputError``."""
    [score] = task.score([completion], [row], functions=functions)
    return {"reward": score.total, "reward_components": score.components}


def nemo_gym_row(task: Task, row: dict, factory) -> dict:
    """One dataset row as a NeMo Gym JSONL line: the row's fields, plus ``responses_create_params`` with the
    task prompt as ``input`` and the tools of the description variant this row's episode shows (Responses API
    form)."""
    environment = factory()
    environment.reset(**row)
    tools = [{"type": "function", "name": t["function"]["name"],
              "description": t["function"].get("description", ""),
              "parameters": t["function"]["parameters"], "strict": False} for t in tool_schemas(environment)]
    # the task's own rendering, as train rl and eval
    prompt = episode_prompt(environment, task.build_prompt(row))
    return {**{k: v for k, v in row.items() if k != "prompt"},
            "responses_create_params": {"input": prompt, "tools": tools}}


# ---------------------------------------------------------------- the app


def build_app(task: Task, index, *, judge=None, seed: int = 0, max_episodes: int = 10_000,
              idle_seconds: float = 900.0, limits: Limits | None = None,
              token: str | Sequence[str] | None = None):
    """The FastAPI app serving ``task`` over ``index`` (see the module docstring): ``task`` as given, e.g. a
    recipe's ``Task.configured``, weighs ``/verify``. ``limits``: body and field sizes, episodes per client,
    the judge's rate (``Limits()``'s defaults); ``token``: the bearer token(s) every route but ``/health``
    then needs (none: no authentication; ``serve`` refuses that off loopback)."""
    limits = limits or Limits()
    tokens = resolve_tokens(token, environ={})  # the caller's only: serve reads $TANSAKU_ENV_TOKEN
    factory = make_environment_factory(task, index, seed=seed, require_prompt=False)
    episodes = Episodes(factory, max_episodes, idle_seconds, limits.max_client_episodes)
    # Each (description variant, interface)'s tool schemas, made once at start (transformers reads
    # docstrings).
    schemas = {(v, i): tool_schemas(make_environment_factory(task, factory.backend, variant=v, interface=i)())
               for v in task_variants(task) for i in task_interfaces(task)}
    app = _app_shell(task, episodes, limits, tokens)
    _add_session_routes(app, task, episodes, limits, schemas)
    tool_args = tool_models(limits)  # the classes are made per app: its caps
    # Every interface's tools: a call of another interface's tool than the episode's is a failed call.
    for name in dict.fromkeys(n for i in task_interfaces(task) for n in INTERFACES[i]):
        _add_tool_route(app, episodes, name, tool_args[name])
    _add_verify_route(app, task, episodes, limits, judge)
    return app


def _app_shell(task: Task, episodes: Episodes, limits: Limits, tokens) -> FastAPI:
    """The app with no routes yet: bounded JSON bodies, the refusal handlers and (with ``tokens``) bearer
    auth."""
    app = FastAPI(title=f"tansaku {task.name} environment")
    app.router.route_class = BoundedJSONRoute  # before any route is added
    app.state.episodes, app.state.task, app.state.limits = episodes, task, limits  # /verify weighs with task
    app.add_exception_handler(Refused, refused_response)
    if tokens:  # outermost: a request without the token is 401 before its body is read
        app.add_middleware(BearerAuth, tokens=tokens)

    @app.exception_handler(InputError)
    def refused(_request: Request, exc: InputError) -> JSONResponse:
        """A request the service cannot use (a field of the wrong type, name or size): 422 with the reason."""
        return JSONResponse({"error": str(exc)}, status_code=422)

    return app


def _given_id(body: dict | None) -> str | None:
    given = body.get("episode_id") if isinstance(body, dict) else None
    if given is not None and not isinstance(given, str):
        raise InputError(f"episode_id must be a string, not {type(given).__name__}")
    return given


def _episode_id_of(request: Request, body: dict | None = None) -> str | None:
    return request.headers.get(HEADER) or _given_id(body) or request.cookies.get(COOKIE)


def _unknown(episode_id) -> JSONResponse:
    # Another client's episode reads as unknown too: an id says nothing to whoever did not seed it.
    return JSONResponse({"error": f"unknown or expired episode {episode_id!r}: call /seed_session first"},
                        status_code=404)


def _add_session_routes(app: FastAPI, task: Task, episodes: Episodes, limits: Limits, schemas: dict) -> None:
    """``/health``, ``/seed_session`` and ``/close_session``."""

    @app.get("/health")
    def health() -> dict:
        return {"ok": True, "task": task.name, "task_version": task.version,
                "reward_weights": dict(task.reward_weights), **episodes.stats()}

    @app.post("/seed_session")
    def seed_session(body: dict[str, Any], request: Request, response: Response) -> dict:
        if "episode_id" in body:  # a caller's id could name, and so replace, an episode of another client's
            raise InputError("episode_id is drawn by the server: /seed_session answers it (and sets the "
                             f"{COOKIE} cookie); send none")
        row = body.get("task_data") if isinstance(body.get("task_data"), dict) else {
            k: v for k, v in body.items() if k != "responses_create_params"}
        reward_columns([row])  # a field TRL's reward call would collide with: refused now, not at /verify
        episode_id, environment = episodes.seed(client_of(request), row, check_row(row, limits))
        response.set_cookie(COOKIE, episode_id, httponly=True, samesite="strict")
        return {"episode_id": episode_id, "tool_variant": environment.tool_variant,
                "tool_interface": environment.tool_interface,
                "tools": schemas[environment.tool_variant, environment.tool_interface]}

    @app.post("/close_session")
    def close_session(request: Request, body: dict[str, Any] | None = None) -> dict:
        return {"closed": episodes.close(_episode_id_of(request, body), client_of(request))}


def _add_tool_route(app: FastAPI, episodes: Episodes, name: str, model: type[BaseModel]) -> None:
    """POST ``/<name>``: one call of the episode's tool ``name``, its arguments the body (``model``)."""

    def run(args, request: Request):
        episode = episodes.get(_episode_id_of(request), client_of(request))
        if episode is None:
            return _unknown(_episode_id_of(request))
        with episode["lock"]:  # one episode's calls in order: its budget counts each once
            content, failed = call_tool(tool_methods(episode["environment"]), name,
                                        args.model_dump(exclude_none=True))
        return {"output": content, "failed": failed}

    run.__name__ = name
    run.__annotations__["args"] = model  # the body's schema: FastAPI answers 422 to anything else
    app.post(f"/{name}")(run)


def _add_verify_route(app: FastAPI, task: Task, episodes: Episodes, limits: Limits, judge) -> None:
    """POST ``/verify``: the episode's completion scored by ``task.score`` against its row (the episode's,
    under the body's own fields); the judge's calls rate-limited per client."""
    judge_rate, VerifyBody = JudgeRate(limits), verify_model(limits)  # the class is made per app: its caps
    functions = task.scoring_functions(judge)  # once: the judge's reward keeps its failure counts

    @app.post("/verify")
    def verify(body: VerifyBody, request: Request) -> dict:
        payload, client = body.model_dump(), client_of(request)
        episode_id = _episode_id_of(request, payload)
        given = {k: v for k, v in (body.model_extra or {}).items() if k != "episode_id"}
        check_row(given, limits, "the /verify body's row")
        episode = episodes.get(episode_id, client)
        row = {**(episodes.row(episode) if episode else {}), **given}
        missing = [c for c in task.columns if row.get(c) in (None, "", [])]
        if missing:
            where = "the episode's row nor the body has" if episode else "the body (no live episode) has"
            raise InputError(f"{task.name} scores against {missing}: neither {where} them")
        if judge is not None and (wait := judge_rate.take(client)):  # the episode stays live for the retry
            raise Refused(429, "judge calls over --judge-rate / --judge-client-rate: retry later",
                          headers={"Retry-After": str(max(1, math.ceil(wait)))})
        # InputError (422): a field named "completions"
        scores = verify_scores(task, completion_from_response(body.response), row, functions)
        episodes.close(episode_id, client)
        return {**payload, **scores, **{k: v for k, v in scores["reward_components"].items()}}


def export_rows(task: Task, index, dataset, out, split: str = "train", seed: int = 0) -> int:
    """``synth serve-env --export FILE``: the dataset's rows as NeMo Gym JSONL (``nemo_gym_row``); a new file
    only: anything at ``out``, a link included, is refused before any work (``tansaku.core.output_files``:
    rows carry no mark that would prove a file tansaku's)."""
    out = output_files.check_output_file(Path(out), "--export")
    factory = make_environment_factory(task, index, seed=seed, require_prompt=False)
    rows = load_rows(dataset, split=split)
    with output_files.output_file(out, "--export") as tmp, open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(jsontext.dumps(nemo_gym_row(task, row, factory), default=str) + "\n")
    return len(rows)


def serve(task: Task | str, index, *, host: str = "127.0.0.1", port: int = 8010, judge=None, seed: int = 0,
          max_episodes: int = 10_000, idle_seconds: float = 900.0, dataset=None, export=None,
          split: str = "train", llm_options: LLMOptions | None = None, limits: Limits | None = None,
          token: str | Sequence[str] | None = None) -> None:
    """``synth serve-env``: the app for ``task`` (a ``Task``, e.g. a recipe's, or a ``TASKS`` name) under
    uvicorn until interrupted (with ``export``: the dataset as NeMo Gym JSONL). ``llm_options``: the judge
    client's; ``token``: else ``$TANSAKU_ENV_TOKEN``, needed unless ``host`` is loopback (``InputError``
    before anything is built)."""
    task = task_named(task) if isinstance(task, str) else task
    if export is not None:
        if dataset is None:
            raise InputError("--export writes a dataset's rows: give --dataset too")
        count = export_rows(task, index, dataset, export, split, seed)
        print(f"{count} rows of {dataset} ({split}) → {export}", file=sys.stderr)
        return
    tokens = resolve_tokens(token)
    check_exposure(host, tokens)
    app = build_app(task, index, judge=as_client(judge, llm_options=llm_options), seed=seed,
                    max_episodes=max_episodes, idle_seconds=idle_seconds, limits=limits, token=tokens)
    auth = f"{len(tokens)} bearer token(s) required" if tokens else "no token: this machine only"
    print(f"serving {task.name} over {index} at http://{host}:{port} (NeMo Gym resources-server routes; "
          f"{auth})",
          file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level="warning", backlog=4096)
