"""One redaction for everything tansaku records: manifests, dataset cards, rejected rows' ``detail``, LLM
errors, recipe copies, reports, the lines a command prints.

    redact_text("APIConnectionError at http://alice:pw@gpu1:8000/v1?api-key=k1")
    redact_mapping({"judge": {"model": "http:j@http://u:p@h", "api_key": "sk-…"},
                    "args": ["--hub_token", "hf_…"]})

A secret reaches a record by a few channels, and each has one rule here:

- a URL's user information, user name and password both (``http://tok@host`` carries a token as the user):
  ``scheme://***@host``;
- a URL's query string (``?api-key=…``, ``?sig=…``): every value masked, the names kept (``?api-key=***``);
  a recorded endpoint never needs them, and which names hold secrets is the server's choice;
- ``key=value``, ``key: value``, ``"key": "value"`` and ``--key value`` where the key is named like a secret
  (:func:`is_secret_name`: api_key / api-key / apikey, a token, a secret, a password, authorization, auth …),
  also inside longer error text, and ``Bearer xyz``;
- tokens of well-known shapes (``sk-…``, ``hf_…``, ``ghp_…``) anywhere, and the value of any secret-named
  environment variable (``OPENAI_API_KEY``, ``HF_TOKEN`` …, as set at the call) wherever it appears.

:func:`redact_mapping` walks dicts and lists: a secret-named key's value is masked whole (a mapping of keys
per endpoint keeps its shape), every other string goes through :func:`redact_text`, and in a list of
command-line words the word after a secret-named ``--option`` is masked. Both are idempotent, and leave
everything else
alone: Japanese text, URLs without user information or query, file paths, numbers, ``max_tokens=512``,
``pad_token``.

>>> redact_text("gave up: APIConnectionError at "
...             "http://alice:pwSECRET@127.0.0.1:8000/v1?api-key=k1: Connection error.")
'gave up: APIConnectionError at http://***@127.0.0.1:8000/v1?api-key=***: Connection error.'
>>> redact_text("http:Qwen/Qwen3-8B@http://tok123@gpu1:8000,https://gpu2:8000/v1")
'http:Qwen/Qwen3-8B@http://***@gpu1:8000,https://gpu2:8000/v1'
>>> redact_text('{"api_key": "sk-x", "max_tokens": 512} Authorization: Bearer abc.def --hub_token hf_x')
'{"api_key": "***", "max_tokens": 512} Authorization: *** --hub_token ***'
>>> redact_text("架空図書館運営法 第一条 /data/egov/506AC.xml "
...             "https://laws.e-gov.go.jp/law/506AC0000000901 3.14")
'架空図書館運営法 第一条 /data/egov/506AC.xml https://laws.e-gov.go.jp/law/506AC0000000901 3.14'
>>> redact_mapping({"api_keys": {"*": "sk-a"}, "base_urls": ["http://u:p@h/v1"], "pad_token": "<pad>",
...                 "n": 3})
{'api_keys': {'*': '***'}, 'base_urls': ['http://***@h/v1'], 'pad_token': '<pad>', 'n': 3}
>>> redact_mapping(["--max_steps", "2", "--hub_token", "hf_abc", "--api-key=sk-b"])
['--max_steps', '2', '--hub_token', '***', '--api-key=***']
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# Words that make a key name a secret wherever they stand in it (client_secret, OPENAI_PASSWORD, x-apikey).
# Not "pwd": $PWD is the working directory, and masking it would mangle every path.
_SECRET_WORDS = frozenset({"password", "passwd", "passphrase", "secret", "secrets", "authorization", "apikey",
                           "apikeys", "credential", "credentials", "bearer", "cookie"})
# api_key, private_key …
_KEY_OWNERS = frozenset({"api", "private", "secret", "access", "signing", "encryption"})
_SPECIAL_TOKENS = frozenset({"pad", "eos", "bos", "unk", "sep", "cls", "mask", "special", "additional"})
_NOT_SECRET_VALUES = frozenset({"", MASK, "None", "null", "EMPTY", "''", '""'})
_MIN_ENV_SECRET = 8  # shorter environment values (a flag, "EMPTY") would mask ordinary words

# a scheme starts where no scheme character precedes it: each position is tried once (linear on any input)
_SCHEME = r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://"
# scheme://USERINFO@ — the user information runs to the last '@' before the path, query or fragment
_USERINFO = re.compile(rf"({_SCHEME})[^\s/?#@\"'<>\\]*(?:@[^\s/?#@\"'<>\\]*)*@")
_QUERY = re.compile(rf"({_SCHEME}[^\s?#\"'<>\\]*)\?([^\s#\"'<>\\]*)")
_TRAILING = re.compile(r"[.,;:!)\]}]+$")  # sentence punctuation after a URL in error text
_BEARER = re.compile(r"(?i)\b(bearer)\s+(?!\*\*\*)[^\s\"',;]+")
# KEY (sep) VALUE: a bare, quoted or JSON key; '=' or ':'; a quoted value, or a bare one, after an auth scheme
# word
_PAIR = re.compile(
    r"""(?<![A-Za-z0-9_.-])(?P<q>["']?)(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)(?P<sep>\s*[:=]\s*)"""
    r"""(?P<value>(?:(?i:basic|bearer|token|digest)\s+)?(?:"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&"'}\])]+))""")
_OPTION = re.compile(r"(?<![\w-])(?P<option>--?[A-Za-z][A-Za-z0-9_-]*)(?P<sep>[ "
                     r"\t]+|=)(?P<value>(?!-)[^\s\"',;]+)")
_OPTION_WORD = re.compile(r"^--?[A-Za-z][A-Za-z0-9_-]*$")
_TOKEN_SHAPES = re.compile(r"\b(?:sk|hf|ghp|gho|ghs|ghu|github_pat|xoxb|xoxp)[-_][A-Za-z0-9_-]{16,}")


def is_secret_name(name: Any) -> bool:
    """Whether a key, option or environment variable name says its value is a secret.

    >>> [n for n in ("api_key", "x-api-key", "OPENAI_API_KEY", "apiKey", "hub_token", "HF_TOKEN", "token",
    ...              "accessToken", "client_secret", "password", "Authorization", "http_auth", "--api-key")
    ...  if is_secret_name(n)] == ["api_key", "x-api-key", "OPENAI_API_KEY", "apiKey", "hub_token",
    ...  "HF_TOKEN", "token", "accessToken", "client_secret", "password", "Authorization", "http_auth",
    ...  "--api-key"]
    True
    >>> [n for n in ("max_tokens", "tokens", "tokenizer", "pad_token", "eos_token_id", "key",
    ...              "keyword_fields", "PWD", "author", "heldout", "tok/s") if is_secret_name(n)]
    []
    """
    if not isinstance(name, str):
        return False
    words = [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()) if w]
    if not words:
        return False
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if any(w in _SECRET_WORDS for w in words):
        return True
    if last in ("key", "keys"):
        return before in _KEY_OWNERS
    if last.endswith("token"):  # token, hub_token, accesstoken; never tokens (max_tokens) or tokenizer
        return before not in _SPECIAL_TOKENS and last[:-5] not in _SPECIAL_TOKENS
    return last == "auth"


