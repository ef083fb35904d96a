"""Model-facing search tools: ``search(query, size)`` and ``open_doc(doc_id, offset)`` returning text.

    from tansaku.envs.search import open_index
    from tansaku.envs.tools import SearchTools, ToolsConfig
    tools = SearchTools(open_index("out/index"), ToolsConfig(top_k=5, chars_per_hit=200), seed=episode_seed)
    GRPOTrainer(..., tools=tools.functions())        # plain functions with type hints + Google docstrings
    tools.search('{"bool": {"must": [{"match": {"text": "鎌倉"}}]}}')

Every knob in ``ToolsConfig`` shapes what the trained model learns (long greedy reads vs careful small
reads), so it is part of an environment's versioned config. Each tool has several phrasings of its
description; ``seed`` draws one per episode (augmentation against description sensitivity).
Errors — a bad query, a missing document, a crashed backend — come back as text starting with
``Error:``, never as exceptions: the model reads them and tries again.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from tansaku.envs.search import QueryError

TRUNCATION = ("cut", "drop")

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
SEARCH_ARGS = [
    ("Plain-text keywords or a JSON OpenSearch query.", "How many hits to return (default from the environment)."),
    ("検索語（自然文）または JSON 形式のクエリ。", "返す件数。省略時は環境の既定値。"),
    ("What to search for: words, or a JSON query DSL object.", "Number of results wanted."),
    ("キーワード、または OpenSearch クエリ DSL の JSON 文字列。", "取得する件数（上限あり）。"),
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


@dataclass(frozen=True)
class ToolsConfig:
    top_k: int = 5              # hits when the model gives no size
    max_k: int = 10             # largest size the model may ask for
    chars_per_hit: int = 200    # snippet length
    chars_per_call: int = 2000  # whole reply of one call, headers included
    page_chars: int = 1000      # open_doc page length
    truncation: str = "cut"     # cut: trim the last hit to the budget; drop: leave out hits that do not fit
    description_variant: int | None = None  # fix a phrasing; None draws one per episode from the seed

    def __post_init__(self):
        if self.truncation not in TRUNCATION:
            raise ValueError(f"truncation must be one of {TRUNCATION}")
        if min(self.top_k, self.max_k, self.chars_per_hit, self.chars_per_call, self.page_chars) < 1:
            raise ValueError("ToolsConfig sizes must be positive")

    def to_dict(self) -> dict:
        return asdict(self)


def _doc(summary: str, args: dict[str, str], returns: str) -> str:
    lines = [summary, "", "Args:"] + [f"    {k}: {v}" for k, v in args.items()] + ["", "Returns:", f"    {returns}"]
    return "\n".join(lines)


def _as_int(value, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, (int, float)) and float(value).is_integer():
        return int(value)
    raise ValueError(f"{name} must be an integer, got {value!r}")


class SearchTools:
    """The two tools over one backend (``tansaku.envs.search.open_index``); safe to share between threads."""

    def __init__(self, backend, config: ToolsConfig = ToolsConfig(), seed: int | None = None):
        self.backend, self.config = backend, config
        self.reset(seed)

    def reset(self, seed: int | None = None) -> None:
        """Draw this episode's tool descriptions."""
        v = self.config.description_variant
        rng = random.Random(seed)
        self.search_variant = v if v is not None else rng.randrange(len(SEARCH_SUMMARIES))
        self.open_variant = v if v is not None else rng.randrange(len(OPEN_SUMMARIES))

    def search(self, query: str, size: int | None = None) -> str:
        """Search the document collection; plain text or a JSON OpenSearch query.

        Args:
            query: Plain-text keywords or a JSON OpenSearch query.
            size: How many hits to return (default from the environment).

        Returns:
            Ranked hits with doc_id, title and a snippet, or a line starting with "Error:".
        """

        try:
            k = None if size is None or size == "" else _as_int(size, "size", self.config.top_k)
            if k is not None and not 1 <= k <= self.config.max_k:
                return f"Error: size must be between 1 and {self.config.max_k}."
            if not isinstance(query, (str, dict)):
                return "Error: query must be text or a JSON query object."
            result = self.backend.search(query, size=k, snippet_chars=self.config.chars_per_hit,
                                         default_size=self.config.top_k, max_size=self.config.max_k)
        except (QueryError, ValueError) as e:
            return f"Error: {e}"
        except Exception as e:  # a backend failure must not end the episode
            return f"Error: search failed ({type(e).__name__}); try again or change the query."
        if not result.hits:
            return "No results. Try other words, fewer conditions, or a plain-text query."
        budget, parts = self.config.chars_per_call, []
        for i, h in enumerate(result.hits, 1):
            entry = f"[{i}] doc_id: {h.doc_id} | title: {h.title}\n{h.snippet}"
            used = sum(len(p) + 2 for p in parts)
            if used + len(entry) > budget:
                left = budget - used
                if self.config.truncation == "cut" and left > 40:
                    parts.append(entry[: left - 12] + "…(truncated)")
                else:
                    parts.append(f"({len(result.hits) - i + 1} more hits not shown; lower size or narrow the query)")
                break
            parts.append(entry)
        return "\n\n".join(parts)

    def open_doc(self, doc_id: str, offset: int = 0) -> str:
        """Read a document by doc_id, one page at a time.

        Args:
            doc_id: The doc_id from a search hit.
            offset: Character offset to start reading from (0 = beginning).

        Returns:
            A page of the document text and where to continue, or a line starting with "Error:".
        """
        try:
            start = _as_int(offset, "offset", 0)
            if start < 0:
                return "Error: offset must be 0 or more."
            doc = self.backend.get(str(doc_id).strip())
        except ValueError as e:
            return f"Error: {e}"
        except Exception as e:
            return f"Error: could not open the document ({type(e).__name__}); try again."
        if doc is None:
            return f"Error: no document with doc_id {doc_id!r}. Use a doc_id from the search results."
        text = doc["text"]
        if start >= len(text) and not (start == 0 and not text):
            return f"Error: offset {start} is past the end; the document has {len(text)} characters."
        header = f"doc_id: {doc['doc_id']} | title: {doc['title']} | characters {start}-"
        room = max(1, min(self.config.page_chars, self.config.chars_per_call - len(header) - 80))
        end = min(len(text), start + room)
        tail = (f"[continues: open_doc(doc_id=\"{doc['doc_id']}\", offset={end})]" if end < len(text)
                else "[end of document]")
        return f"{header}{end} of {len(text)}\n{text[start:end]}\n{tail}"

    def functions(self) -> list:
        """Plain functions for TRL (``tools=[...]``) with this episode's descriptions as docstrings."""

        def search(query: str, size: int | None = None) -> str:
            return self.search(query, size)

        def open_doc(doc_id: str, offset: int = 0) -> str:
            return self.open_doc(doc_id, offset)

        q, s = SEARCH_ARGS[self.search_variant]
        search.__doc__ = _doc(SEARCH_SUMMARIES[self.search_variant], {"query": q, "size": s},
                              "Ranked hits with doc_id, title and snippet, or an error message.")
        d, o = OPEN_ARGS[self.open_variant]
        open_doc.__doc__ = _doc(OPEN_SUMMARIES[self.open_variant], {"doc_id": d, "offset": o},
                                "A page of the document and the offset to continue from, or an error message.")
        return [search, open_doc]

    def schemas(self) -> list[dict]:
        """OpenAI-style tool schemas of ``functions()`` (for rollouts outside the trainer)."""
        from transformers.utils import get_json_schema

        return [get_json_schema(f) for f in self.functions()]
