"""Rewrite each step's reasoning with an LLM, in passes: translate to Japanese, refine, follow a drawn
scenario.

The seed's order (出力の修正: 和訳する → 自然で洗練されたものにする → シナリオパターンに従ってアレンジする),
each
pass its own engine stage, LLM call, versioned prompt and checks: ``translate`` turns the teacher's reasoning
into Japanese; ``refine`` cleans up the translated reasoning (natural, coherent, faithful to the tool
results); ``scenario`` rewrites the *refined* reasoning into the drawn scenario pattern (the stages run in
that order on the same record, so each pass is shown what the pass before it wrote). None is optional and none
is folded into another.

Only assistant ``reasoning_content`` changes, and only in the episode's own steps: the prompt's turns
(``record["n_prompt"]``: system, user, and for a deepresearch row with a clarifying exchange the assistant's
question and the user's answer, shown to the rewriter as ``dialogue``) are left as they are. The LLM sees the
steps (reasoning, tool calls, tool results cut to ``result_chars``) and answers
``{"steps": [{"reasoning", "tool_calls"}, …]}``; it must echo every tool call unchanged. The new reasoning is
put back into the teacher's own messages, and the result is checked with ``verify.identity_violation`` so tool
calls and results stay byte-identical; anything else is dropped with a reason (``llm_error``,
``llm_bad_json``, ``step_count_changed``, ``tool_call_altered``, ``empty_reasoning`` …). Every rewritten step
must then be Japanese (``language``: ``reasoning_has_chinese``, ``reasoning_not_japanese``; thresholds
``min_japanese_share``, ``min_chinese_chars`` in the stage params), so all three rewrite stages drop a Chinese
or English rewrite the same way, each under its own stage name (``translate``/``refine``/``scenario``, with
the step in the detail).

Scenarios come from ``scenarios.yaml``; one is drawn per trajectory with ``rng_for(seed, "scenario", id)``
among those whose ``requires`` hold for what the trajectory really did. Prompts are versioned files in
``prompts/`` (``translate.v2.md`` …; each stage's ``prompt`` param and the recipe's ``prompts``); their file
names go into the dataset manifest.

    stage = rewrite_stage("translate", client, seed=0)       # a batch_stage for the engine (config defaults)
    scenario = draw_scenario(load_catalog(), messages, seed=0, key="q1-t0")
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from tansaku.core import jsontext
from tansaku.core.engine import batch_stage, rng_for
from tansaku.core.errors import InputError
from tansaku.core.llm import ChatRequest, LLMBadJSON, parse_json
from tansaku.core.parsing import is_tool_error
from tansaku.envs.tool_interfaces import TOOL_ROLES
from tansaku.pipelines.trajectories.config import (
    MIN_CHINESE_CHARS,
    MIN_JAPANESE_SHARE,
    RESULT_CHARS,
    REWRITE_MAX_TOKENS,
    REWRITE_TEMPERATURE,
)
from tansaku.pipelines.trajectories.language import language_violation
from tansaku.pipelines.trajectories.records import fail
from tansaku.pipelines.trajectories.verify import (
    call_pairs,
    identity_violation,
    tool_calls_of,
    tool_results_after,
)

HERE = Path(__file__).resolve().parent
CATALOG_PATH = HERE / "scenarios.yaml"
# v2: the payload may hold the clarifying exchange before the episode (`dialogue`); scenario is told its input
# is the refined reasoning, whose facts it keeps.
PROMPTS = {"translate": "translate.v2.md", "refine": "refine.v2.md", "scenario": "scenario.v2.md"}
REWRITE_PASSES = ("translate", "refine", "scenario")  # the stages, in the order they run
REWRITE_SCHEMA = {
    "type": "object",
    "required": ["steps"],
    "properties": {"steps": {"type": "array", "items": {
        "type": "object", "required": ["reasoning"],
        "properties": {"reasoning": {"type": "string"}, "tool_calls": {"type": "array"}}}}},
}


class CatalogError(InputError):
    """scenarios.yaml is malformed."""


def _empty_or_error(text: str) -> bool:
    return text.startswith("No results") or is_tool_error(text)


def _is_bool_query(arguments: str) -> bool:
    try:
        query = jsontext.loads(arguments).get("query")
        if isinstance(query, str):
            query = jsontext.loads(query)
    except (json.JSONDecodeError, AttributeError):
        return False
    return isinstance(query, dict) and "bool" in query


def trajectory_features(messages: list[dict]) -> dict:
    """What the trajectory actually did, for matching scenario ``requires``."""

    pairs = list(call_pairs(messages))
    searches = [(a, r) for n, a, r in pairs if TOOL_ROLES.get(n) == "search"]  # search, or interface 1's find
    return {
        "tool_calls": len(pairs),
        "searches": len(searches),
        "empty_result": any(r is not None and _empty_or_error(str(r.get("content", ""))) for _,
                            r in searches),
        "bool_query": any(_is_bool_query(a) for a, _ in searches),
        "opened_doc": any(TOOL_ROLES.get(n) == "open" for n, _, _ in pairs),
    }


SCENARIO_CHECKS = {
    "min_searches": lambda f, v: f["searches"] >= int(v),
    "min_tool_calls": lambda f, v: f["tool_calls"] >= int(v),
    "empty_result": lambda f, v: f["empty_result"] == bool(v),
    "bool_query": lambda f, v: f["bool_query"] == bool(v),
    "opened_doc": lambda f, v: f["opened_doc"] == bool(v),
}


def load_catalog(path: str | Path | None = None) -> dict:
    """The scenario catalog ``{"version", "scenarios": [{id, name, weight, requires, guide}]}``, validated."""
    path = Path(path) if path else CATALOG_PATH
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot read scenario catalog {path}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):  # a plain string, a list, a number: no catalog (YAML reads any text)
        raise CatalogError(f"{path}: a scenario catalog is a mapping with a 'scenarios' list, got "
                           f"{type(data).__name__ if data is not None else 'an empty file'}")
    scenarios = data.get("scenarios")
    if not isinstance(scenarios, list) or not scenarios:
        raise CatalogError(f"{path}: needs a non-empty 'scenarios' list")
    seen = set()
    for s in scenarios:
        if not isinstance(s, dict) or not isinstance(s.get("id"), str) or not s["id"] \
                or not isinstance(s.get("guide"), str) or not s["guide"]:
            raise CatalogError(f"{path}: every scenario needs an id and a guide (text), got {s!r:.100}")
        weight = s.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise CatalogError(f"{path}: scenario {s['id']!r} needs a number as its weight, got "
                               f"{weight!r:.40}")
        if not isinstance(s.get("requires") or {}, dict):
            raise CatalogError(f"{path}: scenario {s['id']!r}: requires is a mapping of check: value")
        if s["id"] in seen:
            raise CatalogError(f"{path}: duplicate scenario id {s['id']!r}")
        seen.add(s["id"])
        unknown = set(s.get("requires") or {}) - set(SCENARIO_CHECKS)
        if unknown:
            raise CatalogError(f"{path}: scenario {s['id']!r} requires unknown {sorted(unknown)}; "
                               f"known: {sorted(SCENARIO_CHECKS)}")
        # what the check reads it as, at each trajectory
        for check, value in (s.get("requires") or {}).items():
            if check.startswith("min_") and (isinstance(value, bool) or not isinstance(value, int)):
                raise CatalogError(f"{path}: scenario {s['id']!r}: requires {check} takes a whole number")
        if not float(s.get("weight", 1)) > 0:
            raise CatalogError(f"{path}: scenario {s['id']!r} needs a positive weight")
    return {"version": data.get("version", 1), "path": str(path), "scenarios": scenarios}


def applicable_scenarios(catalog: dict, messages: list[dict]) -> list[dict]:
    features = trajectory_features(messages)
    return [s for s in catalog["scenarios"]
            if all(SCENARIO_CHECKS[k](features, v) for k, v in (s.get("requires") or {}).items())]


def draw_scenario(catalog: dict, messages: list[dict], seed: int, key: str) -> dict | None:
    """One applicable scenario, drawn by weight with ``rng_for(seed, "scenario", key)``; None if none
    applies."""
    options = applicable_scenarios(catalog, messages)
    if not options:
        return None
    rng = rng_for(seed, "scenario", key)
    return rng.choices(options, weights=[float(s.get("weight", 1)) for s in options])[0]


def load_prompt(kind: str) -> tuple[str, str]:
    """(prompt text, versioned file name) for ``translate``, ``refine`` or ``scenario``."""
    name = PROMPTS[kind]
    return (HERE / "prompts" / name).read_text(encoding="utf-8"), name


def steps_payload(messages: list[dict], result_chars: int = RESULT_CHARS, start: int = 0) -> list[dict]:
    """The assistant steps from message ``start`` on, as the rewriter sees them (tool results cut to
    ``result_chars``)."""
    steps = []
    for i, message in enumerate(messages):
        if i < start or message.get("role") != "assistant":
            continue
        results = []
        for result in tool_results_after(messages, i):
            text = str(result.get("content") or "")
            results.append(text if len(text) <= result_chars else text[:result_chars] + "…(省略)")
        calls = [{"name": n, "arguments": _loads_or_text(a)} for n, a in tool_calls_of(message)]
        step = {"step": len(steps) + 1, "reasoning": message.get("reasoning_content") or "",
                "tool_calls": calls}
        if results:
            step["tool_results"] = results
        if message.get("content"):
            step["content"] = message["content"]
        steps.append(step)
    return steps


def _loads_or_text(arguments: str):
    try:
        return jsontext.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def prompt_length(record: dict) -> int:
    """How many of ``record["messages"]`` are the episode's prompt (never rewritten)."""
    return int(record.get("n_prompt") or 0)


