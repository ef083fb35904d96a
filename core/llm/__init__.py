"""One interface for batched chat completions over several backends, with a persistent response cache.

    from tansaku.core.llm import from_spec, ChatRequest, parse_json
    client = from_spec("http:Qwen/Qwen3-8B@http://gpu1:8000,http://gpu2:8000")
    results = client.chat([ChatRequest(messages=[{"role": "user", "content": "..."}], json_schema=schema)])
    data = parse_json(results[0].content, schema)   # raises LLMBadJSON → drop with reason llm_bad_json

Specs: ``http:MODEL@URL[,URL…]``, ``vllm:MODEL``, ``transformers:PATH`` (``transformers:tiny``),
``scripted:PATH.jsonl``. Backend modules import their heavy libraries only when used.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .base import ChatRequest, ChatResult, LLMBadJSON, LLMClient, parse_json, split_assistant_text
from .cache import ResponseCache, default_cache_path
from .scripted import ScriptedLLM

__all__ = [
    "ChatRequest", "ChatResult", "LLMBadJSON", "LLMClient", "ResponseCache", "ScriptedLLM",
    "default_cache_path", "from_spec", "parse_json", "split_assistant_text",
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
        raise ValueError(f"LLM spec {spec!r} must look like http:MODEL@URL, vllm:MODEL, transformers:PATH "
                         "or scripted:PATH.jsonl")
    if kind == "http":
        model, at, urls = rest.rpartition("@")
        if not at or not model or not urls:
            raise ValueError(f"http spec {spec!r} must be http:MODEL@URL[,URL…]")
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
    raise ValueError(f"unknown LLM backend {kind!r} in spec {spec!r} (http, vllm, transformers, scripted)")


def _scripted_from_python(target: str, cache=None, **options) -> ScriptedLLM:
    """``FILE.py[:FUNCTION]`` → a ScriptedLLM answering with ``FUNCTION(request)`` (default ``respond``)."""

    path, _, function = target.partition(".py")
    file, name = Path(path + ".py"), function.lstrip(":") or "respond"
    if not file.is_file():
        raise FileNotFoundError(f"scripted LLM file not found: {file}")
    spec = importlib.util.spec_from_file_location(f"tansaku_script_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise ValueError(f"{file} defines no function {name}(request) for a scripted LLM")
    return ScriptedLLM(getattr(module, name), cache=cache, model=f"scripted:{file.name}:{name}", **options)

