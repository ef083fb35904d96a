"""The one grammar of LLM specs: :func:`parse_spec` reads a spec's text (and nothing else: no file, no
network, no environment) into its backend and parts; ``from_spec`` builds clients from what it returns, and
:func:`check_spec` validates every option that takes a spec (``--llm``, ``--teacher``, ``--translator``,
``--policy``, ``--judge``, ``--model``, a recipe's ``judge.model``) while the command line is parsed, before
any work.

    http:MODEL@URL[,URL…]   an OpenAI-compatible server (``http:MODEL`` alone: the OPENAI_BASE_URL server)
    vllm:MODEL              vLLM in this process
    transformers:PATH       a local folder, a Hub id or ``tiny``
    scripted:FILE.jsonl     answers read from a file; scripted:FILE.py[:FUNCTION] runs that file's code
    PATH or ORG/NAME        a bare model folder or Hub id: transformers:

Each engine is one line of ``LLM_ENGINES``: the form of its specs, the function that builds its client
(imported only when a spec names it) and how the text after ``NAME:`` is read; every help text and error that
lists the engines is made from it (``engine_help``, ``grammar``). docs/extending.md, "Adding an LLM engine".

>>> parse_spec("http:Qwen/Qwen3-8B@http://gpu1:8000,http://gpu2:8000")
('http', ('Qwen/Qwen3-8B', ('http://gpu1:8000', 'http://gpu2:8000')))
>>> parse_spec("http:m@gpu1:8000"), parse_spec("vllm:Qwen/Qwen3-8B"), parse_spec("runs/sft")
(('http', ('m', ('http://gpu1:8000',))), ('vllm', ('Qwen/Qwen3-8B',)), ('model', ('runs/sft',)))
>>> parse_spec("http:m@ftp://h")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: http spec 'http:m@ftp://h': ftp://h is not an http:// or https:// URL
>>> parse_spec("gpt:x")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: unknown LLM backend 'gpt' in spec 'gpt:x' (http, vllm, transformers, scripted)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.value_checks import INPUT_FILE, check_path

from .identity import is_hub_id
from .scripted import parse_scripted_spec

# MODEL@URL where URL starts with a scheme: the first such '@' ends the model id, so URLs may carry
# user:pass@.
_MODEL_AT_URL = re.compile(r"^(?P<model>.+?)@(?P<urls>https?://.+)$")


def model_parts(spec: str, rest: str) -> tuple[str]:
    """``NAME:MODEL`` → ``(MODEL,)``: the parts of an engine whose spec names one model."""
    if not rest.strip():
        raise InputError(f"LLM spec {spec!r} names no model: use {spec.partition(':')[0]}:MODEL")
    return (rest,)


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number in range
    except ValueError:
        return "is not a URL with a valid host and port"
    if parts.scheme not in ("http", "https"):
        return "is not an http:// or https:// URL"
    if not parts.hostname:
        return "names no host"
    return None


def _http_parts(spec: str, rest: str) -> tuple[str, tuple[str, ...]]:
    """``MODEL@URL[,URL…]`` → (model, URLs); ``MODEL`` alone → (model, ()): the OPENAI_BASE_URL server."""
    match = _MODEL_AT_URL.match(rest)
    if match:
        model, urls = match["model"], re.split(r",(?=https?://)", match["urls"])
    elif "@" in rest:  # MODEL@host:port without a scheme: plain http. At the first @, so that in
        # MODEL@user:pass@host the credentials stay in the URL (where they are sent and masked), not in the
        # model id
        model, _, text = rest.partition("@")
        urls = [u if "://" in u else f"http://{u}" for u in (u.strip() for u in text.split(",")) if u]
    else:
        model, urls = rest, []
    urls = tuple(u.strip() for u in urls if u.strip())
    if not model.strip():
        raise InputError(f"http spec {spec!r} names no model: use http:MODEL@URL[,URL…]")
    if "@" in rest and not urls:
        raise InputError(f"http spec {spec!r} names no server after '@': use http:MODEL@URL[,URL…]")
    for url in urls:
        if problem := _url_problem(url):
            raise InputError(f"http spec {spec!r}: {url} {problem}")
    return model, urls


def _scripted_parts(spec: str, rest: str) -> tuple[Path, str | None]:
    """``scripted:FILE.jsonl`` → ``(FILE, None)``; ``scripted:FILE.py[:FUNCTION]`` → ``(FILE, FUNCTION)``."""
    target = parse_scripted_spec(spec)
    return target.path, target.function


@dataclass(frozen=True)
class Engine:
    """One LLM engine. ``grammar``: how its specs are written (help texts, errors). ``opener``:
    ``"module:function"``, imported when a spec names the engine, called as ``function(spec, parts, cache,
    llm_options, **options)`` → an ``LLMClient``. ``parts``: ``(spec, text after NAME:)`` → the parts
    ``parse_spec`` returns (an ``InputError`` for a bad form; read from the text alone). ``cached``: whether
    its answers go through the response cache by default."""

    grammar: str
    opener: str
    parts: Callable[[str, str], tuple] = model_parts
    cached: bool = True


# The LLM engines a spec may name, ``NAME:…``; adding one is one line here plus its module.
LLM_ENGINES: dict[str, Engine] = {
    "http": Engine("http:MODEL@URL[,URL…]", "tansaku.core.llm.openers:open_http", _http_parts),
    "vllm": Engine("vllm:MODEL", "tansaku.core.llm.openers:open_vllm"),
    "transformers": Engine("transformers:PATH|tiny", "tansaku.core.llm.openers:open_transformers"),
    "scripted": Engine("scripted:FILE.jsonl|FILE.py[:FUNCTION]", "tansaku.core.llm.openers:open_scripted",
                       _scripted_parts, cached=False),
}


def engine_help() -> str:
    """The engines' spec forms as one option help: ``http:MODEL@URL[,URL…] | vllm:MODEL | …``."""
    return " | ".join(engine.grammar for engine in LLM_ENGINES.values())