def exchange(record: dict) -> list[dict] | None:
    """The prompt's turns after the system prompt when they are a clarifying exchange (an assistant turn among
    them: ``[user request, assistant question, user answer]``), else None."""
    turns = [m for m in record["messages"][:prompt_length(record)] if m.get("role") != "system"]
    if not any(m.get("role") == "assistant" for m in turns):
        return None
    return [{"role": m["role"], "content": m.get("content") or ""} for m in turns]


def rewrite_request(kind: str, record: dict, scenario: dict | None = None, *,
                    result_chars: int = RESULT_CHARS,
                    max_tokens: int = REWRITE_MAX_TOKENS, temperature: float = REWRITE_TEMPERATURE):
    """The ChatRequest asking the LLM to rewrite ``record["messages"]``' reasoning (greedy by default,
    cached).

    With a clarifying exchange in the prompt the payload's ``question`` is the user's first turn and
    ``dialogue``
    the exchange: what the agent was told, so its rewritten reasoning knows no more than that."""

    text, version = load_prompt(kind)
    dialogue = exchange(record)
    payload = {"task": kind, "prompt_version": version,
               "question": dialogue[0]["content"] if dialogue else record.get("question", "")}
    if dialogue:
        payload["dialogue"] = dialogue
    payload["steps"] = steps_payload(record["messages"], result_chars, prompt_length(record))
    if scenario is not None:
        payload["scenario"] = {"id": scenario["id"], "name": scenario.get("name", ""),
                               "guide": scenario["guide"]}
    body = "```json\n" + jsontext.dumps(payload, indent=1) + "\n```"
    return ChatRequest(messages=[{"role": "user", "content": text.replace("{{PAYLOAD}}", body)}],
                       max_tokens=max_tokens, temperature=temperature, json_schema=REWRITE_SCHEMA)


