"""One interface for batched chat completions over several backends, with a persistent response cache.

    from tansaku.core.llm import from_spec, ChatRequest, parse_json
    client = from_spec("http:Qwen/Qwen3-8B@http://gpu1:8000,http://gpu2:8000")
    results = client.chat([ChatRequest(messages=[{"role": "user", "content": "..."}], json_schema=schema)])
    data = parse_json(results[0].content, schema)   # raises LLMBadJSON → drop with reason llm_bad_json
    answers = ask_json(client, requests, schema)     # [dict | Drop("llm_error") | Drop("llm_bad_json"), …]

Specs: ``http:MODEL@URL[,URL…]`` (``http:MODEL`` → ``OPENAI_BASE_URL``), ``vllm:MODEL``,
``transformers:PATH`` (a folder, a Hub id ``ORG/NAME`` or ``tiny``; a bare folder or Hub id means
``transformers:`` too), ``scripted:FILE.jsonl`` and ``scripted:FILE.py[:FUNCTION]`` (scripted responders; the
``.py`` forms execute that file's code, like a plugin: ``tansaku.core.llm.scripted``). Backend modules
import their heavy libraries only when used. A command's ``--no-cache`` / ``--api-key`` /
``--extra-body`` / ``--concurrency`` / ``--llm-option`` (vLLM engine arguments, ``vllm:`` clients) reach the
clients it builds as one ``LLMOptions`` (``llm_options=``).

Every backend returns the generated text as it is in ``ChatResult.content`` (a server's own parsers'
output, if any, apart in ``server_reasoning`` / ``server_tool_calls``); ``tansaku.core.parsing`` is the one
parser of it. ``parse_json`` (from there) repairs JSON by default, for teacher/judge answers only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tansaku.core.errors import InputError
from tansaku.core.parsing import LLMBadJSON, parse_json

from .base import ChatRequest, ChatResult, LLMClient
from .cache import ResponseCache, default_cache_path
from .identity import is_hub_id
from .json_calls import ask_json, checked_json, json_answer, json_answers
from .scripted import ScriptedLLM, load_scripted
from .settings import LLMOptions, api_base, cache_disabled, key_for

# MODEL@URL where URL starts with a scheme: the first such '@' ends the model id, so URLs may carry user:pass@.
_MODEL_AT_URL = re.compile(r"^(?P<model>.+?)@(?P<urls>https?://.+)$")

__all__ = [
    "ChatRequest", "ChatResult", "LLMBadJSON", "LLMClient", "LLMOptions", "ResponseCache", "ScriptedLLM", "as_client",
    "ask_json", "checked_json", "default_cache_path", "from_spec", "json_answer", "json_answers", "parse_json",
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
    kind, _, rest = spec.partition(":")
    if not rest and (Path(spec).expanduser().exists() or (spec.count("/") == 1 and is_hub_id(spec))):
        # a bare folder or ORG/NAME Hub id: what `--model` takes everywhere
        kind, rest = "transformers", spec
    if not rest:
        raise InputError(f"LLM spec {spec!r} must look like http:MODEL@URL, vllm:MODEL, transformers:PATH, "
                         "scripted:FILE.jsonl or scripted:FILE.py[:FUNCTION]")
    if kind == "http":
        from .http_backend import HTTPClient

        model, urls = _http_target(spec, rest)
        if given.api_keys:  # a key given here wins over the command's, per endpoint
            options["api_key"] = {api_base(u): key_for(u, options.get("api_key"), given.api_keys) for u in urls}
        options = {**given.client_options("http"), **options}
        return HTTPClient(model, urls, cache=_open_cache(cache, True, given), **options)
    if kind == "vllm":
        from .vllm_backend import VLLMClient

        options = {**given.client_options("vllm"), **options}  # an engine argument given here wins, as for http
        return VLLMClient(rest, cache=_open_cache(cache, True, given), **options)
    if kind == "transformers":
        from .transformers_backend import TransformersClient

        return TransformersClient(rest, cache=_open_cache(cache, True, given), **options)
    if kind == "scripted":  # FILE.jsonl, or FILE.py[:FUNCTION] whose code runs (the one grammar: parse_scripted_spec)
        return load_scripted(spec, cache=_open_cache(cache, False, given), **options)
    raise InputError(f"unknown LLM backend {kind!r} in spec {spec!r} (http, vllm, transformers, scripted)")


def _http_target(spec: str, rest: str) -> tuple[str, list[str]]:
    """``MODEL@URL[,URL…]`` → (model, URLs); ``MODEL`` alone → the ``OPENAI_BASE_URL`` server."""
    match = _MODEL_AT_URL.match(rest)
    if match:
        model, urls = match["model"], re.split(r",(?=https?://)", match["urls"])
    elif "@" in rest:  # MODEL@host:port without a scheme: plain http. At the first @, so that in
        # MODEL@user:pass@host the credentials stay in the URL (where they are sent and masked), not in the model id
        model, _, text = rest.partition("@")
        urls = [u if "://" in u else f"http://{u}" for u in text.split(",") if u]
    elif os.environ.get("OPENAI_BASE_URL"):
        model, urls = rest, [os.environ["OPENAI_BASE_URL"]]
    else:
        raise InputError(f"http spec {spec!r} names no server: use http:MODEL@URL[,URL…] or set OPENAI_BASE_URL")
    urls = [u.strip() for u in urls if u.strip()]
    if not model or not urls:
        raise InputError(f"http spec {spec!r} must be http:MODEL@URL[,URL…]")
    return model, urls


def as_client(spec_or_client, cache: ResponseCache | str | os.PathLike | bool | None = "default",
              llm_options: LLMOptions | None = None, **options):
    """A client from a spec string (see :func:`from_spec`); a client (or None) is returned as it is.

    Every entry point that takes ``llm=``/``teacher=``/``judge=`` accepts both, through here.
    """
    if spec_or_client is None or not isinstance(spec_or_client, str):
        return spec_or_client
    return from_spec(spec_or_client, cache=cache, llm_options=llm_options, **options)

