"""Stage 2 of ``synth build deepresearch``: an agent writes a report instruction from a keyword group,
confirming its supporting articles with the search tool; then a judge drops single-page instructions.

The writer runs through ``tansaku.envs.rollout.run_rollouts`` with the RL environment
(``tansaku.envs.environments.SearchEnvironment``, one description variant fixed) over the index, so it
searches and reads like the trained model will. Its final message is JSON
``{"instruction", "supporting_doc_ids", "entities", "report_format"}``. A supporting doc id is
**confirmed** when the agent saw it in a tool result (search hit or opened page) *and* the index returns
it (``backend.get``); unconfirmed ids are removed and listed in ``unconfirmed_doc_ids``. Fewer than
``min_sources`` confirmed articles → ``unconfirmed_sources``.

The single-page judge then reads each supporting article alone: if any one of them suffices, the
instruction is dropped (``single_page``).

Drop reasons: ``llm_error``, ``agent_no_answer`` (turns or tokens ran out), ``llm_bad_json``,
``llm_bad_output``, ``instruction_empty``, ``unconfirmed_sources``, ``single_page``.
"""

from __future__ import annotations

import re

from tansaku.core.engine import Drop
from tansaku.core.llm import checked_json
from tansaku.envs.environments import EnvironmentFactory
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.tasks import Task
from tansaku.envs.tools import ToolsConfig
from tansaku.pipelines.deepresearch import ask_json, excerpt, load_prompt

_SEEN_DOC = re.compile(r"doc_id: (\S+)")
REPORT_FORMATS = ("table", "list", "timeline", "prose")


def writer_task(max_turns: int):
    """A generation-only task for the rollout runner: the instruction prompt as system, no rewards."""

    return Task(name="deepresearch_instruction_writer", version="1",
                system_prompts=(load_prompt("instruction"),),
                columns={"question": "str"}, answer_reward_name=None, reward_weights={}, max_turns=max_turns)


def writer_message(group: dict) -> str:
    return (f"【キーワード】{'、'.join(group['keywords'])}\n"
            f"【関連しそうな記事の題名】{'、'.join(group['titles'][:8])}\n"
            "これらのキーワードが複数の記事にまたがる調査レポートの指示を作ってください。")


def seen_doc_ids(messages: list[dict]) -> list[str]:
    """doc ids that appeared in tool results, in order of first appearance."""
    seen: list[str] = []
    for m in messages:
        if m.get("role") == "tool":
            for doc_id in _SEEN_DOC.findall(str(m.get("content", ""))):
                if doc_id not in seen:
                    seen.append(doc_id)
    return seen


def search_queries(messages: list[dict]) -> list[str]:
    return [str(c["function"]["arguments"].get("query")) for m in messages if m.get("role") == "assistant"
            for c in m.get("tool_calls") or [] if c["function"]["name"] == "search"
            and isinstance(c["function"]["arguments"], dict)]


# What the writer's final answer must look like (tansaku.core.llm.validate); doc ids may come as numbers.
INSTRUCTION_SCHEMA = {"type": "object", "required": ["instruction", "supporting_doc_ids"], "properties": {
    "instruction": {"type": "string", "maxLength": 4000},
    "supporting_doc_ids": {"type": "array", "items": {"type": ["string", "integer"], "maxLength": 200}},
    "entities": {"type": "array", "items": {"type": ["string", "integer"], "maxLength": 200}},
    "report_format": {"type": "string", "maxLength": 200}}}


def finish_instruction(group: dict, trajectory, backend, min_sources: int) -> dict | Drop:
    """Turn one writer trajectory into an instruction record, or the reason it is unusable."""

    if trajectory.stop_reason == "llm_error":
        return Drop("llm_error")
    if trajectory.stop_reason != "answer":
        return Drop("agent_no_answer")
    messages = trajectory.completion
    answer = checked_json(messages[-1].get("content") or "", INSTRUCTION_SCHEMA)
    if isinstance(answer, Drop):
        return answer
    instruction = str(answer.get("instruction") or "").strip()
    if not instruction:
        return Drop("instruction_empty")
    claimed = [str(d).strip() for d in answer.get("supporting_doc_ids") or [] if str(d).strip()]
    seen = seen_doc_ids(messages)
    confirmed = [d for d in dict.fromkeys(claimed) if d in seen and backend.get(d) is not None]
    if len(confirmed) < min_sources:
        return Drop("unconfirmed_sources")
    entities = ([str(e).strip() for e in answer.get("entities") or [] if str(e).strip()]
                or list(group["keywords"]))
    report_format = str(answer.get("report_format") or "prose").strip()
    return {**group, "instruction": instruction, "entities": entities,
            "report_format": report_format if report_format in REPORT_FORMATS else "prose",
            "supporting_doc_ids": confirmed,
            "unconfirmed_doc_ids": [d for d in claimed if d not in confirmed],
            "searched_doc_ids": seen, "search_queries": search_queries(messages),
            "agent_turns": trajectory.turns}


def make_instruction_stage_fn(llm, backend, research_task: Task, *, max_turns: int, min_sources: int,
                              top_k: int, seed: int):
    """``batch_stage`` function: one writer episode per keyword group, all turns batched together, with
    ``research_task``'s tool-call budget (the task whose rows these become), ``max_turns`` turns and ``top_k``
    hits per search; fewer than ``min_sources`` confirmed articles → ``unconfirmed_sources``."""

    task = writer_task(max_turns)
    # One fixed wording (a data generator, not a policy to make robust).
    tools = EnvironmentFactory(backend, ToolsConfig(top_k=top_k, description_variant=0),
                               max_tool_calls=research_task.max_tool_calls)

    def write_instructions(groups: list[dict]) -> list[dict | Drop]:
        rows = [{"question": writer_message(g)} for g in groups]
        trajectories = run_rollouts(llm, task, rows, tools, k=1, max_tokens=1024, temperature=0.0,
                                    seed=seed, score=False)
        return [finish_instruction(g, t, backend, min_sources) for g, t in zip(groups, trajectories)]

    return write_instructions


def single_page_message(record: dict, doc: dict, doc_chars: int) -> str:
    return (f"【指示】\n{record['instruction']}\n【対象】{'、'.join(record['entities'])}\n"
            f"【記事】doc_id: {doc.get('doc_id', '')} | title: {doc.get('title', '')}\n"
            f"{excerpt(doc.get('text', ''), doc_chars)}")


def make_single_page_stage_fn(llm, backend, doc_chars: int):
    """``batch_stage`` function: ask, per supporting article (its first ``doc_chars`` characters), whether it
    alone answers the instruction."""

    def judge_single_page(records: list[dict]) -> list[dict | Drop]:
        owners, messages = [], []
        for i, r in enumerate(records):
            for doc_id in r["supporting_doc_ids"]:
                owners.append(i)
                messages.append(single_page_message(r, backend.get(doc_id) or {"doc_id": doc_id}, doc_chars))
        verdicts: list[list] = [[] for _ in records]
        for i, answer in zip(owners, ask_json(llm, "single_page", messages, max_tokens=256)):
            verdicts[i].append(answer)
        out: list[dict | Drop] = []
        for r, answers in zip(records, verdicts):
            drops = [a for a in answers if isinstance(a, Drop)]
            if drops:
                out.append(drops[0])
            elif any(a.get("answerable") is True or str(a.get("answerable")).lower() == "true"
                     for a in answers):
                out.append(Drop("single_page"))
            else:
                out.append({**r, "single_page_checked": len(answers)})
        return out

    return judge_single_page
