"""Benchmark: how many main-provision articles of each law get a rule-based question (no ``--llm``), why the
others get none, and whether the questions are sound (0 leaks, every gold answer the article's text).

    python bench/egov_coverage.py                        # every group below, one table per group
    python bench/egov_coverage.py --groups dev heldout --json bench/results/egov_coverage.json
    python bench/egov_coverage.py LAW.xml DIR … [--samples KIND[,KIND] --n 20 --seed 0] [--uncovered N]

Each law file is built on its own (copied into a temp folder) with ``build_egov`` — the path of
``synth build egov --laws DIR --out OUT`` without ``--llm``; the retrieval stage is skipped (it ranks but drops
nothing without ``--max-retrieval-rank``). Per law:

  * articles / covered / coverage: main-provision (non-supplementary, non-deleted) articles of ``OUT/articles``
    with at least one question in ``OUT`` (train + test), and their share;
  * uncovered: each uncovered article's reason — a stage that dropped all its questions (``leak_filter:…``,
    ``dedup:near_duplicate``, ``gold_check:…``) or, for ``no_rule_target``, a diagnosis of its sentences:
    ``few_distractors`` (a kind matched but found no three distractors), ``no_kind_matched`` (standalone
    sentences, none of the kinds' grammar) or ``no_standalone:<why>`` when no sentence stands alone — its
    sentences cite a numbered provision (``reference``), lean on the paragraph or article before (``previous``),
    open or are items of a list (``list``), lean on a sentence that is not quotable (``leaning``) or have the wrong
    length (``length``); the most frequent of its sentences' reasons names it;
  * question_drops: questions dropped per stage and reason (the engine's funnel);
  * leaks: rows of the final dataset the independent checker (``pipelines/egov/leak.py``) flags — must be 0;
  * gold: share of final rows whose gold answer is the article's own text (a check independent of the
    generators: the quoted provision with the answer in its blank is sentences of the article — an elision （略）
    stands for any text —, with a distractor in the blank it is none; a true statement is a sentence of the article
    and its perturbations occur nowhere in the law; a term and its definition are the article's) and whose gold
    scores 1.0 under the task's reward — must be 1.0;
  * said (``distractor_said``): rows where a distractor put in the blank gives a sentence the law says elsewhere
    (from a phrase boundary; a list's item alone does not count) — a warning to read, not a failure.

Groups (``--groups``; default all): ``real`` ../shared/data/egov/*.xml (when present), ``examples``
examples/laws, ``fixtures`` the readable laws of tests/fixtures/egov, and the fictional laws of other shapes of
tests/fixtures/egov_laws: ``dev``, ``heldout1``, ``heldout2`` and ``heldout`` (its README: each held-out group was
written after a round of rule changes and measured once, unseen; ``heldout`` after the last). The pooled coverage
of a group counts its articles together. ``--samples`` prints ``--n`` random questions (fixed
``--seed``) of each named kind with their article's text; ``--uncovered N`` prints N uncovered articles per law
with their reason, for reading by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import unicodedata
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REAL = ROOT.parent / "shared" / "data" / "egov"
GROUPS = {"real": REAL, "examples": ROOT / "examples" / "laws", "fixtures": ROOT / "tests" / "fixtures" / "egov",
          "dev": ROOT / "tests" / "fixtures" / "egov_laws" / "dev",
          "heldout1": ROOT / "tests" / "fixtures" / "egov_laws" / "heldout1",
          "heldout2": ROOT / "tests" / "fixtures" / "egov_laws" / "heldout2",
          "heldout": ROOT / "tests" / "fixtures" / "egov_laws" / "heldout"}
if __name__ == "__main__":  # as a script: quiet and offline (tests import it and leave the environment alone)
    os.environ.setdefault("TANSAKU_QUIET", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tansaku.core.context import BuildContext  # noqa: E402  (after the path and quiet setup)
from tansaku.core.out_folder import EmptyBuildError  # noqa: E402
from tansaku.core.store import iter_rows, read_manifest  # noqa: E402
from tansaku.envs.tasks import EgovMCQ  # noqa: E402
from tansaku.pipelines.egov import cloze, leak, provisions, statements, subjects  # noqa: E402

try:  # the kinds of the general rules (absent when measuring the rules from before them)
    from tansaku.pipelines.egov import classic, lists  # noqa: E402
except ImportError:
    classic = lists = None
from tansaku.pipelines.egov.build import RULE_KINDS, build_egov  # noqa: E402
from tansaku.pipelines.egov.config import EgovConfig  # noqa: E402
from tansaku.pipelines.egov.parse import article_meta  # noqa: E402

try:
    from tansaku.pipelines.egov.quote import elide  # noqa: E402
except ImportError:  # measuring a version of the rules from before quote.py (the "before" numbers)
    def elide(sentence: str) -> str:
        return sentence

BLANK = "【　　】"
ELISION = re.compile(r"[（(]略[）)]")  # quote.py's mark, also as NFKC makes it
REFERENCE = re.compile(r"第[〇一二三四五六七八九十百千0-9０-９]+[条項号編章節款目]|条の[〇一二三四五六七八九十百千]+|"
                       r"[〇一二三四五六七八九十百千]+[条項](?!件)|乃至")
PREVIOUS = re.compile(r"前[項条号段各二三四五六七八九]|同[項条号]|後段|前[二三四五六七八九十]+[項条]")
LIST = re.compile(r"次に掲げる|次の各号|次のとおり|各号|左ノ|左ニ掲ク|次のいずれか")


def law_files(paths: list[str], groups: list[str]) -> list[tuple[str, Path]]:
    """(group, law file) pairs: the paths given (group ``given``), else every law of the named groups."""
    if paths:
        found = []
        for p in map(Path, paths):
            found += [("given", f) for f in (sorted(p.glob("*.xml")) if p.is_dir() else [p])]
        return found
    return [(g, f) for g in groups if GROUPS[g].is_dir() for f in sorted(GROUPS[g].glob("*.xml"))]


# ---------------------------------------------------------------- gold: is the answer the article's text?

LABEL = re.compile(r"^(?:附\u3000?則|第[〇一二三四五六七八九十百千]+条(?:の[〇一二三四五六七八九十百千]+)*(?:から第[〇一二三四五六七八九十百千]+条"
                   r"(?:の[〇一二三四五六七八九十百千]+)*まで)?|[0-9０-９]+|[一二三四五六七八九十百千]+|"
                   r"[イロハニホヘトチリヌルヲワカヨタレソツネナラム]|（[0-9０-９ｉｖｘ]+）)\u3000")


def _squash(text: str) -> str:
    return re.sub(r"[\s\u3000]+", "", unicodedata.normalize("NFKC", text))


def _sentences(text: str) -> list[str]:
    """``text`` (lines; a line's label — 第三条, ２, 一, イ, （１） — is layout) cut after each 。 outside brackets,
    or in an old law's line (katakana, no 。) at each ideographic space."""
    out = []
    for line in text.split("\n"):
        line, depth, start = LABEL.sub("", line), 0, 0
        if "。" not in line and not re.search("[ぁ-ん]", line):  # an old law's sentences, kept apart by a space
            out += line.split("\u3000")
            continue
        for i, ch in enumerate(line):
            depth += (ch in "（「『") - (ch in "）」』")
            if ch == "。" and depth <= 0:
                out.append(line[start:i + 1])
                start = i + 1
        out.append(line[start:])
    return [t for t in map(_squash, out) if t]


def _quote(question: str) -> str | None:
    """The quoted provision of a blank question: from the first line opening with 「 to the last 」."""
    lines = question.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("「")), None)
    if start is None:
        return None
    quote = "\n".join(lines[start:])
    return quote[1:quote.rindex("」")] if "」" in quote else None