def apply_rewrite(messages: list[dict], text: str, start: int = 0) -> list[dict] | tuple[str, str]:
    """``messages`` with each assistant step's reasoning (from message ``start`` on) replaced by the LLM's, or
    ``(reason, detail)``."""

    try:
        data = parse_json(text, REWRITE_SCHEMA)
    except LLMBadJSON as exc:
        return "llm_bad_json", str(exc)
    steps = data.get("steps")
    assistant_at = [i for i, m in enumerate(messages) if i >= start and m.get("role") == "assistant"]
    if not isinstance(steps, list) or len(steps) != len(assistant_at):
        got = len(steps) if isinstance(steps, list) else type(steps).__name__
        return "step_count_changed", f"{len(assistant_at)} steps -> {got}"
    out = copy.deepcopy(messages)
    for n, (i, step) in enumerate(zip(assistant_at, steps), 1):
        if (not isinstance(step, dict) or not isinstance(step.get("reasoning"), str)
                or not step["reasoning"].strip()):
            return "empty_reasoning", f"step {n}"
        # The echo is compared as parsed JSON (key order and spacing are not a change); the stored bytes
        # stay the teacher's. A different name, value or count of calls is an altered tool call.
        echoed = [(str(c.get("name", "")), _canonical(c.get("arguments", {})))
                  for c in step.get("tool_calls") or [] if isinstance(c, dict)]
        original = [(name, _canonical(args)) for name, args in tool_calls_of(messages[i])]
        if echoed != original:
            return "tool_call_altered", f"step {n}: {original} -> {echoed}"[:300]
        out[i]["reasoning_content"] = step["reasoning"].strip()
    return out


