"""Tool *interface* variants: the names and argument shapes of the model's two tools, drawn per episode.

The description variants (``tansaku.envs.tools``) change what the tools *say*; an interface variant changes
what they *are*. Every interface maps onto the same backend calls and the same reply text
(``tansaku.envs.tools.search_text`` / ``page_text``):

* interface 0 — ``search(query: str, size: int | None)``, ``open_doc(doc_id: str, offset: int = 0)``: plain
  text or a JSON OpenSearch query, a character offset. What every dataset, teacher and run used before.
* interface 1 — ``find(keywords: list[str], top_k: int | None)``, ``read(doc_id: str, page: int = 0)``: the
  keywords are joined by spaces into one plain-text query (no JSON DSL, no filters: a ``filters`` argument
  would promise more than the plain-text path runs), pages are numbered from 0 (``tools.numbered_page_text``).

``ToolsConfig.interface_variants`` (default 1: interface 0 only) says how many are drawn from,
``ToolsConfig.interface_variant`` fixes one. The draw (``draw_interface``) is stable per row key and seed,
like ``draw_variant``, and independent of it. Each interface has four phrasings, one per description
variant, so an episode is a (description variant, interface) pair, ``variant_label`` ``"d2-i1"``.

A system prompt names the tools of interface 0 (``search で…``); ``interface_prompt`` renames them for the
episode's interface, so the prompt never sends the model to a tool it does not have.

>>> INTERFACES[1], draw_interface("q1", 0, 1), draw_interface("q1", 3, 2) == draw_interface("q1", 3, 2)
(('find', 'read'), 0, True)
>>> interface_text("search で文書を検索し、open_doc で本文を読む。research は別。", 1)
'find で文書を検索し、read で本文を読む。research は別。'
"""

from __future__ import annotations

import hashlib
import re

# Tool names per interface: (the search tool, the reading tool).
INTERFACES = (("search", "open_doc"), ("find", "read"))
N_INTERFACES = len(INTERFACES)
# What each tool name does, whatever the interface: "search" (ranked hits) or "open" (a page of a document).
TOOL_ROLES = {"search": "search", "open_doc": "open", "find": "search", "read": "open"}
_OTHER_NAMES = re.compile(r"(?<![A-Za-z0-9_])(search|open_doc)(?![A-Za-z0-9_])")

FIND_SUMMARIES = [
    "Search the document collection for a list of keywords and return the best-matching passages with their "
    "doc_id, title and a snippet (matches in 【】). The keywords are searched together as plain text.",
    "キーワードのリストで文書コレクションを検索し、doc_id・タイトル・スニペット（一致箇所は【】）"
    "を関連度順に返す。キーワードはまとめて一つの自然文として検索される。",
    "Find passages in the corpus that match the given keywords; add a distinguishing word to pin down a "
    "document hidden among similar ones. Returns ranked hits with doc_id, title and snippet.",
    "検索ツール。キーワードの配列で文書を探し、上位の文書の doc_id、タイトル、一致箇所を含む短い抜粋を返す。"
    "似た文書と紛れるときは区別できる語を加える。",
]
FIND_ARGS = [
    ("Keywords to search for, as a list of strings.",
     "How many hits to return (default {top_k}, at most {max_k})."),
    ("検索するキーワードのリスト（文字列の配列）。", "返す件数。省略時は {top_k} 件、最大 {max_k} 件。"),
    ("What to search for: one string per keyword.",
     "Number of results wanted ({top_k} if omitted, {max_k} at most)."),
    ("キーワード（文字列）の配列。", "取得する件数（既定 {top_k}、上限 {max_k}）。"),
]
READ_SUMMARIES = [
    "Read a document by its doc_id, one page at a time; page 0 is the beginning. The reply ends with the "
    "next page to read, or says the document ended.",
    "doc_id で文書本文を開き、指定したページを返す（0 が先頭）。続きがある場合は次のページ番号が示される。",
    "Open the full text of a search hit. Long documents come in numbered pages; call again with the page "
    "given at the end of the reply to keep reading.",
    "検索結果の文書を読む。長い文書はページ単位で返るので、末尾に示されたページ番号で続きを読む。",
]
READ_ARGS = [
    ("The doc_id from a search hit.", "Page number to read (0 = first page)."),
    ("検索結果に出てきた doc_id。", "読むページ番号（0 が先頭）。"),
    ("Identifier of the document to open.", "Which page, counting from 0."),
    ("開く文書の doc_id。", "ページ番号（0 から）。"),
]
FIND_READ_RETURNS = {"find": "Ranked hits with doc_id, title and snippet.",
                     "read": "A page of the document and the next page number."}
FIND_READ_SHORT = {
    "find": ("Search the wiki.", {"keywords": "Words to search for.", "top_k": "Hits ({top_k} if omitted)."},
             "Hits."),
    "read": ("Read a document.", {"doc_id": "doc_id of a hit.", "page": "Page number (0 = first)."}, "Text."),
}


def check_interfaces(interface_variants: int, interface_variant: int | None) -> None:
    """ValueError unless ``interface_variants`` is 1..N and a fixed ``interface_variant`` is an interface."""
    if isinstance(interface_variants, bool) or not isinstance(interface_variants, int) \
            or not 1 <= interface_variants <= N_INTERFACES:
        raise ValueError(f"interface_variants must be in 1..{N_INTERFACES}, got {interface_variants!r}")
    if interface_variant is not None and (isinstance(interface_variant, bool) or interface_variant
                                          not in range(N_INTERFACES)):
        raise ValueError(f"interface_variant must be in 0..{N_INTERFACES - 1}, got {interface_variant!r}")


def draw_interface(key: str, seed: int = 0, interface_variants: int = 1) -> int:
    """The interface of an episode: 0 with one interface, else stable per (row key, seed) and independent of
    the description variant, so every (description, interface) pair occurs. A keyed BLAKE2 hash, not the
    variant's CRC-32 with a salt: CRC is linear, so a salted CRC's low bits would follow the variant's."""
    if interface_variants <= 1:
        return 0
    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8, person=b"tansaku-iface").digest()
    return int.from_bytes(digest, "big") % interface_variants


def variant_label(variant: int | None, interface: int | None) -> str:
    """``"d<description variant>-i<interface>"``, the key of an eval report's ``by_tool_variant``."""
    return f"d{variant}-i{interface or 0}"


def interface_text(text: str, interface: int) -> str:
    """``text`` with interface 0's tool names (whole words) renamed to ``interface``'s."""
    if not interface or not isinstance(text, str):
        return text
    names = dict(zip(INTERFACES[0], INTERFACES[interface]))
    return _OTHER_NAMES.sub(lambda m: names[m.group(1)], text)


def interface_prompt(messages: list[dict], interface: int) -> list[dict]:
    """A prompt whose system messages name ``interface``'s tools (user turns are never touched)."""
    if not interface or not isinstance(messages, list):
        return messages
    return [{**m, "content": interface_text(m.get("content"), interface)}
            if isinstance(m, dict) and m.get("role") == "system" else m for m in messages]