def _matches(sentence: str, article: set[str]) -> bool:
    """Whether a quoted sentence is one of the article's, its elisions standing for any text."""
    if sentence in article:
        return True
    if not ELISION.search(sentence):
        return False
    pattern = re.compile(".+".join(re.escape(p) for p in ELISION.split(sentence)))
    return any(pattern.fullmatch(s) for s in article)


def _said(text: str, law: str) -> bool:
    """Whether the law says ``text`` (its elision-free pieces) somewhere, starting at a phrase boundary."""
    pieces = [p.rstrip("。") for p in ELISION.split(text) if len(p.rstrip("。")) >= 4]
    return bool(pieces) and all(re.search(r"(?:^|(?<=[、。「（\n]))" + re.escape(p), law) for p in pieces)


def gold_problem(row: dict, article: dict, law_text: str, law_lines: str = "") -> tuple[str | None, bool]:
    """(why the row's gold answer is not the article's text — None: it is —, whether a distractor put in the
    blank is said somewhere in the law), checked from the row and the texts alone, with no code of the
    generators: the quoted provision with the answer in its blank must be sentences of the article and with a
    distractor must not; a true statement must be a sentence of the article and its perturbations nowhere in the
    law; a term and its definition must be the article's."""
    task_problem = EgovMCQ().gold_problem(row)
    if task_problem:
        return task_problem, False
    sentences, answer = set(_sentences(article["text"])), row["answer"]
    distractors = [c for i, c in enumerate(row["choices"]) if i != row["answer_index"]]
    quote = _quote(row["question"])
    if quote is not None and BLANK in quote:
        if not all(_matches(s, sentences) for s in _sentences(quote.replace(BLANK, answer))):
            return "the provision with the answer in its blank is not the article's", False
        blanked = [s for s in _sentences(quote.replace(BLANK, "\u0000")) if "\u0000" in s]
        context = [s for s in blanked if s != "\u0000"]  # a list's item alone is said where its own list is
        filled = [s.replace("\u0000", _squash(d)) for d in distractors for s in blanked]
        if any(_matches(s, sentences) for s in filled):
            return "a distractor in the blank gives a sentence of the article", False
        law = law_lines or "\n".join(_sentences(law_text))
        return None, any(_said(s.replace("\u0000", _squash(d)), law) for d in distractors for s in context)
    if row["kind"] == "true_statement":
        if _squash(answer) not in sentences:
            return "the true statement is not a sentence of the article", False
        law = _squash(law_text)
        if any(_squash(d).rstrip("。") in law for d in distractors):
            return "a false statement occurs in the law", False
        return None, False
    if row["kind"] == "term":
        text = _squash(article["text"])
        if _squash(answer) not in text or (quote and _squash(quote) not in text):
            return "the term or its definition is not in the article", False
        return None, False
    return (None if _squash(answer) in _squash(article["text"]) else "the answer is not in the article"), False


