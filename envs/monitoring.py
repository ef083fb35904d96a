"""Helpers to notice reward hacking early: reward decomposition per step, zero-variance groups, and a warning
when some component rises while correctness stays flat.

They read what TRL logs (``trainer.state.log_history`` entries with ``rewards/<name>/mean``,
``tools/call_frequency``, ``frac_reward_zero_std``). ``tansaku.trainer.monitor`` prints the warnings while
training; ``tansaku.trainer.report`` puts them in the run report.

    from tansaku.envs.monitoring import hacking_warnings, reward_decomposition
    print(hacking_warnings(reward_decomposition(trainer.state.log_history), "answer_reward"))
"""

from __future__ import annotations

_EXTRA_SERIES = ("reward", "frac_reward_zero_std", "tools/call_frequency", "tools/failure_frequency",
                 "completions/mean_length", "entropy")
# The keys of a ``reward_decomposition`` row that are not reward components.
LOGGED_SERIES = frozenset({"step", *_EXTRA_SERIES})


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


def _series(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def hacking_warnings(rows: list[dict], correctness: str, window: int = 5, rise: float = 0.1,
                     flat: float = 0.02, call_growth: float = 2.0) -> list[str]:
    """Warnings comparing the first and last ``window`` steps of ``reward_decomposition`` rows.

    - a component (not the correctness one) rose by more than ``rise`` while correctness moved less than
      ``flat``;
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
        warnings.append(f"tool calls per completion grew {_mean(calls[:window]):.2f} → "
                        f"{_mean(calls[-window:]):.2f} while {correctness} changed {delta_correct:+.3f}")
    return warnings
