"""The independent leak checker catches every spelling of a law name, provision number and e-Gov id,
and leaves ordinary legal Japanese alone."""

from __future__ import annotations

import pytest

from tansaku.pipelines.egov.leak import audit, find_leaks, find_leaks_in_text, law_name_forms, row_leaks

LEAKY = {
    "第三条に定める期間": "provision_number",
    "第3条の規定": "provision_number",
    "第３条の規定": "provision_number",
    "第 三 条": "provision_number",
    "第\u3000十二\u3000条": "provision_number",
    "同条第二項の場合": "provision_number",
    "第２項": "provision_number",
    "前条第十二号に掲げる者": "provision_number",
    "第百号": "provision_number",
    "第三章に定める手続": "provision_number",
    "同条の二の規定": "branch_number",
    "条の２に基づく": "branch_number",
    "条の十五": "branch_number",
    "三条の定め": "bare_number",
    "３項の場合": "bare_number",
    "12条により": "bare_number",
    "Article 3 says": "english_article",
    "art. 12": "english_article",
    "129AC0000000089 の条文": "egov_id",
    "ＩＤは129AC0000000089": "egov_id",
    "505AC0000000053による改正": "egov_id",
    "明治二十九年法律第八十九号": "law_number",
    "平成５年法律": "law_number",
}
CLEAN = ["第三者に対抗することができる", "三十日以内に届け出る", "一年を経過した日", "条件を付す", "前条の規定により",
         "次の事項を定める", "二十万円以下の過料", "第一審の判決", "三項目", "七日前まで", "規則で定める"]


@pytest.mark.parametrize("text,kind", LEAKY.items())
def test_every_number_form_is_caught(text, kind):
    kinds = {k for k, _ in find_leaks_in_text(text)}
    assert kind in kinds, (text, kinds)


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_text_is_not_flagged(text):
    assert find_leaks_in_text(text) == []


def test_law_names_title_stem_abbrev_kana():
    names = law_name_forms(["行政手続法"], ["行手法"], ["ぎょうせいてつづきほう"])
    assert set(names) == {"行政手続法", "行政手続", "行手法", "ぎょうせいてつづきほう"}
    for text in ("行政手続法によれば", "行政手続の原則", "行手法上の", "ぎょうせいてつづきほうの"):
        assert ("law_title" in {k for k, _ in find_leaks_in_text(text, names)}), text
    # a two-character title is matched whole only (民法 → not 民)
    assert law_name_forms(["民法"]) == ["民法"]
    assert find_leaks_in_text("国民の権利", law_name_forms(["民法"])) == []
    assert find_leaks_in_text("ﾐﾝﾎﾟｳ 民法の規定", law_name_forms(["民法"])) == [("law_title", "民法")]


def test_choices_are_checked_too():
    row = {"question": "空欄に入るものはどれか。", "choices": ["十日", "第十条", "二十日", "三十日"]}
    assert find_leaks(row) == [("provision_number", "第十条")]


def test_row_leaks_uses_the_rows_own_law_columns():
    row = {"question": "図運法によれば、貸出期間は？", "choices": ["十五日", "十日", "五日", "三日"],
           "law_title": "架空図書館運営法", "law_abbrev": "図運法", "law_kana": "", "law_id": "506AC0000000901",
           "article_id": "506AC0000000901-4"}
    assert row_leaks(row) == [("law_title", "図運法")]
    row["question"] = "506AC0000000901-4 の貸出期間は？"
    assert {k for k, _ in row_leaks(row)} == {"egov_id", "article_id"}
    row["question"] = "貸出期間は？"
    assert row_leaks(row) == [] and audit([row]) == {}
    assert audit([row, {**row, "choices": ["第四条", "a", "b", "c"]}]) == {"provision_number": 1}
