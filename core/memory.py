"""Memory accounting and process isolation for long multi-step runs (``synth demo``).

A model-heavy step (loading a model for evaluation, SFT, RL) leaves memory behind in a long-lived process even
after every Python reference to the model is dropped: glibc keeps freed heap pages in its arenas, torch's CPU
allocator and thread pools keep their own, and trainers hold reference cycles (callbacks ↔ trainer) that live
until the next garbage collection. Steps run one after another in one process therefore add up. The honest
way to give all of it back is to run the step in a child process and let it exit: ``run_isolated``.
Before spawning, the parent hands its freed heap pages back (``malloc_trim``), and the child runs with two
glibc settings (``CHILD_ENVIRONMENT``; a value the user set wins), measured on the demo's steps (2026-11-30):
``MALLOC_ARENA_MAX=2`` (glibc otherwise gives each of torch's threads an arena: one GSPO step peaked at
3,651 MB with the default, 3,426 MB with two) and ``MALLOC_MMAP_THRESHOLD_=1048576`` (tensors over 1 MB are
mapped and unmapped instead of fragmenting the heap: 4 SFT steps peaked at 2,963 MB instead of 3,270 MB, for
81 s instead of 64 s — the price of a laptop that runs the main job in 8 GB).

``RSSMeter`` samples the resident memory of this process and its live descendants in a background thread,
so each step's peak can be reported; ``maxrss_mb`` reads the kernel's high-water marks (``getrusage``:
``self`` is this process, ``children`` the largest waited-for child). Linux only (``/proc``); elsewhere the
sampled numbers are 0 and ``getrusage`` still works.

    meter = RSSMeter().start()
    result, child_peak_mb = run_isolated(train, "recipe.yaml")
    step_peak_mb = meter.lap()
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import importlib
import multiprocessing
import os
import resource
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from tansaku.core.errors import TansakuError


class IsolatedStepDied(TansakuError, RuntimeError):
    """The child process of an isolated step ended without a result (killed, e.g. by the OOM killer)."""


def maxrss_mb() -> dict[str, int]:
    """Peak resident set size in MB: ``self`` (this process) and ``children`` (largest waited-for child)."""
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return {"self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // scale,
            "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // scale}


def rss_mb(pid: int | str = "self") -> int:
    """Current resident set size (VmRSS) of ``pid`` in MB; 0 when unknown (process gone, no /proc)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


def tree_rss_mb(pid: int | None = None) -> int:
    """VmRSS of ``pid`` (default: this process) plus all its live descendants, in MB. Pages shared between
    them (libraries mapped by both) count once per process, so this is an upper bound of the real use."""
    pid = pid or os.getpid()
    return rss_mb(pid) + sum(rss_mb(child) for child in _descendants(pid))


class RSSMeter:
    """Samples ``tree_rss_mb()`` every ``interval`` seconds in a daemon thread; ``lap()`` gives the peak since
    the previous lap (a step's peak), ``peak`` the peak since ``start``."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.peak = self._lap_peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        value = tree_rss_mb()
        with self._lock:
            self.peak = max(self.peak, value)
            self._lap_peak = max(self._lap_peak, value)
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> RSSMeter:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="rss-meter", daemon=True)
        self._thread.start()
        return self

    def lap(self) -> int:
        """Peak (MB) since the previous ``lap`` (or ``start``), including a sample taken now."""
        now = self.sample()
        with self._lock:
            peak, self._lap_peak = self._lap_peak, now
        return peak

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# a value the user set is kept
CHILD_ENVIRONMENT = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "1048576"}


@contextlib.contextmanager
def _child_environment():
    """``CHILD_ENVIRONMENT`` in ``os.environ`` while the child is spawned (it copies the environment then)."""
    added = {k: v for k, v in CHILD_ENVIRONMENT.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def trim_heap() -> bool:
    """Give glibc's freed heap pages back to the system (``malloc_trim(0)``); False where there is no
    glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return bool(libc is not None and hasattr(libc, "malloc_trim") and libc.malloc_trim(0))
    except OSError:
        return False


def _resolve(target):
    """A callable, or ``"package.module:function"`` imported here (so only the child pays for the import)."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _call_measured(target, args, kwargs):
    """Runs in the child: the result and the child's own peak RSS."""
    result = _resolve(target)(*args, **kwargs)
    return result, maxrss_mb()["self"]


def run_isolated(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a fresh child process; returns ``(result, the child's peak RSS in MB)``.

    ``fn`` must be importable (a module-level function) and its arguments and result picklable; or give it as
    ``"package.module:function"``, so that a module that pulls in torch is imported in the child only. The
    child is
    *spawned*, not forked: a fork would copy this process's heap and torch's thread pools (a fork after
    OpenMP has started can deadlock), while a spawned child starts empty and returns all its memory when it
    exits. An exception in ``fn`` is raised here (with the child's traceback as its cause).
    """
    context = multiprocessing.get_context("spawn")
    trim_heap()
    with _child_environment(), ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        try:
            return pool.submit(_call_measured, fn, args, kwargs).result()
        except BrokenProcessPool:
            raise IsolatedStepDied(
                f"{getattr(fn, '__qualname__', fn)} died in its child process without a result "
                "(killed for lack of memory? see the kernel log: dmesg | grep -i oom)") from None
