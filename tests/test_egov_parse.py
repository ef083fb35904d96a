"""e-Gov law XML → article records: fictional fixtures (v3, API v2 wrapper, old bulk, broken, hostile) and
the real 民法 / 行政手続法 (``realdata``)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from tansaku.pipelines.egov.extract import extract_article
from tansaku.pipelines.egov.parse import Skip, iter_articles, parse_law_bytes
from tansaku.pipelines.egov.xml_safety import UnsafeXMLError, check_xml_bytes, parse_xml_bytes

FIX = Path(__file__).parent / "fixtures" / "egov"
LIBRARY = FIX / "506AC0000000901_20250401_000000000000000.xml"
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "egov"
CONTRACT_COLUMNS = {"id", "title", "text", "url", "source", "meta", "law_id", "law_num", "law_title", "law_type",
                    "era", "promulgation_date", "article_num", "article_title", "caption", "paragraphs", "is_suppl"}


def records_of(path: Path) -> tuple[list[dict], list[Skip]]:
    items = list(iter_articles([path]))
    return [i for i in items if isinstance(i, dict)], [i for i in items if isinstance(i, Skip)]


@pytest.fixture(scope="module")
def library() -> dict[str, dict]:
    records, skips = records_of(LIBRARY)
    assert not skips
    return {r["id"]: r for r in records}


def test_v3_law_fields_and_structure(library):
    assert list(library) == [
        "506AC0000000901-1", "506AC0000000901-2", "506AC0000000901-3", "506AC0000000901-3_2",
        "506AC0000000901-4", "506AC0000000901-5", "506AC0000000901-6", "506AC0000000901-7",
        "506AC0000000901-8", "506AC0000000901-s0-p", "506AC0000000901-s1-1", "506AC0000000901-s1-2"]
    r = library["506AC0000000901-3_2"]
    assert set(r) == CONTRACT_COLUMNS
    assert (r["law_title"], r["law_num"], r["law_type"], r["era"], r["promulgation_date"]) == (
        "架空図書館運営法", "令和六年法律第九百一号", "Act", "Reiwa", "2024-05-10")
    assert (r["article_num"], r["article_title"], r["caption"], r["is_suppl"]) == ("3_2", "第三条の二", "（臨時休館）", False)
    assert r["title"] == "架空図書館運営法 第三条の二"
    assert r["text"].startswith("（臨時休館）\n第三条の二\u3000館長は、蔵書点検のため")
    meta = r["meta"]
    assert meta["path"] == ["第一章\u3000総則"] and meta["abbrev"] == ["図運法"] and meta["parser"] == "ja-law-parser"
    assert library["506AC0000000901-4"]["meta"]["path"] == ["第二章\u3000資料の貸出し", "第一節\u3000通則"]


def test_items_subitems_columns_and_proviso(library):
    paragraphs = json.loads(library["506AC0000000901-2"]["paragraphs"])
    assert [p["label"] for p in paragraphs] == ["", "２"]
    items = paragraphs[0]["items"]
    assert [i["title"] for i in items] == ["一", "二", "三"]
    assert items[0]["text"] == "利用者\u3000図書館の資料を閲覧し、又は借り受ける者をいう。"
    assert [s["title"] for s in items[1]["items"]] == ["イ", "ロ"]
    assert items[1]["items"][1]["text"] == "電磁的記録媒体に記録された著作物"
    assert "ロ\u3000電磁的記録媒体に記録された著作物" in library["506AC0000000901-2"]["text"]
    # main sentence and proviso are one paragraph text
    assert json.loads(library["506AC0000000901-3"]["paragraphs"])[0]["text"].endswith("ただし、館長が特に必要と認めるときは、この限りでない。")


def test_ruby_base_in_text_reading_in_meta(library):
    r = library["506AC0000000901-2"]
    assert "事務を掌る者" in r["text"] and "つかさど" not in r["text"]
    assert r["meta"]["ruby"] == [{"base": "掌", "reading": "つかさど"}]


def test_table_and_list_flattened(library):
    text = library["506AC0000000901-5"]["text"]
    assert "貸出冊数表" in text and "区分\u3000冊数" in text
    assert "一般の利用者\u3000十冊" in text and "児童である利用者\u3000五冊" in text
    assert library["506AC0000000901-6"]["text"].endswith("停止の期間は、書面で通知する。")


def test_suppl_provisions_flagged(library):
    s0, s1 = library["506AC0000000901-s0-p"], library["506AC0000000901-s1-1"]
    assert s0["is_suppl"] and s1["is_suppl"]
    assert "一年を経過した日から施行する" in s0["text"]
    assert s1["meta"]["amend_law_num"] == "令和七年法律第九百五号"


def test_deviant_article_falls_back_to_lxml(library):
    r = library["506AC0000000901-7"]  # Paragraph without ParagraphNum: ja-law-parser refuses it
    meta = r["meta"]
    assert meta["parser"] == "lxml" and "ParagraphNum" in meta["fallback_reason"]
    assert "資料を毀損した利用者は" in r["text"] and r["meta"]["ruby"][0]["reading"] == "き"


def test_deleted_article_kept_and_flagged(library):
    meta = library["506AC0000000901-8"]["meta"]
    assert meta["is_deleted"] and library["506AC0000000901-8"]["text"] == "第八条\u3000削除"


def test_both_extractors_agree_on_fixture():
    root = parse_xml_bytes(LIBRARY.read_bytes())
    for el in root.iter("Article"):
        jlp, why = extract_article(el)
        if why is None:  # ja-law-parser handled it: the lxml walk must give the same structure
            lx, _ = extract_article(el, prefer="lxml")
            assert {**jlp, "parser": ""} == {**lx, "parser": ""}, el.get("Num")


def test_api_v2_wrapper():
    records, skips = records_of(FIX / "harbor_api_v2.xml")
    assert not skips and [r["id"] for r in records] == [
        "507AC0000000902-1", "507AC0000000902-2", "507AC0000000902-3", "507AC0000000902-s0-p"]
    assert records[0]["law_title"] == "架空港湾清掃法" and records[0]["promulgation_date"] == "2025-03-31"
    assert records[0]["meta"]["abbrev"] == ["港清法"]


def test_old_bulk_format_with_datainfo_and_delete():
    records, skips = records_of(FIX / "old_bulk_format.xml")
    assert not skips
    assert [r["law_id"] for r in records] == ["418AC0000000903"] * 3
    assert records[0]["promulgation_date"] == "2006-06-15"
    assert [r["meta"]["is_deleted"] for r in records] == [False, True, False]


def test_broken_file_is_skipped_not_fatal():
    items = list(iter_articles([FIX / "broken.xml", LIBRARY, FIX / "does-not-exist.xml"]))
    skips = [i for i in items if isinstance(i, Skip)]
    assert [s.reason for s in skips] == ["not_xml", "missing_file"]
    assert "broken.xml" in skips[0].message and len(items) - len(skips) == 12


@pytest.mark.parametrize("attribute", ["PromulgateMonth", "PromulgateDay", "Year"])
@pytest.mark.parametrize("value", ["xx", "十二", "²", "9" * 5000, "-1"],
                         ids=["latin", "kanji", "superscript", "5000_digits", "signed"])
def test_one_law_with_bad_metadata_is_dropped_the_others_survive(tmp_path, attribute, value):
    """Issue 28: ``int("²")`` raises though ``"²".isdigit()``; one such law lost every other law."""
    good = LIBRARY.read_bytes()
    original = {"PromulgateMonth": b'PromulgateMonth="05"', "PromulgateDay": b'PromulgateDay="10"',
                "Year": b'Year="06"'}[attribute]
    bad = good.replace(original, f'{attribute}="{value}"'.encode(), 1)
    (tmp_path / LIBRARY.name).write_bytes(good)
    (tmp_path / "506AC0000000902_20250401_000000000000000.xml").write_bytes(bad)  # another law
    (tmp_path / "506AC0000000901_20260401_000000000000000.xml").write_bytes(bad)  # a newer revision of the first
    items = list(iter_articles([tmp_path]))
    skips = [i for i in items if isinstance(i, Skip)]
    assert sorted(s.reason for s in skips) == ["bad_law_metadata", "bad_law_metadata"]
    assert all(attribute in s.message and "not a promulgation date" in s.message for s in skips)
    kept = [i for i in items if isinstance(i, dict)]
    assert len(kept) == 12 and {r["law_id"] for r in kept} == {"506AC0000000901"}  # the older revision stays
    assert {r["promulgation_date"] for r in kept} == {"2024-05-10"}


def test_a_paragraph_number_that_is_not_ascii_digits_falls_back_to_its_position():
    data = LIBRARY.read_bytes().replace(b'<Paragraph Num="1">', b'<Paragraph Num="\xc2\xb2">', 1)
    assert data != LIBRARY.read_bytes()
    items = list(parse_law_bytes(data, LIBRARY.name))
    assert len([i for i in items if isinstance(i, dict)]) == 12 and not [i for i in items if isinstance(i, Skip)]


@pytest.mark.parametrize("name", ["xxe.xml", "billion_laughs.xml"])
def test_hostile_xml_rejected_with_clear_message(name):
    data = (FIX / name).read_bytes()
    with pytest.raises(UnsafeXMLError, match="DOCTYPE.*XXE and billion-laughs"):
        parse_xml_bytes(data, name)
    [skip] = list(parse_law_bytes(data, name))
    assert skip.reason == "dtd_declared"


def test_entity_declaration_without_prolog_scan_is_still_refused():
    # A DOCTYPE behind a comment that looks like an element start slips past the byte scan; the parser
    # options and the docinfo check still refuse it, and no entity is ever expanded.
    data = b'<?xml version="1.0"?><!-- <x> --><!DOCTYPE Law [<!ENTITY e SYSTEM "file:///etc/passwd">]><Law>&e;</Law>'
    with pytest.raises(UnsafeXMLError) as e:
        parse_xml_bytes(data)
    assert "root:" not in str(e.value)


def test_size_limit_and_utf16():
    with pytest.raises(UnsafeXMLError, match="over the limit"):
        check_xml_bytes(b"<Law/>" * 10, "big.xml", max_bytes=20)
    with pytest.raises(UnsafeXMLError, match="UTF-16"):
        check_xml_bytes("<Law/>".encode("utf-16"), "u16.xml")


def test_zip_input_matches_folder(tmp_path):
    archive = tmp_path / "laws.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in sorted(FIX.glob("*.xml")):
            zf.write(f, f"egov/{f.name}")
    from_zip, zip_skips = records_of(archive)
    from_dir, dir_skips = records_of(FIX)
    assert [r["id"] for r in from_zip] == [r["id"] for r in from_dir] and len(from_dir) == 19
    assert sorted(s.reason for s in zip_skips) == sorted(s.reason for s in dir_skips) == [
        "dtd_declared", "dtd_declared", "not_xml"]
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    assert [s.reason for s in records_of(tmp_path / "bad.zip")[1]] == ["bad_zip"]


# ---------------------------------------------------------------- real laws


def real_files() -> list[Path]:
    return sorted(REAL.glob("*.xml")) if REAL.exists() else []


@pytest.mark.realdata
@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/egov is absent")
@pytest.mark.parametrize("path", real_files(), ids=lambda p: p.name[:15])
def test_realdata_every_article_is_one_record(path):
    root = etree.parse(str(path)).getroot()
    records, skips = records_of(path)
    assert not skips
    main = [r for r in records if not r["is_suppl"]]
    assert len(main) == len(root.xpath("/Law/LawBody/MainProvision//Article"))
    suppl_articles = [r for r in records if r["is_suppl"] and r["meta"]["kind"] == "article"]
    assert len(suppl_articles) == len(root.xpath("/Law/LawBody/SupplProvision//Article"))
    assert len({r["id"] for r in records}) == len(records)
    # every record was read by ja-law-parser, and the lxml walk gives the same structure
    assert {r["meta"]["parser"] for r in records} == {"ja-law-parser"}
    for el in root.xpath("/Law/LawBody/MainProvision//Article"):
        jlp, _ = extract_article(el)
        lx, _ = extract_article(el, prefer="lxml")
        assert {**jlp, "parser": ""} == {**lx, "parser": ""}, el.get("Num")


@pytest.mark.realdata
@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/egov is absent")
def test_realdata_minpo_branch_articles():
    path = next(REAL.glob("129AC0000000089_*.xml"))
    by_id = {r["id"]: r for r in records_of(path)[0]}
    r = by_id["129AC0000000089-398_22"]
    assert r["article_title"] == "第三百九十八条の二十二" and r["caption"] == "（根抵当権の消滅請求）"
    assert by_id["129AC0000000089-3_2"]["text"].startswith("第三条の二\u3000法律行為の当事者が")
    assert by_id["129AC0000000089-1"]["promulgation_date"] == "1896-04-27"
