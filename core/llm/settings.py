"""``LLMOptions``: what a command's ``--no-cache``, ``--api-key``, ``--extra-body``, ``--concurrency`` and
``--llm-option`` say for every client it builds from a spec string (``tansaku.core.llm.cli_options`` makes one
from the options).

Commands hand spec strings (``--llm``, ``--teacher``, ``--judge``…) down to pipelines together with one
``LLMOptions`` (inside ``tansaku.core.context.BuildContext`` for builds), which pass it to ``from_spec`` /
``as_client``. Nothing is kept per process: two builds in one process, or threads, each use their own. An
option given to ``from_spec`` directly wins over these. ``TANSAKU_NO_CACHE=1`` also turns the cache off.

Which key goes where (:func:`key_for`), following the ``openai`` client, whose ``OPENAI_API_KEY`` pairs with
``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``): a key given explicitly — ``--api-key KEY`` (every
endpoint of the command), ``--api-key URL=KEY`` (that endpoint), ``@FILE``, ``env:NAME`` (that environment
variable, routed where the option says), a recipe's ``judge.api_key``, ``api_key=`` in Python — is sent as
given. Otherwise ``OPENAI_API_KEY`` is sent only to the endpoint ``OPENAI_BASE_URL`` names (or
``api.openai.com`` when it is unset); any other endpoint (a self-hosted vLLM on plain http, say) gets
``EMPTY``, what vLLM accepts when it runs without ``--api-key``. So a key is never handed to a server just
because the spec names it.

>>> LLMOptions(concurrency=8).client_options("http")
{'max_concurrency': 8}
>>> LLMOptions(engine={"tensor_parallel_size": 8}).client_options("vllm")
{'tensor_parallel_size': 8}

>>> parse_api_keys(["sk-all", "http://gpu2:8000=sk-two"])
{'*': 'sk-all', 'http://gpu2:8000/v1': 'sk-two'}
>>> key_for("http://gpu2:8000", {"http://gpu2:8000/v1": "sk-two"}), key_for("http://127.0.0.1:9", None)
('sk-two', 'EMPTY')
>>> load_extra_body('{"chat_template_kwargs": {"enable_thinking": false}}')
{'chat_template_kwargs': {'enable_thinking': False}}
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tansaku.core import jsontext
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.input_files import refuse_special

from .option_values import MAX_BODY_CHARS, MAX_KEY_CHARS, key_problem, value_problem


@dataclass(frozen=True)
class LLMOptions:
    """The LLM options of one command (or one Python caller), handed to every client it builds."""

    no_cache: bool = False
    api_keys: dict[str, str] = field(default_factory=dict)  # "*" → every endpoint; base URL → that one
    extra_body: dict | None = None
    concurrency: int | None = None  # --concurrency: requests in flight per http: endpoint (its slots)
    # --llm-option: vLLM engine arguments of vllm: clients
    engine: dict[str, Any] = field(default_factory=dict)

    def client_options(self, backend: str) -> dict:
        """The constructor options these set for a ``backend`` client (http: its keys, body and slots; vllm:
        the engine arguments; none for the other backends)."""
        if backend == "vllm":
            return dict(self.engine)
        if backend != "http":
            return {}
        given = {"api_key": self.api_keys or None, "extra_body": self.extra_body,
                 "max_concurrency": self.concurrency}
        return {k: v for k, v in given.items() if v is not None}


# the openai client's base URL when OPENAI_BASE_URL is unset
OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"


def api_base(url: str) -> str:
    """The OpenAI API root of a server URL (its ``/v1``); a query string (``?api-version=…``) stays after it.

    >>> api_base("http://h:8000"), api_base("http://h/v1/"), api_base("https://h/openai?api-version=1")
    ('http://h:8000/v1', 'http://h/v1', 'https://h/openai/v1?api-version=1')
    """
    parts = urllib.parse.urlsplit(url.strip())
    path = parts.path.rstrip("/")
    path = path if path.endswith("/v1") else path + "/v1"
    return urllib.parse.urlunsplit(parts._replace(path=path))


def cache_disabled(options: LLMOptions | None = None) -> bool:
    return (options is not None and options.no_cache) or \
        os.environ.get("TANSAKU_NO_CACHE", "").lower() in {"1", "true", "yes"}


def _read_value(text: str, what: str, limit: int) -> str:
    """``@FILE`` → the file's text (keeps secrets out of ``ps`` and shell history), else the text itself; a
    file over ``limit`` bytes is refused unread (a key or a body is small: a large file is the wrong one)."""
    if not text.startswith("@"):
        return text
    if not text[1:].strip():
        raise InputError(f"{what} @: name the file after the @ (@FILE)")
    path = Path(text[1:]).expanduser()
    refuse_special(path, what)  # a FIFO named here would block the read: refused before it is opened
    if path.is_dir():
        raise InputError(f"{what} file {path} is a folder, not a file")
    if not path.is_file():
        raise MissingInputError(f"{what} file not found: {path}")
    try:
        if path.stat().st_size > limit:
            raise InputError(f"{what} file {path} is {path.stat().st_size} bytes, over the {limit} it may "
                             f"have")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # unreadable, or not UTF-8 text: one line, not a traceback
        reason = ("not UTF-8 text" if isinstance(exc, UnicodeDecodeError)
                  else exc.strerror or type(exc).__name__)
        raise InputError(f"{what} file {path} cannot be read ({reason})") from None


def _read_key(text: str) -> str:
    """``env:NAME`` → that environment variable (the opt-in that routes an environment key to a server other
    than ``OPENAI_BASE_URL``'s without putting it on the command line), ``@FILE`` → the file's text, else the
    key."""
    if text.startswith("env:"):
        name = text.removeprefix("env:")
        if not os.environ.get(name, "").strip():
            raise InputError(f"--api-key: env:{name}: the environment variable {name or '(no name)'} is not "
                             f"set")
        return os.environ[name].strip()
    return _read_value(text, "--api-key: key", MAX_KEY_CHARS).strip()


def _checked_key(text: str, url: str | None = None) -> str:
    """The key ``text`` gives (:func:`_read_key`), refused when no HTTP header could carry it
    (``option_values.key_problem``); the refusal names where the key came from, never the key."""
    key = _read_key(text)
    if problem := key_problem(key):
        source = text if text.startswith(("@", "env:")) else ""  # a file or variable name, not a secret
        where = "".join(f"{part}: " for part in (url, source) if part)  # "--api-key X" would read as a secret
        raise InputError(f"--api-key: {where}{problem}")
    return key


def parse_api_keys(values: list[str] | None) -> dict[str, str]:
    """``KEY`` (every endpoint) or ``URL=KEY`` (that endpoint), each possibly ``@FILE`` or ``env:NAME``."""
    keys: dict[str, str] = {}
    for value in values or []:
        if value.startswith(("http://", "https://")):
            url, eq, key = value.partition("=")
            if not eq or not key:
                raise InputError(f"--api-key: {url}: give it as URL=KEY")
            keys[api_base(url)] = _checked_key(key, url)
        else:
            keys["*"] = _checked_key(value)
    return keys


def load_extra_body(text: str | None) -> dict | None:
    """``--extra-body``: a JSON object, or ``@FILE`` with a YAML/JSON mapping; None for None. Refused: empty
    text, over ``MAX_BODY_CHARS``, and what JSON cannot send (``option_values.value_problem``: NaN, Infinity
    …)."""
    if text is None:
        return None
    if not text.strip():
        raise InputError("--extra-body is empty: give a JSON object (e.g. '{\"top_k\": 20}') or @FILE.yaml")
    source = _read_value(text.strip(), "--extra-body", MAX_BODY_CHARS)
    if len(source) > MAX_BODY_CHARS:
        raise InputError(f"--extra-body is {len(source)} characters, over the {MAX_BODY_CHARS} a request "
                         "body may add")
    try:
        data = jsontext.loads(source) if not text.startswith("@") else yaml.safe_load(source)
    except (json.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:  # YAML's parser recurses per level
        first = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0]
        raise InputError(f"--extra-body is not valid {'JSON' if not text.startswith('@') else 'YAML'}: "
                         f"{first}") from None
    if not isinstance(data, dict):
        raise InputError(f"--extra-body must be a mapping (e.g. '{{\"top_k\": 20}}'), got "
                         f"{type(data).__name__}")
    if problem := value_problem(data, json_only=True):
        raise InputError(f"--extra-body {problem}")
    return data


def _endpoint(url: str) -> tuple:
    """A base URL as compared for key routing: scheme, host, port (its default when unsaid) and API path."""
    parts = urllib.parse.urlsplit(api_base(url.strip()))
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:  # a malformed port never matches the key's endpoint
        port = parts.netloc
    return scheme, parts.hostname, port, parts.path


def env_key_endpoint() -> str:
    """The one endpoint ``OPENAI_API_KEY`` is for: ``OPENAI_BASE_URL``'s, else OpenAI's own (the openai
    client's pairing)."""
    return api_base(os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_BASE)


def key_for(base_url: str, *sources: str | dict[str, str] | None) -> str:
    """The bearer key for one endpoint from the first source that has one (each a key, or a mapping whose
    per-endpoint key beats its ``"*"``): e.g. ``key_for(url, given, cli_keys)``; then ``OPENAI_API_KEY`` only
    where ``base_url`` is :func:`env_key_endpoint`; else ``EMPTY`` (what vLLM accepts without
    ``--api-key``)."""
    for source in sources:
        if isinstance(source, str):
            return source
        if source:
            found = source.get(api_base(base_url)) or source.get("*")
            if found:
                return found
    env_key = os.environ.get("OPENAI_API_KEY")
    if env_key and _endpoint(base_url) == _endpoint(env_key_endpoint()):
        return env_key
    return "EMPTY"
