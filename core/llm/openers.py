"""The clients of the built-in LLM engines, one opener each, as ``LLM_ENGINES`` (``tansaku.core.llm.spec``)
names them: ``opener(spec, parts, cache, llm_options, **options)`` → an ``LLMClient``. ``from_spec`` imports
an opener only when a spec names its engine, and each opener imports its backend's libraries (openai, vLLM,
torch) only then.

    from tansaku.core.llm import from_spec
    client = from_spec("vllm:Qwen/Qwen3-8B")   # → open_vllm(spec, ("Qwen/Qwen3-8B",), cache, …)

``options`` (``from_spec``'s keywords) go to the backend's constructor and win over the command's
``LLMOptions`` (``--api-key``, ``--extra-body``, ``--concurrency``, ``--llm-option``).
"""

from __future__ import annotations

import os

from tansaku.core.errors import InputError

from .base import LLMClient
from .cache import ResponseCache
from .scripted import load_scripted
from .settings import LLMOptions, api_base, key_for


def open_http(spec: str, parts: tuple, cache: ResponseCache | None, given: LLMOptions,
              **options) -> LLMClient:
    """``http:MODEL@URL[,URL…]``: an OpenAI-compatible server (``http:MODEL``: the OPENAI_BASE_URL one)."""
    from .http_backend import HTTPClient  # the backend's client library, loaded when it is asked for

    model, urls = parts[0], list(parts[1])
    if not urls:
        if not os.environ.get("OPENAI_BASE_URL"):
            raise InputError(f"http spec {spec!r} names no server: use http:MODEL@URL[,URL…] or set "
                             "OPENAI_BASE_URL")
        urls = [os.environ["OPENAI_BASE_URL"]]
    if given.api_keys:  # a key given here wins over the command's, per endpoint
        options["api_key"] = {api_base(u): key_for(u, options.get("api_key"), given.api_keys) for u in urls}
    options = {**given.client_options("http"), **options}
    return HTTPClient(model, urls, cache=cache, **options)


def open_vllm(spec: str, parts: tuple, cache: ResponseCache | None, given: LLMOptions,
              **options) -> LLMClient:
    """``vllm:MODEL``: vLLM in this process."""
    from .vllm_backend import VLLMClient  # the backend's client library, loaded when it is asked for

    options = {**given.client_options("vllm"), **options}  # an engine argument given here wins, as for http
    return VLLMClient(parts[0], cache=cache, **options)


def open_transformers(spec: str, parts: tuple, cache: ResponseCache | None, given: LLMOptions,
                      **options) -> LLMClient:
    """``transformers:PATH``: a local folder, a Hub id or ``tiny``, run with transformers."""
    # the backend's client library, loaded when it is asked for
    from .transformers_backend import TransformersClient

    return TransformersClient(parts[0], cache=cache, **options)


def open_scripted(spec: str, parts: tuple, cache: ResponseCache | None, given: LLMOptions,
                  **options) -> LLMClient:
    """``scripted:FILE.jsonl`` (answers read from a file) or ``scripted:FILE.py[:FUNCTION]`` (that file's code
    runs, like a plugin: ``tansaku.core.llm.scripted``)."""
    return load_scripted(spec, cache=cache, **options)
