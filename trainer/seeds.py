"""Several runs of one recipe (seeds) side by side: their curves overlaid, and collapses that recur at one
step.

    train report --runs runs/rl-seed0 runs/rl-seed1 runs/rl-seed2 --out seeds.png

Per run (its ``trainer_state.json`` and ``completions/*.parquet``, read by
``tansaku.trainer.report.run_report``)
and per step: the total reward (TRL's ``reward``; else the mean unweighted total of the completions), the
zero-variance group share (TRL's ``frac_reward_zero_std``; else from the completions), the policy entropy
(TRL's ``entropy``) and, with completions, reasoning characters and tool calls per episode
(``tansaku.trainer.collapse.collapse_series``).

A *collapse* of a signal at step s is ``tansaku.trainer.collapse.collapse_onsets``: its value at s is at most
``(1 - drop)`` × the peak of the ``lookback`` values logged before s, the peak is positive, and the step
before was not collapsed. It is watched for the reward, the entropy, reasoning characters and tool calls
(``WATCHED``). A collapse *recurs* when at least ``min_runs`` runs have an onset of the same signal within
``±within`` steps of one another: that points at the data order or the recipe (the same batch, a schedule)
rather than at one seed's luck. The zero-variance share is drawn, not watched: it rises as a task is learnt.
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from tansaku.core.errors import InputError, MissingInputError
from tansaku.trainer.collapse import collapse_onsets

WATCHED = ("reward", "entropy", "reasoning_chars", "tool_calls")
DRAWN = (("reward", "total reward"), ("zero_variance", "zero-variance group share"),
         ("entropy", "policy entropy"))


def run_series(run: str | Path) -> dict[str, dict[int, float]]:
    """``{signal: {step: value}}`` of one run (see the module docstring); a signal the run lacks is absent."""
    from tansaku.trainer.report import run_report

    run = Path(run)
    if not run.is_dir():
        raise MissingInputError(f"no run folder at {run}")
    report = run_report(run)
    if not report["per_step"]:
        raise InputError(f"{run}: no trainer_state.json log history and no completions/*.parquet to read")
    collapse = {s["step"]: s for s in report["collapse"]}
    series: dict[str, dict[int, float]] = {}
    for s in report["per_step"]:
        step, logged, signals = s["step"], s["logged"], s.get("signals", {})
        values = {"reward": logged.get("reward", collapse.get(step, {}).get("reward")),
                  "zero_variance": logged.get("frac_reward_zero_std", s.get("zero_variance_group_share")),
                  "entropy": signals.get("entropy"),
                  "reasoning_chars": collapse.get(step, {}).get("reasoning_chars"),
                  "tool_calls": collapse.get(step, {}).get("tool_calls")}
        for name, value in values.items():
            if isinstance(value, (int, float)):
                series.setdefault(name, {})[step] = float(value)
    return series


def recurring(onsets: dict[str, list[int]], within: int = 1, min_runs: int = 2) -> list[dict]:
    """Clusters of one signal's onsets (``{run: [steps]}``) that ``min_runs`` or more runs share within
    ±``within``.

    Each anchor onset (in step order, not already in a cluster) takes, from every run, its onset nearest the
    anchor if it lies within ``within`` steps; ``steps`` is ``{run: step}``.

    >>> recurring({"a": [4, 12], "b": [5], "c": [9]})
    [{'step': 4, 'steps': {'a': 4, 'b': 5}}]
    >>> recurring({"a": [4], "b": [7]}, within=2)
    []
    """
    anchors = sorted((step, run) for run, steps in onsets.items() for step in steps)
    used: set[tuple[int, str]] = set()
    clusters = []
    for anchor, run in anchors:
        if (anchor, run) in used:
            continue
        near = {}
        for other, steps in onsets.items():
            close = [s for s in steps if abs(s - anchor) <= within and (s, other) not in used]
            if close:
                near[other] = min(close, key=lambda s: (abs(s - anchor), s))
        if len(near) >= min_runs:
            used.update((step, other) for other, step in near.items())
            clusters.append({"step": anchor, "steps": near})
    return clusters


def compare_seeds(runs: list[str | Path], lookback: int = 5, drop: float = 0.5, within: int = 1,
                  min_runs: int = 2) -> dict:
    """Each run's collapse onsets per watched signal, and the collapses that recur (see the module
    docstring)."""
    if len(runs) < 2:
        raise InputError("give two or more runs to compare (train report --runs R1 R2 …)")
    if not 0 < drop < 1 or lookback < 1 or within < 0 or min_runs < 2:
        raise InputError("need 0 < drop < 1, lookback ≥ 1, within ≥ 0 and min-runs ≥ 2")
    if len({Path(run).resolve() for run in runs}) < len(runs):
        raise InputError("a run is given twice: give each run folder once")
    names = _names(runs)
    series = {name: run_series(run) for name, run in zip(names, runs)}
    per_run = [{"run": name, "path": str(run), "steps": len({s for v in series[name].values() for s in v}),
                "collapses": {signal: collapse_onsets(sorted(series[name][signal].items()), lookback, drop)
                              for signal in WATCHED if signal in series[name]}}
               for name, run in zip(names, runs)]
    found = []
    for signal in WATCHED:
        onsets = {r["run"]: r["collapses"][signal] for r in per_run if r["collapses"].get(signal)}
        found += [{"signal": signal, **c} for c in recurring(onsets, within, min_runs)]
    return {"runs": per_run, "recurring": found, "coincide": bool(found),
            "params": {"lookback": lookback, "drop": drop, "within": within, "min_runs": min_runs},
            "series": series}


def _names(runs: list[str | Path]) -> list[str]:
    """Each run's folder name, or its whole path where two runs share a name."""
    short = [Path(run).name or str(run) for run in runs]
    return [name if short.count(name) == 1 else str(run) for name, run in zip(short, runs)]


