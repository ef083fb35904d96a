"""GPU smoke test: a few SFT steps, then GSPO steps with vLLM colocated, on the tiny model, one GPU.

    pip install -e '.[gpu]' && python bench/gpu_smoke.py [--sft-steps 5] [--rl-steps 3] [--out /tmp/gpu-smoke]

Uses the shipped tiny recipes (``trainer/recipes/sft-tiny.yaml``, ``rl-tiny.yaml``) with GPU overrides:
bf16, ``use_cpu=false``, and for RL ``use_vllm=true vllm_mode=colocate`` (vLLM shares the training GPU and
process; ``vllm_gpu_memory_utilization`` caps its KV cache, ``vllm_max_model_length`` bounds the context).
Prints each step's wall time and SFT tokens/s, RL seconds/step and completion tokens/s. A few minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def step_timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._start = None

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

    return StepTimer()


def report(name: str, trainer, timer, token_key: str, completions_per_step: int = 1) -> None:
    logs = [e for e in trainer.state.log_history if "loss" in e]
    print(f"\n== {name}: {len(timer.times)} steps")
    print(f"{'step':>5}{'seconds':>10}{'tokens':>10}{'tokens/s':>10}")
    previous = 0.0
    for step, (seconds, entry) in enumerate(zip(timer.times, logs), 1):
        tokens = entry.get(token_key, 0.0)
        # num_tokens is cumulative (tokens seen so far); completion length is a per-completion mean.
        step_tokens = tokens - previous if token_key == "num_tokens" else tokens * completions_per_step
        previous = tokens if token_key == "num_tokens" else previous
        print(f"{step:>5}{seconds:>10.2f}{step_tokens:>10.0f}{step_tokens / seconds:>10.1f}")
    steady = timer.times[1:] or timer.times
    print(f"mean s/step (after the first): {sum(steady) / len(steady):.2f}")


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=5)
    parser.add_argument("--rl-steps", type=int, default=3)
    parser.add_argument("--out", default="/tmp/tansaku-gpu-smoke")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this smoke test needs one GPU")
    print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    out = Path(args.out)
    gpu = ["use_cpu=false", "bf16=true", "report_to=[]", "save_steps=100000"]

    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rl import build_rl_trainer
    from tansaku.trainer.sft import build_sft_trainer

    timer = step_timer()
    sft = build_sft_trainer(load_recipe(ROOT / "trainer/recipes/sft-tiny.yaml", [
        *gpu, f"output_dir={out / 'sft'}", f"max_steps={args.sft_steps}", "per_device_train_batch_size=4",
        "mix_size=64"]), callbacks=[timer])
    sft.train()
    report("SFT (tiny, bf16, batch 4)", sft, timer, "num_tokens")
    del sft
    torch.cuda.empty_cache()

    sys.path.insert(0, str(ROOT / "tests/fixtures/envs"))
    from helpers import build_fixture_index

    index = build_fixture_index(out / "corpus")
    timer = step_timer()
    rl = build_rl_trainer(load_recipe(ROOT / "trainer/recipes/rl-tiny.yaml", [
        *gpu, f"output_dir={out / 'rl'}", f"max_steps={args.rl_steps}", f"tasks.0.index={index}",
        "use_vllm=true", "vllm_mode=colocate", "vllm_gpu_memory_utilization=0.3",
        "num_prompts_per_step=4", "num_generations_per_prompt=8", "max_completion_length=512",
        "max_tool_calling_iterations=4", "trl.vllm_max_model_length=4096"]), callbacks=[timer])
    rl.train()
    report("GSPO + vLLM colocate (tiny, 4 prompts × 8 generations; completion tokens)", rl, timer,
           "completions/mean_length", completions_per_step=32)
    print(f"completions parquet: {sorted(p.name for p in (out / 'rl' / 'completions').glob('*.parquet'))}")


if __name__ == "__main__":
    main()