def _env_secrets() -> list[str]:
    """Values of the secret-named environment variables as set now, longest first."""
    found = {value for name, value in os.environ.items()
             if len(value) >= _MIN_ENV_SECRET and value not in _NOT_SECRET_VALUES and is_secret_name(name)}
    return sorted(found, key=lambda v: (-len(v), v))  # ties by text: a set's order follows PYTHONHASHSEED


def _query(match: re.Match) -> str:
    query = match[2]
    tail = _TRAILING.search(query)
    query, tail = (query[: tail.start()], tail[0]) if tail else (query, "")
    params = [p.partition("=") for p in re.split(r"([&;])", query)]
    masked = "".join(p[0] if p[0] in "&;" else f"{p[0]}={MASK}" if p[1] else MASK if p[0] else ""
                     for p in params)
    return f"{match[1]}?{masked}{tail}"


def _pair(match: re.Match) -> str:
    value = match["value"]
    if not is_secret_name(match["key"]) or value in _NOT_SECRET_VALUES:
        return match[0]
    quote = value[0] if value[0] in "\"'" and value[-1] == value[0] and len(value) > 1 else ""
    return f"{match['q']}{match['key']}{match['q']}{match['sep']}{quote}{MASK}{quote}"


def _option(match: re.Match) -> str:
    if not is_secret_name(match["option"]) or match["value"] in _NOT_SECRET_VALUES:
        return match[0]
    return f"{match['option']}{match['sep']}{MASK}"


