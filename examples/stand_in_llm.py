"""A stand-in LLM that answers every synthesis prompt of tansaku, for the throughput benchmark and the streaming
tests: deterministic (the answer depends only on the request), no model, no GPU.

``respond(request)`` reads which prompt it got and answers in the shape the pipeline expects:

- e-Gov ``mcq_generate``: a question on the article's first sentence, three distractors that add a
  condition the article does not have; ``mcq_judge``: every rubric criterion met;
- multihop triple extraction: ``主語は値。`` sentences and ``AのB`` noun pairs of the article as triples, the
  sentence as evidence;
  question writing: 「{subject}」の{relation1}の{relation2}は何ですか？; the quality judge: natural, unambiguous,
  except that it finds a third of the questions (by a hash of the text) stiff (``natural`` 2) until the fixer
  has rewritten them as 「…を教えてください。」, so a build runs judge → fix → judge as it does with a real judge;
  the cardinality confirmation (``pipelines/multihop/cardinality.confirm_with_llm``): ``{"single_valued": true}``
  (it knows no relation, so it leaves the data's per-subject verdict as it stands);
- deepresearch: ``tansaku.pipelines.deepresearch.demo_llm.respond``;
- the rubric judge of ``train rl`` (``tansaku.envs.rubric_reward.judge_messages``): one score per criterion, its top
  points when the report holds at least half of the criterion's names and numbers (a doc id for a doc_id
  criterion), else 0 — a deterministic stand-in, not a judge of quality;
- trajectories: the teacher (requests with tools) and the rewriter are ``examples/teacher_script.py``; on a
  deepresearch row (the report agent's system prompt) the teacher is ``research``: it searches each subject the
  user's first turn names, opens each one's article and writes a report (a table of what it read, following the
  clarifying answer when the row has one) — the stand-in rubric judge above scores it.

Serve it over HTTP (the way ``bench/llm_throughput.py`` does) with
``python -m tansaku.testing.canned_server --responder tansaku.examples.stand_in_llm:respond
--latency lognormal:0.5,0.8 --slots 64``; or call it in process: ``--llm scripted:examples/stand_in_llm.py``.
"""

from __future__ import annotations

import json
import re
import zlib

from tansaku.examples import teacher_script
from tansaku.pipelines.deepresearch.demo_llm import respond as deepresearch_respond

_ARTICLE_NUMBER = re.compile(r"第[〇一二三四五六七八九十百千0-9０-９]+[条項号](の[〇一二三四五六七八九十]+)*")
_FACT = re.compile(r"^([^、。「」]{1,12})は([^、。「」]{1,20})$")
_NOUN = r"[一-龥ァ-ヶー々A-Za-z0-9・]"
_NOUN_OF_NOUN = re.compile(rf"({_NOUN}{{2,15}})の({_NOUN}{{2,8}})")
_DISTRACTOR_CONDITIONS = ("緊急の場合に限り", "書面による場合に限り", "一年以内に限り")
_CRITERION = re.compile(r"^\d+\. （0〜(\d+) 点）(.*)$", re.MULTILINE)
_TERM = re.compile(r"[一-龥ァ-ヶー々]{2,}|[0-9]{3,4}")
_GENERIC_TERMS = {"言及", "根拠", "文書", "県内", "以上", "著者", "出身地", "創業者", "出版社", "所在地", "本社所在地"}


def _json(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False)


def _data_section(prompt: str, marker: str) -> str:
    r"""What follows the last line that opens with ``marker``: the prompt's data. The instructions above it may
    name the marker mid-sentence (「以下の【条文】だけを根拠に」), so a plain first split would read them instead.

    >>> _data_section("以下の【条文】だけを根拠に。\n【条文】（民法 第四条）\n年齢十八歳をもって、成年とする。", "【条文】")
    '（民法 第四条）\n年齢十八歳をもって、成年とする。'
    """
    return re.split(rf"(?m)^{re.escape(marker)}", prompt)[-1]


