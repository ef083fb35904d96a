"""Stage 4: a question for each 2-hop chain — by template (no LLM) or by an LLM.

The template generator always works, so the embedded default (no ``--llm``) still yields a dataset. Its
frames (:data:`FRAMES`: a hop-1 bridge phrase inside a hop-2 question) are chosen per relation pair from the
phrasings of ``relations.json`` (:func:`frames_for`):

    >>> chain = {"chain_id": "c1", "subject": "ノルウェイの森", "bridge": "村上春樹", "answer": "京都府",
    ...          "relations": ["著者", "出身地"]}
    >>> template_question(chain, seed=0)["question"]
    '「ノルウェイの森」を書いた人物について、その人物はどこで生まれましたか？'

Each template question records its ``frame`` (``"bridge/final"``). The frames fall into phrasing families by
their final form (:data:`PHRASING_FAMILIES`), which ``--heldout-phrasing`` keeps out of training
(``phrasing.py``).

The LLM generator asks for natural Japanese that names the start entity, never the bridge entity
and never the answer (prompt: ``prompts/question.v1.md``); every question, whichever generator wrote
it, passes :func:`question_problem` (``bridge_named``, ``answer_leaked``, ``subject_missing``).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

from tansaku.core.engine import Drop, rng_for
from tansaku.core.llm import ChatRequest, ask_json
from tansaku.pipelines.multihop.chains import derivations_of
from tansaku.pipelines.multihop.entities import display_name, entity_key
from tansaku.pipelines.multihop.relations import DEFAULT, KIND_NOUN, WH, Phrase, Relations

PROMPTS = Path(__file__).with_name("prompts")
QUESTION_PROMPT = "question.v1.md"
QUESTION_SCHEMA = {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}

# A question is a bridge phrase (hop 1 from the subject) inside a final phrase (hop 2, asking for the answer).
BRIDGES = {
    "clause": lambda s, p: p.of.format(S=s),                                    # 「X」を書いた人物
    "noun": lambda s, p: f"{s}の{p.name}",                                       # 「X」の著者
    # 「X」の著者として知られる人物
    "known": lambda s, p: f"{s}の{p.name}として知られる{KIND_NOUN[p.kind]}",
}
FINALS = {
    "ask": lambda b, p, p1: p.ask.format(S=b),                                   # …はどこで生まれましたか？
    # …が生まれた場所はどこですか？
    "wh": lambda b, p, p1: f"{p.of.format(S=b)}は{WH[p.kind]}",
    # …が生まれた場所を答えてください。
    "answer": lambda b, p, p1: f"{p.of.format(S=b)}を答えてください。",
    # …について、その人物は…
    "about": lambda b, p, p1: f"{b}について、{p.ask.format(S='その' + KIND_NOUN[p1.kind])}",
}
FRAMES = tuple((b, f) for b in BRIDGES for f in FINALS)  # 12 frames

# Phrasing families (``--heldout-phrasing``): a family is a final phrase form, with its frames. The final, not
# the bridge, because every relation pair can be asked with ``ask``, ``wh`` and ``answer`` (:func:`frames_for`
# restricts bridges and ``about`` only), so holding one of them out leaves every pair frames to train on and
# one to evaluate on; a bridge family would not (``clause`` needs a hop-1 clause, ``known`` a person,
# organisation or work: a pair of two noun relations has ``noun`` frames only). The final is also the more
# visible form: a question (…ですか？), a request (…を答えてください。) or a topic (…について、その人物は…).
PHRASING_FAMILIES = {final: tuple((b, f) for b, f in FRAMES if f == final) for final in FINALS}


def frames_for(first: Phrase, second: Phrase) -> list[tuple[str, str]]:
    """The frames that read well for a relation pair.

    * ``clause`` needs a hop-1 clause (「…を書いた人物」); ``known`` and ``about`` need a bridge that is a
      person, organisation or work (「…として知られる人物」, 「その組織は」);
    * no 「「X」の著者の職業は何ですか」 chains of の when hop 1 can be said as a clause instead.

    >>> from tansaku.pipelines.multihop.relations import DEFAULT
    >>> (len(frames_for(DEFAULT.phrase("著者"), DEFAULT.phrase("出生地"))),
    ...  frames_for(DEFAULT.phrase("血液型"), DEFAULT.phrase("色")))
    (12, [('noun', 'ask'), ('noun', 'wh'), ('noun', 'answer')])
    """
    allowed = []
    for bridge, final in FRAMES:
        if bridge == "clause" and not first.verbal:
            continue
        if (bridge == "known" or final == "about") and first.kind not in ("person", "org", "work"):
            continue
        if bridge in ("noun", "known") and first.verbal and not second.verbal and final != "about":
            continue  # 「X」の著者の職業は… : 「X」を書いた人物の職業は… reads better
        allowed.append((bridge, final))
    return allowed


def _key(text: str) -> str:
    return entity_key(text)


def question_problem(question: str, chain: dict) -> str | None:
    """Why a question is unusable for its chain, or None.

    >>> question_problem("村上春樹の出身地は？",
    ...                  {"subject": "ノルウェイの森", "bridge": "村上春樹", "answer": "京都府"})
    'bridge_named'
    """
    q = _key(question)
    if not q:
        return "empty_question"
    if _key(chain["answer"]) and _key(chain["answer"]) in q:
        return "answer_leaked"
    if _key(chain["bridge"]) and _key(chain["bridge"]) in q:
        return "bridge_named"
    if _key(chain["subject"]) not in q:
        return "subject_missing"
    return None


# The same clause twice reads clumsily: 「Xがある場所がある都道府県」, 「…が設立された年に設立された…」.
REPEATED_CLAUSE = re.compile(r"(がある|された|した|生まれた|亡くなった)[^？。]*\1")


def frame_name(frame: tuple[str, str]) -> str:
    """A frame as the rows' ``frame`` column writes it: ``"bridge/final"``.

    >>> frame_name(("clause", "answer"))
    'clause/answer'
    """
    return "/".join(frame)


def template_question(chain: dict, seed: int = 0, relations: Relations = DEFAULT,
                      frames: Collection[tuple[str, str]] | None = None, draw: str = "template") -> dict:
    """The chain with a template question: a frame that reads well for its relation pair (and does not say
    one clause twice), drawn per chain from ``seed``; ``frames`` limits the draw to those frames (None: all;
    none of the pair's among them: all), ``draw`` names the draw (another name draws independently).
    The record says which frame wrote it (``frame``)."""
    rendered = _rendered(display_name(chain["subject"]), *chain["relations"], relations)
    if frames is not None:
        rendered = [(f, t) for f, t in rendered if f in frames] or rendered
    # Without ``frames`` the list and the draw are those of every earlier build: the same questions.
    frame, text = rng_for(seed, draw, chain["chain_id"]).choice(
        [(f, t) for f, t in rendered if not REPEATED_CLAUSE.search(t)] or rendered)
    return {**chain, "question": text, "generator": "template", "frame": frame_name(frame)}


_NOUNS = re.compile(r"の([^「」、。？の]{1,12}?)(?=として|について|の|は|が|を|がある)")


@lru_cache(maxsize=4096)
def template_parts(question: str, relations: Relations = DEFAULT) -> tuple[str, str, str] | None:
    """``(subject, relation 1, relation 2)`` of a template question, or None: the templates run backwards
    (every frame of every relation pair the table knows, plus the nouns the question itself names) — what
    a scripted agent needs to know which two hops to search.

    >>> template_parts("「ノルウェイの森」を書いた人物が生まれた場所を答えてください。")
    ('ノルウェイの森', '著者', '出生地')
    """
    match = re.match(r"「(.+?)」", question)
    if not match:
        return None
    subject = match.group(1)
    names = [*relations.table, *dict.fromkeys(_NOUNS.findall(question[match.end() - 1:]))]
    for r1 in names:
        for r2 in names:
            if r1 != r2 and question in _renderings(subject, r1, r2, relations):
                return subject, r1, r2
    return None


def _renderings(subject: str, r1: str, r2: str, relations: Relations) -> list[str]:
    """The question of every frame that reads well for (r1, r2), in :data:`FRAMES` order."""
    return [text for _, text in _rendered(subject, r1, r2, relations)]


def _rendered(subject: str, r1: str, r2: str, relations: Relations) -> list[tuple[tuple[str, str], str]]:
    """``(frame, question)`` for every frame that reads well for (r1, r2), in :data:`FRAMES` order."""
    first, second = relations.phrase(r1), relations.phrase(r2)
    return [((b, f), FINALS[f](BRIDGES[b](f"「{subject}」", first), second, first)) for b,
            f in frames_for(first, second)]


def generate_template(chain: dict, seed: int = 0, relations: Relations = DEFAULT,
                      frames: Collection[tuple[str, str]] | None = None) -> dict | Drop:
    """:func:`template_question`, dropped with the reason :func:`question_problem` gives."""
    out = template_question(chain, seed, relations, frames)
    problem = question_problem(out["question"], chain)
    return Drop(problem) if problem else out


def question_request(chain: dict, seed: int = 0, temperature: float = 0.7):
    prompt = (PROMPTS / QUESTION_PROMPT).read_text(encoding="utf-8")
    (s1, r1, _), (_, r2, _) = derivations_of(chain)
    user = (prompt.replace("{subject}", s1).replace("{relation1}", r1).replace("{bridge}", chain["bridge"])
            .replace("{relation2}", r2).replace("{answer}", chain["answer"]))
    return ChatRequest(messages=[{"role": "user", "content": user}], max_tokens=256, temperature=temperature,
                       seed=rng_for(seed, "question", chain["chain_id"]).randrange(2**31),
                       json_schema=QUESTION_SCHEMA)


def question_from_answer(chain: dict, answer: dict | Drop) -> dict | Drop:
    """One parsed LLM answer (from :func:`tansaku.core.llm.ask_json`) checked like a template question."""
    if isinstance(answer, Drop):
        return answer
    question = answer.get("question")
    if not isinstance(question, str) or not question.strip():
        return Drop("llm_no_question")
    question = question.strip()
    problem = question_problem(question, chain)
    return Drop(problem) if problem else {**chain, "question": question, "generator": "llm"}


def generate_llm(chains: list[dict], llm, seed: int = 0, temperature: float = 0.7) -> list[dict | Drop]:
    """One LLM call per chain (batched); each answer is checked like a template question."""
    answers = ask_json(llm, [question_request(c, seed, temperature) for c in chains])
    return [question_from_answer(c, a) for c, a in zip(chains, answers)]