def plot_seeds(result: dict, out_png: str | Path, option: str | None = None):
    """One panel per ``DRAWN`` signal, one line per run (its collapse onsets marked ×); returns the figure.
    ``option``: ``out_png`` is a file the user named with it (``tansaku.trainer.curves.save_figure``)."""
    from tansaku.trainer.curves import new_figure, save_figure

    figure, axes = new_figure(1, len(DRAWN), width=5.6, height=3.6)
    colors = [f"C{i % 10}" for i in range(len(result["runs"]))]
    for ax, (signal, title) in zip(axes[0], DRAWN):
        for run, color in zip(result["runs"], colors):
            points = sorted(result["series"][run["run"]].get(signal, {}).items())
            if not points:
                continue
            ax.plot(*zip(*points), marker="o", markersize=3, color=color, label=run["run"])
            marks = [(s, v) for s, v in points if s in run["collapses"].get(signal, [])]
            if marks:
                ax.plot(*zip(*marks), linestyle="", marker="x", markersize=10, mew=2, color=color)
        for cluster in (c for c in result["recurring"] if c["signal"] == signal):
            ax.axvspan(min(cluster["steps"].values()) - 0.5, max(cluster["steps"].values()) + 0.5,
                       color="tab:red", alpha=0.12)
        if signal == "zero_variance":
            ax.set_ylim(-0.05, 1.05)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, framealpha=0.6)
    figure.suptitle("× collapse onset; shaded: a collapse several runs share", fontsize=9)
    save_figure(figure, out_png, option)
    return figure


def seeds_table(result: dict) -> Table:
    """Per run: its steps and the collapse onsets of each watched signal; recurring ones as the caption."""
    p = result["params"]
    recur = "; ".join(f"{c['signal']} at step {c['step']} in "
                      + ", ".join(f"{r} ({s})" for r, s in c["steps"].items()) for c in result["recurring"])
    table = Table(title=f"collapse onsets (drop ≥ {p['drop']:.0%} of the peak of the last {p['lookback']} "
                        f"steps)",
                  caption=f"recurring within ±{p['within']} steps: {recur}" if recur
                  else f"no collapse recurs within ±{p['within']} steps")
    table.add_column("run")
    table.add_column("steps", justify="right")
    for signal in WATCHED:
        table.add_column(signal)
    for run in result["runs"]:
        cells = [", ".join(map(str, run["collapses"][s])) or "none" if s in run["collapses"] else "–"
                 for s in WATCHED]
        table.add_row(run["run"], str(run["steps"]), *cells)
    return table