# ---------------------------------------------------------------- why an article gets no question


def sentence_reason(sentence: str, in_item: bool) -> str:
    sentence = elide(sentence)  # as the generators quote it
    if REFERENCE.search(sentence):
        return "reference"
    if PREVIOUS.search(sentence):
        return "previous"
    if in_item or LIST.search(sentence) or sentence.endswith(statements.FRAGMENT):
        return "list"
    if not cloze.MIN_SENTENCE <= len(sentence) <= statements.MAX_STEM:
        return "length"
    if cloze.LEANS.match(sentence):
        return "leaning"
    return "clean"


def article_sentences(article: dict) -> list[tuple[str, bool]]:
    """(sentence, is inside an item) of the article's paragraphs and items."""
    out: list[tuple[str, bool]] = []

    def walk(node: dict, in_item: bool) -> None:
        out.extend((s, in_item) for s in cloze.split_sentences(node.get("text") or ""))
        for item in node.get("items", []):
            walk(item, True)

    for p in json.loads(article["paragraphs"]):
        walk(p, False)
    return out


@contextmanager
def padded_distractors():
    """Every kind's distractor search answers with as many (placeholder) values as it asks for: what targets
    the article would have with distractors enough. Diagnosis only."""
    real = cloze.nearest_values

    def padded(pool, pos, keep, n):
        found = real(pool, pos, keep, n)
        return found + [f"〔仮{i}〕" for i in range(n - len(found))]

    modules = [m for m in (cloze, statements, provisions, subjects, lists, classic) if m is not None]
    for m in modules:
        m.nearest_values = padded
    try:
        yield
    finally:
        for m in modules:
            m.nearest_values = real


def diagnose(article: dict, pools: dict) -> str:
    """Why a generator gave ``article`` no target (see the module docstring)."""
    reasons = [sentence_reason(s, in_item) for s, in_item in article_sentences(article)]
    if "clean" in reasons or not reasons:
        with padded_distractors():
            law = article["law_id"]
            found = (cloze.cloze_targets(article, pools["cloze"].get(law, {"units": {}, "terms": []}))
                     + statements.statement_targets(article, pools["statements"][law])
                     + provisions.provision_targets(article, pools["provisions"].get(law, {}))
                     + (lists.list_targets(article, pools["lists"].get(law, {})) if lists else [])
                     + (classic.classic_targets(article, pools["classic"].get(law, {})) if classic else []))
        return "few_distractors" if found else "no_kind_matched"
    counts = Counter(reasons)
    order = ("reference", "previous", "list", "leaning", "length")
    return "no_standalone:" + max(order, key=lambda r: (counts[r], -order.index(r)))


