"""Write a larger fictional mini-wiki: a few hundred seeded articles with infoboxes and links, in the JSONL
shape of ``examples/miniwiki.jsonl`` (``id, title, text, url, source_text, outgoing_link, redirect``).

    python -m tansaku.examples.make_miniwiki                    # rewrites examples/miniwiki_large.jsonl
    python examples/make_miniwiki.py --out /tmp/wiki.jsonl --seed 1

Every name is invented (rare kanji pairs, combined at random). Five kinds of article — 県, 市, 人物, 会社,
小説 — link to each other through single-valued infobox fields (県庁所在地, 都道府県, 市長, 出身地, 創業者,
本社所在地, 著者, 出版社 …), so ``synth build multihop`` finds several hundred 2-hop chains on them.

Why the body text is so plain: each article states every infobox field as ``<field>は<value>。``, the
field name being the relation word the template questions use. The answer to a hop is then always the
words after the question's relation word in the hit, which a 135M model can learn to copy within a few
hundred SFT rows; natural prose would test reading more than searching. The ``bench/efficacy.py`` run
and the compact multihop task (``tansaku.envs.tasks``) are built on it.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("miniwiki_large.jsonl")
SIZES = {"県": 8, "市": 40, "人物": 90, "会社": 36, "小説": 70}  # articles per kind
PLACE_1 = "霞雫茜楓萩澪暁蛍汐凪朧翠"
PLACE_2 = ("ヶ原", "沢", "浦", "ノ森", "ヶ丘", "津", "瀬", "野")
FAMILY_1 = "鷺榊椿柊楠樫檜萩蓮菖葵桐"
FAMILY_2 = "坂塚沼淵堀垣巻縞"
GIVEN = ("一馬", "遥", "健吾", "美汐", "拓真", "彩葉", "直人", "真澄", "蒼", "千尋", "湊", "紬", "颯太", "栞",
         "朔", "雅樂", "琴音", "環", "玲央", "澄江")
COMPANY = ("製菓", "電機", "工業", "商会", "酒造", "紡績")
PUBLISHER = ("書房", "出版", "文庫")
NOVEL_1 = ("月影", "風花", "星屑", "夏草", "青嵐", "朧月", "白露", "雪灯", "水鏡", "鈴虫")
NOVEL_2 = ("庭", "舟", "歌", "坂道", "門", "塔", "港", "森", "島", "手紙")
JOBS = ("小説家", "画家", "建築家", "実業家", "政治家", "作曲家", "写真家", "医師")
TREES = ("ケヤキ", "クスノキ", "ブナ", "シラカバ", "イチョウ", "クロマツ", "サクラ", "カエデ")
FLOWERS = ("ツツジ", "キキョウ", "リンドウ", "スイセン", "ユリ", "アジサイ", "ツバキ", "コスモス")
INFOBOX = {"県": "都道府県", "市": "日本の市", "人物": "人物", "会社": "会社", "小説": "書籍"}


def _names(rng: random.Random, count: int, make) -> list[str]:
    """``count`` distinct names from ``make(rng)``."""
    seen: list[str] = []
    while len(seen) < count:
        name = make(rng)
        if name not in seen:
            seen.append(name)
    return seen


def entities(seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    places = _names(rng, SIZES["県"] + SIZES["市"], lambda r: r.choice(PLACE_1) + r.choice(PLACE_2))
    companies = SIZES["会社"]
    return {
        "県": [p + "県" for p in places[: SIZES["県"]]],
        "市": [p + "市" for p in places[SIZES["県"]:]],
        "人物": _names(rng, SIZES["人物"], lambda r: r.choice(FAMILY_1) + r.choice(FAMILY_2) + r.choice(GIVEN)),
        # about a third are publishers (書房, 出版, 文庫), so every novel's 出版社 is a company article
        "会社": _names(rng, companies, lambda r: r.choice(PLACE_1) + r.choice("光星陽月") + r.choice(
            PUBLISHER if r.random() < 0.34 else COMPANY)),
        "小説": _names(rng, SIZES["小説"], lambda r: r.choice(NOVEL_1) + "の" + r.choice(NOVEL_2)),
    }


def facts(names: dict[str, list[str]], seed: int) -> dict[str, list[tuple[str, str, bool]]]:
    """``{title: [(field, value, is_link), …]}``; every field single-valued, mayors and capitals unique."""
    rng = random.Random(seed + 1)
    prefs, cities, people, companies, novels = (names[k] for k in ("県", "市", "人物", "会社", "小説"))
    publishers = [c for c in companies if c.endswith(PUBLISHER)] or companies[:5]
    mayors = rng.sample(people, len(cities))
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for i, pref in enumerate(prefs):
        out[pref] = [("県庁所在地", cities[i], True), ("県の木", rng.choice(TREES), False)]
    for i, city in enumerate(cities):
        pref = prefs[i] if i < len(prefs) else rng.choice(prefs)  # a capital lies in its own prefecture
        out[city] = [("都道府県", pref, True), ("市長", mayors[i], True), ("市の花", rng.choice(FLOWERS), False)]
    for person in people:
        out[person] = [("出身地", rng.choice(cities), True), ("職業", rng.choice(JOBS), False),
                       ("生年", f"{rng.randrange(1900, 1991)}年", False)]
    for company in companies:
        out[company] = [("創業者", rng.choice(people), True), ("本社所在地", rng.choice(cities), True),
                        ("設立年", f"{rng.randrange(1890, 2011)}年", False)]
    for novel in novels:
        out[novel] = [("著者", rng.choice(people), True), ("出版社", rng.choice(publishers), True),
                      ("刊行年", f"{rng.randrange(1950, 2021)}年", False)]
    return out


def article(i: int, title: str, kind: str, fields: list[tuple[str, str, bool]]) -> dict:
    text = f"{title}（架空の{kind}）。" + "".join(f"{f}は{v}。" for f, v, _ in fields)
    box = "\n".join(f"| {f} = {f'[[{v}]]' if link else v}" for f, v, link in fields)
    source = f"{{{{基礎情報 {INFOBOX[kind]}\n| 名前 = {title}\n{box}\n}}}}\n'''{title}'''\n{text}\n[[Category:架空]]"
    return {"id": f"mwl{i:04d}", "title": title, "text": text, "url": f"https://example.invalid/wiki/{title}",
            "source_text": source, "outgoing_link": [v for _, v, link in fields if link], "redirect": []}


def make_miniwiki(seed: int = 0) -> list[dict]:
    names = entities(seed)
    table = facts(names, seed)
    kinds = [(title, kind) for kind, titles in names.items() for title in titles]
    return [article(i, title, kind, table[title]) for i, (title, kind) in enumerate(kinds, 1)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = make_miniwiki(args.seed)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} articles -> {args.out}")


if __name__ == "__main__":
    main()
