"""Helpers to notice reward hacking early: reward decomposition per step, zero-variance groups, tool-call
counts, sample dumps, and a warning when some component rises while correctness stays flat.

They read what TRL logs (``tansaku.trainer.state.log_history`` entries with ``rewards/<name>/mean``,
``tools/call_frequency``, ``frac_reward_zero_std``) or ``tansaku.envs.rollout.Trajectory`` lists.

    from tansaku.envs.monitoring import reward_decomposition, hacking_warnings, make_monitor_callback
    tansaku.trainer.add_callback(make_monitor_callback("answer_reward"))   # prints warnings while training
    print(hacking_warnings(reward_decomposition(tansaku.trainer.state.log_history), "answer_reward"))
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from tansaku.core import jsontext, safe_write
from tansaku.envs.zh_detect import chinese_spans

_EXTRA_SERIES = ("reward", "frac_reward_zero_std", "tools/call_frequency", "tools/failure_frequency",
                 "completions/mean_length", "entropy")


def reward_decomposition(log_history: list[dict]) -> list[dict]:
    """One row per logged step: ``step`` plus each ``rewards/<name>/mean`` (as ``name``) and the extra series.

    >>> reward_decomposition([{"step": 1, "rewards/answer_reward/mean": 0.1, "loss": 0.3}])
    [{'step': 1, 'answer_reward': 0.1}]
    """
    rows = []
    for entry in log_history:
        row = {"step": entry.get("step")}
        for key, value in entry.items():
            if key.startswith("rewards/") and key.endswith("/mean"):
                row[key[len("rewards/"):-len("/mean")]] = value
            elif key in _EXTRA_SERIES:
                row[key] = value
        if len(row) > 1:
            rows.append(row)
    return rows


def zero_variance_share(group_rewards: list[list[float]]) -> float:
    """Share of groups whose rewards are all equal (their GRPO advantages are all 0).

    >>> zero_variance_share([[1, 1], [0, 1], [0, 0]])
    0.6666666666666666
    """
    if not group_rewards:
        return 0.0
    return sum(1 for g in group_rewards if len({round(float(x), 9) for x in g}) <= 1) / len(group_rewards)


def tool_call_distribution(trajectories) -> dict[int, int]:
    """How many episodes made 0, 1, 2 … tool calls."""
    return dict(sorted(Counter(t.tool_calls for t in trajectories).items()))


def _series(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def hacking_warnings(rows: list[dict], correctness: str, window: int = 5, rise: float = 0.1,
                     flat: float = 0.02, call_growth: float = 2.0) -> list[str]:
    """Warnings comparing the first and last ``window`` steps of ``reward_decomposition`` rows.

    - a component (not the correctness one) rose by more than ``rise`` while correctness moved less than ``flat``;
    - tool calls per completion grew more than ``call_growth``× while correctness stayed flat.
    """
    if len(rows) < 2 * window:
        return []
    correct = _series(rows, correctness)
    if not correct:
        return [f"no {correctness!r} series in the logs: cannot compare components with correctness"]
    delta_correct = _mean(correct[-window:]) - _mean(correct[:window])
    if delta_correct >= flat:
        return []
    warnings = []
    for name in rows[-1]:
        if name in ("step", correctness, "frac_reward_zero_std", "completions/mean_length") or \
                name.startswith("tools/"):
            continue
        values = _series(rows, name)
        delta = _mean(values[-window:]) - _mean(values[:window])
        if delta > rise:
            warnings.append(f"{name} rose by {delta:+.3f} while {correctness} changed {delta_correct:+.3f}: "
                            "check samples for reward hacking")
    calls = _series(rows, "tools/call_frequency")
    if calls and _mean(calls[:window]) > 0 and _mean(calls[-window:]) > call_growth * _mean(calls[:window]):
        warnings.append(f"tool calls per completion grew {_mean(calls[:window]):.2f} → {_mean(calls[-window:]):.2f} "
                        f"while {correctness} changed {delta_correct:+.3f}")
    return warnings


def dump_samples(trajectories, path: str | Path, n: int = 8, seed: int = 0) -> Path:
    """Write ``n`` random trajectories as readable Markdown (rewards, reasoning, calls, results, Chinese spans)."""
    picked = random.Random(seed).sample(list(trajectories), min(n, len(trajectories)))
    lines = []
    for t in picked:
        lines.append(f"## row {t.row_index} sample {t.sample_index} — stop: {t.stop_reason}, "
                     f"calls: {t.tool_calls}, parse failures: {t.parse_failures}")
        lines.append("rewards: " + jsontext.dumps(t.rewards) + f" total: {t.total_reward}")
        for message in t.messages:
            role = message.get("role")
            if message.get("reasoning_content"):
                lines.append(f"- **{role} (reasoning)**: {message['reasoning_content']}")
                spans = chinese_spans(message["reasoning_content"])
                if spans:
                    lines.append(f"  - ⚠ Chinese: {spans}")
            for call in message.get("tool_calls") or []:
                lines.append(f"- **call**: {jsontext.dumps(call['function'])}")
            content = str(message.get("content") or "")
            if content:
                shown = content if len(content) <= 600 else content[:600] + f"…(+{len(content) - 600})"
                lines.append(f"- **{role}**: {shown}")
        lines.append("")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    safe_write.write_text_atomic(out, "\n".join(lines))
    return out


def make_monitor_callback(correctness: str, window: int = 5, printer=print):
    """A ``transformers.TrainerCallback`` that prints ``hacking_warnings`` at each log step (once each)."""
    from transformers import TrainerCallback

    class RewardMonitorCallback(TrainerCallback):
        def __init__(self):
            self.seen: set[str] = set()

        def on_log(self, args, state, control, logs=None, **kwargs):
            for warning in hacking_warnings(reward_decomposition(state.log_history), correctness, window):
                key = warning.split(" ")[0]
                if key not in self.seen:
                    self.seen.add(key)
                    printer(f"[reward monitor] step {state.global_step}: {warning}")

    return RewardMonitorCallback()