# ---------------------------------------------------------------- one law


def measure(law: Path, group: str, work: Path) -> dict:
    """Build one law alone; its coverage, the reasons of the uncovered, drops, leaks and gold checks."""
    laws = work / law.stem / "laws"
    laws.mkdir(parents=True)
    shutil.copy(law, laws / law.name)
    out = work / law.stem / "out"
    empty = False
    try:
        build_egov(EgovConfig(laws=laws, retrieval=False), out, BuildContext(quiet=True))
    except EmptyBuildError:  # no articles (the unreadable fixtures: broken, xxe, …) or no question at all
        if not (out / "articles" / "manifest.json").exists():
            return {"articles": 0}
        empty = True
    articles = {a["id"]: a for a in iter_rows(out / "articles")}
    if not articles:
        return {"articles": 0}
    main = {i for i, a in articles.items() if not a["is_suppl"] and not article_meta(a).get("is_deleted")}
    rows = [] if empty else [r for split in ("train", "test") for r in iter_rows(out, split=split)]
    covered = {r["article_id"] for r in rows} & main
    rejected = list(iter_rows(out, split="rejected")) if (out / "data").is_dir() else []
    dropped_at: dict[str, str] = {}  # article id → the last stage:reason that dropped one of its questions
    no_target = set()
    for r in rejected:
        record = json.loads(r["record"]) if isinstance(r["record"], str) else (r["record"] or {})
        if r["reason"] == "no_rule_target":
            no_target.add(record.get("id"))
        elif record.get("article_id"):
            dropped_at[record["article_id"]] = f"{r['stage']}:{r['reason']}"
    ordered = list(articles.values())
    pools = {"cloze": cloze.law_pools(ordered), "statements": statements.law_statement_pools(ordered),
             "provisions": provisions.law_provision_pools(ordered),
             "lists": lists.law_list_pools(ordered) if lists else {},
             "classic": classic.law_classic_pools(ordered) if classic else {}}
    uncovered = {}
    for aid in sorted(main - covered, key=list(articles).index):
        uncovered[aid] = diagnose(articles[aid], pools) if aid in no_target else dropped_at.get(aid, "unknown")
    law_text = "\n".join(a["text"] for a in ordered)
    law_lines = "\n".join(_sentences(law_text))
    checks = {r["id"]: gold_problem(r, articles[r["article_id"]], law_text, law_lines) for r in rows}
    problems = [(rid, p) for rid, (p, _) in checks.items() if p]
    said = [rid for rid, (_, s) in checks.items() if s]
    manifest = {"stages": []} if empty else read_manifest(out)
    drops = Counter({f"{s['name']}:{reason}": n for s in manifest["stages"] for reason, n in s["dropped"].items()
                     if reason not in ("no_rule_target", "deleted_article")})
    title = next(iter(articles.values()))["law_title"] if articles else law.stem
    return {"law": title, "file": law.name, "group": group, "articles": len(main), "covered": len(covered),
            "coverage": round(len(covered) / len(main), 3) if main else None, "questions": len(rows),
            "kinds": dict(Counter(r["kind"] for r in rows)),
            "uncovered": dict(Counter(uncovered.values()).most_common()), "question_drops": dict(drops),
            "leaks": sum(leak.audit(rows).values()), "leaking_rows": sum(1 for r in rows if leak.row_leaks(r)),
            "gold": round(1 - len(problems) / len(rows), 4) if rows else None, "gold_problems": problems,
            "distractor_said": len(said), "distractor_said_ids": said[:10],
            "_rows": rows, "_articles": articles, "_uncovered": uncovered}


def pooled(results: list[dict]) -> dict:
    articles = sum(r["articles"] for r in results)
    covered = sum(r["covered"] for r in results)
    rows = sum(r["questions"] for r in results)
    bad = sum(len(r["gold_problems"]) for r in results)
    return {"laws": len(results), "articles": articles, "covered": covered,
            "coverage": round(covered / articles, 3) if articles else None, "questions": rows,
            "min_coverage": min((r["coverage"] for r in results if r["coverage"] is not None), default=None),
            "leaking_rows": sum(r["leaking_rows"] for r in results), "gold": round(1 - bad / rows, 4) if rows else None,
            "distractor_said": sum(r["distractor_said"] for r in results),
            "uncovered": dict(sum((Counter(r["uncovered"]) for r in results), Counter()).most_common())}


