"""The one query language: a validated subset of the OpenSearch query DSL, shared by both backends.

``parse_request(query, size, fields, limits)`` accepts what a model or a user writes — plain text, a
JSON string, a clause dict (``{"bool": …}``) or a request body (``{"query": …, "size": N}``) — and
returns ``(canonical_query, size)``. The canonical query is valid OpenSearch DSL with every option
spelled out; the OpenSearch backend sends it as is, the embedded backend translates it to tantivy
queries, and the tests evaluate it by brute force. Anything else raises ``QueryError`` whose message
names the clause path and the rule or limit, so a model can fix its next call.

Supported (OpenSearch semantics):
  match {field: text | {query, operator: or|and, minimum_should_match, boost}}     (text fields)
  match_phrase {field: text | {query, slop, boost}}   (in-order matching; slop counts gaps)
  multi_match {query, fields: ["title^2", "text"], type: best_fields|most_fields|phrase,
               operator, minimum_should_match, tie_breaker, boost}
  term {field: value | {value, boost}}, terms {field: [values], boost}               (keyword fields)
  bool {must, should, must_not, filter, minimum_should_match, boost} (nesting allowed), match_all
A plain string means ``multi_match`` (most_fields) over title and text.
Every limit (``Limits`` and the ``MAX_*`` of ``dsl_limits``: nesting, clauses, fields per multi_match, text
and request length, terms, ``minimum_should_match`` — an integer within ±1000 or a percentage within ±100 %,
sloppy phrases) is checked here, before any translation, so both the work and the error are bounded; the
backends' timeout covers the rest.
Embedded backend, ``char`` analyzer: ``match`` terms are the character bigrams of each query word (a
one-character word is itself), and ``operator`` / ``minimum_should_match`` count those terms; phrases
stay exact over characters (whitespace ignored). See ``analysis.py``.

    >>> parse_request("東京", 3, Fields(keyword=("source",)))[1]
    3
    >>> parse_request({"regexp": {"text": ".*"}}, 5, Fields())
    Traceback (most recent call last):
    ...
    tansaku.envs.search.dsl.QueryError: query.regexp: 'regexp' is not allowed (regular expressions are too
    expensive); use match or match_phrase
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from tansaku.core.errors import InputError
from tansaku.core.text_values import holds_surrogate

from .dsl_limits import MAX_KEYWORD_CHARS, MAX_MSM_COUNT, MAX_REQUEST_CHARS, MAX_TEXT_CHARS, Limits

LEAF_CLAUSES = ("match", "match_phrase", "multi_match", "term", "terms", "match_all")
CLAUSES = LEAF_CLAUSES + ("bool",)
# Clauses a model may plausibly try, with the reason they are refused.
FORBIDDEN = {
    "script": "scripts are never run",
    "script_score": "scripts are never run",
    "function_score": "custom scoring is not supported",
    "regexp": "regular expressions are too expensive",
    "wildcard": "wildcards are too expensive",
    "prefix": "prefix scans are too expensive",
    "fuzzy": "fuzzy matching is too expensive",
    "query_string": "query_string syntax is not supported",
    "simple_query_string": "query_string syntax is not supported",
    "more_like_this": "more_like_this is not supported",
}
TEXT_FIELDS = ("title", "text")


class QueryError(InputError):
    """A query outside the supported subset or over a limit; the message is meant for the model."""


_MSM = re.compile(r"-?[0-9]{1,6}%?")  # ASCII digits only: int() accepts other scripts' digits, "²" fails


@dataclass(frozen=True)
class Fields:
    """The searchable fields of one index: analyzed text fields and exact-match keyword fields."""

    text: tuple[str, ...] = TEXT_FIELDS
    keyword: tuple[str, ...] = ()

    @property
    def all_keyword(self) -> tuple[str, ...]:
        return (("doc_id", "source", "title.keyword")
                + tuple(k for k in self.keyword if k not in ("doc_id", "source")))


def _is_number(x) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:  # an int too large for a float (a JSON number of 400 digits) is not a usable number
        return math.isfinite(x)
    except OverflowError:
        return False


def _one_line(msg: str, limit: int = 300) -> str:
    """Error messages quote what was written: keep them one short line whatever it contained."""
    msg = " ".join(msg.split())
    return msg if len(msg) <= limit else msg[:limit] + "…"


class _Validator:
    def __init__(self, fields: Fields, limits: Limits):
        self.fields, self.limits, self.count, self.sloppy, self.slop_work = fields, limits, 0, 0, 0

    def fail(self, path: str, msg: str):
        raise QueryError(_one_line(f"{path}: {msg}"))

    def boost(self, path: str, v) -> float:
        if v is None:
            return 1.0
        if not _is_number(v) or v < 0 or v > 1000:
            self.fail(f"{path}.boost", "boost must be a number between 0 and 1000")
        return float(v)

    def text(self, path: str, v) -> str:
        if not isinstance(v, str) and not _is_number(v):
            self.fail(path, "query text must be a string")
        v = str(v)
        if not v.strip():
            self.fail(path, "query text is empty")
        if holds_surrogate(v):  # JSON's "\ud800": no engine can encode it (a traceback, not a refusal)
            self.fail(path, "query text holds a lone surrogate (not UTF-8 text)")
        if len(v) > self.limits.max_text_chars:
            self.fail(path, f"query text has {len(v)} characters; the limit is {self.limits.max_text_chars}")
        return v

    def msm(self, path: str, v):
        """An integer within ±MAX_MSM_COUNT or a percentage within ±100 % (as int or str) — nothing else."""
        if v is None:
            return None
        rule = (f"use an integer from -{MAX_MSM_COUNT} to {MAX_MSM_COUNT} (2, -1) "
                "or a percentage from -100% to 100% ('75%', '-25%')")
        if isinstance(v, str) and _MSM.fullmatch(v.strip()):
            s = v.strip()
            n = int(s.rstrip("%"))
            if s.endswith("%"):
                if abs(n) > 100:
                    self.fail(f"{path}.minimum_should_match", rule)
                return f"{n}%"
            v = n
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_MSM_COUNT:
            return v
        self.fail(f"{path}.minimum_should_match", rule)

    def params(self, path: str, v: dict, allowed: tuple[str, ...]):
        if not isinstance(v, dict):
            self.fail(path, "expected an object")
        for k in v:
            if k == "fuzziness":
                self.fail(f"{path}.fuzziness", "fuzzy matching is too expensive and not supported")
            if k not in allowed:
                self.fail(f"{path}.{k}", f"unknown parameter; allowed: {', '.join(allowed)}")

    def one_field(self, path: str, body, kind: str, allowed_fields: tuple[str, ...]):
        if not isinstance(body, dict) or len(body) != 1:
            self.fail(path,
                      f"{kind} takes exactly one field, e.g. {{\"{kind}\": {{\"{allowed_fields[0]}\": …}}}}")
        (fname, spec), = body.items()
        if fname not in allowed_fields:
            hint = "keyword" if kind in ("term", "terms") else "text"
            other = " (for text fields use match)" if hint == "keyword" else " (for exact values use term)"
            self.fail(f"{path}.{fname}", f"'{fname}' is not a {hint} field for {kind}; "
                      f"use one of: {', '.join(allowed_fields)}{other}")
        return fname, spec

    def clause(self, q, path: str, depth: int) -> dict:
        self.count += 1
        if self.count > self.limits.max_clauses:
            self.fail(path, f"too many clauses; the limit is {self.limits.max_clauses} per query")
        if depth > self.limits.max_depth:
            self.fail(path, f"bool nesting is deeper than the limit of {self.limits.max_depth}")
        if not isinstance(q, dict) or len(q) != 1:
            keys = ", ".join(map(str, list(q)[:8])) if isinstance(q, dict) else type(q).__name__
            self.fail(path,
                      f"a clause is an object with exactly one key (one of {', '.join(CLAUSES)}); got {keys}")
        (kind, body), = q.items()
        p = f"{path}.{kind}"
        if kind in FORBIDDEN:
            self.fail(p, f"'{kind}' is not allowed ({FORBIDDEN[kind]}); use match or match_phrase")
        if kind not in CLAUSES:
            self.fail(p, f"unsupported clause '{kind}'; supported: {', '.join(CLAUSES)}")
        return getattr(self, kind)(body, p, depth)

    def match(self, body, p, depth):
        f, spec = self.one_field(p, body, "match", self.fields.text)
        spec = spec if isinstance(spec, dict) else {"query": spec}
        self.params(f"{p}.{f}", spec, ("query", "operator", "minimum_should_match", "boost"))
        op = str(spec.get("operator", "or")).lower()
        if op not in ("or", "and"):
            self.fail(f"{p}.{f}.operator", "operator must be 'or' or 'and'")
        return {"match": {f: {"query": self.text(f"{p}.{f}.query", spec.get("query")), "operator": op,
                              "minimum_should_match": self.msm(f"{p}.{f}", spec.get("minimum_should_match")),
                              "boost": self.boost(f"{p}.{f}", spec.get("boost"))}}}

    def match_phrase(self, body, p, depth):
        f, spec = self.one_field(p, body, "match_phrase", self.fields.text)
        spec = spec if isinstance(spec, dict) else {"query": spec}
        self.params(f"{p}.{f}", spec, ("query", "slop", "boost"))
        slop = spec.get("slop", 0)
        if not isinstance(slop, int) or isinstance(slop, bool) or not 0 <= slop <= self.limits.max_slop:
            self.fail(f"{p}.{f}.slop", f"slop must be an integer from 0 to {self.limits.max_slop}")
        text = self.text(f"{p}.{f}.query", spec.get("query"))
        self.sloppy, self.slop_work = (self.sloppy + bool(slop),
                                       self.slop_work + len("".join(text.split())) * slop)
        if self.sloppy > self.limits.max_sloppy_phrases or self.slop_work > self.limits.max_slop_work:
            self.fail(f"{p}.{f}.slop",
                      f"sloppy phrases (slop ≥ 1) so far: {self.sloppy} clause(s), {self.slop_work} "
                      f"characters × slop; the limit is {self.limits.max_sloppy_phrases} clauses and "
                      f"{self.limits.max_slop_work} characters × slop per query: shorten them, lower slop or "
                      f"use slop 0")
        return {"match_phrase": {f: {"query": text, "slop": slop,
                                     "boost": self.boost(f"{p}.{f}", spec.get("boost"))}}}

    def multi_match(self, body, p, depth):
        self.params(p, body,
                    ("query", "fields", "type", "operator", "minimum_should_match", "tie_breaker", "boost"))
        fields = body.get("fields", list(self.fields.text))
        if isinstance(fields, str):
            fields = [fields]
        if not isinstance(fields, list) or not fields:
            self.fail(f"{p}.fields", "fields must be a non-empty list like [\"title^2\", \"text\"]")
        if len(fields) > self.limits.max_fields:
            self.fail(f"{p}.fields", f"{len(fields)} fields; the limit is {self.limits.max_fields}")
        out_fields, names = [], set()
        for f in fields:
            if not isinstance(f, str):
                self.fail(f"{p}.fields", "each field is a string like \"title^2\"")
            name, _, boost = f.partition("^")
            if name not in self.fields.text:
                self.fail(f"{p}.fields", f"'{name}' is not a text field; use: {', '.join(self.fields.text)}")
            if name in names:
                self.fail(f"{p}.fields", f"'{name}' is listed twice; list each field once")
            names.add(name)
            try:
                b = float(boost) if boost else 1.0
            except ValueError:
                b = -1.0
            if not 0 <= b <= 1000:
                self.fail(f"{p}.fields", f"bad boost in '{f}'; write 'title^2'")
            out_fields.append(f"{name}^{b:g}")
        typ = body.get("type", "best_fields")
        if typ not in ("best_fields", "most_fields", "phrase"):
            self.fail(f"{p}.type", "type must be best_fields, most_fields or phrase")
        op = str(body.get("operator", "or")).lower()
        if op not in ("or", "and"):
            self.fail(f"{p}.operator", "operator must be 'or' or 'and'")
        tb = body.get("tie_breaker", 0.0)
        if not _is_number(tb) or not 0 <= tb <= 1:
            self.fail(f"{p}.tie_breaker", "tie_breaker must be a number from 0 to 1")
        return {"multi_match": {"query": self.text(f"{p}.query", body.get("query")), "fields": out_fields,
                                "type": typ, "operator": op, "tie_breaker": float(tb),
                                "minimum_should_match": self.msm(p, body.get("minimum_should_match")),
                                "boost": self.boost(p, body.get("boost"))}}

    def keyword_value(self, path, v) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, str) or _is_number(v):
            v = str(v)
            if holds_surrogate(v):
                self.fail(path, "a keyword value holds a lone surrogate (not UTF-8 text)")
            if len(v) > MAX_KEYWORD_CHARS:
                self.fail(path, f"a keyword value has {len(v)} characters; the limit is {MAX_KEYWORD_CHARS}")
            return v
        self.fail(path, "a keyword value must be a string or a number")

    def term(self, body, p, depth):
        f, spec = self.one_field(p, body, "term", self.fields.all_keyword)
        spec = spec if isinstance(spec, dict) else {"value": spec}
        self.params(f"{p}.{f}", spec, ("value", "boost"))
        return {"term": {f: {"value": self.keyword_value(f"{p}.{f}.value", spec.get("value")),
                             "boost": self.boost(f"{p}.{f}", spec.get("boost"))}}}

    def terms(self, body, p, depth):
        if not isinstance(body, dict):
            self.fail(p, "terms takes {\"field\": [values]}")
        body = dict(body)
        boost = self.boost(p, body.pop("boost", None))
        f, values = self.one_field(p, body, "terms", self.fields.all_keyword)
        if not isinstance(values, list) or not values:
            self.fail(f"{p}.{f}", "terms takes a non-empty list of values")
        if len(values) > self.limits.max_terms:
            self.fail(f"{p}.{f}", f"{len(values)} values; the limit is {self.limits.max_terms}")
        return {"terms": {f: [self.keyword_value(f"{p}.{f}[{i}]", v) for i, v in enumerate(values)],
                          "boost": boost}}

    def match_all(self, body, p, depth):
        self.params(p, body if body is not None else {}, ("boost",))
        return {"match_all": {"boost": self.boost(p, (body or {}).get("boost"))}}

    def bool(self, body, p, depth):
        self.params(p, body, ("must", "should", "must_not", "filter", "minimum_should_match", "boost"))
        out = {}
        for occ in ("must", "should", "must_not", "filter"):
            items = body.get(occ, [])
            items = items if isinstance(items, list) else [items]
            out[occ] = [self.clause(c, f"{p}.{occ}[{i}]", depth + 1) for i, c in enumerate(items)]
        if not any(out.values()):
            self.fail(p, "bool needs at least one of must, should, must_not, filter")
        out["minimum_should_match"] = self.msm(p, body.get("minimum_should_match"))
        out["boost"] = self.boost(p, body.get("boost"))
        return {"bool": out}


def _loads(text: str):
    if len(text) > MAX_REQUEST_CHARS:
        raise QueryError(f"query: {len(text)} characters of JSON; the limit is {MAX_REQUEST_CHARS}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise QueryError(f"query: looks like JSON but does not parse ({e.msg} at line {e.lineno} "
                         f"column {e.colno}); send valid JSON or plain text") from None
    except RecursionError:
        raise QueryError("query: JSON nested too deeply; the bool nesting limit is "
                         f"{Limits().max_depth}") from None
    except ValueError as e:  # a number of more than 4300 digits (Python's int parsing limit)
        raise QueryError(_one_line(f"query: JSON value refused ({e})")) from None


def parse_request(query, size: int | None, fields: Fields, limits: Limits = Limits(),
                  default_size: int = 10, max_size: int | None = None) -> tuple[dict, int]:
    """Validate what was written; return (canonical OpenSearch query, size).

    ``size`` wins over a ``"size"`` in the body; ``max_size`` can only tighten ``limits.max_size``.
    """
    if isinstance(query, str):
        s = query.strip()
        if not s:
            raise QueryError("query: empty; write words to search for or a JSON query")
        if s[0] in "{[":
            query = _loads(s)
        else:
            query = {"multi_match": {"query": s, "fields": list(fields.text), "type": "most_fields"}}
    if isinstance(query, dict) and "query" in query and not (set(query) - {"query", "size"}):
        if size is None and "size" in query:
            size = query["size"]
        query = query["query"]
    elif isinstance(query, dict) and len(query) > 1:
        raise QueryError(_one_line(f"query: unexpected top-level keys {sorted(map(str, query))[:8]}; "
                                   "send one clause or {\"query\": {…}, \"size\": N}"))
    if size is None:
        size = default_size
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise QueryError(_one_line(f"size: must be a positive integer, got {size!r}"))
    cap = min(limits.max_size, max_size or limits.max_size)
    if size > cap:
        raise QueryError(f"size: {size} is over the limit of {cap}")
    v = _Validator(fields, limits)
    return v.clause(query, "query", 1), size


def resolve_msm(spec, n_optional: int) -> int:
    """OpenSearch minimum_should_match arithmetic: 2, -1, '75%', '-25%' → a count ≥ 0.

    A positive integer above ``n_optional`` is kept as is: like OpenSearch, nothing can match then.
    """
    if spec is None:
        return 0
    s = str(spec).strip()
    if s.endswith("%"):
        pct = int(s[:-1])
        k = math.floor(n_optional * abs(pct) / 100)
        k = k if pct >= 0 else n_optional - k
    else:
        k = int(s)
        k = k if k >= 0 else n_optional + k
    return max(0, k)


def plain_text_query(text: str) -> dict:
    """``text`` as a plain multi_match query. A generated question or entity name is words, never the query
    DSL: passed as a string, one that starts with ``[`` or ``{`` would be parsed as JSON DSL and refused. Cut
    to the DSL's limit of characters per query text, which a long question would otherwise exceed.

    >>> plain_text_query('{"match_all": {}}')["multi_match"]["query"]
    '{"match_all": {}}'
    """
    return {"multi_match": {"query": text[:MAX_TEXT_CHARS], "fields": list(TEXT_FIELDS),
                            "type": "most_fields"}}