def _egov_question(prompt: str) -> str:
    article = _data_section(prompt, "【条文】").split("\n", 1)[-1]
    sentence = next((s.strip() for s in re.split(r"[。\n]", article) if len(s.strip()) >= 8), article.strip()[:40])
    sentence = _ARTICLE_NUMBER.sub("", sentence)[:60] or "規定なし"
    wrong = [f"{condition}、{sentence}" for condition in _DISTRACTOR_CONDITIONS]
    return _json({"question": "次の規定の内容として正しいものはどれか。", "choices": [wrong[0], sentence, *wrong[1:]],
                  "answer_index": 1, "explanation": "条文の本文による。"})


def _triples(prompt: str) -> str:
    """``主語は値`` sentences as (title, 主語, 値); then every ``AのB`` noun pair of the text as (title, B, A), the
    shallow reading of "the article's B is A" a weak extractor makes of encyclopedia leads."""
    title = re.search(r"記事「(.+?)」", prompt)
    body = _data_section(prompt, "本文:")
    facts, mentions = [], []
    for sentence in body.split("。"):
        sentence = sentence.strip().split("\n")[-1]
        if not title or not sentence:
            continue
        if match := _FACT.match(sentence):
            facts.append({"subject": title.group(1), "relation": match.group(1), "object": match.group(2),
                          "evidence": sentence})
        for match in _NOUN_OF_NOUN.finditer(sentence):
            if match.group(1) != title.group(1):
                mentions.append({"subject": title.group(1), "relation": match.group(2), "object": match.group(1),
                                 "evidence": sentence})
    return _json({"triples": (facts + mentions)[:8]})


def _question_text(prompt: str) -> str:
    """「subject」のrelation1のrelation2は何ですか？ from the prompt's two facts ("" when it has none)."""
    subject = re.search(r"事実1: 「(.+?)」の(.+?)は「", prompt)
    relation2 = re.search(r"事実2: 「.+?」の(.+?)は「", prompt)
    if not subject or not relation2:
        return ""
    return f"「{subject.group(1)}」の{subject.group(2)}の{relation2.group(1)}は何ですか？"


def _question(prompt: str) -> str:
    return _json({"question": _question_text(prompt)})


FIXED_ENDING = "を教えてください。"


def _fixed_question(prompt: str) -> str:
    """The fixer's question: the writer's, ending as the judge wants it."""
    question = _question_text(prompt)
    return _json({"question": question.removesuffix("は何ですか？") + FIXED_ENDING if question else ""})


def _quality_verdict(prompt: str) -> str:
    """Natural and unambiguous, but stiff (``natural`` 2) for a third of the unfixed questions."""
    question = _data_section(prompt, "質問: ").split("\n", 1)[0]
    stiff = not question.endswith(FIXED_ENDING) and zlib.crc32(question.encode()) % 3 == 0
    return _json({"ambiguous": False, "natural": 2 if stiff else 4, "single_answer": True,
                  "time_dependent": False, "reasons": ["文末が硬い"] if stiff else []})


def _rubric_verdict(prompt: str) -> str:
    """``{"scores": [...]}`` with exactly one integer per criterion of the judge prompt (its count is stated there)."""
    head, _, criteria = prompt.rpartition("## 採点基準（")
    report = head.split(">", 1)[-1].rpartition("</report-")[0]
    count = int(re.match(r"\d+", criteria).group())
    scores = []
    for top, criterion in _CRITERION.findall(criteria)[:count]:
        terms = [t for t in _TERM.findall(criterion) if t not in _GENERIC_TERMS]
        met = (re.search(r"\b[a-z]+[0-9]{2,}", report) is not None if "doc_id" in criterion
               else bool(terms) and 2 * sum(t in report for t in terms) >= len(terms))
        scores.append(int(top) if met else 0)
    return _json({"scores": scores + [0] * (count - len(scores))})


def _subjects(request_text: str) -> list[str]:
    """The subjects a report request names: what precedes 「について」, split at 「、」 (the deepresearch demo's
    requests and instructions open so), else the text's first clause."""
    head = request_text.split("について", 1)[0] if "について" in request_text else re.split(r"[。、]", request_text)[0]
    return [s.strip() for s in head.split("、") if s.strip()][:6]


def _hits(text: str) -> list[tuple[str, str, str]]:
    """``(doc_id, title, snippet)`` of a search result's hits."""
    return [(d, t.split(" | ")[0].strip(), b) for d, t, b in teacher_script.HIT.findall(text.replace("【", "").replace("】", ""))]


