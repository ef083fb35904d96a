"""The efficacy experiment's report, made only from its per-(arm, seed) result files (``bench/efficacy.py``).

    python bench/efficacy.py --table-only        # writes bench/results/efficacy/README.md and the plots

``stability(history, run_report)``: one run's stability numbers from its TRL log history; ``table(results)``: the
held-out pass@1 per arm and set (per seed, mean ± sd) and the stability per run; ``plot_arm``: one PNG per
arm with the seeds' curves overlaid.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

ARM_ORDER = ("sft", "gspo", "grpo", "gspo-onpolicy")
SET_NAMES = {"test": "(a) test: unseen bridges", "phrasing": "(b) held-out phrasings",
             "unseen": "(c) unseen wiki, free-style questions"}
# What each panel of an arm's PNG draws: (log key, title)
CURVES = (("reward", "reward (weighted)"), ("clip_ratio/region_mean", "clip fraction"), ("entropy", "entropy"),
          ("kl_to_start", "KL to the SFT start"), ("sampling/sampling_logp_difference/mean", "sampler-trainer gap"))


def series(history: list[dict], key: str) -> list[tuple[int, float]]:
    return [(e["step"], float(e[key])) for e in history if key in e and e[key] is not None]


def _mean(values):
    return statistics.mean(values) if values else None


def stability(history: list[dict], run_report: dict | None) -> dict:
    """One run's stability: reward std over steps, entropy (mean, last), clip fraction (mean over all optimizer
    steps and over the steps after a round's first), KL to the start (last, max), sampler–trainer gap (mean,
    max) and the collapse / reward-hacking watch events of its run report.

    >>> h = [{"step": 1, "reward": 0.2, "clip_ratio/region_mean": 0.0, "entropy": 0.5},
    ...      {"step": 2, "clip_ratio/region_mean": 0.3, "entropy": 0.4}, {"step": 3, "reward": 0.4}]
    >>> s = stability(h, None); s["clip_fraction_mean"], s["clip_fraction_later_minibatches"], s["reward_std"]
    (0.15, 0.3, 0.1414)
    """
    rewards = [v for _, v in series(history, "reward")]
    # the first minibatch of a round logs the rollout metrics (reward …): the others train on moved weights
    round_starts = {e["step"] for e in history if "reward" in e}
    clips = series(history, "clip_ratio/region_mean")
    gaps = [v for _, v in series(history, "sampling/sampling_logp_difference/mean")]
    gap_max = [v for _, v in series(history, "sampling/sampling_logp_difference/max")]
    kl = [v for _, v in series(history, "kl_to_start")]
    entropy = [v for _, v in series(history, "entropy")]
    overall = (run_report or {}).get("overall", {})
    return {
        "reward_std": round(statistics.stdev(rewards), 4) if len(rewards) > 1 else None,
        "reward_first_last": [rewards[0], rewards[-1]] if rewards else None,
        "entropy_mean": _mean(entropy), "entropy_last": entropy[-1] if entropy else None,
        "clip_fraction_mean": _mean([v for _, v in clips]),
        "clip_fraction_later_minibatches": _mean([v for s, v in clips if s not in round_starts]),
        "kl_to_start_last": kl[-1] if kl else None, "kl_to_start_max": max(kl) if kl else None,
        "sampler_gap_mean": _mean(gaps), "sampler_gap_max": max(gap_max) if gap_max else None,
        "watch_events": list(overall.get("collapse_warnings", [])) + list(overall.get("hacking_warnings", [])),
    }


def load_results(results: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(results.glob("*-seed*.json"))]


def mean_sd(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def pass_table(rows: list[dict]) -> list[str]:
    sets = list(SET_NAMES)
    lines = ["| arm | seed | " + " | ".join(SET_NAMES[s] for s in sets) + " |", "|---" * (len(sets) + 2) + "|"]
    for arm in ARM_ORDER:
        group = [r for r in rows if r["method"] == arm]
        for r in sorted(group, key=lambda r: r["seed"]):
            cells = [_fmt(r["heldout"].get(s, {}).get("pass@1")) for s in sets]
            lines.append(f"| {arm} | {r['seed']} | " + " | ".join(cells) + " |")
        if len(group) > 1:
            lines.append(f"| **{arm}** | mean ± sd (n={len(group)}) | " + " | ".join(
                mean_sd([r["heldout"].get(s, {}).get("pass@1") for r in group]) for s in sets) + " |")
    return lines


def stability_table(rows: list[dict]) -> list[str]:
    keys = ("reward_std", "entropy_last", "clip_fraction_mean", "clip_fraction_later_minibatches",
            "kl_to_start_last", "sampler_gap_mean")
    lines = ["| arm | seed | steps | " + " | ".join(keys) + " | watch events |", "|---" * (len(keys) + 4) + "|"]
    for arm in ARM_ORDER[1:]:
        for r in sorted((r for r in rows if r["method"] == arm), key=lambda r: r["seed"]):
            s = r.get("stability", {})
            lines.append(f"| {arm} | {r['seed']} | {r.get('steps', '–')} | "
                         + " | ".join(_fmt(s.get(k), 4) for k in keys) + f" | {len(s.get('watch_events', []))} |")
    return lines


def target_lines(rows: list[dict]) -> list[str]:
    """The issue's target, computed: the better off-policy arm's mean above SFT's by more than the two SDs."""
    def stats(arm: str, name: str):
        values = [r["heldout"][name]["pass@1"] for r in rows if r["method"] == arm and name in r["heldout"]]
        return (statistics.mean(values), statistics.stdev(values), len(values)) if len(values) > 1 else None

    out = []
    for name in SET_NAMES:
        sft = stats("sft", name)
        arms = {arm: stats(arm, name) for arm in ("gspo", "grpo")}
        arms = {a: v for a, v in arms.items() if v is not None}
        if sft is None or not arms:
            out.append(f"- {SET_NAMES[name]}: not enough seeds yet")
            continue
        best = max(arms, key=lambda a: arms[a][0])
        m, sd, n = arms[best]
        gap, noise = m - sft[0], sd + sft[1]
        verdict = "beats SFT by more than the sum of SDs" if gap > noise else "within noise of SFT"
        out.append(f"- {SET_NAMES[name]}: best off-policy arm {best} {m:.3f} (n={n}) vs SFT {sft[0]:.3f} "
                   f"(n={sft[2]}): difference {gap:+.3f}, sum of SDs {noise:.3f}: {verdict}")
    return out