def grammar() -> str:
    """The engines' spec forms as a sentence, for errors: ``http:…, vllm:MODEL, … or scripted:…``."""
    forms = [engine.grammar for engine in LLM_ENGINES.values()]
    return ", ".join(forms[:-1]) + f" or {forms[-1]}" if len(forms) > 1 else "".join(forms)


def parse_spec(spec: str) -> tuple[str, tuple]:
    """``(backend, parts)`` of an LLM spec, from its text alone; ``InputError`` (one line) for any other form.

    ``http`` → ``(model, urls)`` (``()``: the OPENAI_BASE_URL server), ``vllm`` / ``transformers`` →
    ``(model,)``, ``scripted`` → ``(file, function)`` (``None`` for a JSONL file), ``model`` (a bare folder or
    Hub id, which ``from_spec`` reads as ``transformers:``) → ``(text,)``."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"the LLM spec is empty; use {grammar()}")
    if any(c in spec for c in "\0\n\r"):
        raise InputError(f"LLM spec {spec!r} holds a NUL byte or a line break")
    kind, colon, rest = spec.partition(":")
    if not colon:
        return "model", (spec,)
    if kind not in LLM_ENGINES:
        raise InputError(f"unknown LLM backend {kind!r} in spec {spec!r} ({', '.join(LLM_ENGINES)})")
    return kind, LLM_ENGINES[kind].parts(spec, rest)


def bare_model_problem(spec: str) -> str | None:
    """Why a spec without a backend is no model ``from_spec`` can load (neither a folder nor an ORG/NAME Hub
    id), or None."""
    if Path(spec).expanduser().exists() or (spec.count("/") == 1 and is_hub_id(spec)):
        return None
    return f"LLM spec {spec!r} must look like {grammar()} (or be a model folder or an ORG/NAME Hub id)"


def _scripted_file_problem(path: Path) -> str | None:
    """Why a ``scripted:`` spec's file cannot be read, or None: looked at with ``stat`` only (never opened,
    never run), as any input file (``value_checks.check_path``: a FIFO, a folder, a name that is not UTF-8 …),
    and it
    must exist: nothing a command does makes it."""
    try:
        check_path(str(path), INPUT_FILE, "scripted")
    except (InputError, MissingInputError) as exc:  # MissingInputError: a dangling link
        return str(exc)
    # as the loader opens it: no ~ expanded
    return None if path.exists() else f"scripted file {path} not found"


def check_spec(spec: str, option: str, builtins: tuple[str, ...] = (), files: bool = False) -> str:
    """``spec`` when :func:`parse_spec` reads it and ``from_spec`` could build it (a bare name is a folder or
    Hub id, ``http:MODEL`` has OPENAI_BASE_URL to go to); ``InputError`` naming ``option`` otherwise.
    ``builtins``: specs a command knows by name (``scripted:deepresearch``); ``files``: a ``scripted:`` file
    must be there too (a command line's spec, checked before any work: a command whose first step loads a
    model would otherwise meet it only after that)."""
    if spec in builtins:
        return spec
    try:
        kind, parts = parse_spec(spec)
        problem = bare_model_problem(spec) if kind == "model" else None
        if kind == "http" and not parts[1] and not os.environ.get("OPENAI_BASE_URL"):
            problem = f"http spec {spec!r} names no server: use http:MODEL@URL[,URL…] or set OPENAI_BASE_URL"
        if kind == "scripted" and files:
            problem = _scripted_file_problem(parts[0])
    except InputError as exc:
        problem = str(exc)
    if problem:
        raise InputError(f"{option}: {problem}")
    return spec
