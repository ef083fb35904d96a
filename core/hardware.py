"""Whether this machine computes bf16 natively, and so the dtype local generation and training should use.

bf16 halves memory traffic, which makes it about twice as fast as fp32 on a CPU with native bf16 (AVX512_BF16
or AMX) and on a GPU that has it; a CPU without (AVX2 only) emulates it, and there a 1024³ bf16 matmul took
68× as long as the fp32 one (2.6 s against 39 ms). The answer comes from the CPU's feature flags (as torch
reads them), never from a timing, so one machine always gets the same dtype, and with it the same numbers.

    from tansaku.core.hardware import fast_dtype, native_bf16
    fast_dtype()        # "bfloat16" where bf16 is native, else "float32"
    native_bf16("cpu")  # False on an AVX2-only CPU
"""

from __future__ import annotations

# torch's own checks of the CPU features its bf16 kernels use (torch.cpu, private but stable since 2.2)
_CPU_BF16_CHECKS = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")


def native_bf16(device: str = "cpu") -> bool:
    """True when ``device`` ("cpu", "cuda", "cuda:1", …) computes bf16 in hardware."""
    import torch  # torch: not at --help

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return any(getattr(torch.cpu, name, lambda: False)() for name in _CPU_BF16_CHECKS)


def fast_dtype(device: str = "cpu") -> str:
    """The dtype to generate and train in on ``device``: ``bfloat16`` where it is native, else ``float32``."""
    return "bfloat16" if native_bf16(device) else "float32"


def emulated_bf16_warning(bf16: bool, device: str = "cpu") -> str | None:
    """One line for a run that asks for bf16 on a device that only emulates it, else None."""
    if not bf16 or native_bf16(device):
        return None
    return (f"bf16 is emulated on this {device.split(':')[0].upper()} (no AVX512_BF16 or AMX): its matmuls "
            "run tens of times slower than fp32; set bf16: false (and dtype: float32) unless the numbers "
            "must match a bf16 run")