def table(results: list[dict]) -> str:
    kinds = [k for k in RULE_KINDS if any(k in r["kinds"] for r in results)]
    head = ["law", "articles", "covered", "coverage", "questions", "leaks", "gold", "said", *kinds, "uncovered (top 3)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        top = ", ".join(f"{k} {n}" for k, n in list(r["uncovered"].items())[:3])
        cov = "–" if r["coverage"] is None else f"{r['coverage']:.1%}"
        gold = "–" if r["gold"] is None else f"{r['gold']:.3f}"
        cells = [r["law"], r["articles"], r["covered"], cov, r["questions"], r["leaking_rows"], gold, r["distractor_said"],
                 *(r["kinds"].get(k, 0) for k in kinds), top]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def samples(results: list[dict], kind: str, n: int, seed: int) -> str:
    """``n`` questions of ``kind`` drawn with ``seed`` from every measured law, with their article text."""
    pool = [(r, row) for r in results for row in r["_rows"] if row["kind"] == kind]
    pool.sort(key=lambda p: p[1]["id"])
    picked = random.Random(f"{seed}-{kind}").sample(pool, min(n, len(pool)))
    out = [f"## {kind} ({len(picked)} of {len(pool)})\n"]
    for k, (r, row) in enumerate(picked, 1):
        article = r["_articles"][row["article_id"]]
        choices = "\n".join(f"   {'*' if i == row['answer_index'] else ' '} {i + 1}. {c}"
                            for i, c in enumerate(row["choices"]))
        out.append(f"### {kind}-{k}  {row['law_title']} {row['article_title']}\n\n```\n{row['question']}\n{choices}\n"
                   f"article: {article['text'][:600]}\n```\n")
    return "\n".join(out)


def uncovered_texts(result: dict, n: int) -> str:
    out = [f"## {result['law']}: uncovered {len(result['_uncovered'])}\n"]
    for aid, reason in list(result["_uncovered"].items())[:n]:
        out.append(f"### {aid}  {reason}\n\n```\n{result['_articles'][aid]['text'][:500]}\n```\n")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("laws", nargs="*", help="law XML files or folders (one build per file); default: --groups")
    ap.add_argument("--groups", nargs="+", choices=list(GROUPS), default=list(GROUPS))
    ap.add_argument("--json", help="also write the results (per law and pooled per group) as JSON here")
    ap.add_argument("--samples", default="", help="comma-separated kinds to print samples of")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--uncovered", type=int, default=0, help="print this many uncovered articles per law")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for group, law in law_files(args.laws, args.groups):
            result = measure(law, group, Path(tmp))
            if result["articles"]:  # the unreadable fixtures (broken, xxe, …) have none; a law of 附則 alone too
                results.append(result)
    groups = {g: [r for r in results if r["group"] == g] for g in dict.fromkeys(r["group"] for r in results)}
    summary = {g: pooled(rs) for g, rs in groups.items()}
    for g, rs in groups.items():
        s = summary[g]
        print(f"\n### {g}: {s['covered']}/{s['articles']} = {s['coverage']:.1%} pooled (lowest law "
              f"{s['min_coverage']:.1%}), {s['questions']} questions, leaking rows {s['leaking_rows']}, "
              f"gold {s['gold']}, a distractor said elsewhere {s['distractor_said']}\n")
        print(table(rs))
        print(f"\nuncovered by reason: {s['uncovered']}")
    for r in results:
        for rid, problem in r["gold_problems"]:
            print(f"GOLD PROBLEM {rid}: {problem}")
        for rid in r["distractor_said_ids"]:
            print(f"DISTRACTOR SAID {rid}")
    for kind in filter(None, args.samples.split(",")):
        print("\n" + samples(results, kind, args.n, args.seed))
    if args.uncovered:
        for r in results:
            print("\n" + uncovered_texts(r, args.uncovered))
    if args.json:
        keep = [k for k in results[0] if not k.startswith("_")] if results else []
        data = {"groups": summary, "laws": [{k: r[k] for k in keep} for r in results]}
        Path(args.json).write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
