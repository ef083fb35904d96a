"""Question generation for one law is linear in its articles (issue 28): the law's text is indexed once
(``lawindex.LawText``) and its distractor pools sorted once (``lawindex.ByPosition``). Both give exactly the
answers of what they replace — ``needle in text`` and ``sorted(pool, key=(distance, position, value))`` —
checked here on generated inputs, and the rule-based rows of the fixture laws, a synthetic law and (when
../shared/data is there) 民法 are the same with the indexes as with the old scans.

    pytest tests/test_egov_linear.py -q
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from fixtures.egov_articles import synthetic_law
from hypothesis import given, settings
from hypothesis import strategies as st

from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop
from tansaku.pipelines.egov import lawindex
from tansaku.pipelines.egov.build import _rules_stage
from tansaku.pipelines.egov.cloze import nearest_values
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.egov.lawindex import ByPosition, LawText

FIXTURES = Path(__file__).parent / "fixtures" / "egov"
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "egov"
ALPHABET = "甲乙はにをの、。\n"  # few characters: grams repeat, as 「しなければならない」 does in a law


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=300), data=st.data())
def test_law_text_contains_exactly_what_the_text_contains(text, data):
    law = LawText(text, small=0)  # always through the index
    i = data.draw(st.integers(0, len(text)))
    piece = text[i:i + data.draw(st.integers(0, 40))]
    edited = (piece[:len(piece) // 2] + data.draw(st.sampled_from(ALPHABET)) + piece[len(piece) // 2 + 1:]
              if piece else piece)
    for needle in (piece, edited, data.draw(st.text(alphabet=ALPHABET, max_size=30)), text, text + "甲"):
        assert (needle in law) == (needle in text), (needle, text)


def test_law_text_of_a_repetitive_law_falls_back_to_a_scan():
    text = "しなければならない。" * 5000
    law = LawText(text, small=0)
    assert "ならない。しなければならない。しなければ" in law and "しなくてもよい" not in law
    assert str(law) == text and len(law) == len(text)


def _old_nearest(pool, pos, keep, n):
    """cloze.nearest_values before issue 28: the whole pool sorted for every call."""
    out = []
    for _, value in sorted(pool, key=lambda pv: (abs(pv[0] - pos), pv[0], pv[1])):
        if value not in out and keep(value):
            out.append(value)
            if len(out) == n:
                break
    return out


pairs = st.lists(st.tuples(st.integers(0, 30), st.sampled_from("abcdefgh") | st.text("xyz", min_size=1, max_size=3)),
                 max_size=120)


@settings(max_examples=400, deadline=None)
@given(pool=pairs, pos=st.integers(-3, 33), rejected=st.sets(st.sampled_from("abcdefghxyz")), n=st.integers(1, 5),
       stateful=st.booleans())
def test_nearest_values_walk_gives_the_sorted_order(pool, pos, rejected, n, stateful):
    def keep_factory():
        accepted = set()

        def keep(value):  # like provisions' keep: a value that shares a first letter with one accepted is out
            if value in rejected or (stateful and value[0] in accepted):
                return False
            accepted.add(value[0])
            return True
        return keep

    assert nearest_values(ByPosition(pool), pos, keep_factory(), n) == _old_nearest(pool, pos, keep_factory(), n)


def test_nearest_walk_reads_by_value_when_a_pool_has_few_values():
    pool = ByPosition([(p, "三十日" if p % 2 else "十四日") for p in range(10_000)])
    walk = pool.nearest(5_000)
    assert [v for _, v in walk] == ["十四日", "三十日"]  # each once: nothing more to read


def _rows(articles):
    return [r.reason if isinstance(r, Drop) else r for r in _rules_stage(0, 2).fn(iter(articles))]


def _articles_of(xml: Path) -> list[dict]:
    from tansaku.core.store import iter_rows
    from tansaku.pipelines.egov.build import build_articles

    with tempfile.TemporaryDirectory() as d:
        build_articles(EgovConfig(laws=[xml]), Path(d) / "a", BuildContext(quiet=True))
        return list(iter_rows(Path(d) / "a"))


LAWS = (["synthetic", "small synthetic"] + sorted(FIXTURES.glob("506AC*.xml"))
        + sorted((Path(__file__).resolve().parents[1] / "examples" / "laws").glob("*.xml"))
        + sorted(REAL.glob("129AC*.xml")))  # 民法, when ../shared/data is there


def _law(which) -> list[dict]:
    if which == "synthetic":
        return synthetic_law(600)
    if which == "small synthetic":
        return synthetic_law(40, seed=1)
    return _articles_of(which)


@pytest.mark.parametrize("which", LAWS, ids=lambda w: getattr(w, "name", w))
def test_rule_rows_are_the_same_with_the_indexes(which, monkeypatch):
    articles = _law(which)
    monkeypatch.setattr(lawindex, "SMALL", 0)  # every law through the gram index, however short
    new = _rows(articles)
    monkeypatch.setattr(lawindex, "SMALL", 10**12)  # the old scans: plain `in`, the whole pool sorted each time
    monkeypatch.setattr(ByPosition, "nearest",
                        lambda self, pos: iter(sorted(self.pairs, key=lambda pv: (abs(pv[0] - pos), pv[0], pv[1]))))
    old = _rows(articles)
    assert json.dumps(new, ensure_ascii=False, default=str) == json.dumps(old, ensure_ascii=False, default=str)
    assert any(isinstance(r, dict) for r in new), which
