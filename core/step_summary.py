"""A run's step table: one row per step with its seconds and memory, printed with rich and written as
``summary.json`` (the numbers as data) and ``summary.md`` (the table). ``synth demo`` keeps one.

    summary = Summary(folder=out); summary.meter.start()
    summary.add("train sft", out / "sft", "steps=12", seconds, global_step=12)   # summary.json rewritten
    summary.write(out, complete=True); summary.print()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tansaku.core import jsontext, safe_write
from tansaku.core.memory import RSSMeter, maxrss_mb, rss_mb
from tansaku.core.redact import redact_mapping, redact_text

SUMMARY_COLUMNS = ("step", "artifact", "numbers", "seconds", "peak RSS MB")


@dataclass
class Summary:
    """The demo's table and the same numbers as data (``summary.json``), one entry per step.

    Memory per step: ``peak_rss_mb`` is the sampled peak of this process plus its children during the
    step, ``rss_mb`` this process's RSS when the step ended (what it keeps), ``child_peak_rss_mb`` the
    kernel's peak of the step's own process when it ran isolated.
    """

    rows: list[tuple[str, ...]] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    meter: RSSMeter = field(default_factory=RSSMeter)

    # set: summary.json is rewritten after every step (an interrupted run keeps it)
    folder: Path | None = None

    def add(self, step: str, artifact: Path | str, numbers: str, seconds: float, **data) -> None:
        """One table row; ``data`` holds the row's numbers as JSON values (rows, pass@1, loss, …)."""
        entry = {"step": step, "artifact": str(artifact), "seconds": round(seconds, 2), **data,
                 "rss_mb": rss_mb(), "peak_rss_mb": self.meter.lap()}
        self.steps.append(entry)
        self.rows.append((step, str(artifact), numbers, f"{seconds:.1f}", str(entry["peak_rss_mb"])))
        if self.folder is not None:
            self.write(self.folder, complete=False)

    def print(self) -> None:
        table = Table(title="tansaku demo")
        for col in SUMMARY_COLUMNS:
            table.add_column(col)
        for row in self.rows:
            table.add_row(*row)
        Console(stderr=True, width=200).print(table)

    def write(self, folder: Path, **sections) -> dict:
        """``folder/summary.json`` (steps, ``sections``, peak RSS) and ``folder/summary.md`` (the table)."""
        data = {"steps": self.steps, **sections,
                # getrusage's high-water marks: this process, and the largest of its (isolated) children.
                "peak_rss_mb": {**maxrss_mb(), "sampled_tree": self.meter.peak}}
        data = redact_mapping(data)  # a step's artifact or section may name an endpoint (tansaku.core.redact)
        safe_write.write_text_atomic(folder / "summary.json",
                                     jsontext.dumps(data, indent=2, default=str) + "\n")
        lines = ["| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
        lines += ["| " + " | ".join(redact_text(cell).replace("|", "\\|") for cell in row) + " |"
                  for row in self.rows]
        safe_write.write_text_atomic(folder / "summary.md", "\n".join(lines) + "\n")
        return data
