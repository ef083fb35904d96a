"""A scripted teacher and rewriter for the laptop demo of ``synth build trajectories`` (no GPU, no model).

``respond(request)`` is a small rule-based search agent: it reads the question (the multihop templates run
backwards: ``tansaku.pipelines.multihop.questions.template_parts``) and the
tool results already in the conversation, and decides the next real tool call (search, a bool query,
open_doc, a broader search) or the final ``{{answer}}``. Relation values are read from result text with a
table of patterns written for the example mini-wiki (``examples/miniwiki.jsonl``); when it cannot find a
value it gives up with a wrong answer, which the pipeline stores as a failure. Its reasoning is in English,
so the translation stage has work to do.

It speaks the tool interface of its episode (``tansaku.envs.tool_interfaces``): ``search(query=…)`` /
``open_doc(doc_id=…)``, or, when the request's tool schemas name ``find``, ``find(keywords=query.split())`` (plain
keywords: that interface has no JSON query, so no bool query either) / ``read(doc_id=…)``.

``rewrite(request)`` answers the translate/refine/scenario prompts of ``pipelines/trajectories/rewrite.py``
with templated Japanese reasoning (keyed by scenario), echoing every tool call unchanged.

Two styles. ``respond`` + ``rewrite`` (the default, for real models): scenario sentences, a bool query on
half the questions, several sentences per step. ``respond_compact`` + ``rewrite_compact`` (for the 135M
tiny model, whose budget is a few hundred tokens per episode and whose tokenizer spends 1–3 tokens per
Japanese character): plain-text queries only and one short Japanese sentence per step that states the
fact just read — ``SのR1はB。「B」を検索する。`` — so the value the next call copies sits right before it.

    synth build trajectories --dataset out/multihop --index out/index --out out/sft \
        --teacher scripted:examples/teacher_script.py --translator scripted:examples/teacher_script.py:rewrite \
        --general tests/fixtures/sft/general.jsonl --ratio 0.5 --n 1
    # compact: --teacher scripted:examples/teacher_script.py:respond_compact
    #          --translator scripted:examples/teacher_script.py:rewrite_compact
"""

from __future__ import annotations

import json
import re

from tansaku.pipelines.multihop.questions import template_parts
from tansaku.pipelines.multihop.relations import DEFAULT

W = r"[^\s、。『』「」（）()【】]"  # one "word" character of an entity name
PATTERNS = {
    "県庁所在地": [rf"県庁所在地は({W}{{1,6}}?[市町村])"],
    "出生地": [rf"({W}{{1,6}}?[市町村])出身"], "出身地": [rf"({W}{{1,6}}?[市町村])出身"],
    "都道府県": [rf"({W}{{1,5}}?県)"],
    "著者": [rf"({W}{{2,8}}?)の(?:長編)?小説"],
    "生年": [r"(\d{4}年)"], "設立": [r"(\d{4})年に", r"(\d{4}年)設立"], "設立年": [r"(\d{4}年)設立", r"(\d{4})年に"],
    "創業者": [rf"\d{{4}}年に({W}{{2,8}}?)が(?:設立|創業)", rf"({W}{{2,8}}?)が(?:設立|創業)"],
    "市長": [rf"市長の({W}{{2,8}}?)は"],
    "名誉市民": [rf"名誉市民に(?:{W}*?の)?({W}{{2,8}}?)がいる"],
    "職業": [rf"は、({W}{{2,6}}?)[。・]"],
    "最終学歴": [rf"({W}{{2,10}}?大学)(?:を)?卒業"],
    "所在地": [rf"は、({W}{{1,6}}?[市町村])に", rf"は、({W}{{1,6}}?[市町村])の"],
    "本社所在地": [rf"({W}{{1,6}}?[市町村])に本[社店]", rf"は、({W}{{1,6}}?[市町村])の"],
    "出版社": [rf"({W}{{2,8}}?)から\d{{4}}年に刊行", rf"({W}{{2,8}}?)刊"],
    "設計者": [rf"({W}{{2,8}}?)の設計"],
}
HIT = re.compile(r"doc_id: (\S+) \| title: ([^\n]+)\n([^\n]*)")
# The stand-in LLM's questions (examples/stand_in_llm.py) and its reading of "AのB" as "the B is A".
STAND_IN_QUESTION = re.compile(r"^「(.+?)」の(.+?)の(.+?)は何ですか？$")
NOUN = "一-龥ァ-ヶー々A-Za-z0-9・"


