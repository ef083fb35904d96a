"""Japanese answer normalization: each rule alone and the composed normalize_answer."""

import pytest

from tansaku.envs.normalize import answers_match, compose, nfkc, normalize_answer, strip_quotes


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("『あまちゃん』", "あまちゃん"),
        ("「あまちゃん」。", "あまちゃん"),
        ("蛹化（ようか）", "蛹化"),
        ("石見（いわみ）銀山", "石見銀山"),
        ("ＮＨＫ大阪", "nhk大阪"),
        ("東京 都", "東京都"),
        ("１９６４年", "1964年"),
        ("“Tokyo Tower”", "tokyo tower"),
        ("ｱﾏﾁｬﾝ", "アマチャン"),
        ("大阪府！", "大阪府"),
    ],
)
def test_equivalent_forms_match(prediction, gold):
    assert answers_match(prediction, gold)


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("東京", "東京都"),  # a prefix is a different answer
        ("1964", "1964年"),  # units are not guessed away; aliases cover them
        ("第2次(1945年)", "第2次"),  # only kana readings are dropped, not arbitrary parentheses
        ("大阪府と京都府", "大阪府"),
        ("", ""),
    ],
)
def test_different_answers_do_not_match(prediction, gold):
    assert not answers_match(prediction, gold)


def test_aliases_are_accepted():
    assert answers_match("1964", "1964年", aliases=["1964", "昭和39年"])
    assert answers_match("昭和３９年", "1964年", aliases=["1964", "昭和39年"])


def test_composition_order_is_left_to_right():
    assert compose(nfkc, strip_quotes)("＂Ａ＂") == "A"
    assert normalize_answer("『東京』。") == "東京"
