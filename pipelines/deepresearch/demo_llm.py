"""A scripted LLM for the deepresearch demo and tests: plausible answers computed from the prompt itself.

It reads which prompt it got from the system message's first line (``# deepresearch/<kind> v1``) and
the data blocks of the user message (【キーワード】, 【対象】, 【記事】 …), so the whole pipeline runs
over any small corpus without an endpoint: ``--llm scripted:deepresearch``. The writer really searches
(tool calls through ``tansaku.envs.environments.SearchEnvironment``) and cites only doc ids it saw; the
single-page judge answers "yes" exactly when one article names every entity. It is a demo of the plumbing, not
a model: its instructions are templates.

    from tansaku.pipelines.deepresearch.demo_llm import demo_llm
    llm = demo_llm()              # a tansaku.core.llm.ScriptedLLM
"""

from __future__ import annotations

import re

from tansaku.core import jsontext
from tansaku.core.llm import ScriptedLLM

_KIND = re.compile(r"^# deepresearch/(\w+) v\d+")
_HIT = re.compile(r"doc_id: (\S+) \| title: ([^\n|]+)(?:\n([^\n]*))?")
_DOC_BLOCK = re.compile(r"- doc_id: (\S+) \| title: ([^\n]+)\n([^\n]*)")
_SENTENCE_WITH_NUMBER = re.compile(r"[^。]*\d[^。]*。")


def _block(text: str, label: str) -> str:
    """The text after 【label】 up to the next 【…】 label at a line start."""
    match = re.search(rf"【{label}】\n?(.*?)(?=\n【|\Z)", text, re.DOTALL)
    return match.group(1).strip() if match else ""


def _names(text: str, label: str) -> list[str]:
    return [n for n in _block(text, label).split("、") if n]


def _as_json(obj: dict) -> str:
    return jsontext.dumps(obj)


def _writer(messages: list[dict]) -> dict:
    user = next(m["content"] for m in messages if m["role"] == "user")
    keywords = _names(user, "キーワード")
    tool_texts = [str(m.get("content", "")) for m in messages if m.get("role") == "tool"]
    if not tool_texts:
        return {"content": "", "tool_calls": [{"type": "function", "function": {"name": "search",
                                                                                "arguments": {"query": k}}}
                                              for k in keywords[:3]]}
    hits = [(d, t.strip(), s or "") for text in tool_texts for d, t, s in _HIT.findall(text)]
    supporting: list[str] = []
    for keyword in keywords:  # per keyword: its own article first, else the first hit that mentions it
        ranked = sorted(hits, key=lambda h: (h[1] != keyword, keyword not in h[2]))
        for doc_id, title, snippet in ranked:
            if (keyword == title or keyword in snippet) and doc_id not in supporting:
                supporting.append(doc_id)
                break
    names = "、".join(keywords)
    instruction = (f"{names}について、それぞれの概要と相互の関わり（歴史的な経緯や地域とのつながり）"
                   "を複数の資料で調べ、対象ごとに比較できる表を含むレポートにまとめてください。")
    return {"content": _as_json({"instruction": instruction, "supporting_doc_ids": supporting[:4],
                                 "entities": keywords, "report_format": "table"})}


def _single_page(user: str) -> str:
    entities = _names(user, "対象")
    article = _block(user, "記事")
    missing = [e for e in entities if e not in article]
    return _as_json({"answerable": not missing, "missing": "、".join(missing)})


def _quality(user: str) -> str:
    instruction, entities = _block(user, "指示"), _names(user, "対象")
    n_docs = int(_block(user, "根拠記事の数") or 0)
    named = sum(e in instruction for e in entities)
    scores = {"specificity": 5 if named >= 2 else 2, "multi_source": min(5, 1 + 2 * n_docs),
              "verifiability": 4, "clarity": 4 if 20 <= len(instruction) <= 300 else 2, "safety": 5}
    return _as_json({"scores": scores, "comment": f"{named} 個の対象を明記、根拠記事 {n_docs} 件"})