def _value(relation: str, entity: str, text: str) -> str | None:
    """The value of ``relation`` for ``entity`` in a result's text (only from the entity's own hit/page)."""
    text = text.replace("【", "").replace("】", "")
    own = [body for _, title, body in HIT.findall(text) if title.strip() == entity]
    if text.startswith("doc_id:"):  # an open_doc page: header line, then the text
        header, _, body = text.partition("\n")
        own = [body] if f"title: {entity} |" in header else []
    # "<relation>は<value>。" (examples/make_miniwiki.py states every field so) first, then the prose patterns.
    # The question names the canonical relation (出生地); the page may write any of its spellings (出身地).
    spellings = [relation, *DEFAULT.table.get(relation, {}).get("variants", [])]
    generic = [rf"{re.escape(name)}は({W}+?)[。、]" for name in spellings]
    generic += [rf"(?<![{NOUN}])([{NOUN}]{{2,15}})の{re.escape(name)}" for name in spellings]
    for body in own:
        for pattern in [*generic, *(p for name in spellings for p in PATTERNS.get(name, []))]:
            match = re.search(pattern, body)
            if match and match.group(1) != entity:
                return match.group(1)
    return None


def _history(messages: list[dict]) -> list[tuple[str, dict, str]]:
    calls, results = [], [m.get("content") or "" for m in messages if m.get("role") == "tool"]
    for m in messages:
        for c in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            fn = c.get("function", c)
            args = fn.get("arguments")
            calls.append((fn.get("name"), json.loads(args) if isinstance(args, str) else args))
    return [(n, a, r) for (n, a), r in zip(calls, results)]


