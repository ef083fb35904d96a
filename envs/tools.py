"""What the model-facing search tools say and do: config, description variants, and the replies.

The one tool surface is ``tansaku.envs.environments.SearchEnvironment`` (TRL's ``environment_factory``
class, also what ``tansaku.envs.rollout`` drives for eval, teacher and solvability episodes). This module
holds its parts, none of them a tool itself:

* ``ToolsConfig`` — every knob shapes what the trained model learns (long greedy reads vs careful small
  reads), so it is part of a task's versioned config (``Task.tools_config``).
* Four phrasings per tool (``SEARCH_SUMMARIES`` …). ``draw_variant`` picks one per episode (augmentation
  against description sensitivity of tool calling), ``tool_docstrings`` writes that variant's Google-style
  docstrings, from which TRL / transformers build the JSON schema the model sees.
* Interface variants (``tansaku.envs.tool_interfaces``): the tools' names and argument shapes, drawn per
  episode when ``interface_variants`` > 1; ``tool_docstrings(variant, config, interface)`` covers each.
  ``keyword_search_text`` / ``numbered_page_text`` are interface 1's ``find`` / ``read`` over the same
  replies.
* ``search_text`` / ``page_text`` — the replies. A call the model got wrong (bad query, size or offset,
  unknown doc id) or that could not run raises ``ToolError`` whose message the model reads: TRL's tool loop
  shows it as ``{'error': '<message>'}`` and counts it in ``tools/failure_frequency``.

>>> draw_variant("q1") == draw_variant("q1"), 0 <= draw_variant("q1", seed=3) < N_VARIANTS
(True, True)
>>> print(tool_docstrings(0, ToolsConfig(top_k=3))["search"].splitlines()[-4])
    size: How many hits to return (default 3, at most 10).
>>> print(tool_docstrings(0, ToolsConfig(top_k=3), interface=1)["find"].splitlines()[-4])
    top_k: How many hits to return (default 3, at most 10).
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass

from tansaku.envs.search import QueryError
from tansaku.envs.tool_interfaces import (
    FIND_ARGS,
    FIND_READ_RETURNS,
    FIND_READ_SHORT,
    FIND_SUMMARIES,
    INTERFACES,
    READ_ARGS,
    READ_SUMMARIES,
    check_interfaces,
)

TRUNCATION = ("cut", "drop")
# How a search reply that matched nothing begins: not a failure, but no call worth a tool reward either
# (``tansaku.envs.rewards`` keys on it).
NO_HITS = "No results."

SEARCH_SUMMARIES = [
    "Search the document collection and return the best-matching passages with their doc_id, title and a "
    "snippet (matches in 【】). The query is plain text or an OpenSearch query DSL object as JSON "
    "(match, match_phrase, multi_match, term, terms, bool with must/should/must_not/filter).",
    "文書コレクションを検索し、doc_id・タイトル・スニペット（一致箇所は【】）を関連度順に返す。"
    "query には自然文、または OpenSearch のクエリ DSL の JSON（match, match_phrase, multi_match, term, "
    "terms, bool の must/should/must_not/filter）を書ける。",
    "Find passages in the corpus. Write keywords, or a JSON OpenSearch query such as "
    '{"bool": {"must": [{"match_phrase": {"text": "..."}}], "must_not": [{"match": {"title": "..."}}]}} '
    "to pin down documents hidden among similar ones. Returns ranked hits with doc_id, title and snippet.",
    "検索ツール。キーワードか OpenSearch 形式の JSON クエリで文書を探し、上位の文書の doc_id、"
    "タイトル、一致箇所を含む短い抜粋を返す。完全一致には match_phrase、除外には bool の must_not を使う。",
]
# {top_k}/{max_k}: the schema carries no default values, so the size description states them.
SEARCH_ARGS = [
    ("Plain-text keywords or a JSON OpenSearch query.",
     "How many hits to return (default {top_k}, at most {max_k})."),
    ("検索語（自然文）または JSON 形式のクエリ。", "返す件数。省略時は {top_k} 件、最大 {max_k} 件。"),
    ("What to search for: words, or a JSON query DSL object.",
     "Number of results wanted ({top_k} if omitted, "
     "{max_k} at most)."),
    ("キーワード、または OpenSearch クエリ DSL の JSON 文字列。",
     "取得する件数（既定 {top_k}、上限 {max_k}）。"),
]
OPEN_SUMMARIES = [
    "Read a document by its doc_id, one page of characters at a time, starting at offset. "
    "The reply ends with the offset to continue from, or says the document ended.",
    "doc_id で文書本文を開き、offset の位置から一定文字数を返す。続きがある場合は次の offset が示される。",
    "Open the full text of a search hit. Long documents come in pages; call again with the offset given "
    "at the end of the page to keep reading.",
    "検索結果の文書を読む。長い文書はページ単位で返るので、末尾に示された offset で続きを読む。",
]
OPEN_ARGS = [
    ("The doc_id from a search hit.", "Character offset to start reading from (0 = beginning)."),
    ("検索結果に出てきた doc_id。", "読み始める文字位置（0 が先頭）。"),
    ("Identifier of the document to open.", "Where to start, in characters."),
    ("開く文書の doc_id。", "開始位置（文字数）。"),
]
RETURNS = {"search": "Ranked hits with doc_id, title and snippet.",
           "open_doc": "A page of the document and the offset to continue from."}
N_VARIANTS = len(SEARCH_SUMMARIES)
# ``ToolsConfig(short_descriptions=True)``: one terse phrasing (~170 schema tokens instead of 460–630 with
# the tiny model's tokenizer), for models whose whole episode must fit a few hundred tokens.
SHORT = {"search": ("Search the wiki.",
                    {"query": "Words to search for.", "size": "Hits ({top_k} if omitted)."}, "Hits."),
         "open_doc": ("Read a document.", {"doc_id": "doc_id of a hit.", "offset": "Start character."},
                      "Text.")}


class ToolError(Exception):
    """A tool call that failed; ``str(error)`` is the message the model reads (TRL:
    ``{'error': message}``)."""


@dataclass(frozen=True)
class ToolsConfig:
    top_k: int = 5              # hits when the model gives no size (the schema's stated default)
    max_k: int = 10             # largest size the model may ask for
    chars_per_hit: int = 200    # snippet length
    chars_per_call: int = 2000  # whole reply of one call, headers included
    page_chars: int = 1000      # open_doc page length
    truncation: str = "cut"     # cut: trim the last hit to the budget; drop: leave out hits that do not fit
    description_variant: int | None = None  # fix a phrasing; None draws one per episode
    short_descriptions: bool = False  # SHORT's terse phrasing instead of the variant's (small models)
    # tool interfaces drawn from per episode (tool_interfaces.py); 1: interface 0 only
    interface_variants: int = 1
    interface_variant: int | None = None  # fix an interface; None draws one of the first interface_variants

    def __post_init__(self):
        if self.truncation not in TRUNCATION:
            raise ValueError(f"truncation must be one of {TRUNCATION}")
        if min(self.top_k, self.max_k, self.chars_per_hit, self.chars_per_call, self.page_chars) < 1:
            raise ValueError("ToolsConfig sizes must be positive")
        if self.top_k > self.max_k:
            raise ValueError(f"top_k ({self.top_k}) must not exceed max_k ({self.max_k})")
        if self.description_variant is not None and not 0 <= self.description_variant < N_VARIANTS:
            raise ValueError(f"description_variant must be in 0..{N_VARIANTS - 1}")
        check_interfaces(self.interface_variants, self.interface_variant)

    def to_dict(self) -> dict:
        return asdict(self)


def draw_variant(key: str, seed: int = 0) -> int:
    """The description variant of an episode, stable per (row key, seed) so reruns and LLM caches agree."""
    return zlib.crc32(f"{seed}:{key}".encode()) % N_VARIANTS


def _doc(summary: str, args: dict[str, str], returns: str) -> str:
    lines = ([summary, "", "Args:"] + [f"    {k}: {v}" for k, v in args.items()]
             + ["", "Returns:", f"    {returns}"])
    return "\n".join(lines)


# Per interface: (summaries, argument phrasings, argument names) of its search tool, then of its reading tool.
_PHRASINGS = (
    ((SEARCH_SUMMARIES, SEARCH_ARGS, ("query", "size")), (OPEN_SUMMARIES, OPEN_ARGS, ("doc_id", "offset"))),
    ((FIND_SUMMARIES, FIND_ARGS, ("keywords", "top_k")), (READ_SUMMARIES, READ_ARGS, ("doc_id", "page"))))


def tool_docstrings(variant: int, config: ToolsConfig, interface: int = 0) -> dict[str, str]:
    """``{tool name: docstring}`` of one description variant in one interface (0: ``search``/``open_doc``)."""
    numbers = {"top_k": config.top_k, "max_k": config.max_k}
    if config.short_descriptions:
        short = SHORT if interface == 0 else FIND_READ_SHORT
        return {name: _doc(summary, {k: v.format(**numbers) for k, v in args.items()}, returns)
                for name, (summary, args, returns) in short.items()}
    returns = RETURNS if interface == 0 else FIND_READ_RETURNS
    docs = {}
    for name, (summaries, arg_texts, arg_names) in zip(INTERFACES[interface], _PHRASINGS[interface]):
        texts = [text.format(**numbers) for text in arg_texts[variant]]
        docs[name] = _doc(summaries[variant], dict(zip(arg_names, texts)), returns[name])
    return docs


def _as_int(value, name: str) -> int:
    if isinstance(value, bool):
        raise ToolError(f"{name} must be an integer")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, (int, float)) and float(value).is_integer():
        return int(value)
    raise ToolError(f"{name} must be an integer, got {value!r}")


def search_text(backend, config: ToolsConfig, query, size=None, size_name: str = "size") -> str:
    """Ranked hits as text, cut to ``config``'s budgets; raises ``ToolError``. ``size`` None/"": ``top_k``.
    ``size_name``: what the model calls ``size`` (the errors it reads name its own argument)."""
    k = None if size is None or size == "" else _as_int(size, size_name)
    if k is not None and not 1 <= k <= config.max_k:
        raise ToolError(f"{size_name} must be between 1 and {config.max_k}.")
    if not isinstance(query, (str, dict)):
        raise ToolError("query must be text or a JSON query object.")
    try:
        result = backend.search(query, size=k, snippet_chars=config.chars_per_hit,
                                default_size=config.top_k, max_size=config.max_k)
    except (QueryError, ValueError) as e:
        raise ToolError(str(e)) from None
    except Exception as e:  # a backend failure: the model may retry, the episode goes on
        raise ToolError(f"search failed ({type(e).__name__}); try again or change the query.") from e
    if not result.hits:  # not a failure: the call worked, the query matched nothing
        return NO_HITS + " Try other words, fewer conditions, or a plain-text query."
    budget, parts = config.chars_per_call, []
    for i, h in enumerate(result.hits, 1):
        entry = f"[{i}] doc_id: {h.doc_id} | title: {h.title}\n{h.snippet}"
        used = sum(len(p) + 2 for p in parts)
        if used + len(entry) > budget:
            left = budget - used
            if config.truncation == "cut" and left > 40:
                parts.append(entry[: left - 12] + "…(truncated)")
            else:
                parts.append(f"({len(result.hits) - i + 1} more hits not shown; lower size or narrow the "
                             f"query)")
            break
        parts.append(entry)
    return "\n\n".join(parts)


def keyword_search_text(backend, config: ToolsConfig, keywords, top_k=None) -> str:
    """Interface 1's ``find``: the keywords joined by spaces, searched as plain text (``search_text``'s
    reply).

    A keyword list that would read as JSON (``["{…"]``) goes to the backend as the ``multi_match`` clause a
    plain-text query becomes, so keywords are never a query DSL."""
    if not isinstance(keywords, list) or not keywords:
        raise ToolError('keywords must be a non-empty list of strings, e.g. ["白砂市", "市長"].')
    if not all(isinstance(k, str) for k in keywords):
        raise ToolError("keywords must be strings.")
    text = " ".join(k.strip() for k in keywords if k.strip())
    if not text:
        raise ToolError("keywords are empty; write words to search for.")
    query = {"multi_match": {"query": text, "type": "most_fields"}} if text[0] in "{[" else text
    return search_text(backend, config, query, top_k, size_name="top_k")


def _document(backend, doc_id) -> dict:
    try:
        doc = backend.get(str(doc_id).strip())
    except Exception as e:
        raise ToolError(f"could not open the document ({type(e).__name__}); try again.") from e
    if doc is None:
        raise ToolError(f"no document with doc_id {doc_id!r}. Use a doc_id from the search results.")
    return doc


def _header(doc: dict, start: int) -> str:
    return f"doc_id: {doc['doc_id']} | title: {doc['title']} | characters {start}-"


def _room(config: ToolsConfig, header: str) -> int:
    """Characters of text one reply holds after ``header`` (``page_chars``, less when the header is long)."""
    return max(1, min(config.page_chars, config.chars_per_call - len(header) - 80))


def _page(doc: dict, start: int, end: int, tail: str) -> str:
    text = doc["text"]
    return f"{_header(doc, start)}{end} of {len(text)}\n{text[start:end]}\n{tail}"


def page_text(backend, config: ToolsConfig, doc_id, offset=0) -> str:
    """One page of a document from ``offset``, with where to continue; raises ``ToolError``."""
    start = 0 if offset is None or offset == "" else _as_int(offset, "offset")
    if start < 0:
        raise ToolError("offset must be 0 or more.")
    doc = _document(backend, doc_id)
    text = doc["text"]
    if start >= len(text) and not (start == 0 and not text):
        raise ToolError(f"offset {start} is past the end; the document has {len(text)} characters.")
    end = min(len(text), start + _room(config, _header(doc, start)))
    tail = (f"[continues: open_doc(doc_id=\"{doc['doc_id']}\", offset={end})]" if end < len(text)
            else "[end of document]")
    return _page(doc, start, end, tail)


def page_size(config: ToolsConfig, doc: dict) -> int:
    """Characters per numbered page of ``doc`` (interface 1's ``read``): ``page_text``'s room at the
    document's last offset, the longest header, so one size serves every page and each fits
    ``chars_per_call``. That is ``page_chars`` unless the doc_id and title are long: page p starts at offset p
    × this."""
    return _room(config, _header(doc, len(doc["text"])))


def numbered_page_text(backend, config: ToolsConfig, doc_id, page=0) -> str:
    """Interface 1's ``read``: page ``page`` (from 0) of a document, ``page_text``'s reply naming the next
    page."""
    number = 0 if page is None or page == "" else _as_int(page, "page")
    if number < 0:
        raise ToolError("page must be 0 or more.")
    doc = _document(backend, doc_id)
    text, size = doc["text"], page_size(config, doc)
    pages = max(1, -(-len(text) // size))
    if number >= pages:
        raise ToolError(f"page {number} is past the end; the document has {pages} pages (0-{pages - 1}).")
    start = number * size
    end = min(len(text), start + size)
    tail = (f"[continues: read(doc_id=\"{doc['doc_id']}\", page={number + 1})]" if end < len(text)
            else "[end of document]")
    return _page(doc, start, end, tail)
