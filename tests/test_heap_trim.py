"""A CPU trainer hands the C heap's free pages back after every optimizer step (``trainer/cpu/heap_trim.py``):
the callback calls ``malloc_trim(0)`` once per step, ``cpu.apply`` attaches it on CPU only, and where the C
library has no ``malloc_trim`` nothing is called.

Run: ``pytest tests/test_heap_trim.py`` (a second; no model)."""

from __future__ import annotations

import ctypes.util
import platform
from types import SimpleNamespace

import pytest

from tansaku.trainer import cpu
from tansaku.trainer.cpu.heap_trim import HeapTrimCallback, libc_trim


def test_each_step_end_trims_once_and_counts_what_released_memory():
    calls = []
    callback = HeapTrimCallback(trim=lambda pad: calls.append(pad) or len(calls) % 2)  # released, not, released
    for _ in range(3):
        callback.on_step_end(None, None, None)
    assert calls == [0, 0, 0] and callback.trims == 2


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_trim_is_found_and_callable():
    trim = libc_trim()
    assert trim is not None and trim(0) in (0, 1)


def test_without_malloc_trim_the_callback_does_nothing(monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    callback = HeapTrimCallback()
    assert callback.trim is None
    callback.on_step_end(None, None, None)  # no call, no error
    assert callback.trims == 0


@pytest.mark.parametrize("device, attached", [("cpu", 1), ("cuda", 0)])
def test_apply_attaches_the_callback_on_cpu_only(monkeypatch, device, attached):
    monkeypatch.setattr(cpu, "score_labelled_positions", lambda trainer, **kw: None)  # no model here
    added = []
    trainer = SimpleNamespace(args=SimpleNamespace(device=SimpleNamespace(type=device)), add_callback=added.append)
    assert cpu.apply(trainer) is False  # the SFT path
    assert [type(c) for c in added] == [HeapTrimCallback] * attached
