"""One interface for batched chat completions over several backends, with a persistent response cache.

    from tansaku.core.llm import from_spec, ChatRequest, parse_json
    client = from_spec("http:Qwen/Qwen3-8B@http://gpu1:8000,http://gpu2:8000")
    results = client.chat([ChatRequest(messages=[{"role": "user", "content": "..."}], json_schema=schema)])
    data = parse_json(results[0].content, schema)   # raises LLMBadJSON → drop with reason llm_bad_json
    answers = ask_json(client, requests, schema)     # [dict | Drop("llm_error") | Drop("llm_bad_json"), …]

Specs: ``http:MODEL@URL[,URL…]``, ``vllm:MODEL``, ``transformers:PATH`` (``transformers:tiny``),
``scripted:PATH.jsonl``. Backend modules import their heavy libraries only when used.

Every backend returns the generated text as it is in ``ChatResult.content`` (a server's own parsers'
output, if any, apart in ``server_reasoning`` / ``server_tool_calls``); ``tansaku.core.parsing`` is the one
parser of it. ``parse_json`` (from there) repairs JSON by default, for teacher/judge answers only.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.parsing import LLMBadJSON, parse_json

from .base import ChatRequest, ChatResult, LLMClient
from .cache import ResponseCache, default_cache_path
from .json_calls import ask_json, checked_json, json_answer, json_answers, raise_if_all_unusable
from .scripted import ScriptedLLM

__all__ = [
    "ChatRequest", "ChatResult", "LLMBadJSON", "LLMClient", "ResponseCache", "ScriptedLLM", "as_client",
    "ask_json", "checked_json", "default_cache_path", "from_spec", "json_answer", "json_answers", "parse_json",
    "raise_if_all_unusable",
]


def _open_cache(cache, default_on: bool) -> ResponseCache | None:
    if isinstance(cache, ResponseCache):
        return cache
    if cache is True or (cache == "default" and default_on):
        return ResponseCache(default_cache_path())
    if cache in (None, False, "default"):
        return None
    return ResponseCache(Path(cache))


def from_spec(spec: str, cache: ResponseCache | str | os.PathLike | bool | None = "default", **options) -> LLMClient:
    """Build a client from a spec string. ``cache``: a path, a ResponseCache, True (default file),
    False/None (off) or "default" (on for real backends, off for ``scripted``). ``options`` go to the
    backend's constructor (e.g. ``max_concurrency=32``, ``batch_size=4``, ``tensor_parallel_size=8``).
    """
    kind, _, rest = spec.partition(":")
    if not rest:
        raise InputError(f"LLM spec {spec!r} must look like http:MODEL@URL, vllm:MODEL, transformers:PATH "
                         "or scripted:PATH.jsonl")
    if kind == "http":
        model, at, urls = rest.rpartition("@")
        if not at or not model or not urls:
            raise InputError(f"http spec {spec!r} must be http:MODEL@URL[,URL…]")
        from .http_backend import HTTPClient

        return HTTPClient(model, [u for u in urls.split(",") if u], cache=_open_cache(cache, True), **options)
    if kind == "vllm":
        from .vllm_backend import VLLMClient

        return VLLMClient(rest, cache=_open_cache(cache, True), **options)
    if kind == "transformers":
        from .transformers_backend import TransformersClient

        return TransformersClient(rest, cache=_open_cache(cache, True), **options)
    if kind == "scripted":
        if ".py" in rest:  # scripted:FILE.py[:FUNCTION] — a Python responder (demo teachers, policies)
            return _scripted_from_python(rest, cache=_open_cache(cache, False), **options)
        return ScriptedLLM(rest, cache=_open_cache(cache, False), **options)
    raise InputError(f"unknown LLM backend {kind!r} in spec {spec!r} (http, vllm, transformers, scripted)")


def as_client(spec_or_client, cache: ResponseCache | str | os.PathLike | bool | None = "default", **options):
    """A client from a spec string (see :func:`from_spec`); a client (or None) is returned as it is.

    Every entry point that takes ``llm=``/``teacher=``/``judge=`` accepts both, through here.
    """
    if spec_or_client is None or not isinstance(spec_or_client, str):
        return spec_or_client
    return from_spec(spec_or_client, cache=cache, **options)


def _scripted_from_python(target: str, cache=None, **options) -> ScriptedLLM:
    """``FILE.py[:FUNCTION]`` → a ScriptedLLM answering with ``FUNCTION(request)`` (default ``respond``)."""

    path, _, function = target.partition(".py")
    file, name = Path(path + ".py"), function.lstrip(":") or "respond"
    if not file.is_file():
        raise MissingInputError(f"scripted LLM file not found: {file}")
    spec = importlib.util.spec_from_file_location(f"tansaku_script_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise InputError(f"{file} defines no function {name}(request) for a scripted LLM")
    return ScriptedLLM(getattr(module, name), cache=cache, model=f"scripted:{file.name}:{name}", **options)

