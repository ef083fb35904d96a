"""The same prompts' samples at two steps of one RL run, side by side with their reward components.

    train compare --completions runs/rl --steps 1 20      # the run folder or its completions/ folder

It reads TRL's ``completions/completions_<step>.parquet`` (``log_completions``: each completion's prompt,
messages, one column per reward component, advantage, and tansaku's ``reward_inputs``). A prompt sampled at
both steps (GRPO samples each prompt ``num_generations`` times; an epoch later the same prompt comes back)
gives one entry: its text, the reference answer when ``reward_inputs`` has one, and each step's samples — the
completion as text (reasoning, tool calls, results, answer), each reward component, their unweighted sum and
TRL's advantage. Prompts sampled at one step only are counted, not shown.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from rich.table import Table

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.envs.answer_text import as_messages

SHOWN_TOOL_RESULT = 80


def completion_text(completion) -> str:
    """One completion as readable lines: reasoning, tool calls, shortened tool results, the answer.

    >>> print(completion_text([{"role": "assistant", "reasoning_content": "調べる", "content": "",
    ...     "tool_calls": [{"function": {"name": "search", "arguments": {"query": "白砂市"}}}]},
    ...     {"role": "tool", "content": "[1] 白砂市の市長は…"},
    ...     {"role": "assistant", "content": "{{山田}}"}]))
    (think) 調べる
    → search({"query": "白砂市"})
    ← [1] 白砂市の市長は…
    {{山田}}
    """
    lines = []
    for message in as_messages(completion):
        if message["role"] == "tool":
            text = " ".join(message["content"].split())
            cut = len(text) > SHOWN_TOOL_RESULT
            lines.append("← " + text[:SHOWN_TOOL_RESULT] + ("…" if cut else ""))
            continue
        if message["reasoning_content"]:
            lines.append("(think) " + message["reasoning_content"].strip())
        for call in message["tool_calls"]:
            function = call.get("function") or call if isinstance(call, dict) else {}
            arguments = function.get("arguments")
            if isinstance(arguments, dict):
                arguments = jsontext.dumps({k: v for k, v in arguments.items() if v is not None})
            lines.append(f"→ {function.get('name')}({arguments})")
        if message["content"].strip():
            lines.append(message["content"].strip())
    return "\n".join(lines)


def _prompt_text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content") for m in prompt or [] if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1]) if users else jsontext.dumps(prompt, default=str)


def _answer(row: dict):
    try:
        inputs = jsontext.loads(row.get("reward_inputs") or "{}")
    except (TypeError, json.JSONDecodeError):
        return None
    return inputs.get("answer") if isinstance(inputs, dict) else None


def _score(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _sample(row: dict, components: list[str]) -> dict:
    rewards = {name: _score(row.get(name)) for name in components}
    scored = [v for v in rewards.values() if v is not None]
    return {"completion": completion_text(row.get("completion")), "rewards": rewards,
            "total": sum(scored) if scored else None, "advantage": _score(row.get("advantage"))}


def step_samples(run: str | Path, step_a: int, step_b: int, limit: int | None = None) -> dict:
    """``{"run", "steps", "components", "prompts": [{"prompt", "answer", "a": [sample], "b": [sample]}],
    "only_a", "only_b", "mean": {"a": {component: mean}, "b": …}}`` for the prompts both steps sampled
    (the first ``limit`` of them, in step A's order); ``mean`` is over all their samples."""
    from tansaku.trainer.report import completions_run, load_completions, reward_columns

    folder = completions_run(run)
    rows = load_completions(folder)
    logged = sorted({int(row["step"]) for row in rows})
    for step in (step_a, step_b):
        if step not in logged:
            raise InputError(f"--steps: step {step} is not in {folder}/completions (logged steps: "
                             f"{_ranges(logged)})")
    components = reward_columns(rows)
    groups: dict[int, dict[str, list[dict]]] = {step_a: {}, step_b: {}}
    prompts: dict[str, object] = {}
    for row in rows:
        if int(row["step"]) in groups:
            key = jsontext.dumps(row.get("prompt"), sort_keys=True, default=str)
            prompts.setdefault(key, row.get("prompt"))
            groups[int(row["step"])].setdefault(key, []).append(row)
    a, b = groups[step_a], groups[step_b]
    shared = [key for key in a if key in b]
    pairs = []
    for key in shared[:limit]:
        answer = next((x for x in map(_answer, a[key] + b[key]) if x is not None), None)
        pairs.append({"prompt": _prompt_text(prompts[key]), "answer": answer,
                      "a": [_sample(r, components) for r in a[key]],
                      "b": [_sample(r, components) for r in b[key]]})
    mean = {side: {**{name: _mean([s["rewards"][name] for p in pairs for s in p[side]])
                      for name in components},
                   "total": _mean([s["total"] for p in pairs for s in p[side]])} for side in ("a", "b")}
    return {"run": str(folder), "steps": [step_a, step_b], "components": components, "prompts": pairs,
            "shared": len(shared), "only_a": len(a) - len(shared), "only_b": len(b) - len(shared),
            "mean": mean}


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _ranges(steps: list[int]) -> str:
    """``1-5, 7, 9-10`` for a sorted list of steps.

    >>> _ranges([1, 2, 3, 5, 7, 8])
    '1-3, 5, 7-8'
    """
    parts, start = [], None
    for i, step in enumerate(steps):
        start = step if start is None else start
        if i + 1 == len(steps) or steps[i + 1] != step + 1:
            parts.append(str(step) if start == step else f"{start}-{step}")
            start = None
    return ", ".join(parts) or "none"


def _rewards_cell(sample: dict) -> str:
    lines = [f"{name} {'–' if v is None else format(v, '.2f')}" for name, v in sample["rewards"].items()]
    total, advantage = sample["total"], sample["advantage"]
    lines.append(f"sum {'–' if total is None else format(total, '.2f')}")
    if advantage is not None:
        lines.append(f"adv {advantage:+.2f}")
    return "\n".join(lines)


def samples_table(result: dict, width: int = 400) -> Table:
    """A rich table: per shared prompt a row (number, prompt, answer), then its samples at step A and step
    B."""
    a, b = result["steps"]
    mean = "   ".join(f"{name}: {_fmt(result['mean']['a'][name])} → {_fmt(result['mean']['b'][name])}"
                       for name in result["mean"]["a"])
    table = Table(title=f"{result['run']}: step {a} vs step {b} ({result['shared']} shared prompts; "
                        f"{result['only_a']} only at {a}, {result['only_b']} only at {b})",
                  caption=f"mean over the shown samples — {mean}" if result["prompts"] else
                  f"no prompt was sampled at both step {a} and step {b}", show_lines=True)
    table.add_column("#", justify="right")
    for column in (f"step {a}", "rewards", f"step {b}", "rewards"):
        table.add_column(column, overflow="fold", ratio=3 if column.startswith("step") else 1)
    short = (lambda s: s["completion"] if len(s["completion"]) <= width  # noqa: E731
             else s["completion"][:width] + "…")
    for n, pair in enumerate(result["prompts"], 1):
        answer = f"answer: {pair['answer']}" if pair["answer"] is not None else ""
        table.add_row(str(n), f"[bold]{_escape(pair['prompt'])}[/bold]", "", _escape(answer), "",
                      style="on grey15")
        for i in range(max(len(pair["a"]), len(pair["b"]))):
            sa = pair["a"][i] if i < len(pair["a"]) else None
            sb = pair["b"][i] if i < len(pair["b"]) else None
            table.add_row(f"{n}.{i + 1}", _escape(short(sa)) if sa else "", _rewards_cell(sa) if sa else "",
                          _escape(short(sb)) if sb else "", _rewards_cell(sb) if sb else "")
    return table


def _fmt(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