def _clarify_question(user: str) -> str:
    """The initial request names the entities and leaves out the instruction's viewpoint and format; the
    question asks for them."""
    entities = _names(user, "対象") or ["対象"]
    names = "、".join(entities)
    return _as_json({
        "request": f"{names}について調べて、レポートにまとめてください。",
        "question": f"{entities[0]}などについて、どのような観点を中心に調べればよいですか？"
                    "まとめ方に希望があれば教えてください。"})


def _clarify_answer(user: str) -> str:
    """The user holds the instruction: its part after 「について、」 is what the initial request left out."""
    instruction = _block(user, "指示")
    detail = instruction.split("について、", 1)[-1].strip()
    if detail.endswith("ください。"):
        detail = detail[: -len("ください。")] + "ほしいです。"
    return _as_json({"answer": f"{detail}特に歴史的な経緯を中心にお願いします。"})


def _clarify_question_judge(user: str) -> str:
    instruction, request, question = _block(user, "指示"), _block(user, "最初の依頼"), _block(user,
                                                                                       "確認の質問")
    return _as_json({"request_ok": bool(request) and len(request) < len(instruction),
                     "question_ok": "？" in question or "?" in question, "reason": "形式を確認"})


def _clarify_answer_judge(user: str) -> str:
    answer = _block(user, "ユーザーの回答")
    return _as_json({"answer_ok": bool(answer) and not answer.endswith(("？", "?")), "reason": "形式を確認"})


def _rubric(user: str) -> str:
    entities = _names(user, "対象")
    instruction = _block(user, "指示")
    criteria = [{"criterion": f"{e}の概要と、他の対象との関わりを説明している", "weight": 2, "scale": "0-2",
                 "kind": "coverage", "entities": [e], "source_doc_ids": []} for e in entities]
    for doc_id, title, text in _DOC_BLOCK.findall(user):
        sentence = next(iter(_SENTENCE_WITH_NUMBER.findall(text)), "")
        if sentence:
            criteria.append({"criterion": f"{title.strip()}について「{sentence.strip()}」"
                                          f"という記述と一致する事実を書いている",
                             "weight": 1.5, "scale": "binary", "kind": "fact", "entities": [title.strip()],
                             "source_doc_ids": [doc_id]})
    if "表" in instruction:
        criteria.append({"criterion": f"{'、'.join(entities)}を比較する表を含めている", "weight": 1,
                         "scale": "binary", "kind": "format", "entities": entities, "source_doc_ids": []})
    if _block(user, "ユーザーの回答"):
        criteria.append({"criterion": "確認の回答で指定された観点（歴史的な経緯）を中心に書いている",
                         "weight": 1,
                         "scale": "binary", "kind": "other", "entities": [], "source_doc_ids": []})
    return _as_json({"criteria": criteria[:10]})


def respond(request) -> str | dict:
    """The scripted answer to one ``ChatRequest``."""
    messages = request.messages
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    match = _KIND.match(system)
    if not match:
        raise ValueError("demo LLM only answers deepresearch prompts (system line '# deepresearch/<kind> "
                         "vN')")
    kind = match.group(1)
    if kind == "instruction":
        return _writer(messages)
    user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    answers = {"single_page": _single_page, "quality": _quality, "clarify_question": _clarify_question,
               "clarify_question_judge": _clarify_question_judge, "clarify_answer": _clarify_answer,
               "clarify_answer_judge": _clarify_answer_judge, "rubric": _rubric}
    if kind not in answers:
        raise ValueError(f"demo LLM has no script for prompt kind {kind!r}")
    return answers[kind](user)


def demo_llm(responder=respond):
    """A ``ScriptedLLM`` answering with ``responder`` (default :func:`respond`; tests wrap it)."""

    return ScriptedLLM(responder, model="scripted:deepresearch")
