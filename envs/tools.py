"""What the model-facing search tools say and do: config, description variants, and the replies.

The one tool surface is ``tansaku.envs.environments.SearchEnvironment`` (TRL's ``environment_factory``
class, also what ``tansaku.envs.rollout`` drives for eval, teacher and solvability episodes). This module
holds its parts, none of them a tool itself:

* ``ToolsConfig`` — every knob shapes what the trained model learns (long greedy reads vs careful small
  reads), so it is part of a task's versioned config (``Task.tools_config``).
* Four phrasings per tool (``SEARCH_SUMMARIES`` …). ``draw_variant`` picks one per episode (augmentation
  against description sensitivity of tool calling), ``tool_docstrings`` writes that variant's Google-style
  docstrings, from which TRL / transformers build the JSON schema the model sees.
* ``search_text`` / ``page_text`` — the replies. A call the model got wrong (bad query, size or offset,
  unknown doc id) or that could not run raises ``ToolError`` whose message the model reads: TRL's tool loop
  shows it as ``{'error': '<message>'}`` and counts it in ``tools/failure_frequency``.

>>> draw_variant("q1") == draw_variant("q1"), 0 <= draw_variant("q1", seed=3) < N_VARIANTS
(True, True)
>>> print(tool_docstrings(0, ToolsConfig(top_k=3))["search"].splitlines()[-4])
    size: How many hits to return (default 3, at most 10).
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass

from tansaku.envs.search import QueryError

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
    ("Plain-text keywords or a JSON OpenSearch query.", "How many hits to return (default {top_k}, at most {max_k})."),
    ("検索語（自然文）または JSON 形式のクエリ。", "返す件数。省略時は {top_k} 件、最大 {max_k} 件。"),
    ("What to search for: words, or a JSON query DSL object.", "Number of results wanted ({top_k} if omitted, "
     "{max_k} at most)."),
    ("キーワード、または OpenSearch クエリ DSL の JSON 文字列。", "取得する件数（既定 {top_k}、上限 {max_k}）。"),
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
SHORT = {"search": ("Search the wiki.", {"query": "Words to search for.", "size": "Hits ({top_k} if omitted)."},
                    "Hits."),
         "open_doc": ("Read a document.", {"doc_id": "doc_id of a hit.", "offset": "Start character."}, "Text.")}


class ToolError(Exception):
    """A tool call that failed; ``str(error)`` is the message the model reads (TRL: ``{'error': message}``)."""


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

    def __post_init__(self):
        if self.truncation not in TRUNCATION:
            raise ValueError(f"truncation must be one of {TRUNCATION}")
        if min(self.top_k, self.max_k, self.chars_per_hit, self.chars_per_call, self.page_chars) < 1:
            raise ValueError("ToolsConfig sizes must be positive")
        if self.top_k > self.max_k:
            raise ValueError(f"top_k ({self.top_k}) must not exceed max_k ({self.max_k})")
        if self.description_variant is not None and not 0 <= self.description_variant < N_VARIANTS:
            raise ValueError(f"description_variant must be in 0..{N_VARIANTS - 1}")

    def to_dict(self) -> dict:
        return asdict(self)


def draw_variant(key: str, seed: int = 0) -> int:
    """The description variant of an episode, stable per (row key, seed) so reruns and LLM caches agree."""
    return zlib.crc32(f"{seed}:{key}".encode()) % N_VARIANTS


def _doc(summary: str, args: dict[str, str], returns: str) -> str:
    lines = [summary, "", "Args:"] + [f"    {k}: {v}" for k, v in args.items()] + ["", "Returns:", f"    {returns}"]
    return "\n".join(lines)


def tool_docstrings(variant: int, config: ToolsConfig) -> dict[str, str]:
    """``{"search": docstring, "open_doc": docstring}`` of one description variant."""
    numbers = {"top_k": config.top_k, "max_k": config.max_k}
    if config.short_descriptions:
        return {name: _doc(summary, {k: v.format(**numbers) for k, v in args.items()}, returns)
                for name, (summary, args, returns) in SHORT.items()}
    q, s = SEARCH_ARGS[variant]
    d, o = OPEN_ARGS[variant]
    return {"search": _doc(SEARCH_SUMMARIES[variant], {"query": q, "size": s.format(**numbers)}, RETURNS["search"]),
            "open_doc": _doc(OPEN_SUMMARIES[variant], {"doc_id": d, "offset": o}, RETURNS["open_doc"])}


def _as_int(value, name: str) -> int:
    if isinstance(value, bool):
        raise ToolError(f"{name} must be an integer")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, (int, float)) and float(value).is_integer():
        return int(value)
    raise ToolError(f"{name} must be an integer, got {value!r}")


def search_text(backend, config: ToolsConfig, query, size=None) -> str:
    """Ranked hits as text, cut to ``config``'s budgets; raises ``ToolError``. ``size`` None/"": ``top_k``."""
    k = None if size is None or size == "" else _as_int(size, "size")
    if k is not None and not 1 <= k <= config.max_k:
        raise ToolError(f"size must be between 1 and {config.max_k}.")
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
                parts.append(f"({len(result.hits) - i + 1} more hits not shown; lower size or narrow the query)")
            break
        parts.append(entry)
    return "\n\n".join(parts)


def page_text(backend, config: ToolsConfig, doc_id, offset=0) -> str:
    """One page of a document from ``offset``, with where to continue; raises ``ToolError``."""
    start = 0 if offset is None or offset == "" else _as_int(offset, "offset")
    if start < 0:
        raise ToolError("offset must be 0 or more.")
    try:
        doc = backend.get(str(doc_id).strip())
    except Exception as e:
        raise ToolError(f"could not open the document ({type(e).__name__}); try again.") from e
    if doc is None:
        raise ToolError(f"no document with doc_id {doc_id!r}. Use a doc_id from the search results.")
    text = doc["text"]
    if start >= len(text) and not (start == 0 and not text):
        raise ToolError(f"offset {start} is past the end; the document has {len(text)} characters.")
    header = f"doc_id: {doc['doc_id']} | title: {doc['title']} | characters {start}-"
    room = max(1, min(config.page_chars, config.chars_per_call - len(header) - 80))
    end = min(len(text), start + room)
    tail = (f"[continues: open_doc(doc_id=\"{doc['doc_id']}\", offset={end})]" if end < len(text)
            else "[end of document]")
    return f"{header}{end} of {len(text)}\n{text[start:end]}\n{tail}"
