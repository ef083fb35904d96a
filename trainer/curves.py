"""PNG learning curves of a training run (Agg canvas, no display): ``learning_curves.png`` for RL,
``loss_curve.png`` for SFT. They draw what ``tansaku.trainer.report.run_report`` read back
(``report["per_step"]``); a signal the run did not log leaves its panel empty with a note saying what would
log it, never a made-up line.

``learning_curves_figure(report)`` is the 4×3 figure (``plot_learning_curves`` saves it), row by row:

1. reward components (``rewards/<name>/mean`` and the weighted total) · tool calls per episode · failed tool
   calls, episodes repeating a call and the rubric judge's failure share;
2. loss and KL to the reference (``kl``, right axis) · clip ratios (``clip_ratio/*_mean``) · policy entropy;
3. completion length (mean / min / max tokens; ``completions/clipped_ratio`` on the right axis) ·
   zero-variance group share (TRL's ``frac_reward_zero_std`` and the share read from the completions) ·
   sampler–trainer gap (``sampling/sampling_logp_difference/*``; ``sampling/importance_sampling_ratio/*``
   on the right axis);
4. search health (``tansaku.envs.search_health``, ``search_health/*``): searches per episode (mean, p90; the
   shares with 0 and 1 searches on the right axis) · distinct-query ratio and repeated queries · open before
   answering, grounded answers, answers without a search.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tansaku.core import output_files, safe_write
from tansaku.envs.monitoring import LOGGED_SERIES
from tansaku.trainer.report import CURVES_FILE, LOSS_FILE, load_log_history, run_report

PANELS = ("reward components (mean per step)", "tool calls per episode",
          "failures: tool calls, repeats, judge",
          "loss / KL to the reference", "clip ratios", "policy entropy",
          "completion length (tokens)", "zero-variance group share",
          "sampler–trainer gap (vLLM IS correction)",
          "searches per episode", "queries: distinct ratio, repeats", "evidence before the answer")


def new_figure(rows: int, cols: int, width: float = 6, height: float = 3.6):
    # The object API with the Agg canvas: no pyplot, no global backend switch, works without a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width * cols, height * rows), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, cols, squeeze=False)


def save_figure(figure, out: str | Path, option: str | None = None) -> Path:
    """``figure`` written to ``out`` through a fresh temp name (``tansaku.core.safe_write``); the format
    comes from ``out``'s suffix (PNG without one), since the temp name ends in ``.tmp``. A PNG carries
    tansaku's mark, so that a rerun may draw it again. ``option``: ``out`` is a file the user named with it,
    not one inside a folder tansaku claimed: it is written only where nothing else is
    (``tansaku.core.output_files``)."""
    out = Path(out)
    fmt = out.suffix[1:].lower() or "png"
    # svg, pdf: fixed metadata keys only
    mark = {"metadata": output_files.PNG_METADATA} if fmt == "png" else {}
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
    ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="gray",
            wrap=True)


class _CurvePanels:
    """Draws one report's series into the panels: ``xs`` the steps, ``twins`` the right axes made so far
    (keyed by the panel they belong to)."""

    def __init__(self, report: dict):
        self.steps = report["per_step"]
        self.xs = [s["step"] for s in self.steps]
        self.twins: dict = {}

    def logged(self, key: str) -> list:
        return [s["logged"].get(key) for s in self.steps]

    def signal(self, key: str) -> list:
        return [s.get("signals", {}).get(key) for s in self.steps]

    def per_step(self, key: str) -> list:
        return [s.get(key) for s in self.steps]

    def twin(self, ax, keys: list[tuple[str, str]], ylabel: str, **kwargs) -> None:
        """A right axis on ``ax`` for the signals ``keys`` (key, label), only when one of them was logged."""
        if any(v is not None for key, _ in keys for v in self.signal(key)):
            self.twins[ax] = ax.twinx()
            for key, label in keys:
                _plot(self.twins[ax], self.xs, self.signal(key), label, **kwargs)
            self.twins[ax].set_ylabel(ylabel, fontsize=8)

    def episode_row(self, rewards, calls, failures) -> None:
        """Reward components and total · tool calls per episode · failed calls, repeats, judge failures."""
        xs = self.xs
        for name in dict.fromkeys(k for s in self.steps for k in s["logged"] if k not in LOGGED_SERIES):
            _plot(rewards, xs, self.logged(name), name)
        _plot(rewards, xs, self.logged("reward"), "total (weighted)", color="black", linewidth=2)
        _plot(calls, xs, self.logged("tools/call_frequency"), "tools/call_frequency")
        _plot(calls, xs, [s.get("calls_per_episode", {}).get("max") for s in self.steps], "max per episode",
              linestyle="--")
        _plot(failures, xs, self.logged("tools/failure_frequency"), "tools/failure_frequency")
        _plot(failures, xs, self.per_step("repeated_call_share"), "episodes repeating a call", linestyle="--")
        judged, failed = self.signal("rubric/judged"), self.signal("rubric/judge_failures")
        _plot(failures, xs, [f / j if f is not None and j else None for f, j in zip(failed, judged)],
              "judge failures / judged", linestyle=":", color="tab:red")

    def optimiser_row(self, loss, clip, entropy) -> None:
        """Loss with KL on the right axis · clip ratios · policy entropy."""
        xs = self.xs
        _plot(loss, xs, self.signal("loss"), "loss")
        _plot(loss, xs, self.signal("policy_loss"), "policy_loss", linestyle="--")
        self.twin(loss, [("kl", "kl (right axis)")], "kl", color="tab:red")
        if loss not in self.twins:
            loss.set_title("kl not logged (beta = 0)", fontsize=8, loc="right", color="gray")
        clipped = [_plot(clip, xs, self.signal(f"clip_ratio/{k}_mean"), f"clip_ratio/{k}_mean")
                   for k in ("region", "low", "high")]
        clipped.append(_plot(clip, xs, self.signal("cispo_clip_ratio"), "cispo_clip_ratio"))
        if not any(clipped):
            _absent(clip, "no clip ratio logged\n(TRL logs them for the grpo, bnpo, dr_grpo,\n"
                          "dapo, luspo and cispo losses)")
        if not _plot(entropy, xs, self.signal("entropy"), "entropy", color="tab:purple"):
            _absent(entropy, "entropy not logged")

    def completion_row(self, length, zero, gap) -> None:
        """Completion lengths with the clipped share on the right · zero-variance groups · sampler gap."""
        xs = self.xs
        shown = [_plot(length, xs, self.signal(f"completions/{k}_length"), k, linestyle=style)
                 for k, style in (("mean", "-"), ("max", "--"), ("min", ":"))]
        self.twin(length, [("completions/clipped_ratio", "clipped_ratio (right axis)")], "clipped ratio",
                  color="tab:gray")
        if not any(shown) and length not in self.twins:
            _absent(length, "completion lengths not logged")
        _plot(zero, xs, self.logged("frac_reward_zero_std"), "frac_reward_zero_std (TRL)")
        _plot(zero, xs, self.per_step("zero_variance_group_share"), "from completions", linestyle="--")
        zero.set_ylim(-0.05, 1.05)
        gaps = [_plot(gap, xs, self.signal(f"sampling/sampling_logp_difference/{k}"), f"logp difference {k}",
                      linestyle=style) for k, style in (("mean", "-"), ("max", "--"))]
        self.twin(gap, [(f"sampling/importance_sampling_ratio/{k}", f"IS ratio {k} (right axis)")
                        for k in ("min", "mean", "max")],
                  "importance sampling ratio", linestyle=":")
        if not any(gaps) and gap not in self.twins:
            _absent(gap, "not logged: TRL reports it with use_vllm\nand vllm_importance_sampling_correction")


    def health_row(self, searches, queries, evidence) -> None:
        """Searches per episode · distinct queries and repeats · open / grounded / no-search answers."""
        xs, key = self.xs, "search_health/{}".format
        shown = [_plot(searches, xs, self.signal(key("searches_mean")), "mean"),
                 _plot(searches, xs, self.signal(key("searches_p90")), "p90", linestyle="--")]
        self.twin(searches, [(key("searches_share_0"), "share with 0 (right axis)"),
                             (key("searches_share_1"), "share with 1 (right axis)")], "share", linestyle=":")
        shown.append(_plot(queries, xs, self.signal(key("distinct_query_ratio")), "distinct-query ratio"))
        shown.append(_plot(queries, xs, self.signal(key("repeated_queries_per_episode")),
                           "repeated queries / episode", linestyle="--"))
        for name, label in (("open_before_answer_share", "opened a document before answering"),
                            ("grounded_answer_share", "answer in retrieved text"),
                            ("answered_without_search_share", "answered without a search")):
            shown.append(_plot(evidence, xs, self.signal(key(name)), label))
        if not any(shown) and searches not in self.twins:
            _absent(evidence, "search_health/* not logged\n(an older run, or no completions)")


def learning_curves_figure(report: dict):
    """The 4×3 ``matplotlib.figure.Figure`` of ``report`` (titles: ``PANELS``; twin axes carry no title)."""
    figure, axes = new_figure(4, 3, width=5.6, height=3.4)
    panels = _CurvePanels(report)
    (rewards, calls, failures), (loss, clip, entropy), (length, zero, gap), health = axes
    panels.episode_row(rewards, calls, failures)
    panels.optimiser_row(loss, clip, entropy)
    panels.completion_row(length, zero, gap)
    panels.health_row(*health)
    for ax, title in zip(axes.flat, PANELS):
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        _legend(ax, *([panels.twins[ax]] if ax in panels.twins else []))
    return figure


def plot_learning_curves(output_dir: str | Path, out_png: str | Path | None = None,
                         report: dict | None = None, option: str | None = None) -> Path:
    """``learning_curves_figure`` of ``report`` (default: ``run_report(output_dir)``) as a PNG (default
    ``output_dir/learning_curves.png``); ``option``: ``out_png`` is the user's (``save_figure``)."""
    report = report or run_report(output_dir)
    out = Path(out_png) if out_png else Path(output_dir, CURVES_FILE)
    return save_figure(learning_curves_figure(report), out, option)


def copy_learning_curves(run_dir: str | Path, folder: str | Path) -> Path | None:
    """``run_dir``'s learning-curve PNG (``train rl`` draws it) copied into ``folder``, drawn from the run's
    logs first when an older run lacks it; None, with a warning on stderr, when it cannot be drawn: the
    curves are a view of the run, never a reason to fail."""
    from tansaku.trainer.report import CURVES_FILE

    source, target = Path(run_dir, CURVES_FILE), Path(folder, CURVES_FILE)
    try:
        if not source.exists():
            plot_learning_curves(run_dir, source)
        safe_write.copy_file_atomic(source, target)
        return target
    except Exception as exc:  # noqa: BLE001 (matplotlib, a run without logs, …)
        Console(stderr=True).print(f"[yellow]learning curves not drawn: {type(exc).__name__}: {exc}[/yellow]")
        return None


def plot_loss_curve(output_dir: str | Path, out_png: str | Path | None = None) -> Path:
    """SFT: training loss (and learning rate) per logged step as a PNG (default
    ``output_dir/loss_curve.png``)."""
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
