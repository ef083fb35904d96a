"""The one grammar of a search index target: what every ``--index`` option (and ``open_index``) takes.

    out/index                       an embedded index folder (any path that is not one of the forms below)
    opensearch:NAME                 index NAME on the cluster at $OPENSEARCH_URL
    http(s)://host[:port]/NAME      index NAME on that cluster

Anything else that looks like a URL (``ftp://h/x``, ``http://[::1``, ``https://``) is refused in one line:
read as a folder it would be made in the working folder (``./ftp:/h/x``), read by ``urllib`` it raised
``ValueError`` (a traceback). An index NAME is one OpenSearch index, never a pattern or a list (no ``*``,
``,``, ``/``, ``:``, spaces, no leading ``_ - +``). ``tansaku.core.value_checks.check_path`` applies it to
every index option while the command line is parsed (``tansaku.core.cli_types.IndexType``), and
``tansaku.envs.search.opensearch_backend.parse_spec`` reads a service target through it.

>>> parse_service("https://host:9200/wiki"), parse_service("opensearch:wiki"), parse_service("out/index")
(('https://host:9200', 'wiki'), (None, 'wiki'), None)
>>> parse_service("ftp://h/x")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: ftp://h/x: unknown scheme 'ftp'; an index is an index folder, opensearch:NAME
or http(s)://host:port/NAME
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from tansaku.core.errors import InputError

SERVICE_PREFIXES = ("opensearch:", "http://", "https://")
FORMS = "an index folder, opensearch:NAME or http(s)://host:port/NAME"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")  # what makes a value a URL rather than a folder
# What an index name may not hold or start with: these would make the one index a search across several
# (``a,b``, ``logs-*``, ``_all``) or a path, and OpenSearch refuses them in an index name anyway.
_BAD_NAME = re.compile(r'[\\/*?"<>|,#:\s]|^[_\-+]|^\.\.?$')


def _shown(text: str) -> str:
    """``text`` as one printable line (a lone surrogate or a control character escaped, a long value cut)."""
    shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
    return shown if len(shown) <= 120 else f"{shown[:80]}… ({len(text)} characters)"


def index_name_problem(name: str) -> str | None:
    """Why ``name`` is not the name of one OpenSearch index, or None."""
    if not name or _BAD_NAME.search(name) or not name.isprintable():
        return ("names no one OpenSearch index: an index name has no * , / \\ # : or spaces and does not "
                "start with _ - +, e.g. opensearch:my-index")
    return None


def parse_service(text: str) -> tuple[str | None, str] | None:
    """``(cluster URL or None for $OPENSEARCH_URL, index name)`` when ``text`` names an OpenSearch index, None
    when it names an index folder; ``InputError`` (one line, naming no option) when it is a URL of another
    scheme or a malformed one."""
    text = str(text)
    scheme = _SCHEME.match(text)
    if not text.startswith(SERVICE_PREFIXES):
        if scheme:
            raise InputError(f"{_shown(text)}: unknown scheme {scheme[1]!r}; an index is {FORMS}")
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{_shown(text)}: not valid UTF-8; an index is {FORMS}") from None
    if text.startswith("opensearch:"):
        name = text.split(":", 1)[1]
        if problem := index_name_problem(name):
            raise InputError(f"'{_shown(text)}' {problem}")
        return None, name
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number in range
    except ValueError:  # "http://[::1", "http://h:99999/x": urllib's own error is a traceback
        raise InputError(f"{_shown(text)}: not a URL with a valid host and port; give the index as "
                         "https://host:9200/my-index") from None
    name = parts.path.strip("/")
    if not parts.hostname or not name or "/" in name or parts.query or parts.fragment:
        raise InputError(f"{_shown(text)}: give the index as the URL path, e.g. https://host:9200/my-index")
    if problem := index_name_problem(name):
        raise InputError(f"'{_shown(text)}' {problem}")
    return f"{parts.scheme}://{parts.netloc}", name
