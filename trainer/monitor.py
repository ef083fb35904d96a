"""The reward watch of `train rl`: a TRL callback that warns when a reward component rises while
answer correctness stays flat (the usual sign of reward hacking), per task.

The series come from what TRL already logs each step (``rewards/<name>/mean``, ``frac_reward_zero_std``
= zero-variance group share, ``tools/call_frequency`` = tool calls per episode); the comparison itself
is ``tansaku.envs.monitoring.hacking_warnings``. Each warning is printed once, appended to
``<output_dir>/reward_watch.log`` and kept in ``callback.warnings``.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from tansaku.core import safe_write
from tansaku.envs.monitoring import hacking_warnings, reward_decomposition
from tansaku.trainer.recipe_sections import WatchSpec

SHARED_SERIES = ("tools/call_frequency", "frac_reward_zero_std")


class RewardWatchCallback(TrainerCallback):
    """``groups``: ``{task: ([reward component names], correctness component name)}``."""

    def __init__(self, groups: dict[str, tuple[list[str], str]], watch: WatchSpec,
                 output_dir: str | None = None, printer=print):
        self.groups, self.watch, self.printer = groups, watch, printer
        self.log_path = Path(output_dir) / "reward_watch.log" if output_dir else None
        self.warnings: list[str] = []
        self._seen: set[str] = set()

    def check(self, log_history: list[dict]) -> list[str]:
        """New warnings for this log history (each (task, component) warned once)."""
        rows = reward_decomposition(log_history)
        new = []
        for task, (names, correctness) in self.groups.items():
            if self.watch.correctness:  # the recipe names another correctness component (substring)
                correctness = next((n for n in names if self.watch.correctness in n), None)
            if correctness is None:
                continue
            keep = set(names) | set(SHARED_SERIES) | {"step"}
            task_rows = [{k: v for k, v in r.items() if k in keep} for r in rows]
            for warning in hacking_warnings(task_rows, correctness, self.watch.window, self.watch.rise,
                                            self.watch.flat):
                key = f"{task}:{warning.split(' ')[0]}"
                if key not in self._seen:
                    self._seen.add(key)
                    new.append(f"[{task}] {warning}")
        return new

    def on_log(self, args, state, control, logs=None, **kwargs):
        for warning in self.check(state.log_history):
            line = f"[reward watch] step {state.global_step}: {warning}"
            self.warnings.append(line)
            self.printer(line)
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                with safe_write.open_for_append(self.log_path) as f:  # a link at the log's name is refused
                    f.write(line + "\n")