def _canonical(arguments) -> str:
    value = _loads_or_text(arguments) if isinstance(arguments, str) else arguments
    if isinstance(value, str):
        return value
    return jsontext.dumps(value, sort_keys=True, separators=(",", ":"))


def rewrite_stage(kind: str, client, *, seed: int = 0, catalog: dict | None = None, batch_size: int = 16,
                  result_chars: int = RESULT_CHARS, rewrite_max_tokens: int = REWRITE_MAX_TOKENS,
                  rewrite_temperature: float = REWRITE_TEMPERATURE,
                  min_japanese_share: float = MIN_JAPANESE_SHARE, min_chinese_chars: int = MIN_CHINESE_CHARS):
    """A batch stage rewriting live records' reasoning with ``client`` (one pass: ``translate``, ``refine`` or
    ``scenario``, each given the reasoning the record holds when it arrives); ``kind="scenario"`` also draws
    and records the scenario (a trajectory no scenario applies to fails with ``no_scenario_applies``).
    ``result_chars``, ``rewrite_max_tokens``, ``rewrite_temperature``: what the rewriter is shown and how it
    answers; ``min_japanese_share``/``min_chinese_chars``: the language check on every rewritten step
    (``language``). All five are ``TrajectoriesConfig`` fields and the stage's params, under the same
    names."""
    settings = {"result_chars": result_chars, "rewrite_max_tokens": rewrite_max_tokens,
                "rewrite_temperature": rewrite_temperature, "min_japanese_share": min_japanese_share,
                "min_chinese_chars": min_chinese_chars}
    if kind == "scenario" and catalog is None:
        catalog = load_catalog()

    def run(batch: list[dict]) -> list:
        outs: list = [None] * len(batch)
        todo, requests = [], []
        for k, record in enumerate(batch):
            scenario = None
            if kind == "scenario":
                scenario = draw_scenario(catalog, record["messages"], seed, record["id"])
                if scenario is None:
                    outs[k] = fail(record, "no_scenario_applies")
                    continue
                record = {**record, "scenario": scenario["id"]}
                batch[k] = record
            todo.append(k)
            requests.append(rewrite_request(kind, record, scenario, result_chars=result_chars,
                                            max_tokens=rewrite_max_tokens, temperature=rewrite_temperature))
        for k, result in zip(todo, client.chat(requests) if requests else []):
            record = batch[k]
            if result.error:
                outs[k] = fail(record, "llm_error", result.error)
                continue
            start = prompt_length(record)
            rewritten = apply_rewrite(record["messages"], result.content, start)
            if isinstance(rewritten, tuple):
                outs[k] = fail(record, *rewritten)
                continue
            # This pass's own checks, on what it wrote: tool calls and results unchanged, every step Japanese.
            problem = identity_violation(record["messages"], rewritten, start) or language_violation(
                rewritten[start:], kind, min_japanese_share, min_chinese_chars)
            outs[k] = fail(record, *problem) if problem else {**record, "messages": rewritten}
        return outs

    params = {"prompt": PROMPTS[kind], **settings}
    if kind == "scenario":
        params["catalog_version"] = catalog.get("version")
    return batch_stage(kind, run, batch_size=batch_size, params=params, llm=client)
