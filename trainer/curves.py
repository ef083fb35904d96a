"""PNG learning curves of a training run (Agg canvas, no display): ``learning_curves.png`` for RL, ``loss_curve.png``
for SFT. They draw what ``tansaku.trainer.report.run_report`` read back (``report["per_step"]``); a signal the run
did not log leaves its panel empty with a note saying what would log it, never a made-up line.

``learning_curves_figure(report)`` is the 3×3 figure (``plot_learning_curves`` saves it), row by row:

1. reward components (``rewards/<name>/mean`` and the weighted total) · tool calls per episode · failed tool
   calls, episodes repeating a call and the rubric judge's failure share;
2. loss and KL to the reference (``kl``, right axis) · clip ratios (``clip_ratio/*_mean``) · policy entropy;
3. completion length (mean / min / max tokens; ``completions/clipped_ratio`` on the right axis) · zero-variance
   group share (TRL's ``frac_reward_zero_std`` and the share read from the completions) · sampler–trainer gap
   (``sampling/sampling_logp_difference/*``; ``sampling/importance_sampling_ratio/*`` on the right axis).
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import output_files, safe_write

PANELS = ("reward components (mean per step)", "tool calls per episode", "failures: tool calls, repeats, judge",
          "loss / KL to the reference", "clip ratios", "policy entropy",
          "completion length (tokens)", "zero-variance group share", "sampler–trainer gap (vLLM IS correction)")


def new_figure(rows: int, cols: int, width: float = 6, height: float = 3.6):
    # The object API with the Agg canvas: no pyplot, no global backend switch, works without a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width * cols, height * rows), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, cols, squeeze=False)


def save_figure(figure, out: str | Path, option: str | None = None) -> Path:
    """``figure`` written to ``out`` through a fresh temp name (``tansaku.core.safe_write``); the format comes
    from ``out``'s suffix (PNG without one), since the temp name ends in ``.tmp``. A PNG carries tansaku's mark,
    so that a rerun may draw it again. ``option``: ``out`` is a file the user named with it, not one inside a
    folder tansaku claimed: it is written only where nothing else is (``tansaku.core.output_files``)."""
    out = Path(out)
    fmt = out.suffix[1:].lower() or "png"
    mark = {"metadata": output_files.PNG_METADATA} if fmt == "png" else {}  # svg, pdf: fixed metadata keys only
    with safe_write.atomic_path(out) if option is None else output_files.output_file(out, option) as tmp:
        figure.savefig(tmp, dpi=100, format=fmt, **mark)
    return out


def _plot(ax, xs, ys, label, **kwargs) -> bool:
    points = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if points:
        ax.plot(*zip(*points), marker="o", markersize=3, label=label, **kwargs)
    return bool(points)


def _legend(ax, *twins) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for twin in twins:
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:  # on the right axis when there is one (drawn on top); half-transparent over the other's lines
        (twins[-1] if twins else ax).legend(handles, labels, fontsize=7, framealpha=0.6)


def _absent(ax, note: str) -> None:
    ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="gray", wrap=True)


def learning_curves_figure(report: dict):
    """The 3×3 ``matplotlib.figure.Figure`` of ``report`` (titles: ``PANELS``; twin axes carry no title)."""
    from tansaku.trainer.report import _LOGGED_SERIES

    steps = report["per_step"]
    xs = [s["step"] for s in steps]
    logged = lambda key: [s["logged"].get(key) for s in steps]  # noqa: E731
    signal = lambda key: [s.get("signals", {}).get(key) for s in steps]  # noqa: E731
    figure, axes = new_figure(3, 3, width=5.6, height=3.4)
    (rewards, calls, failures), (loss, clip, entropy), (length, zero, gap) = axes
    twins = {}

    def twin(ax, keys: list[tuple[str, str]], ylabel: str, **kwargs):
        if any(v is not None for key, _ in keys for v in signal(key)):
            twins[ax] = ax.twinx()
            for key, label in keys:
                _plot(twins[ax], xs, signal(key), label, **kwargs)
            twins[ax].set_ylabel(ylabel, fontsize=8)

    for name in dict.fromkeys(k for s in steps for k in s["logged"] if k not in _LOGGED_SERIES):
        _plot(rewards, xs, logged(name), name)
    _plot(rewards, xs, logged("reward"), "total (weighted)", color="black", linewidth=2)
    _plot(calls, xs, logged("tools/call_frequency"), "tools/call_frequency")
    _plot(calls, xs, [s.get("calls_per_episode", {}).get("max") for s in steps], "max per episode", linestyle="--")
    _plot(failures, xs, logged("tools/failure_frequency"), "tools/failure_frequency")
    _plot(failures, xs, [s.get("repeated_call_share") for s in steps], "episodes repeating a call", linestyle="--")
    judged, failed = signal("rubric/judged"), signal("rubric/judge_failures")
    _plot(failures, xs, [f / j if f is not None and j else None for f, j in zip(failed, judged)],
          "judge failures / judged", linestyle=":", color="tab:red")

    _plot(loss, xs, signal("loss"), "loss")
    _plot(loss, xs, signal("policy_loss"), "policy_loss", linestyle="--")
    twin(loss, [("kl", "kl (right axis)")], "kl", color="tab:red")
    if loss not in twins:
        loss.set_title("kl not logged (beta = 0)", fontsize=8, loc="right", color="gray")
    clipped = [_plot(clip, xs, signal(f"clip_ratio/{k}_mean"), f"clip_ratio/{k}_mean") for k in ("region", "low", "high")]
    clipped.append(_plot(clip, xs, signal("cispo_clip_ratio"), "cispo_clip_ratio"))
    if not any(clipped):
        _absent(clip, "no clip ratio logged\n(TRL logs them for the grpo, bnpo, dr_grpo,\ndapo, luspo and cispo losses)")
    if not _plot(entropy, xs, signal("entropy"), "entropy", color="tab:purple"):
        _absent(entropy, "entropy not logged")
    shown = [_plot(length, xs, signal(f"completions/{k}_length"), k, linestyle=style)
             for k, style in (("mean", "-"), ("max", "--"), ("min", ":"))]
    twin(length, [("completions/clipped_ratio", "clipped_ratio (right axis)")], "clipped ratio", color="tab:gray")
    if not any(shown) and length not in twins:
        _absent(length, "completion lengths not logged")
    _plot(zero, xs, logged("frac_reward_zero_std"), "frac_reward_zero_std (TRL)")
    _plot(zero, xs, [s.get("zero_variance_group_share") for s in steps], "from completions", linestyle="--")
    zero.set_ylim(-0.05, 1.05)
    gaps = [_plot(gap, xs, signal(f"sampling/sampling_logp_difference/{k}"), f"logp difference {k}",
                  linestyle=style) for k, style in (("mean", "-"), ("max", "--"))]
    twin(gap, [(f"sampling/importance_sampling_ratio/{k}", f"IS ratio {k} (right axis)") for k in ("min", "mean", "max")],
         "importance sampling ratio", linestyle=":")
    if not any(gaps) and gap not in twins:
        _absent(gap, "not logged: TRL reports it with use_vllm\nand vllm_importance_sampling_correction")

    for ax, title in zip(axes.flat, PANELS):
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        _legend(ax, *([twins[ax]] if ax in twins else []))
    return figure


def plot_learning_curves(output_dir: str | Path, out_png: str | Path | None = None,
                         report: dict | None = None, option: str | None = None) -> Path:
    """``learning_curves_figure`` of ``report`` (default: ``run_report(output_dir)``) as a PNG (default
    ``output_dir/learning_curves.png``); ``option``: ``out_png`` is the user's (``save_figure``)."""
    from tansaku.trainer.report import CURVES_FILE, run_report

    report = report or run_report(output_dir)
    out = Path(out_png) if out_png else Path(output_dir, CURVES_FILE)
    return save_figure(learning_curves_figure(report), out, option)


def plot_loss_curve(output_dir: str | Path, out_png: str | Path | None = None) -> Path:
    """SFT: training loss (and learning rate) per logged step as a PNG (default ``output_dir/loss_curve.png``)."""
    from tansaku.trainer.report import LOSS_FILE, load_log_history

    history = [e for e in load_log_history(output_dir) if "loss" in e]
    figure, ((loss, rate),) = new_figure(1, 2)
    xs = [e.get("step") for e in history]
    _plot(loss, xs, [e.get("loss") for e in history], "loss")
    _plot(rate, xs, [e.get("learning_rate") for e in history], "learning_rate")
    loss.set_title("training loss")
    rate.set_title("learning rate")
    for ax in (loss, rate):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    out = Path(out_png) if out_png else Path(output_dir, LOSS_FILE)
    return save_figure(figure, out)
