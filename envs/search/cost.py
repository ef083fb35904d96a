"""How many postings a canonical query reads on one embedded index: decides where the backend runs it.

    estimate = QueryCost(analyzer, searcher.doc_freq, keyword_field, num_docs).postings(canonical)

The estimate walks the canonical query (``dsl.parse_request``) the way ``EmbeddedBackend.translate`` turns
it into tantivy queries and looks up the real length of each posting list (``doc_freq``): a ``match``
reads its terms' lists; an exact phrase of three or more characters is led by its rarest bigram (see
``EmbeddedBackend._phrase``), a sloppy phrase by its rarest character, and each candidate then costs a
position check per character and per unit of slop; ``match_all`` reads every document. A query whose
estimate fits ``INLINE_POSTINGS_PER_MS × timeout`` runs in the caller's thread (handing it off would
cost more than running it); any other runs in a killable worker process (workers.py). One lookup per
distinct term of the query: the DSL's limits bound how many there are.

    >>> from tansaku.core.analysis import char_analyzer
    >>> df = {("text_bi", "東京"): 40, ("text_bi", "京都"): 5, ("text", "東"): 90}.get
    >>> cost = QueryCost(char_analyzer(), lambda f, t: df((f, t), 0), str, num_docs=100)
    >>> cost.postings({"match": {"text": {"query": "東京都", "operator": "or",
    ...                                     "minimum_should_match": None, "boost": 1.0}}})
    1180
"""

from __future__ import annotations

# Weighted so that tantivy gets through >40k estimated postings per ms on 2 contended cores (measured on the
# 100k generated documents of bench/search.py: its normal queries' largest estimate, 3.2M, took 28 ms; 31
# multi_match with minimum_should_match, the slowest kind, 43k per ms): a query under this many per ms of
# timeout takes at most about a twentieth of it (100 ms of 2 s), too little to need stopping.
INLINE_POSTINGS_PER_MS = 2000
PHRASE_POSITIONS = 8  # a phrase candidate's positions cost about this many doc-id postings per character
MATCH_WEIGHT = 4  # a posting scored into a union (match) costs about four of a phrase intersection's
# setting up one term of the query (its weight, its posting list) costs ~5 µs, 500 postings' worth
TERM_COST = 500


class QueryCost:
    """Posting-list reads of canonical queries on one index (``doc_freq(field, term)`` → documents)."""

    def __init__(self, analyzer, doc_freq, keyword_field, num_docs: int):
        self.analyzer, self.keyword_field, self.num_docs = analyzer, keyword_field, num_docs
        self._doc_freq, self._seen = doc_freq, {}

    def df(self, field: str, term: str) -> int:
        key = (field, term)
        if key not in self._seen:  # a phrase repeats its characters; look each one up once
            self._seen[key] = int(self._doc_freq(field, term))
        return self._seen[key]

    def match(self, field: str, text: str) -> int:
        terms = self.analyzer.match_terms(text)
        return sum(TERM_COST + MATCH_WEIGHT * self.df(f"{field}_bi" if bigram else field, t) for t,
                   bigram in terms)

    def phrase(self, field: str, text: str, slop: int) -> int:
        tokens = self.analyzer.tokens(text)
        if len(tokens) <= 1:
            return TERM_COST + self.df(field, tokens[0]) if tokens else 0
        if not slop and self.analyzer.has_bigrams:  # led by the rarest bigram (EmbeddedBackend._phrase)
            pairs = {a + b for a, b in zip(tokens, tokens[1:])}
            lead = min(self.df(f"{field}_bi", p) for p in pairs)
            if len(tokens) == 2:
                return TERM_COST + lead
            return (len(tokens) + len(pairs)) * (TERM_COST + lead * PHRASE_POSITIONS)
        lead = min(self.df(field, t) for t in set(tokens))
        return len(tokens) * (TERM_COST + lead * PHRASE_POSITIONS * (1 + slop))

    def postings(self, q: dict, budget: int | None = None) -> int:
        """Estimated postings of ``q``; past ``budget`` it may stop counting (then it returns more than
        it)."""
        (kind, body), = q.items()
        if kind == "match":
            (f, s), = body.items()
            return self.match(f, s["query"])
        if kind == "match_phrase":
            (f, s), = body.items()
            return self.phrase(f, s["query"], s["slop"])
        if kind == "multi_match":
            fields = [spec.partition("^")[0] for spec in body["fields"]]
            if body["type"] == "phrase":
                return sum(self.phrase(f, body["query"], 0) for f in fields)
            return sum(self.match(f, body["query"]) for f in fields)
        if kind == "term":
            (f, s), = body.items()
            return TERM_COST + self.df(self.keyword_field(f), s["value"])
        if kind == "terms":
            (f, values), = ((k, v) for k, v in body.items() if k != "boost")
            return sum(TERM_COST + self.df(self.keyword_field(f), v) for v in values)
        if kind == "match_all":
            return self.num_docs
        # Only must_not: every other document. Past the budget the rest need not be looked up (31 long clauses
        # would take 15 ms).
        total = self.num_docs if not (body["must"] or body["filter"] or body["should"]) else 0
        for c in (c for occ in ("must", "should", "must_not", "filter") for c in body[occ]):
            total += self.postings(c, None if budget is None else budget - total)
            if budget is not None and total > budget:
                break
        return total