def _call(name: str, reasoning: str, **arguments) -> dict:
    return {"reasoning": reasoning, "content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def _tool_names(request) -> tuple[str, str]:
    """The episode's (search tool, reading tool): ``find``/``read`` when its tool schemas name ``find``."""
    names = {(schema.get("function") or schema).get("name") for schema in request.tools or []
             if isinstance(schema, dict)}
    return ("find", "read") if "find" in names else ("search", "open_doc")


def _search(tools: tuple[str, str], reasoning: str, query: str) -> dict:
    """A plain-text search in the episode's interface (``find`` takes the query's words as keywords)."""
    if tools[0] == "find":
        return _call("find", reasoning, keywords=query.split())
    return _call("search", reasoning, query=query)


def respond_compact(request) -> dict:
    """``respond`` in the compact style: plain-text queries only (a JSON bool query costs ~40 tokens)."""
    return respond(request, bool_queries=False)


def respond(request, bool_queries: bool = True) -> dict:
    """The next assistant turn of the rule-based demo agent."""
    question = next(m["content"] for m in request.messages if m.get("role") == "user")
    parts = template_parts(question.strip())
    if parts is None and (stand_in := STAND_IN_QUESTION.match(question.strip())):
        parts = stand_in.groups()
    history, tools = _history(request.messages), _tool_names(request)
    if not parts:
        if not history:
            return _search(tools, "I cannot split this question; I will search for it as a whole.", question)
        return {"reasoning": "The results do not settle it; I give up.", "content": "{{不明}}"}
    subject, r1, r2 = parts
    hops, entity, hop, tries, opened = [(subject, r1), (None, r2)], subject, 0, [], set()
    for name, args, result in history:
        if name in ("open_doc", "read"):
            opened.add(args.get("doc_id"))
        tries.append(result)
        found = _value(hops[hop][1], entity, result)
        if found:
            if hop == 1:
                return {"reasoning": f"The page of {entity} says its {r2} is {found}. That answers the question.",
                        "content": f"{{{{{found}}}}}"}
            entity, hop, tries = found, 1, []
    relation = hops[hop][1]
    if not tries:
        if bool_queries and tools[0] == "search" and hop == 1 and len(question) % 2 == 0:  # half the questions pin the bridge page with a bool query
            query = json.dumps({"bool": {"must": [{"match_phrase": {"title": entity}}]}}, ensure_ascii=False)
            return _call("search", f"The {r1} of {subject} is {entity}. Similar titles exist, so I narrow the "
                                   f"search to the page titled {entity} to find its {relation}.", query=query)
        what = f"The question asks for the {r2} of the {r1} of {subject}. First I look up {subject}." if hop == 0 \
            else f"The {r1} of {subject} is {entity}. Now I need the {relation} of {entity}."
        return _search(tools, what, entity)
    hits = [doc_id for text in tries for doc_id, title, _ in HIT.findall(text) if title.strip() == entity]
    unopened = [d for d in hits if d not in opened]
    if unopened:
        return _call(tools[1], f"The snippet of {entity} does not show its {relation}; I open the page.",
                     doc_id=unopened[0])
    if len(tries) < 3:
        return _search(tools, f"No page for {entity} gave its {relation}; I broaden the query.",
                       f"{entity} {relation}")
    return {"reasoning": f"I could not find the {relation} of {entity}; I answer my best guess.", "content": "{{不明}}"}


# ---------------------------------------------------------------- the demo rewriter

SCENARIO_LINES = {
    "replan_after_empty": "結果が得られなかったので、語が細かすぎたと考えて検索語を変える。",
    "narrow_with_bool": "似た名前の文書と紛れないよう、bool クエリでタイトルを固定して絞り込む。",
    "broaden_query": "最初の検索が狭すぎたので、より一般的な語に広げて探し直す。",
    "verify_second_search": "一度目の結果だけで決めず、二度目の検索で事実を確かめる。",
    "bridge_entity": "質問は二段階なので、まず中間の手がかりを見つけ、それを次の検索語に使う。",
    "read_document": "抜粋だけでは根拠が足りないので、本文を開いて確かめる。",
    "enough_then_answer": "ここまでの情報で足りるかを確かめ、足りた時点で答える。",
}


def _payload(request) -> dict:
    text = request.messages[-1]["content"]
    block = text[text.rindex("```json") + 7: text.rindex("```")]
    return json.loads(block)


def _query(call: dict):
    """What a search call searched: ``query``, or a ``find`` call's keywords joined by spaces."""
    args = call.get("arguments") or {}
    if call.get("name") == "find" and isinstance(args.get("keywords"), list):
        return " ".join(str(k) for k in args["keywords"])
    return args.get("query")


def _step_reasoning(step: dict, previous: dict | None, kind: str, scenario: str | None) -> str:
    parts = []
    if previous is not None:
        results = previous.get("tool_results") or []
        titles = [t for r in results for _, t, _ in HIT.findall(r)]
        if any(r.startswith(("No results", "{'error'", "エラー")) for r in results):  # empty, or a failed call
            parts.append("前の検索では結果が得られなかった。")
        elif titles:
            parts.append(f"前の結果では「{titles[0].strip()}」などが見つかった。")
        else:
            parts.append("前の結果で文書の本文を確認した。")
    for call in step.get("tool_calls") or []:
        args = call.get("arguments") or {}
        if call.get("name") in ("open_doc", "read"):
            parts.append(f"文書 {args.get('doc_id')} を開いて本文を読む。")
        else:
            parts.append(f"「{_query(call)}」で検索する。")
    if not step.get("tool_calls"):
        parts.append(f"根拠が揃ったので {step.get('content', '')} と答える。")
    if kind == "scenario" and scenario in SCENARIO_LINES:
        parts.insert(0, SCENARIO_LINES[scenario])
    elif kind == "refine":
        parts = [p.replace("などが見つかった", "が見つかった") for p in parts]
    return "".join(parts)


def rewrite(request) -> str:
    """Templated Japanese reasoning for every step; tool calls echoed unchanged."""
    payload = _payload(request)
    scenario = (payload.get("scenario") or {}).get("id")
    steps, out = payload["steps"], []
    for i, step in enumerate(steps):
        out.append({"reasoning": _step_reasoning(step, steps[i - 1] if i else None, payload["task"], scenario),
                    "tool_calls": step.get("tool_calls") or []})
    return json.dumps({"steps": out}, ensure_ascii=False)


def _compact_step(step: dict, i: int, bridge: str | None, parts: tuple[str, str, str] | None) -> str:
    """One short sentence: what the last result said (when it matters) and what this step does."""
    call = (step.get("tool_calls") or [None])[0]
    if call and call.get("name") in ("open_doc", "read"):
        return "本文を開いて確かめる。"
    if call:
        query = _query(call)
        query = query if isinstance(query, str) else json.dumps(query, ensure_ascii=False)
        if i == 0 or parts is None:
            return f"「{query}」を検索する。"
        if query == bridge:  # the hop: state the bridge as read, then search it
            return f"{parts[0]}の{parts[1]}は{bridge}。「{bridge}」を検索する。"
        return f"「{query}」で検索し直す。"
    answer = str(step.get("content") or "").strip().strip("{}")
    if parts is not None and bridge:
        return f"{bridge}の{parts[2]}は{answer}。"
    return f"答えは{answer}。"


def rewrite_compact(request) -> str:
    """One short Japanese sentence per step (the compact style); tool calls echoed unchanged."""
    payload = _payload(request)
    parts = template_parts((payload.get("question") or "").strip())
    steps = payload["steps"]
    searches = [_query(c) for s in steps for c in s.get("tool_calls") or []
                if c.get("name") in ("search", "find") and isinstance(c.get("arguments"), dict)]
    # The bridge is the entity searched after the subject (the last search that is not the subject).
    bridge = next((q for q in reversed(searches) if parts and q != parts[0] and isinstance(q, str)), None)
    out = [{"reasoning": _compact_step(step, i, bridge, parts), "tool_calls": step.get("tool_calls") or []}
           for i, step in enumerate(steps)]
    return json.dumps({"steps": out}, ensure_ascii=False)
