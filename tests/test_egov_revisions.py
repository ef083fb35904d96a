"""e-Gov inputs holding one law several times (revisions) give unique article ids, newest revision kept;
a law file whose name contains ``!`` is a plain file, not a zip member.

Fixtures are the fictional laws of tests/fixtures/egov, copied under e-Gov revision names with one
sentence changed, so the kept revision can be told apart.

    pytest tests/test_egov_revisions.py -q
"""

from __future__ import annotations

import shutil
import zipfile
from datetime import date
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tansaku.core.context import BuildContext
from tansaku.core.store import iter_rows
from tansaku.pipelines.egov.build import build_articles
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.egov.parse import iter_articles, superseded_revisions
from tansaku.pipelines.egov.sources import Skip, list_law_sources, read_law_source, split_source

FIX = Path(__file__).parent / "fixtures" / "egov"
LIBRARY = FIX / "506AC0000000901_20250401_000000000000000.xml"
LAW_ID = "506AC0000000901"
MARK = "この法律は、"  # the first sentence of 第一条 starts so in every fixture law


def revision(folder: Path, date: str, tag: str, name: str | None = None) -> Path:
    """A copy of the library law as revision ``date`` (YYYYMMDD) whose 第一条 says ``tag``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"{LAW_ID}_{date}_000000000000000.xml")
    path.write_bytes(LIBRARY.read_bytes().replace(MARK.encode(), f"{MARK}{tag}".encode(), 1))
    return path


def split(items) -> tuple[list[dict], list[Skip]]:
    items = list(items)
    return [i for i in items if isinstance(i, dict)], [i for i in items if isinstance(i, Skip)]


def article_one(records: list[dict]) -> dict:
    return next(r for r in records if r["id"] == f"{LAW_ID}-1")


def test_two_revisions_keep_the_newest_and_unique_ids(tmp_path):
    revision(tmp_path / "b", "20240401", "旧版")
    newer = revision(tmp_path / "a", "20260401", "新版")  # listed first: order must not decide
    records, skips = split(iter_articles([tmp_path]))
    single, _ = split(iter_articles([LIBRARY]))
    assert len(records) == len(single) == len({r["id"] for r in records})
    assert "新版" in article_one(records)["text"]
    assert [s.reason for s in skips] == ["duplicate_law_revision"] and str(newer) in skips[0].message


def test_build_drops_older_revision_articles_with_a_named_reason(tmp_path):
    revision(tmp_path / "laws", "20240401", "旧版")
    revision(tmp_path / "laws", "20260401", "新版")
    manifest = build_articles(EgovConfig(laws=[tmp_path / "laws"]), tmp_path / "out", BuildContext(quiet=True))
    rows = list(iter_rows(tmp_path / "out"))
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) > 0
    (parse,) = manifest["stages"]
    assert parse["dropped"] == {"duplicate_law_revision": len(rows)}
    assert "新版" in article_one(rows)["text"] and not any("旧版" in r["text"] for r in rows)
    assert all("20260401" in r["meta"]["source_file"] for r in rows)


def test_api_v2_revision_date_beats_file_order(tmp_path):
    wrapper = (FIX / "harbor_api_v2.xml").read_bytes()
    (tmp_path / "a_harbor.xml").write_bytes(wrapper.replace(b"2026-04-01", b"2027-10-01")
                                            .replace(MARK.encode(), f"{MARK}改正後".encode(), 1))
    (tmp_path / "z_harbor.xml").write_bytes(wrapper)
    records, skips = split(iter_articles([tmp_path]))
    assert len(records) == len({r["id"] for r in records}) > 0
    assert [(s.reason, Path(s.source).name) for s in skips] == [("duplicate_law_revision", "z_harbor.xml")]
    assert any("改正後" in r["text"] for r in records)


def test_same_revision_twice_is_kept_once(tmp_path):
    revision(tmp_path / "a", "20250401", "甲")
    revision(tmp_path / "b", "20250401", "乙")
    records, skips = split(iter_articles([tmp_path]))
    assert len(records) == len({r["id"] for r in records}) and len(skips) == 1
    assert "乙" in article_one(records)["text"]  # equal dates: the last source name wins, every run


def test_different_laws_are_not_revisions(tmp_path):
    for f in ("harbor_api_v2.xml", "old_bulk_format.xml"):
        shutil.copy(FIX / f, tmp_path / f)
    shutil.copy(LIBRARY, tmp_path / LIBRARY.name)
    assert superseded_revisions(s for s in list_law_sources([tmp_path]) if not isinstance(s, Skip)) == {}


@settings(max_examples=12, deadline=None)
@given(dates=st.lists(st.dates(min_value=date(1990, 1, 1)), min_size=1, max_size=4,
                      unique=True))
def test_any_set_of_revisions_keeps_exactly_the_newest(tmp_path_factory, dates):
    folder = tmp_path_factory.mktemp("revs")
    for i, d in enumerate(dates):
        revision(folder / f"d{i}", d.strftime("%Y%m%d"), f"版{d:%Y%m%d}")
    records, skips = split(iter_articles([folder]))
    assert len(records) == len({r["id"] for r in records})
    assert len(skips) == len(dates) - 1
    assert f"版{max(dates):%Y%m%d}" in article_one(records)["text"]


def test_bang_in_a_plain_file_name(tmp_path):
    plain = revision(tmp_path, "", "", name=f"{LAW_ID}_20250401_000000000000000!rev.xml")
    odd = revision(tmp_path, "", "", name="notes.zip!rev.xml")  # no notes.zip: still a plain file
    assert split_source(str(plain)) == (str(plain), None) and split_source(str(odd)) == (str(odd), None)
    assert read_law_source(str(plain)) == plain.read_bytes()
    records, skips = split(iter_articles([plain]))
    assert not skips and records and all(r["law_id"] == LAW_ID for r in records)
    records, skips = split(iter_articles([odd]))
    assert not skips and records


def test_bang_inside_a_zip_member_and_zip_name(tmp_path):
    archive = tmp_path / "e!gov.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"{LAW_ID}_20250401_000000000000000!rev.xml", LIBRARY.read_bytes())
    (name,) = list_law_sources([archive])
    assert split_source(name) == (str(archive), f"{LAW_ID}_20250401_000000000000000!rev.xml")
    assert read_law_source(name) == LIBRARY.read_bytes()
    records, skips = split(iter_articles([archive]))
    single, _ = split(iter_articles([LIBRARY]))
    assert not skips and [r["id"] for r in records] == [r["id"] for r in single]
