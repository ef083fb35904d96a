"""Question generation pieces around the generators: the LLM generator and judge (prompts versioned in
``pipelines/egov/prompts/*.md``), near-duplicate removal, seeded answer-position balancing and the
retrieval rank of the source article. The rule-based kinds live in ``cloze.py``, ``statements.py``,
``provisions.py``, ``subjects.py``, ``lists.py`` and ``classic.py``.

Every function here works on plain row dicts so ``build.py`` can wrap them as engine stages::

    rows_or_drops = llm_generate(client, articles)          # one ChatRequest per article
    rows_or_drops = llm_judge(client, rows, articles_by_id, threshold=0.75)
    kept = near_duplicates(rows)                            # yields rows and Drop("near_duplicate")
    balanced = balance_positions(rows, seed=0)              # answer position counts differ by ≤ 1
    rank = retrieval_rank(backend, row["question"], row["article_id"], k=20)
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

from tansaku.core.engine import Drop, rng_for
from tansaku.core.llm import ChatRequest, ask_json
from tansaku.envs.search.dsl import plain_text_query

PROMPTS = Path(__file__).with_name("prompts")
GENERATE_PROMPT = "mcq_generate_v1"
JUDGE_PROMPT = "mcq_judge_v1"
LABELS = "ABCD"
MCQ_SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string"},
                   "choices": {"type": "array", "items": {"type": "string"}, "minItems": 4, "maxItems": 4},
                   "answer_index": {"type": "integer", "minimum": 0, "maximum": 3},
                   "explanation": {"type": "string"}},
    "required": ["question", "choices", "answer_index", "explanation"],
}
RUBRIC = ("single_correct", "grounded", "plausible_distractors", "no_leak")
JUDGE_SCHEMA = {"type": "object", "properties": {k: {"type": "integer", "enum": [0, 1]} for k in RUBRIC}
                | {"comment": {"type": "string"}}, "required": list(RUBRIC)}


def load_prompt(name: str) -> tuple[str, str]:
    """(template text without its header comment, version tag) of ``prompts/<name>.md``."""
    text = (PROMPTS / f"{name}.md").read_text(encoding="utf-8")
    body = re.sub(r"^<!--.*?-->\s*", "", text, flags=re.S)
    return body, name


def fill(template: str, **values: str) -> str:
    # Plain replacement, not str.format: the prompts contain literal JSON braces.
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def _article_prompt_values(article: dict) -> dict:
    return {"law_title": article["law_title"], "article_title": article["article_title"],
            "article_text": article["text"]}


# ---------------------------------------------------------------- LLM generator


def llm_generate(client, articles: list[dict], seed: int = 0, max_tokens: int = 1024) -> list[dict | Drop]:
    """One question per article from the LLM; a Drop with a named reason for each failure."""

    template, version = load_prompt(GENERATE_PROMPT)
    requests = [ChatRequest(messages=[{"role": "user",
                                       "content": fill(template, **_article_prompt_values(a))}],
                            max_tokens=max_tokens, temperature=0.0, seed=seed, json_schema=MCQ_SCHEMA)
                for a in articles]
    out: list[dict | Drop] = []
    for data in ask_json(client, requests, MCQ_SCHEMA):
        if isinstance(data, Drop):
            out.append(data)
            continue
        row = validate_mcq(data)
        if isinstance(row, Drop):
            out.append(row)
            continue
        out.append(row | {"kind": "llm", "generator": f"llm:{version}"})
    return out


def validate_mcq(data: dict) -> dict | Drop:
    """Shape checks on a generated question: 4 distinct non-empty choices, an index in range."""
    question = str(data.get("question") or "").strip()
    choices = data.get("choices")
    if not question:
        return Drop("empty_question")
    if (not isinstance(choices, list) or len(choices) != 4
            or not all(isinstance(c, (str, int, float)) for c in choices)):
        return Drop("bad_choices")
    choices = [str(c).strip() for c in choices]
    if any(not c for c in choices) or len({unicodedata.normalize("NFKC", c) for c in choices}) != 4:
        return Drop("bad_choices")
    try:
        index = int(data.get("answer_index"))
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf), should one get past the schema
        return Drop("bad_answer_index")
    if not 0 <= index < 4:
        return Drop("bad_answer_index")
    return {"question": question, "choices": choices, "answer_index": index, "answer": choices[index],
            "explanation": str(data.get("explanation") or "").strip()}


# ---------------------------------------------------------------- LLM judge


def llm_judge(client, rows: list[dict], articles_by_id: dict[str, dict], threshold: float = 0.75,
              max_tokens: int = 256) -> list[dict | Drop]:
    """Score each row against the written rubric (mean of the four 0/1 criteria); drop below ``threshold``."""

    template, version = load_prompt(JUDGE_PROMPT)
    requests = []
    for row in rows:
        article = articles_by_id[row["article_id"]]
        choices = "\n".join(f"{LABELS[i]}. {c}" for i, c in enumerate(row["choices"]))
        prompt = fill(template, **_article_prompt_values(article), question=row["question"], choices=choices,
                      answer_label=f"{LABELS[row['answer_index']]}. {row['answer']}")
        requests.append(ChatRequest(messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                                    temperature=0.0, json_schema=JUDGE_SCHEMA))
    out: list[dict | Drop] = []
    verdicts = ask_json(client, requests, JUDGE_SCHEMA, error="judge_error", bad_json="judge_bad_json")
    for row, verdict in zip(rows, verdicts, strict=True):
        if isinstance(verdict, Drop):
            out.append(verdict)
            continue
        try:
            scores = {k: float(verdict[k]) for k in RUBRIC}
        except (KeyError, TypeError, ValueError):
            out.append(Drop("judge_bad_json"))
            continue
        if any(v not in (0.0, 1.0) for v in scores.values()):
            out.append(Drop("judge_bad_json"))
            continue
        quality = sum(scores.values()) / len(RUBRIC)
        if quality < threshold:
            out.append(Drop("low_quality"))
            continue
        out.append(row
                   | {"quality": quality, "quality_detail": json.dumps(scores), "judge": f"llm:{version}"})
    return out


# ---------------------------------------------------------------- near-duplicate removal


def _shingles(text: str, n: int = 3) -> set[str]:
    norm = re.sub(r"[\s\u3000、。「」（）【】・,.]", "", unicodedata.normalize("NFKC", text))
    return {norm[i:i + n] for i in range(max(1, len(norm) - n + 1))}


def _minhash(shingles: set[str], n_perm: int = 32):
    import numpy as np

    prime = (1 << 61) - 1
    params = np.random.default_rng(12345).integers(1, prime, size=(2, n_perm), dtype=np.uint64)
    hashes = np.array([int.from_bytes(hashlib.blake2b(s.encode(), digest_size=7).digest(), "big")
                       for s in shingles], dtype=np.uint64)
    # (a·x + b) mod p on uint64 overflows harmlessly: we only need a fixed, well-mixed permutation.
    return ((hashes[:, None] * params[0] + params[1]) % np.uint64(prime)).min(axis=0)


def near_duplicates(rows: Iterable[dict], threshold: float = 0.85, bands: int = 16) -> Iterator[dict | Drop]:
    """Keep the first of each group of near-identical questions (char-3-gram Jaccard of question +
    answer ≥ ``threshold``); MinHash LSH finds candidates, the exact Jaccard decides."""
    buckets: dict[tuple, list[int]] = {}
    kept: list[set[str]] = []
    for row in rows:
        sh = _shingles(row["question"] + "|" + row["answer"])
        sig = _minhash(sh)
        rows_per_band = len(sig) // bands
        keys = [(b, tuple(sig[b * rows_per_band:(b + 1) * rows_per_band].tolist())) for b in range(bands)]
        candidates = {i for key in keys for i in buckets.get(key, [])}
        if any(len(sh & kept[i]) / len(sh | kept[i]) >= threshold for i in candidates):
            yield Drop("near_duplicate", record=row)
            continue
        for key in keys:
            buckets.setdefault(key, []).append(len(kept))
        kept.append(sh)
        yield row


# ---------------------------------------------------------------- answer positions


def place_answer(row: dict, target: int, seed: int) -> dict:
    """Move the correct choice to ``target``; the distractors keep a seeded order around it."""
    answer = row["choices"][row["answer_index"]]
    others = [c for i, c in enumerate(row["choices"]) if i != row["answer_index"]]
    rng_for(seed, "distractors", row["id"]).shuffle(others)
    choices = others[:target] + [answer] + others[target:]
    return row | {"choices": choices, "answer_index": target, "answer": answer}


def balance_positions(rows: Iterable[dict], seed: int = 0) -> Iterator[dict]:
    """Assign answer positions over the whole dataset so counts per position differ by at most one:
    rows are put in a seeded random order and dealt positions round-robin."""
    rows = sorted(rows, key=lambda r: r["id"])
    order = list(range(len(rows)))
    rng = rng_for(seed, "positions", len(rows))
    rng.shuffle(order)
    start = rng.randrange(4)
    targets = [0] * len(rows)
    for rank, i in enumerate(order):
        targets[i] = (start + rank) % 4
    for row, target in zip(rows, targets):
        yield place_answer(row, target, seed)


# ---------------------------------------------------------------- retrieval signal


def search_query_of(question: str) -> str:
    """The searchable part of a question: the quoted text when there is one, else the question."""
    quoted = re.findall(r"「([^」]{6,})」", question)
    text = max(quoted, key=len) if quoted else question
    return text.replace("【　　】", " ").strip()


def retrieval_rank(backend, question: str, article_id: str, k: int = 20) -> int | None:
    """1-based rank of the source article among the top ``k`` documents for the question; None if absent
    (or when the question has nothing to search for)."""
    text = search_query_of(question)
    if not text:
        return None
    result = backend.search(plain_text_query(text), size=k)
    for rank, hit in enumerate(result.hits, 1):
        if hit.doc_id == article_id:
            return rank
    return None