def _token_shape(match: re.Match) -> str:
    text = match[0]  # a real key mixes letters and digits; sk-learn-extension-docs is a name
    return MASK if any(c.isdigit() for c in text) and any(c.isalpha() for c in text[3:]) else text


def _redact(text: str, env: list[str]) -> str:
    for value in env:
        if value in text:
            text = text.replace(value, MASK)
    if "://" in text:
        text = _USERINFO.sub(lambda m: f"{m[1]}{MASK}@", text)
        text = _QUERY.sub(_query, text)
    text = _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)
    text = _PAIR.sub(_pair, text)
    text = _OPTION.sub(_option, text)
    return _TOKEN_SHAPES.sub(_token_shape, text)


def redact_text(text: str) -> str:
    """``text`` with every secret this module knows masked (see the module docstring); anything else
    unchanged.

    >>> redact_text("password=hunter2 passwd: 'x y' token=abc&page=2")
    "password=*** passwd: '***' token=***&page=2"
    >>> redact_text("max_tokens=512 tokens: 3 key=article_id 探索 sk-learn https://h/p?q=1 ***")
    'max_tokens=512 tokens: 3 key=article_id 探索 sk-learn https://h/p?q=*** ***'
    """
    if not isinstance(text, str) or not text:
        return text
    return _redact(text, _env_secrets())


def _masked(value: Any) -> Any:
    """A secret-named key's value: strings masked, a mapping or list masked inside, nothing else touched
    (None, a bool, a number say whether a secret is set, not what it is)."""
    if isinstance(value, str):
        return value if value in _NOT_SECRET_VALUES else MASK
    if isinstance(value, Mapping):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_masked(v) for v in value)
    return value


def _walk(value: Any, env: list[str]) -> Any:
    if isinstance(value, str):
        return _redact(value, env) if value else value
    if isinstance(value, Mapping):
        return {(_redact(k, env) if isinstance(k, str) else k): _masked(v) if is_secret_name(k)
                else _walk(v, env) for k, v in value.items()}
    if isinstance(value, list | tuple):
        out, after_secret_option = [], False
        # a list of command-line words: the word after --api-key / --hub_token is the secret
        for item in value:
            if after_secret_option and isinstance(item, str) and not item.startswith("-"):
                out.append(_masked(item))
            else:
                out.append(_walk(item, env))
            after_secret_option = (isinstance(item, str) and _OPTION_WORD.match(item) is not None
                                   and is_secret_name(item))
        return out if isinstance(value, list) else tuple(out)
    return value


def redact_mapping(value: Any) -> Any:
    """A copy of ``value`` (dicts, lists, tuples, strings) fit to record: secret-named keys' values masked,
    every string (keys too) through :func:`redact_text`, the word after a secret ``--option`` masked.

    >>> redact_mapping({"judge": {"model": "http:j@http://u:p@h:1", "api_key": "sk-judge"},
    ...                 "hub_token": None})
    {'judge': {'model': 'http:j@http://***@h:1', 'api_key': '***'}, 'hub_token': None}
    """
    return _walk(value, _env_secrets())
