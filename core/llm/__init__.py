"""One interface for batched chat completions over several backends, with a persistent response cache.

    from tansaku.core.llm import from_spec, ChatRequest, parse_json
    client = from_spec("http:Qwen/Qwen3-8B@http://gpu1:8000,http://gpu2:8000")
    results = client.chat([ChatRequest(messages=[{"role": "user", "content": "..."}], json_schema=schema)])
    data = parse_json(results[0].content, schema)   # raises LLMBadJSON → drop with reason llm_bad_json
    answers = ask_json(client, requests, schema)     # [dict | Drop("llm_error") | Drop("llm_bad_json"), …]

Specs: ``http:MODEL@URL[,URL…]`` (``http:MODEL`` → ``OPENAI_BASE_URL``), ``vllm:MODEL``,
``transformers:PATH`` (a folder, a Hub id ``ORG/NAME`` or ``tiny``; a bare folder or Hub id means
``transformers:`` too), ``scripted:FILE.jsonl`` and ``scripted:FILE.py[:FUNCTION]`` (scripted responders; the
``.py`` forms execute that file's code, like a plugin: ``tansaku.core.llm.scripted``), all read by the one
parser ``parse_spec`` (``tansaku.core.llm.spec``), which every spec option also runs while it is parsed. Each
engine is one line of ``LLM_ENGINES`` there, naming the function that builds its client (``openers``).
Backend modules import their heavy libraries only when used. A command's ``--no-cache`` / ``--api-key`` /
``--extra-body`` / ``--concurrency`` / ``--llm-option`` (vLLM engine arguments, ``vllm:`` clients) reach the
clients it builds as one ``LLMOptions`` (``llm_options=``).

Every backend returns the generated text as it is in ``ChatResult.content`` (a server's own parsers'
output, if any, apart in ``server_reasoning`` / ``server_tool_calls``); ``tansaku.core.parsing`` is the one
parser of it. ``parse_json`` (from there) repairs JSON by default, for teacher/judge answers only.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from tansaku.core.errors import InputError
from tansaku.core.parsing import LLMBadJSON, parse_json

from .base import ChatRequest, ChatResult, LLMClient
from .cache import ResponseCache, default_cache_path
from .json_calls import ask_json, checked_json, json_answer, json_answers
from .scripted import ScriptedLLM
from .settings import LLMOptions, cache_disabled
from .spec import LLM_ENGINES, Engine, bare_model_problem, parse_spec

__all__ = [
    "ChatRequest", "ChatResult", "Engine", "LLMBadJSON", "LLMClient", "LLMOptions", "LLM_ENGINES",
    "ResponseCache", "ScriptedLLM", "as_client",
    "ask_json", "checked_json", "default_cache_path", "from_spec", "json_answer", "json_answers",
    "parse_json", "parse_spec",
]


def _open_cache(cache, default_on: bool, options: LLMOptions | None) -> ResponseCache | None:
    if cache == "default" and cache_disabled(options):  # --no-cache / TANSAKU_NO_CACHE=1
        return None
    if isinstance(cache, ResponseCache):
        return cache
    if cache is True or (cache == "default" and default_on):
        return ResponseCache(default_cache_path())
    if cache in (None, False, "default"):
        return None
    return ResponseCache(Path(cache))


def from_spec(spec: str, cache: ResponseCache | str | os.PathLike | bool | None = "default",
              llm_options: LLMOptions | None = None, **options) -> LLMClient:
    """Build a client from a spec string. ``cache``: a path, a ResponseCache, True (default file),
    False/None (off) or "default" (on for real backends, off for ``scripted``, off with
    ``llm_options.no_cache``). ``llm_options``: the command's ``--api-key``/``--extra-body``/``--concurrency``
    (http:) and ``--llm-option`` (vllm: engine arguments) as one ``LLMOptions``; ``options`` go to the
    backend's constructor and win over them (e.g.
    ``max_concurrency=32``, ``batch_size=4``, ``tensor_parallel_size=8``).
    """
    given = llm_options or LLMOptions()
    kind, parts = parse_spec(spec)  # the one grammar (tansaku.core.llm.spec), read before anything is built
    if kind == "model":  # a bare folder or ORG/NAME Hub id: what `--model` takes everywhere
        if problem := bare_model_problem(spec):
            raise InputError(problem)
        kind, parts = "transformers", (spec,)
    engine = LLM_ENGINES[kind]
    module, _, function = engine.opener.partition(":")  # imported now: an engine's libraries load when used
    opener = getattr(importlib.import_module(module), function)
    return opener(spec, parts, _open_cache(cache, engine.cached, given), given, **options)


def as_client(spec_or_client, cache: ResponseCache | str | os.PathLike | bool | None = "default",
              llm_options: LLMOptions | None = None, **options):
    """A client from a spec string (see :func:`from_spec`); a client (or None) is returned as it is.

    Every entry point that takes ``llm=``/``teacher=``/``judge=`` accepts both, through here.
    """
    if spec_or_client is None or not isinstance(spec_or_client, str):
        return spec_or_client
    return from_spec(spec_or_client, cache=cache, llm_options=llm_options, **options)

