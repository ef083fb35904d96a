"""bf16 where it is native, fp32 elsewhere: the dtype read off the CPU's features, and a recipe asking for bf16 on
a CPU that emulates it gets one warning line.

    pytest tests/test_hardware.py -q
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tansaku.core import hardware
from tansaku.trainer.recipes import load_recipe

SFT_TINY = Path(__file__).resolve().parents[1] / "trainer" / "recipes" / "sft-tiny.yaml"


@pytest.fixture(params=[False, True], ids=["avx2", "avx512_bf16"])
def cpu_bf16(request, monkeypatch) -> bool:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: request.param)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    return request.param


def test_the_dtype_follows_the_cpus_bf16_features(cpu_bf16):
    assert hardware.native_bf16("cpu") is cpu_bf16
    assert hardware.fast_dtype() == ("bfloat16" if cpu_bf16 else "float32")
    assert (hardware.emulated_bf16_warning(True) is None) is cpu_bf16
    assert hardware.emulated_bf16_warning(False) is None  # fp32 asked for: nothing to say


def test_amx_alone_counts_as_native(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert hardware.fast_dtype() == "bfloat16"


def test_a_bf16_recipe_on_an_emulating_cpu_is_warned_once(cpu_bf16, caplog):
    with caplog.at_level(logging.WARNING, logger="tansaku.trainer.recipes"):
        load_recipe(SFT_TINY, ["--bf16", "true", "--use_cpu", "true"], kind="sft")
        load_recipe(SFT_TINY, ["--bf16", "false", "--use_cpu", "true"], kind="sft")
    lines = [r.getMessage() for r in caplog.records if "bf16 is emulated" in r.getMessage()]
    assert len(lines) == (0 if cpu_bf16 else 1)
    assert all(line.startswith("sft-tiny.yaml: ") and "bf16: false" in line for line in lines)
