"""The bounds of the query language: how big a query may be, how many hits it asks for, how long it runs.

``dsl.parse_request`` checks every one of them before a query is translated or sent; the backends take a
``Limits`` (``open_index(target, Limits(timeout_ms=…))``) and enforce ``timeout_ms`` themselves.

    >>> Limits(max_size=5).max_size, Limits().max_depth
    (5, 5)
"""

from __future__ import annotations

from dataclasses import dataclass

# Limits, checked before a query is translated or sent: translation and execution both grow with the
# query's size, and the per-query timeout only bounds how long a caller waits, not the work a huge
# query makes (a 9000-field multi_match took seconds to translate before the fields were capped).
MAX_DEPTH = 5             # bool nesting levels; deeper queries are never needed to express a search
MAX_CLAUSES = 32          # clauses in the whole query, bool included
MAX_FIELDS = 32           # entries of one multi_match "fields" list (each known field at most once)
MAX_TERMS = 64            # values in one terms clause
MAX_TEXT_CHARS = 200      # characters of one match/phrase text: each character is a posting list
MAX_KEYWORD_CHARS = 1000  # characters of one term/terms value (long titles fit)
MAX_REQUEST_CHARS = 32_000  # characters of a query written as JSON text, checked before parsing it
MAX_MSM_COUNT = 1000      # |integer minimum_should_match|: more than any query has optional terms
MAX_SIZE = 50             # hits per request
MAX_SLOP = 10
# A sloppy phrase (no bigram can lead it) costs its characters × slop on every document holding them all.
# Per query: the match_phrase clauses with slop ≥ 1, and the sum of their characters × slop.
MAX_SLOPPY_PHRASES, MAX_SLOP_WORK = 8, 200
TIMEOUT_MS = 2000         # per query, translation and execution, enforced by the backend


@dataclass(frozen=True)
class Limits:
    """The per-index bounds a backend is opened with; the defaults are the ``MAX_*`` constants above."""

    max_depth: int = MAX_DEPTH
    max_clauses: int = MAX_CLAUSES
    max_size: int = MAX_SIZE
    max_terms: int = MAX_TERMS
    max_text_chars: int = MAX_TEXT_CHARS
    max_slop: int = MAX_SLOP
    timeout_ms: int = TIMEOUT_MS
    max_fields: int = MAX_FIELDS
    max_sloppy_phrases: int = MAX_SLOPPY_PHRASES
    max_slop_work: int = MAX_SLOP_WORK
