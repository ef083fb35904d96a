"""Stage 4: a question for each 2-hop chain — by template (no LLM) or by an LLM.

The template generator always works, so the embedded default (no ``--llm``) still yields a dataset:

    >>> chain = {"chain_id": "c1", "subject": "ノルウェイの森", "bridge": "村上春樹", "answer": "京都府",
    ...          "relations": ["著者", "出身地"]}
    >>> template_question(chain, seed=0)["question"]
    '「ノルウェイの森」の著者の出身地はどこですか？'

The LLM generator asks for natural Japanese that names the start entity, never the bridge entity
and never the answer (prompt: ``prompts/question.v1.md``); every question, whichever generator wrote
it, passes :func:`question_problem` (``bridge_named``, ``answer_leaked``, ``subject_missing``).
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core.engine import Drop, rng_for
from tansaku.core.llm import ChatRequest, ask_json
from tansaku.pipelines.multihop.chains import derivations_of
from tansaku.pipelines.multihop.entities import display_name, entity_key

PROMPTS = Path(__file__).with_name("prompts")
QUESTION_PROMPT = "question.v1.md"
QUESTION_SCHEMA = {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}

_WHERE = ("地", "所在地", "出身", "本社", "本拠地", "場所", "国", "国籍", "都道府県", "県", "都市", "州")
_WHEN = ("年", "年月日", "日", "時期", "時代", "設立", "開業", "開館", "創業", "開通", "開港")
_WHO = ("者", "人", "長", "知事", "監督", "妻", "夫", "配偶者", "師匠", "父", "母", "主宰", "選手")
TEMPLATES = (
    "「{s}」の{r1}の{r2}は{wh}",
    "「{s}」の{r1}について、その{r2}は{wh}",
    "「{s}」の{r1}に当たるものの{r2}は{wh}",
)


def wh_word(relation: str) -> str:
    """どこ/いつ/誰/何 from the shape of the relation name.

    >>> [wh_word(r) for r in ("出身地", "設立年", "監督", "血液型")]
    ['どこですか？', 'いつですか？', '誰ですか？', '何ですか？']
    """
    if relation.endswith(_WHERE):
        return "どこですか？"
    if relation.endswith(_WHEN):
        return "いつですか？"
    if relation.endswith(_WHO):
        return "誰ですか？"
    return "何ですか？"


def _key(text: str) -> str:
    return entity_key(text)


def question_problem(question: str, chain: dict) -> str | None:
    """Why a question is unusable for its chain, or None.

    >>> question_problem("村上春樹の出身地は？", {"subject": "ノルウェイの森", "bridge": "村上春樹", "answer": "京都府"})
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


def template_question(chain: dict, seed: int = 0) -> dict:
    """The chain with a template question (variant drawn per chain from ``seed``)."""
    r1, r2 = chain["relations"]
    wh = wh_word(r2)
    pattern = rng_for(seed, "template", chain["chain_id"]).choice(TEMPLATES)
    text = pattern.format(s=display_name(chain["subject"]), r1=r1, r2=r2, wh=wh)
    return {**chain, "question": text, "generator": "template"}


def generate_template(chain: dict, seed: int = 0) -> dict | Drop:
    out = template_question(chain, seed)
    problem = question_problem(out["question"], chain)
    return Drop(problem) if problem else out


def question_request(chain: dict, seed: int = 0, temperature: float = 0.7):
    prompt = (PROMPTS / QUESTION_PROMPT).read_text(encoding="utf-8")
    (s1, r1, _), (_, r2, _) = derivations_of(chain)
    user = (prompt.replace("{subject}", s1).replace("{relation1}", r1).replace("{bridge}", chain["bridge"])
            .replace("{relation2}", r2).replace("{answer}", chain["answer"]))
    return ChatRequest(messages=[{"role": "user", "content": user}], max_tokens=256, temperature=temperature,
                       seed=rng_for(seed, "question", chain["chain_id"]).randrange(2**31), json_schema=QUESTION_SCHEMA)


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