def paired_lines(rows: list[dict]) -> list[str]:
    """Each RL run minus the SFT start it began from (same seed): the seed-to-seed spread of SFT, which the
    target's unpaired SDs carry twice, cancels. Shown beside the target, not instead of it."""
    sft = {r["seed"]: r["heldout"] for r in rows if r["method"] == "sft"}
    lines = ["| arm | " + " | ".join(SET_NAMES.values()) + " |", "|---" * (len(SET_NAMES) + 1) + "|"]
    for arm in ARM_ORDER[1:]:
        runs = sorted((r for r in rows if r["method"] == arm and r["seed"] in sft), key=lambda r: r["seed"])
        if not runs:
            continue
        cells = []
        for name in SET_NAMES:
            gains = [r["heldout"][name]["pass@1"] - sft[r["seed"]][name]["pass@1"] for r in runs
                     if name in r["heldout"] and name in sft[r["seed"]]]
            mean = f" (mean {statistics.mean(gains):+.3f})" if len(gains) > 1 else ""
            cells.append(" ".join(f"{g:+.3f}" for g in gains) + mean if gains else "–")
        seeds = ", ".join(str(r["seed"]) for r in runs)
        lines.append(f"| {arm} (seeds {seeds}) | " + " | ".join(cells) + " |")
    return lines


def plot_arm(rows: list[dict], arm: str, out: Path) -> Path | None:
    """One PNG for ``arm``: a panel per curve, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted((r for r in rows if r["method"] == arm and r.get("curves")), key=lambda r: r["seed"])
    if not runs:
        return None
    fig, axes = plt.subplots(1, len(CURVES), figsize=(4 * len(CURVES), 3.2))
    for ax, (key, title) in zip(axes, CURVES):
        for r in runs:
            points = r["curves"].get(key) or []
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=f"seed {r['seed']}")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("optimizer step", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{arm}: {len(runs)} seed(s)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def write_report(results: Path, protocol: str) -> str:
    """``README.md`` and ``plots/<arm>.png`` under ``results`` from the result files; returns the tables."""
    rows = load_results(results)
    text = "\n".join(["## Held-out pass@1", "", *pass_table(rows), "", "## Target (mean above SFT by more than "
                      "the sum of both SDs)", "", *target_lines(rows), "",
                      "## Paired by seed (RL run − its SFT start)", "", *paired_lines(rows), "",
                      "## Stability per run", "",
                      *stability_table(rows)])
    plots = [plot_arm(rows, arm, results / "plots" / f"{arm}.png") for arm in ARM_ORDER[1:]]
    pictures = "".join(f"![{p.stem}](plots/{p.name})\n" for p in plots if p is not None)
    (results / "README.md").write_text(f"# RL efficacy v2 (bench/efficacy.py)\n\n{protocol}\n\n{text}\n\n{pictures}",
                                       encoding="utf-8")
    return text
