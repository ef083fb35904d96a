"""Standalone multi-turn rollout runner (solvability checks, teacher rollouts, evaluation).

generate → parse → execute tools → append the tool messages → generate again, until the model answers
without a tool call, hits ``max_turns``, or a generation is cut by ``max_tokens``. All active episodes of a
turn go to the client in one ``client.chat`` call, so every ``tansaku.core.llm`` backend batches/parallelizes
them. Trajectories are HF chat messages: assistant turns carry ``reasoning_content`` (every step's, not
just the last) and ``tool_calls`` with dict arguments, tool results are ``{"role": "tool", …}`` — the same
shape TRL hands to reward functions, so ``tansaku.envs.rewards`` scores both alike.

A malformed tool call gets a tool message starting with ``エラー:`` that the model sees next turn, and is
kept as raw ``<tool_call>`` text in the assistant content, where ``tansaku.envs.rewards.format_reward`` counts it.

    from tansaku.envs.rollout import run_rollouts
    trajectories = run_rollouts(client, TASKS["multihop_qa"], rows, make_environment_factory(task, idx), k=4)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from tansaku.core.llm import ChatRequest
from tansaku.core.parsing import (
    ParseError,
    ToolCall,
    coerce_tool_call,
    parse_tool_calls,
    split_think,
    strip_end_markers,
)
from tansaku.core.progress import progress_bar
from tansaku.envs.environments import tool_methods
from tansaku.envs.rewards import episode_stats


@dataclass
class Trajectory:
    row_index: int
    sample_index: int
    prompt: list[dict]
    completion: list[dict] = field(default_factory=list)
    stop_reason: str = "running"  # answer | max_turns | max_tokens | llm_error
    error: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    parse_failures: int = 0
    rewards: dict[str, float | None] = field(default_factory=dict)
    total_reward: float | None = None

    @property
    def messages(self) -> list[dict]:
        return self.prompt + self.completion

    def to_record(self) -> dict:
        """JSON-able record (one line of trajectories.jsonl)."""
        record = asdict(self)
        record["messages"] = record.pop("prompt") + record.pop("completion")
        record["n_prompt_messages"] = len(self.prompt)
        return record


def _environment_for_episode(tools):
    """A fresh environment per episode from a factory/class, or the shared tools object itself."""
    if isinstance(tools, type) or (callable(tools) and not hasattr(tools, "search")):
        return tools()
    return tools


def _tool_functions(environment) -> dict:
    if hasattr(environment, "functions") and callable(environment.functions):  # tansaku.envs.tools.SearchTools
        return {f.__name__: f for f in environment.functions()}

    return tool_methods(environment)


def _tool_schemas(functions: dict) -> list[dict]:
    from transformers.utils import get_json_schema

    return [get_json_schema(f) for f in functions.values()]


def _wire_messages(messages: list[dict]) -> list[dict]:
    """OpenAI wire form for the client: tool-call arguments as JSON strings, with ids."""
    wired = []
    for message in messages:
        if message.get("tool_calls"):
            calls = [{"id": c.get("id"), "type": "function",
                      "function": {"name": c["function"]["name"],
                                   "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
                     for c in message["tool_calls"]]
            message = {**message, "tool_calls": calls}
        wired.append(message)
    return wired


def _parse_result(result) -> tuple[str | None, str, list[ToolCall], list[ParseError]]:
    """(reasoning, content with malformed calls kept as raw text, good calls, parse errors)."""
    reasoning, rest = split_think(strip_end_markers(result.content or ""))
    reasoning = result.reasoning or reasoning
    content, calls, errors = parse_tool_calls(rest)
    for raw_call in result.tool_calls or []:
        parsed = coerce_tool_call(raw_call, raw=json.dumps(raw_call, ensure_ascii=False, default=str))
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
    for error in errors:
        closing = "" if error.kind == "unclosed" else "</tool_call>"
        content += f"\n<tool_call>{error.raw}{closing}"
    return reasoning, content.strip(), calls, errors


def _execute(functions: dict, call: ToolCall) -> str:
    function = functions.get(call.name)
    if function is None:
        return f"エラー: ツール {call.name!r} はありません。使えるツール: {', '.join(functions)}"
    try:
        return str(function(**call.arguments))
    except TypeError as exc:  # wrong/missing argument names
        return f"エラー: {call.name} の引数が正しくありません: {exc}"
    except Exception as exc:  # a tool must never end the episode
        return f"エラー: {call.name} が失敗しました ({type(exc).__name__}: {exc})"


def run_rollouts(client, task, rows: list[dict], tools, k: int = 1, max_turns: int | None = None,
                 max_tokens: int = 1024, temperature: float = 0.7, top_p: float = 1.0, seed: int = 0,
                 judge=None, score: bool = True, quiet: bool = False) -> list[Trajectory]:
    """Run ``k`` episodes per row; return trajectories ordered by (row, sample).

    A progress bar counts finished episodes (shown on a terminal only; ``quiet`` turns it off).

    ``tools``: an environment factory/class (fresh instance per episode, ``reset(**row)`` called), or a
    shared object with tool methods (e.g. ``tansaku.envs.tools.SearchTools``). ``score``: fill ``rewards`` with
    the task's reward functions (``judge`` needed for rubric tasks) and ``total_reward``.
    """

    max_turns = max_turns or task.max_turns
    episodes, environments, functions = [], [], []
    for row_index, row in enumerate(rows):
        for sample_index in range(k):
            environment = _environment_for_episode(tools)
            # A shared tools object (not built per episode) is not reset: it has no per-episode state.
            observation = environment.reset(**row) if environment is not tools else None
            prompt = task.build_prompt(row)
            if observation:  # TRL appends reset()'s text to the last prompt message; do the same
                prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
            episodes.append(Trajectory(row_index, sample_index, prompt))
            environments.append(environment)
            functions.append(_tool_functions(environment))
    schemas = _tool_schemas(functions[0]) if functions else []

    with progress_bar(f"{task.name} rollouts", total=len(episodes), quiet=quiet) as advance:
        for turn in range(max_turns):
            active = [i for i, e in enumerate(episodes) if e.stop_reason == "running"]
            if not active:
                break
            # One seed per turn (not per episode): the transformers backend batches only requests sharing a seed.
            requests = [ChatRequest(messages=_wire_messages(episodes[i].messages), max_tokens=max_tokens,
                                    temperature=temperature, top_p=top_p, seed=seed + turn, tools=schemas,
                                    sample_index=episodes[i].sample_index) for i in active]
            for i, result in zip(active, client.chat(requests), strict=True):
                episode = episodes[i]
                if result.error:
                    episode.stop_reason, episode.error = "llm_error", result.error
                    continue
                reasoning, content, calls, errors = _parse_result(result)
                message = {"role": "assistant", "content": content}
                if reasoning:
                    message["reasoning_content"] = reasoning
                if calls:
                    message["tool_calls"] = [{"id": f"call_{turn}_{j}", **c.as_message_call()} for j, c in enumerate(calls)]
                episode.completion.append(message)
                episode.turns += 1
                episode.tool_calls += len(calls)
                episode.parse_failures += len(errors)
                for j, call in enumerate(calls):
                    output = _execute(functions[i], call)
                    episode.completion.append({"role": "tool", "name": call.name, "tool_call_id": f"call_{turn}_{j}",
                                               "content": output})
                for j, error in enumerate(errors):
                    episode.completion.append({"role": "tool", "name": "parse_error",
                                               "tool_call_id": f"call_{turn}_error_{j}",
                                               "content": error.as_tool_message()})
                if not calls and not errors:
                    episode.stop_reason = "max_tokens" if result.finish_reason == "length" else "answer"
            advance(sum(1 for i in active if episodes[i].stop_reason != "running"))
    for episode in episodes:
        if episode.stop_reason == "running":
            episode.stop_reason = "max_turns"
        episode.tool_errors = episode_stats(episode.completion).failed_calls
    if score:
        score_trajectories(task, rows, episodes, judge=judge)
    return episodes


def score_trajectories(task, rows: list[dict], trajectories: list[Trajectory], judge=None) -> None:
    """Fill each trajectory's ``rewards`` (per component) and ``total_reward`` with the task's rewards."""
    if not trajectories:
        return
    completions = [t.completion for t in trajectories]
    keys = {key for row in rows for key in row}
    columns = {key: [rows[t.row_index].get(key) for t in trajectories] for key in keys}
    for name, function in zip(task.reward_weights, task.reward_functions(judge), strict=True):
        for trajectory, value in zip(trajectories, function(completions, **columns), strict=True):
            trajectory.rewards[name] = value
    for trajectory in trajectories:
        trajectory.total_reward = task.weighted_total(trajectory.rewards)
