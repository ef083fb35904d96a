"""``LLMOptions``: what a command's ``--no-cache``, ``--api-key``, ``--extra-body``, ``--concurrency`` and
``--llm-option`` say for every client it builds from a spec string (``tansaku.core.llm.cli_options`` makes one
from the options).

Commands hand spec strings (``--llm``, ``--teacher``, ``--judge``…) down to pipelines together with one
``LLMOptions`` (inside ``tansaku.core.context.BuildContext`` for builds), which pass it to ``from_spec`` /
``as_client``. Nothing is kept per process: two builds in one process, or threads, each use their own. An
option given to ``from_spec`` directly wins over these. ``TANSAKU_NO_CACHE=1`` also turns the cache off.

>>> LLMOptions(concurrency=8).client_options("http")
{'max_concurrency': 8}
>>> LLMOptions(engine={"tensor_parallel_size": 8}).client_options("vllm")
{'tensor_parallel_size': 8}

>>> parse_api_keys(["sk-all", "http://gpu2:8000=sk-two"])
{'*': 'sk-all', 'http://gpu2:8000/v1': 'sk-two'}
>>> load_extra_body('{"chat_template_kwargs": {"enable_thinking": false}}')
{'chat_template_kwargs': {'enable_thinking': False}}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tansaku.core import jsontext
from tansaku.core.errors import InputError, MissingInputError


@dataclass(frozen=True)
class LLMOptions:
    """The LLM options of one command (or one Python caller), handed to every client it builds."""

    no_cache: bool = False
    api_keys: dict[str, str] = field(default_factory=dict)  # "*" → every endpoint; base URL → that one
    extra_body: dict | None = None
    concurrency: int | None = None  # --concurrency: requests in flight per http: endpoint (its slots)
    engine: dict[str, Any] = field(default_factory=dict)  # --llm-option: vLLM engine arguments of vllm: clients

    def client_options(self, backend: str) -> dict:
        """The constructor options these set for a ``backend`` client (http: its keys, body and slots; vllm: the
        engine arguments; none for the other backends)."""
        if backend == "vllm":
            return dict(self.engine)
        if backend != "http":
            return {}
        given = {"api_key": self.api_keys or None, "extra_body": self.extra_body, "max_concurrency": self.concurrency}
        return {k: v for k, v in given.items() if v is not None}


def api_base(url: str) -> str:
    """The OpenAI API root of a server URL (its ``/v1``)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def cache_disabled(options: LLMOptions | None = None) -> bool:
    return (options is not None and options.no_cache) or \
        os.environ.get("TANSAKU_NO_CACHE", "").lower() in {"1", "true", "yes"}


def _read_value(text: str, what: str) -> str:
    """``@FILE`` → the file's text (keeps secrets out of ``ps`` and shell history), else the text itself."""
    if not text.startswith("@"):
        return text
    path = Path(text[1:]).expanduser()
    if not path.is_file():
        raise MissingInputError(f"{what} file not found: {path}")
    return path.read_text(encoding="utf-8")


def parse_api_keys(values: list[str] | None) -> dict[str, str]:
    """``KEY`` (every endpoint) or ``URL=KEY`` (that endpoint), each possibly ``@FILE``."""
    keys: dict[str, str] = {}
    for value in values or []:
        if value.startswith(("http://", "https://")):
            url, eq, key = value.partition("=")
            if not eq or not key:
                raise InputError(f"--api-key {url}: give it as URL=KEY")
            keys[api_base(url)] = _read_value(key, "API key").strip()
        else:
            keys["*"] = _read_value(value, "API key").strip()
    return keys


def load_extra_body(text: str | None) -> dict | None:
    """``--extra-body``: a JSON object, or ``@FILE`` with a YAML/JSON mapping."""
    if text is None or not text.strip():
        return None
    import yaml

    source = _read_value(text.strip(), "--extra-body")
    try:
        data = jsontext.loads(source) if not text.startswith("@") else yaml.safe_load(source)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0]
        raise InputError(f"--extra-body is not valid {'JSON' if not text.startswith('@') else 'YAML'}: {first}") from None
    if not isinstance(data, dict):
        raise InputError(f"--extra-body must be a mapping (e.g. '{{\"top_k\": 20}}'), got {type(data).__name__}")
    return data


def key_for(base_url: str, *sources: str | dict[str, str] | None) -> str:
    """The bearer key for one endpoint from the first source that has one (each a key, or a mapping whose
    per-endpoint key beats its ``"*"``): e.g. ``key_for(url, given, cli_keys)``; then ``OPENAI_API_KEY``, then
    ``EMPTY`` (what vLLM accepts when it runs without ``--api-key``)."""
    for source in sources:
        if isinstance(source, str):
            return source
        if source:
            found = source.get(api_base(base_url)) or source.get("*")
            if found:
                return found
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"