def research(request) -> dict:
    """The next turn of the stand-in report agent: search every subject, open each one's article, then report.

    Reasoning in English (the translation pass has work), one tool call per turn, in the episode's tool
    interface (``search``/``open_doc`` or ``find``/``read``)."""
    turns = [m for m in request.messages if m.get("role") in ("user", "assistant")]
    first = next(m["content"] for m in turns if m["role"] == "user")
    # A clarifying exchange before the research: [user request, assistant question, user answer].
    exchange = turns[:3] if len(turns) >= 3 and turns[1]["role"] == "assistant" and not turns[1].get("tool_calls")         else []
    subjects, tools = _subjects(first), teacher_script._tool_names(request)
    history = teacher_script._history(request.messages)
    searched = {teacher_script._query({"name": n, "arguments": a}): r for n, a, r in history if n in ("search", "find")}
    opened = {a.get("doc_id"): r for n, a, r in history if n in ("open_doc", "read")}
    for subject in subjects:
        if subject not in searched:
            return teacher_script._search(tools, f"I need sources on {subject}; I search for it.", subject)
    pages = {}
    for subject in subjects:
        hits = _hits(searched[subject])
        own = next((h for h in hits if h[1] == subject), hits[0] if hits else None)
        if own is None:
            continue
        if own[0] not in opened:
            return teacher_script._call(tools[1], f"The hit {own[0]} is about {subject}; I open it to read the "
                                                  "whole article.", doc_id=own[0])
        pages[subject] = (own[0], opened[own[0]].partition("\n")[2].replace("[end of document]", "").strip())
    names = "、".join(subjects)
    lines = [f"# {names}の調査レポート", ""]
    if exchange:
        lines.append(f"ご回答いただいた観点（{exchange[2]['content'][:120]}）を中心に、各対象の概要と他の対象との"
                     "関わりを説明します。")
    else:
        lines.append("各対象の概要と他の対象との関わりを、検索で読んだ記事に基づいて説明します。")
    lines += ["", "| 対象 | 概要 | 根拠 |", "|---|---|---|"]
    for subject, (doc_id, body) in pages.items():
        lines.append(f"| {subject} | {body[:300].replace('|', '／')} | {doc_id} |")
    lines += ["", f"以上の表で{names}を比較しました。各対象の記述は上の根拠文書（doc_id）によります。"]
    return {"reasoning": f"I have read the articles on {len(pages)} of {len(subjects)} subjects; I write the report "
                         "with a comparison table.", "content": "\n".join(lines)}


def respond(request) -> str | dict:
    """The stand-in answer to one ``ChatRequest`` (see the module docstring)."""
    system = next((m["content"] for m in request.messages if m["role"] == "system"), "")
    if system.startswith("# deepresearch/"):
        return deepresearch_respond(request)
    if request.tools and "調査エージェント" in system:  # the deepresearch task's report agent
        return research(request)
    if request.tools:
        return teacher_script.respond(request)
    prompt = next((m["content"] for m in reversed(request.messages) if m["role"] == "user"), "")
    if "## 採点基準（" in prompt:  # before the checks below: a report may contain any of their words
        return _rubric_verdict(prompt)
    if "ルーブリック" in prompt:
        return _json({"single_correct": 1, "grounded": 1, "plausible_distractors": 1, "no_leak": 1, "comment": "ok"})
    if "【条文】" in prompt:
        return _egov_question(prompt)
    if "三つ組" in prompt:
        return _triples(prompt)
    if "常に一つに決まりますか" in prompt and "single_valued" in prompt:  # multihop's cardinality confirmation
        return _json({"single_valued": True})
    if "質問の品質を審査" in prompt:
        return _quality_verdict(prompt)
    if "審査で問題が指摘されました" in prompt:
        return _fixed_question(prompt)
    if "クイズ作家" in prompt:
        return _question(prompt)
    if "検索エージェント" in prompt and "steps" in prompt:
        return teacher_script.rewrite(request)
    raise ValueError(f"stand-in LLM has no answer for this prompt: {prompt[:80]!r}")
